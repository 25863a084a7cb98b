"""One name per App. B setting on both engines (issue 37 part 1): the typed settings the run spec carries
(:class:`pipeline_lib.core.run_spec.RLSettings`, :class:`~pipeline_lib.core.run_spec.SFTSettings`) are the local
engine's
``train.rl`` / ``train.sft`` and verl's ``train.verl.rl`` / ``train.verl.sft`` field for field, every planned run
carries them and they survive the spec's JSON, and a config still using a name from before the rename is told the new
one."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from pipeline_lib.core.config import RENAMED_KEYS, ConfigError, load_config_file, load_schema, validate_config
from pipeline_lib.core.run_spec import (
    AGGREGATIONS,
    KL_ESTIMATORS,
    LocalRLKnobs,
    LocalSFTKnobs,
    PlanError,
    RLSettings,
    RunSpec,
    SFTSettings,
    VerlRLKnobs,
    VerlSFTKnobs,
)
from pipeline_lib.plan import plan_runs

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


def test_each_engines_sft_section_is_the_typed_settings():
    """``train.sft`` is SFTSettings with the local knobs, ``train.verl.sft`` SFTSettings with verl's; a verl task
    row's ``sft`` sets only those keys."""
    train = load_schema(SCHEMA)["properties"]["train"]["properties"]
    local, verl = set(train["sft"]["properties"]), set(train["verl"]["properties"]["sft"]["properties"])
    assert local == _names(SFTSettings) | _names(LocalSFTKnobs)
    assert verl == _names(SFTSettings) | _names(VerlSFTKnobs)
    row = train["verl"]["properties"]["tasks"]["additionalProperties"]["properties"]["sft"]["properties"]
    assert set(row) <= verl and "save_freq" not in verl  # renamed: checkpoint_every, as on the local engine


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_every_planned_run_carries_typed_settings_that_survive_its_json(name):
    """Every run with an estimator (group RL, the RL baselines) on either engine carries its engine's typed group-RL
    settings, every SFT-trained run its typed SFT settings; every spec reads back equal from its JSON."""
    config = validate_config(load_config_file(REPO / "config" / name), SCHEMA, base_dir=REPO)
    engine = "local" if name == "config.yaml" else "verl"
    knobs = {"local": (LocalRLKnobs, LocalSFTKnobs), "verl": (VerlRLKnobs, VerlSFTKnobs)}[engine]
    specs = [run.spec for run in plan_runs(config, check_estimators=False).runs]
    rl = [spec for spec in specs if spec.estimator is not None and spec.engine in ("local", "verl")]
    sft = [spec for spec in specs if spec.method in ("sft", "rationalization", "opd_teacher")
           and spec.engine in ("local", "verl") and spec.generation is None]
    assert rl and sft and {spec.engine for spec in rl + sft} == {engine}
    assert all(isinstance(spec.rl.knobs, knobs[0]) and spec.sft is None for spec in rl)
    assert all(isinstance(spec.sft.knobs, knobs[1]) and spec.rl is None for spec in sft)
    for spec in specs:
        assert RunSpec.from_json(spec.to_json()) == spec


def test_settings_that_are_not_the_engines_are_refused():
    with pytest.raises(PlanError, match=r"train.rl: local group-RL settings lack .*'beta'.* unknown \['kl_coef'\]"):
        RLSettings.from_flat({"steps": 2, "kl_coef": 0.1}, "local", "train.rl")
    with pytest.raises(PlanError, match=r"run spec t/sft sft: verl SFT settings lack .*'max_length'"):
        RunSpec.from_dict({"method": "sft", "task": "t", "engine": "verl", "sft": {"steps": 2, "knobs": {}}})
    with pytest.raises(PlanError, match="rl must be RLSettings"):
        RunSpec(method="grpo_exact", task="t", engine="local", rl={"steps": 2})


@pytest.mark.parametrize(("config", "old", "new"), [
    ({"train": {"verl": {"rl": {"kl_coef": 0.01}}}}, "train.verl.rl.kl_coef", "beta"),
    ({"train": {"verl": {"rl": {"loss_agg_mode": "token-mean"}}}}, "train.verl.rl.loss_agg_mode", "aggregation"),
    ({"train": {"verl": {"tasks": {"gsm8k": {"batch_size": 8}}}}}, "train.verl.tasks.gsm8k.batch_size",
     "prompts_per_step"),
    ({"train": {"rl": {"max_new_tokens": 8}}}, "train.rl.max_new_tokens", "max_response_tokens"),
    ({"train": {"verl": {"sft": {"save_freq": 8}}}}, "train.verl.sft.save_freq", "checkpoint_every"),
])
def test_an_old_key_names_its_new_name(config, old, new):
    with pytest.raises(ConfigError, match=rf"unknown key '{old}' \(renamed: use '{new}'"):
        validate_config(config, SCHEMA, base_dir=REPO)


def test_no_hint_where_the_new_name_is_not_allowed_either():
    with pytest.raises(ConfigError) as error:
        validate_config({"train": {"verl": {"sft": {"kl_coef": 0.1}}}}, SCHEMA, base_dir=REPO)
    assert "unknown key 'train.verl.sft.kl_coef'" in str(error.value) and "renamed" not in str(error.value)


def test_one_value_vocabulary_for_the_kl_estimator_and_the_aggregation():
    """Both engines' blocks take the same values; what an engine cannot compute is refused naming the key, when the
    plan builds the run's settings."""
    train = load_schema(SCHEMA)["properties"]["train"]["properties"]
    for block in (train["rl"], train["verl"]["properties"]["rl"]):
        assert block["properties"]["kl_estimator"]["enum"] == list(KL_ESTIMATORS)
        assert block["properties"]["aggregation"]["enum"] == list(AGGREGATIONS)
    config = validate_config(load_config_file(REPO / "config" / "config.yaml"), SCHEMA, base_dir=REPO)
    local = config["train"]["rl"]
    with pytest.raises(PlanError, match=r"train.rl: kl_estimator 'abs': the local engine computes only"):
        RLSettings.from_flat(local | {"kl_estimator": "abs"}, "local", "train.rl")
    verl = validate_config({}, SCHEMA, base_dir=REPO)["train"]["verl"]["rl"]
    with pytest.raises(PlanError, match=r"aggregation 'group-token-mean': the verl engine computes only"):
        RLSettings.from_flat(verl | {"aggregation": "group-token-mean"}, "verl")
    with pytest.raises(ConfigError, match=r"train.verl.rl.kl_estimator.*'low_var_kl' is not one of"):
        validate_config({"train": {"verl": {"rl": {"kl_estimator": "low_var_kl"}}}}, SCHEMA, base_dir=REPO)
