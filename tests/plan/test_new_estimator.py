"""Adding an estimator as a user would: its function, its parameter dataclass, one registry line and one
``train.methods`` entry in a config file that the real schema validates (the schema learns the new parameters from
the dataclass). The toy estimator is then planned, trained two steps on the local engine (its advantages in
``rollouts.jsonl`` checked against a direct computation on the logged rewards) and, on the paper config, turned into
verl overrides that verl validates and whose algorithm config runs the toy estimator with the configured parameters
through verl's own estimator registry."""

import copy
import json
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import yaml

from pipeline_lib.core.config import ConfigError
from pipeline_lib.core.data.build import build_tiny, build_tokenizer
from pipeline_lib.core.model import build_model, save_model_atomic
from pipeline_lib.core.rl import advantages
from pipeline_lib.core.rl.estimators import ADVANTAGE_ESTIMATORS, EstimatorEntry, param
from pipeline_lib.plan import Estimator, group_rl, plan_runs, register, unregister, validate_planned_config
from tests.conftest import REPO

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"
TOY = "toy_shifted"  # the estimator's name
METHOD = "toy_exact"  # the method that trains with it
SCALE, SHIFT = 2.0, 0.25
ENTRY = {"advantage": TOY, "scale": SCALE, "shift": SHIFT, "reward": "verifier"}  # its train.methods entry


# --- what the user writes -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ToyParams:
    """The toy estimator's parameters, declared once."""

    scale: float = param("Multiplies the centred rewards.", exclusiveMinimum=0)
    shift: float = param("Added to every advantage (so even a group of equal rewards shows the parameters).")


def toy_advantage(rewards: torch.Tensor, index: advantages.GroupIndex, scale: float, shift: float) -> torch.Tensor:
    """``scale * (R - group mean) + shift``."""
    return float(scale) * (rewards - index.expand(index.mean(rewards))) + float(shift)


def expected(rewards: list[float], groups: list) -> list[float]:
    """The toy's formula computed directly (plain Python, not the estimator): the test's oracle."""
    means = {g: sum(r for r, h in zip(rewards, groups, strict=True) if h == g) / groups.count(g) for g in groups}
    return [SCALE * (r - means[g]) + SHIFT for r, g in zip(rewards, groups, strict=True)]


@pytest.fixture
def toy_method():
    """The user's two steps (undone afterwards: the registries are process-wide): the registry line, and the
    function registered as ``@register_advantage(TOY)`` would be."""
    register(group_rl(METHOD, "Toy-Exact", EstimatorEntry(TOY, ToyParams), "verifier"))
    try:
        advantages.register_advantage(TOY)(toy_advantage)
        yield
    finally:
        unregister(METHOD)
        advantages.unregister_advantage(TOY)
    assert TOY not in ADVANTAGE_ESTIMATORS and TOY not in advantages.available_estimators()


def _config(name: str, entry: dict | None = None) -> dict:
    """``config/<name>`` as read from disk with the toy method's ``train.methods`` entry added, then validated by the
    real schema (the one the workflow loads)."""
    config = yaml.safe_load((REPO / "config" / name).read_text())
    train = config.setdefault("train", {})
    if "methods" not in train:  # paper.yaml takes train.methods from the schema's defaults: keep them
        schema = yaml.safe_load(SCHEMA.read_text())
        train["methods"] = copy.deepcopy(schema["properties"]["train"]["properties"]["methods"]["default"])
    train["methods"][METHOD] = dict(entry or ENTRY)
    return validate_planned_config(config, SCHEMA, base_dir=REPO)


# --- the checks -----------------------------------------------------------------------------------------------------

def test_an_undeclared_estimators_parameters_are_unknown_keys_of_the_real_schema():
    with pytest.raises(ConfigError, match=rf"train\.methods\.{METHOD}"):
        _config("config.yaml")


def test_the_schema_checks_a_declared_parameter_with_its_dataclass_bounds(toy_method):
    with pytest.raises(ConfigError, match=rf"train\.methods\.{METHOD}\.scale"):
        _config("config.yaml", {**ENTRY, "scale": 0.0})  # exclusiveMinimum 0, from the field's metadata
    with pytest.raises(ConfigError, match=r"needs parameter\(s\) \['shift'\]"):
        _config("config.yaml", {k: v for k, v in ENTRY.items() if k != "shift"})


def test_a_toy_estimator_is_planned_and_trains_on_the_local_engine(toy_method, tmp_path, monkeypatch):
    config = _config("config.yaml")
    config["train"]["rl"].update(steps=2, prompts_per_step=2, group_size=4, checkpoint_every=1)
    config["train"]["rl"]["local"]["minibatches"] = 1
    run = plan_runs(config).get("train_local", f"countdown_tiny/{METHOD}/seed0")
    assert run.spec.estimator == Estimator(TOY, {"scale": SCALE, "shift": SHIFT})
    assert run.entry_module == "pipeline_lib.jobs.engines.local.rl"

    # the run's inputs where its command expects them (relative to the workflow directory)
    monkeypatch.chdir(tmp_path)
    data, init = (tmp_path / run.args[run.args.index(flag) + 1] for flag in ("--data", "--init"))
    build_tiny("countdown_tiny", {"n_train": 12, "n_test": 4, "imperfect_fraction": 0.3, "numbers_per_task": [3],
                                  "max_number": 9, "max_target": 100}, 0, None, data.parent)
    build_tokenizer([data.parent / "sft_train.parquet", data], 400, tmp_path / "tok")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    save_model_atomic(build_model(tokenizer, {"hidden_size": 32, "intermediate_size": 64, "layers": 2, "heads": 2,
                                              "kv_heads": 1, "max_positions": 256}, 0), tokenizer, init)
    from pipeline_lib.jobs.engines.local.rl import main as rl_main

    module = run.args.index("-m")
    assert rl_main([*run.args[module + 2:], *run.extra_args(threads=1, tracking=False)]) == 0
    run_dir = tmp_path / run.output.rsplit("/", 1)[0]
    assert json.loads((run_dir / "DONE.json").read_text())["advantage"] == TOY
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2] and all(len(row["advantage"]) == 2 * 4 for row in rows)
    for row in rows:  # the toy's formula, computed directly from the logged rewards and groups
        assert row["advantage"] == pytest.approx(expected(row["reward"], row["group"]), abs=1e-6), row["step"]


def test_a_toy_estimator_becomes_verl_overrides_that_verl_validates_and_runs(toy_method, tmp_path):
    from pipeline_lib.jobs.engines.verl import estimators as verl_side
    from pipeline_lib.jobs.engines.verl.planned import plan_overrides
    from pipeline_lib.jobs.engines.verl.validate import validate_rl

    runs = [r for r in plan_overrides(plan_runs(_config("paper.yaml"))) if r[0] == f"gsm8k/{METHOD}/seed0"]
    assert len(runs) == 1
    overrides = runs[0][2]
    assert f"algorithm.adv_estimator={TOY}" in overrides
    assert f"+algorithm.scale={SCALE}" in overrides and f"+algorithm.shift={SHIFT}" in overrides
    assert not any("algorithm.tau" in o for o in overrides)  # gsm8k's row tau is not this estimator's parameter

    verl_side.register()  # as importing it in a fresh process does: every estimator the registry declares as ours
    config = validate_rl(overrides, label=runs[0][0])  # verl's own checks, the estimator run through compute_advantage
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5]
    groups = ["a", "a", "a", "a", "b", "b", "b", "b"]
    token_rewards = torch.zeros(8, 3)
    token_rewards[:, -1] = torch.tensor(rewards)
    advantage, _ = get_adv_estimator_fn(config.algorithm.adv_estimator)(
        token_level_rewards=token_rewards, response_mask=torch.ones(8, 3), index=np.array(groups, dtype=object),
        config=config.algorithm)
    assert advantage[:, 0].tolist() == pytest.approx(expected(rewards, groups), abs=1e-6)  # scale and shift arrived
