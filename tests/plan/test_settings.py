"""One name per App. B setting on both engines (issue 37 part 1): the typed settings the run spec carries
(:class:`pipeline_lib.core.run_spec.RLSettings`, :class:`~pipeline_lib.core.run_spec.SFTSettings`) are the one
block per concern of both engines (``train.rl`` / ``train.sft``, each engine's knobs in ``local`` / ``verl``, a task
row's ``rl`` / ``sft`` with the same keys) field for field, every planned run carries them and they survive the spec's
JSON, and a config still using a name or a place from before is told the new one."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from pipeline_lib.core.baselines import BaselineSettings
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
from pipeline_lib.plan.settings import engine_settings

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def _names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)} - {"knobs"}


def _block(schema: dict, concern: str) -> tuple[set[str], set[str], set[str]]:
    """A block's shared properties and its ``local`` / ``verl`` sub-blocks' properties."""
    props = schema["properties"]["train"]["properties"][concern]["properties"]
    return ({k for k in props if k not in ("local", "verl")}, set(props["local"]["properties"]),
            set(props["verl"]["properties"]))


def _without_defaults(node: object) -> object:
    if isinstance(node, dict):
        return {k: _without_defaults(v) for k, v in node.items() if k not in ("default", "description")}
    return node


@pytest.mark.parametrize(("concern", "settings", "local_knobs", "verl_knobs", "row"), [
    ("rl", RLSettings, LocalRLKnobs, VerlRLKnobs, "rl_row"),
    ("sft", SFTSettings, LocalSFTKnobs, VerlSFTKnobs, "sft_row"),
])
def test_one_block_per_concern_is_the_typed_settings(concern, settings, local_knobs, verl_knobs, row):
    """``train.rl`` / ``train.sft`` is one block for both engines: its shared properties are the dataclass's fields,
    its ``local`` and ``verl`` sub-blocks each engine's knobs, field for field; a task row's ``rl`` / ``sft``
    (``$defs``) has the same properties and types without defaults, so a row can override any of them."""
    schema = load_schema(SCHEMA)
    shared, local, verl = _block(schema, concern)
    assert shared == _names(settings)
    assert local == _names(local_knobs) and verl == _names(verl_knobs)
    block = schema["properties"]["train"]["properties"][concern]["properties"]
    assert _without_defaults(schema["$defs"][row]["properties"]) == _without_defaults(block)
    assert not set(RENAMED_KEYS) - {"batch_size"} & (shared | local | verl)  # SFT's batch_size is demonstrations
    assert concern == "sft" or "batch_size" not in shared | local | verl  # RL's is prompts_per_step
    rows = schema["properties"]["train"]["properties"]["task_settings"]["additionalProperties"]["properties"]
    assert rows[concern] == {"$ref": f"#/$defs/{row}"}
    assert {"rl", "sft"} <= set(rows)
    plan_source = "\n".join(path.read_text() for path in (REPO / "pipeline_lib" / "plan").glob("*.py"))
    unread = [key for key in set(rows) - {"rl", "sft"} if not re.search(rf"[\"']{key}[\"']", plan_source)]
    assert not unread, f"task-row keys the plan never reads: {unread}"  # the rest of a row is what it plans
    assert "verl" not in schema["properties"]["train"]["properties"]["verl"]["properties"].get(concern, {})


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
    ({"train": {"rl": {"kl_coef": 0.01}}}, "train.rl.kl_coef", "beta"),
    ({"train": {"rl": {"loss_agg_mode": "token-mean"}}}, "train.rl.loss_agg_mode", "aggregation"),
    ({"train": {"task_settings": {"gsm8k": {"rl": {"batch_size": 8}}}}}, "train.task_settings.gsm8k.rl.batch_size",
     "prompts_per_step"),
    ({"train": {"rl": {"max_new_tokens": 8}}}, "train.rl.max_new_tokens", "max_response_tokens"),
    ({"train": {"sft": {"save_freq": 8}}}, "train.sft.save_freq", "checkpoint_every"),
])
def test_an_old_key_names_its_new_name(config, old, new):
    with pytest.raises(ConfigError, match=rf"unknown key '{old}' \(renamed: use '{new}'"):
        validate_config(config, SCHEMA, base_dir=REPO)


@pytest.mark.parametrize(("config", "old", "new"), [
    ({"train": {"verl": {"rl": {"steps": 8}}}}, "train.verl.rl", "train.rl (verl's own knobs: train.rl.verl)"),
    ({"train": {"verl": {"sft": {"steps": 8}}}}, "train.verl.sft", "train.sft (verl's own knobs: train.sft.verl)"),
    ({"train": {"verl": {"tasks": {"gsm8k": {"tau": 0.1}}}}}, "train.verl.tasks",
     "train.task_settings (a row's settings under its rl / sft)"),
    ({"train": {"rl": {"minibatches": 1}}}, "train.rl.minibatches", "train.rl.local.minibatches"),
    ({"train": {"rl": {"nodes": 2}}}, "train.rl.nodes", "train.rl.verl.nodes"),
    ({"train": {"sft": {"warmup_steps": 2}}}, "train.sft.warmup_steps", "train.sft.local.warmup_steps"),
    ({"train": {"sft": {"max_length": 64}}}, "train.sft.max_length", "train.sft.verl.max_length"),
    ({"train": {"task_settings": {"gsm8k": {"group_size": 4}}}}, "train.task_settings.gsm8k.group_size",
     "train.task_settings.gsm8k.rl.group_size"),
    ({"train": {"task_settings": {"gsm8k": {"nodes": 1}}}}, "train.task_settings.gsm8k.nodes",
     "train.task_settings.gsm8k.rl.verl.nodes"),
    ({"train": {"task_settings": {"gsm8k": {"batch_size": 8}}}}, "train.task_settings.gsm8k.batch_size",
     "train.task_settings.gsm8k.rl.prompts_per_step"),
    ({"train": {"task_settings": {"gsm8k": {"rl": {"gpus_per_node": 1}}}}},
     "train.task_settings.gsm8k.rl.gpus_per_node", "train.task_settings.gsm8k.rl.verl.gpus_per_node"),
])
def test_a_moved_key_names_where_it_lives_now(config, old, new):
    """The blocks moved to one per concern (issue 37 part 1): a config still using an old place is told the new one
    (:data:`pipeline_lib.core.config.MOVED_KEYS`, the engines' knobs, a task row's old flat keys)."""
    with pytest.raises(ConfigError) as error:
        validate_config(config, SCHEMA, base_dir=REPO)
    assert f"unknown key '{old}' (moved: use '{new}'" in str(error.value)


def test_no_hint_where_the_new_name_is_not_allowed_either():
    with pytest.raises(ConfigError) as error:
        validate_config({"train": {"sft": {"kl_coef": 0.1}}}, SCHEMA, base_dir=REPO)
    assert "unknown key 'train.sft.kl_coef'" in str(error.value)
    assert "renamed" not in str(error.value) and "moved" not in str(error.value)


def test_a_verl_row_in_a_local_config_is_refused():
    with pytest.raises(ConfigError, match=r"train.task_settings.gsm8k.engine': verl, but train.engine is 'local'"):
        validate_config({"train": {"engine": "local", "task_settings": {"gsm8k": {"engine": "verl"}}}}, SCHEMA,
                        base_dir=REPO)


def test_one_value_vocabulary_for_the_kl_estimator_and_the_aggregation():
    """Both engines' blocks take the same values; what an engine cannot compute is refused naming the key, when the
    plan builds the run's settings."""
    schema = load_schema(SCHEMA)
    for block in (schema["properties"]["train"]["properties"]["rl"], schema["$defs"]["rl_row"]):
        assert block["properties"]["kl_estimator"]["enum"] == list(KL_ESTIMATORS)
        assert block["properties"]["aggregation"]["enum"] == list(AGGREGATIONS)
    config = validate_config(load_config_file(REPO / "config" / "config.yaml"), SCHEMA, base_dir=REPO)
    local = engine_settings(config, "countdown_tiny", "rl", "local")
    with pytest.raises(PlanError, match=r"train.rl: kl_estimator 'abs': the local engine computes only"):
        RLSettings.from_flat(local | {"kl_estimator": "abs"}, "local", "train.rl")
    verl = engine_settings(validate_config({}, SCHEMA, base_dir=REPO), "gsm8k", "rl", "verl")
    with pytest.raises(PlanError, match=r"aggregation 'group-token-mean': the verl engine computes only"):
        RLSettings.from_flat(verl | {"aggregation": "group-token-mean"}, "verl")
    with pytest.raises(ConfigError, match=r"train.rl.kl_estimator.*'low_var_kl' is not one of"):
        validate_config({"train": {"rl": {"kl_estimator": "low_var_kl"}}}, SCHEMA, base_dir=REPO)


def test_a_task_row_overrides_the_shared_block_on_either_engine():
    """Both engines read ``train.task_settings``: a local task's row changes only its own runs, and a row may keep a
    task of a verl config on the local engine (``engine: local``), where it takes the shared block and the local
    knobs."""
    config = validate_config(load_config_file(REPO / "config" / "config.yaml"), SCHEMA, base_dir=REPO)
    config["train"]["task_settings"] = {"arith_tiny": {"rl": {"steps": 3, "local": {"minibatches": 1}},
                                                       "sft": {"local": {"warmup_steps": 1}}}}
    plan = plan_runs(config, check_estimators=False)
    row, other = (plan.get("train_local", f"{task}/grpo_exact/seed0").spec for task in ("arith_tiny", "countdown_tiny"))
    assert (row.rl.steps, row.rl.knobs.minibatches) == (3, 1)
    assert (other.rl.steps, other.rl.knobs.minibatches) == (config["train"]["rl"]["steps"], 2)
    assert plan.get("train_local", "arith_tiny/sft/seed0").spec.sft.knobs.warmup_steps == 1
    paper = validate_config(load_config_file(REPO / "config" / "paper.yaml"), SCHEMA, base_dir=REPO)
    paper["train"]["task_settings"]["gsm8k"]["engine"] = "local"
    run = plan_runs(paper, check_estimators=False).get("train_local", "gsm8k/grpo_exact/seed0")
    assert run.engine == "local" and isinstance(run.spec.rl.knobs, LocalRLKnobs)
    assert (run.spec.rl.steps, run.spec.rl.lr) == (1000, paper["train"]["rl"]["lr"])  # its row over the shared block


# --- a baseline's own settings: one typed class per train.baselines.<name> section ---------------------------------

def test_each_baselines_settings_class_is_its_schema_section_field_for_field():
    """A baseline's registry entry names its settings class; the class has one field per key of its
    section ``train.baselines.<name>`` (same names; the schema describes each), besides the keys that only plan
    (``planned``); a nested section
    (OPD's ``teacher``, ``verl``) is a dataclass of its keys the same way. A baseline without a class (Base) has no
    key besides the planned ones."""
    from pipeline_lib.core.baselines import BaselineSettings, declared
    from pipeline_lib.plan.registry import METHODS

    schema = load_schema(SCHEMA)["properties"]["train"]["properties"]["baselines"]
    baselines = [m for m in METHODS.values() if m.family == "baseline"]
    assert {m.section for m in baselines} == set(schema["properties"]["methods"]["items"]["enum"])
    for m in baselines:
        props = schema["properties"][m.section]["properties"]
        if m.settings is None:
            assert set(props) == set(BaselineSettings.planned), m.name
            continue
        assert declared(m.section) is m.settings, m.name  # what the plan's spec builders find by the name
        assert set(m.settings.planned) <= set(props), m.name
        # a per-run field (RL-Logit's variant) is set by the plan, from the section's list (variants), not a key
        own = [f.name for f in fields(m.settings) if f.name not in m.settings.per_run]
        assert own == [k for k in props if k not in m.settings.planned], m.name
        assert all(props[name].get("description") for name in own), m.name  # described once, there
        for name, nested in getattr(m.settings, "nested", {}).items():
            assert [f.name for f in fields(nested)] == list(props[name]["properties"]), (m.name, name)
            assert all(sub.get("description") for sub in props[name]["properties"].values()), (m.name, name)


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_every_baseline_run_carries_its_typed_settings_and_imagenet_runs_their_objective(name):
    """Every planned run of a baseline with a settings class carries that class (the annotation job too: the STaR
    hint; not Rationalization's verl SFT step, plain SFT on the annotation's output), its JSON names the class, no
    other run carries any, and the ImageNet runs carry their objective and M in their own settings."""
    from pipeline_lib.plan.registry import METHODS, variant_runs

    config = validate_config(load_config_file(REPO / "config" / name), SCHEMA, base_dir=REPO)
    runs = plan_runs(config, check_estimators=False).runs
    variants = variant_runs(config)  # RL-Logit's runs, one per reward variant, each carrying its variant
    typed = [run for run in runs if run.method in METHODS and METHODS[run.method].settings is not None
             and (run.name == run.method or run.name in variants) and run.verl_kind != "sft"]
    assert variants and all(run.spec.baseline.variant == variants[run.name][1] for run in typed
                            if run.name in variants)
    planned = config["train"]["baselines"]["methods"]
    with_class = {m.name for m in METHODS.values() if m.settings is not None and m.section in planned}
    assert len(with_class) >= 2 and {run.method for run in typed} == with_class
    for run in typed:
        cls = METHODS[run.method].settings
        assert type(run.spec.baseline) is cls, run.key
        assert run.spec.to_dict()["baseline"]["type"] == f"{cls.__module__}:{cls.__name__}"
    assert all(run.spec.baseline is None for run in runs if run not in typed)
    imagenet = [run for run in runs if run.job == "train_imagenet"]
    assert imagenet and all(run.spec.imagenet.objective == run.method and
                            run.name == f"{run.method}/m{run.spec.imagenet.group_size}" for run in imagenet)


def test_a_baseline_spec_whose_settings_are_not_a_settings_class_is_refused(tmp_path, monkeypatch):
    spec = {"method": "raro", "task": "t", "engine": "local"}
    with pytest.raises(PlanError, match=r"run spec t/raro baseline: 'os:path' is not a loaded BaselineSettings class"):
        RunSpec.from_dict(spec | {"baseline": {"type": "os:path", "settings": {}}})
    # the JSON names a class; it never makes the reader import a module
    (tmp_path / "spec_planted.py").write_text("import os\nos.environ['SPEC_PLANTED_IMPORTED'] = '1'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("SPEC_PLANTED_IMPORTED", raising=False)
    with pytest.raises(PlanError, match="'spec_planted:Settings' is not a loaded BaselineSettings class"):
        RunSpec.from_dict(spec | {"baseline": {"type": "spec_planted:Settings", "settings": {}}})
    assert "SPEC_PLANTED_IMPORTED" not in os.environ and "spec_planted" not in sys.modules
    with pytest.raises(PlanError, match=r"run spec t/raro baseline \(RaroSettings\): lacks \['advantage'"):
        RunSpec.from_dict(spec | {"baseline": {"type": "pipeline_lib.core.baselines:RaroSettings", "settings": {}}})
    with pytest.raises(PlanError, match="baseline must be BaselineSettings or None"):
        RunSpec(method="raro", task="t", engine="local", baseline={"advantage": "grpo"})


@dataclasses.dataclass(frozen=True)
class ToySettings(BaselineSettings):
    """A baseline defined outside the package's modules, as a user would."""

    depth: int
    """How deep the toy baseline looks."""


def test_a_registered_baselines_settings_class_is_declared_built_and_read_back_from_its_json():
    """``register(baseline(..., settings=...))`` declares the class for its section, the plan's builder reads the
    section as that class, a spec's JSON names it and reads back the same type; ``unregister`` forgets it."""
    from pipeline_lib.core.baselines import declared
    from pipeline_lib.plan.registry import Entry, baseline, register, unregister
    from pipeline_lib.plan.settings import baseline_settings, dpo_spec

    entry = Entry("train_local", "pipeline_lib.jobs.engines.local.dpo", lambda c, spec: None, dpo_spec)
    register(baseline("toy_baseline", "Toy", entry, entry, ToySettings))
    try:
        assert declared("toy_baseline") is ToySettings
        config = {"train": {"baselines": {"toy_baseline": {"tasks": ["gsm8k"], "depth": 3}}}}
        assert baseline_settings(config, "toy_baseline") == ToySettings(depth=3)  # tasks only plans
        spec = dpo_spec(config, "gsm8k", "toy_baseline", "local")
        assert spec.to_dict()["baseline"] == {"type": f"{__name__}:ToySettings", "settings": {"depth": 3}}
        again = RunSpec.from_json(spec.to_json())
        assert again == spec and type(again.baseline) is ToySettings
        with pytest.raises(PlanError, match=r"toy_baseline: lacks \['depth'\] / has unknown \['deep'\]"):
            baseline_settings({"train": {"baselines": {"toy_baseline": {"deep": 3}}}}, "toy_baseline")
    finally:
        unregister("toy_baseline")
    assert declared("toy_baseline") is None


# --- an ImageNet-study run's settings: one typed class for the imagenet section -----------------------------------

def test_the_imagenet_settings_class_is_the_sections_run_keys_field_for_field():
    """:class:`ImageNetSettings` has one field per key of the ``imagenet`` section that one run reads (same names, same
    order; the schema describes each), besides the keys that choose which runs exist and the estimators' parameters
    (``tau``: the spec's estimator), plus the run's ``objective`` and ``group_size`` (M); ``dataset`` and ``model``
    are dataclasses of their sections' keys the same way."""
    from pipeline_lib.core.rl.estimators import schema_properties
    from pipeline_lib.core.run_spec import IMAGENET_RUN_FIELDS, ImageNetDataset, ImageNetModel, ImageNetSettings
    from pipeline_lib.plan.settings import IMAGENET_SWEEP_KEYS

    props = load_schema(SCHEMA)["properties"]["imagenet"]["properties"]
    run_keys = [k for k in props if k not in IMAGENET_SWEEP_KEYS and k not in schema_properties()]
    assert "tau" in props and "tau" not in run_keys
    assert [f.name for f in fields(ImageNetSettings)] == [*run_keys, *IMAGENET_RUN_FIELDS]
    assert all(props[key].get("description") for key in run_keys)
    for name, cls in (("dataset", ImageNetDataset), ("model", ImageNetModel)):
        assert [f.name for f in fields(cls)] == list(props[name]["properties"]), name
        assert all(sub.get("description") for sub in props[name]["properties"].values()), name


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_imagenet_runs_carry_typed_settings_whose_json_and_digest_are_as_before(name):
    """Every ImageNet run carries :class:`ImageNetSettings`; its JSON is the flat mapping the spec carried before it
    was typed (the section's run keys, ``objective``, and M, now named ``group_size``), so the trainer's digest of
    the run keys (:meth:`ImageNetSettings.run_settings`) is unchanged, and it reads back equal and of the same
    types."""
    from pipeline_lib.core.rl.estimators import schema_properties
    from pipeline_lib.core.run_spec import ImageNetDataset, ImageNetModel, ImageNetSettings
    from pipeline_lib.plan.settings import imagenet_run_spec

    config = validate_config(load_config_file(REPO / "config" / name), SCHEMA, base_dir=REPO)
    before = {k: v for k, v in imagenet_run_spec(config["imagenet"]).items() if k not in schema_properties()}
    runs = [run for run in plan_runs(config, check_estimators=False).runs if run.job == "train_imagenet"]
    assert runs
    for run in runs:
        settings = run.spec.imagenet
        assert type(settings) is ImageNetSettings
        assert (type(settings.dataset), type(settings.model)) == (ImageNetDataset, ImageNetModel)
        assert settings.run_settings() == before
        assert run.spec.to_dict()["imagenet"] == {**before, "objective": run.method, "group_size": settings.group_size}
        again = RunSpec.from_json(run.spec.to_json())
        assert again == run.spec and type(again.imagenet.dataset) is ImageNetDataset


def test_imagenet_settings_that_are_not_the_sections_are_refused():
    from pipeline_lib.core.run_spec import ImageNetSettings
    from tests.conftest import CLASSIFY_SPEC

    flat = {**CLASSIFY_SPEC, "objective": "grpo", "group_size": 4}
    assert ImageNetSettings.from_dict(flat).to_dict() == flat
    with pytest.raises(PlanError, match=r"imagenet: lacks \['lr'\] / has unknown \['tau'\]"):
        ImageNetSettings.from_dict({k: v for k, v in flat.items() if k != "lr"} | {"tau": 0.2}, "imagenet")
    with pytest.raises(PlanError, match=r"imagenet.dataset: lacks \['seed'\]"):
        ImageNetSettings.from_dict(flat | {"dataset": {k: v for k, v in flat["dataset"].items() if k != "seed"}},
                                   "imagenet")
    with pytest.raises(PlanError, match="imagenet must be ImageNetSettings or None"):
        RunSpec(method="grpo", task="imagenet", engine="classify", imagenet=flat)


@pytest.mark.parametrize("config", [
    {"judge": {"primary": {"kind": "llm", "endpoint": {"model": "judge"}, "serve": {"command": ["x"], "port": 8000}}}},
    {"eval": {"server": {"serve": {"command": ["x"], "port": 8100}}}},
])
def test_a_fixed_server_port_is_refused_naming_the_change(config):
    """`serve.port` (judges, the eval server) is removed: a started server listens on a free port chosen at start
    (issue 44: two judge jobs on one node collided on 8000/8001); a config still setting one is told so."""
    with pytest.raises(ConfigError) as error:
        validate_config(config, SCHEMA, base_dir=REPO)
    assert re.search(r"unknown key '(judge\.primary|eval\.server)\.serve\.port' \(removed: a started server listens "
                     r"on a free port chosen at start", str(error.value)), str(error.value)
