"""A new baseline the way docs/design.md's recipe adds one ("A baseline"): its settings class and local trainer (here
in this module, as a user's own module would hold them), one registry line, then 2 local training steps through the
plan's spec builder and the group-RL loop every RL-style baseline shares."""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from pipeline_lib.core.baselines import BaselineSettings
from pipeline_lib.core.config import load_config_file, validate_config
from pipeline_lib.jobs.engines.local.rl import GroupRLMethod, StepContext, train_rl
from pipeline_lib.plan.registry import Entry, baseline, method, register, unregister
from pipeline_lib.plan.settings import rl_baseline_spec
from tests.conftest import REPO, params


@dataclass(frozen=True)
class TargetLengthSettings(BaselineSettings):
    """The toy baseline's section ``train.baselines.target_length``."""

    target_characters: int
    """The response length (characters) the reward prefers."""


class TargetLength(GroupRLMethod):
    """The toy baseline's trainer: group RL whose reward is minus the distance of a response's length from a target,
    so rollouts of one prompt differ in reward and every step has an update."""

    kind = "target_length"

    def score(self, ctx: StepContext, rows: list[int], responses: list[list[int]], texts: list[str]
              ) -> tuple[torch.Tensor, dict[str, float]]:
        lengths = torch.tensor([len(text) for text in texts], dtype=torch.float32)
        return -(lengths - self.spec.baseline.target_characters).abs(), {"toy/length_mean": float(lengths.mean())}


def test_a_new_baseline_is_its_module_and_one_registry_line_and_trains_two_local_steps(tiny, tmp_path):
    local = Entry("train_local", __name__, lambda context, spec: None, rl_baseline_spec)
    register(baseline("target_length", "Target length", local, local, TargetLengthSettings))  # the one line
    try:
        config = load_config_file(REPO / "config/config.yaml")
        validate_config(config, REPO / "workflow/schemas/config.schema.yaml")
        config["train"]["rl"]["steps"] = 2
        config["train"]["baselines"]["target_length"] = {"tasks": ["countdown_tiny"], "target_characters": 12}
        spec = method("target_length").engines["local"].spec(config, "countdown_tiny", "target_length", "local")
        assert spec.baseline == TargetLengthSettings(target_characters=12) and spec.rl.steps == 2
        assert spec.estimator.name == "grpo"  # an RL-style baseline without an `advantage` key: GRPO's

        train_rl(spec, tiny / "data/rl_train.parquet", tiny / "init", tmp_path, 0, progress=False,
                 method=TargetLength(spec))
    finally:
        unregister("target_length")
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    trained = [row for row in rows if "toy/length_mean" in row]
    assert [row["step"] for row in trained] == [1, 2], rows
    before, after = params(tiny / "init"), params(tmp_path / "final")
    assert any(not torch.equal(before[name], after[name]) for name in before)  # the toy reward moved the policy
