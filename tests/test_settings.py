"""One name per App. B setting on both engines (issue 37 part 1): the typed group-RL settings
(:class:`pipeline_lib.run_spec.RLSettings`) are the local engine's ``train.rl`` and verl's ``train.verl.rl`` field for
field, every planned RL run reads them, and a config still using a name from before the rename is told the new one."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from pipeline_lib.config import RENAMED_KEYS, ConfigError, load_config_file, load_schema, validate_config
from pipeline_lib.plan import plan_runs
from pipeline_lib.run_spec import LocalRLKnobs, PlanError, RLSettings, RunSpec, VerlRLKnobs

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def _names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)} - {"knobs"}


def test_each_engines_rl_section_is_the_typed_settings():
    """``train.rl`` is RLSettings with the local knobs, ``train.verl.rl`` RLSettings with verl's, field for field;
    a verl task row sets only those keys (besides what it plans: methods, tau, reward weights, its SFT)."""
    train = load_schema(SCHEMA)["properties"]["train"]["properties"]
    local, verl = set(train["rl"]["properties"]), set(train["verl"]["properties"]["rl"]["properties"])
    assert local == _names(RLSettings) | _names(LocalRLKnobs)
    assert verl == _names(RLSettings) | _names(VerlRLKnobs)
    row = set(train["verl"]["properties"]["tasks"]["additionalProperties"]["properties"])
    assert row - {"methods", "tau", "similarity_weights", "sft"} <= verl
    assert not set(RENAMED_KEYS) & (local | verl | row)


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_every_planned_rl_run_reads_typed_settings(name):
    """Every run with an estimator (group RL, the RL baselines) on either engine has exactly its engine's typed
    settings, and they survive the spec's JSON."""
    config = validate_config(load_config_file(REPO / "config" / name), SCHEMA, base_dir=REPO)
    specs = [run.spec for run in plan_runs(config, check_estimators=False).runs
             if run.spec.estimator is not None and run.spec.engine in ("local", "verl")]
    assert {spec.engine for spec in specs} == {"local" if name == "config.yaml" else "verl"}
    for spec in specs:
        assert spec.rl.flat() == spec.settings
        assert RunSpec.from_json(spec.to_json()).rl == spec.rl


def test_settings_that_are_not_the_engines_are_refused():
    spec = RunSpec(method="grpo_exact", task="t", engine="local", settings={"steps": 2, "kl_coef": 0.1})
    with pytest.raises(PlanError, match=r"run spec t/grpo_exact: local group-RL settings lack .*'beta'.* unknown "
                                        r"\['kl_coef'\]"):
        _ = spec.rl


@pytest.mark.parametrize(("config", "old", "new"), [
    ({"train": {"verl": {"rl": {"kl_coef": 0.01}}}}, "train.verl.rl.kl_coef", "beta"),
    ({"train": {"verl": {"rl": {"loss_agg_mode": "token-mean"}}}}, "train.verl.rl.loss_agg_mode", "aggregation"),
    ({"train": {"verl": {"tasks": {"gsm8k": {"batch_size": 8}}}}}, "train.verl.tasks.gsm8k.batch_size",
     "prompts_per_step"),
    ({"train": {"rl": {"max_new_tokens": 8}}}, "train.rl.max_new_tokens", "max_response_tokens"),
])
def test_an_old_key_names_its_new_name(config, old, new):
    with pytest.raises(ConfigError, match=rf"unknown key '{old}' \(renamed: use '{new}'"):
        validate_config(config, SCHEMA, base_dir=REPO)


def test_no_hint_where_the_new_name_is_not_allowed_either():
    with pytest.raises(ConfigError) as error:
        validate_config({"train": {"verl": {"sft": {"kl_coef": 0.1}}}}, SCHEMA, base_dir=REPO)
    assert "unknown key 'train.verl.sft.kl_coef'" in str(error.value) and "renamed" not in str(error.value)
