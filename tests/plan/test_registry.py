"""Every field of a registry entry that points elsewhere points at something that exists (a layout function, a
prelude's layout and spec builder, a verl overrides function), and what other stages keep about methods names
registered ones (the preflight's kinds, the report's paired comparisons)."""

import importlib

import pytest

from pipeline_lib.core.config import load_config_file
from pipeline_lib.jobs.engines.verl.preflight import CHECKS, KINDS
from pipeline_lib.paper.reproduction import PAIRS
from pipeline_lib.plan import layouts, settings
from pipeline_lib.plan.registry import (
    METHODS,
    PlanError,
    baseline,
    register,
    starting_point,
    unregister,
)
from tests.conftest import REPO


def test_every_entrys_layout_and_prelude_are_functions_of_the_layouts_and_the_spec_builders():
    preludes = 0
    for name, m in METHODS.items():
        for engine, entry in m.engines.items():
            assert getattr(layouts, entry.layout.__name__) is entry.layout, (name, engine)
            if entry.prelude is not None:
                preludes += 1
                assert getattr(layouts, entry.prelude.layout.__name__) is entry.prelude.layout, (name, engine)
                assert getattr(settings, entry.prelude.spec.__name__) is entry.prelude.spec, (name, engine)
    assert preludes, "no entry has a prelude: the check above checked none"


def test_every_verl_overrides_name_is_a_function_of_the_verl_engine():
    named = {name: m.engines["verl"].overrides for name, m in METHODS.items() if m.engines.get("verl")
             and m.engines["verl"].overrides}
    assert named, "no verl baseline names its overrides"
    for name, where in named.items():
        module, _, function = where.partition(":")
        assert module.startswith("pipeline_lib.jobs.engines.verl.") and callable(
            getattr(importlib.import_module(module), function, None)), (name, where)
        assert METHODS[name].engines["verl"].verl_kind == "rl", name  # they add to an RL run's overrides


def test_the_verl_engine_finds_each_baselines_overrides_from_its_spec_as_the_registry_names_them():
    """A running verl job imports no plan: it finds a baseline's overrides by the settings its spec carries
    (``VERL_BASELINES``). That table and the registry's verl entries name the same functions and the same need of
    expert answers (``Method.needs_references``), method by method."""
    from pipeline_lib.jobs.engines.verl.translate import VERL_BASELINES

    named = {m.settings: m for m in METHODS.values() if m.engines.get("verl") and m.engines["verl"].overrides}
    assert set(named) == set(VERL_BASELINES), (sorted(c.__name__ for c in named),
                                                sorted(c.__name__ for c in VERL_BASELINES))
    for settings_class, m in named.items():
        module, _, function = m.engines["verl"].overrides.partition(":")
        assert getattr(importlib.import_module(module), function) is VERL_BASELINES[settings_class].overrides, m.name
        assert VERL_BASELINES[settings_class].needs_references == m.needs_references, m.name


def test_preflight_kinds_train_registered_verl_jobs_and_the_preflight_config_names_each():
    assert len({p.method for p in CHECKS.values()}) == len(CHECKS)  # one kind per method
    for kind, (trainer, method) in KINDS.items():
        assert CHECKS[kind].method == method and METHODS[method].engines["verl"].verl_kind == trainer in ("sft", "rl")
    listed = load_config_file(REPO / "config/preflight.yaml")["preflight"]["kinds"]
    assert set(listed) - {"eval"} == set(CHECKS)  # the preflight config trains every kind


@pytest.mark.parametrize("table", ["verifiable", "nonverifiable"])
def test_paired_comparisons_name_registered_methods_once_each(table):
    found = PAIRS[table]
    assert len(found) == len(set(found)) > 0
    assert all(a in METHODS and b in METHODS and a != b for a, b in found)


def test_the_starting_point_is_the_one_entry_that_says_so():
    """The plan reads the start every run trains from off the registry (SFT), never a literal name: a second entry
    that claims to be the start is an error that names both."""
    assert starting_point() == "sft" and METHODS["sft"].starting_point
    sft = METHODS["sft"]
    register(baseline("second_start", "Second start", sft.engines["local"], sft.engines["verl"],
                      starting_point=True))
    try:
        with pytest.raises(PlanError, match=r"\['sft', 'second_start'\]"):
            starting_point()
    finally:
        unregister("second_start")
    assert starting_point() == "sft"


def test_a_verl_runs_done_kind_read_from_its_spec_is_the_registrys_family():
    """``DONE.json``'s kind of a verl run, which the job reads from its spec alone (``done_kind``), is what the
    registry says: a baseline's name, else the trainer (``sft`` / ``rl``), for every verl run of the paper plan."""
    from pipeline_lib.core.config import validate_config
    from pipeline_lib.jobs.engines.verl.translate import done_kind
    from pipeline_lib.plan import plan_runs

    config = validate_config(load_config_file(REPO / "config" / "paper.yaml"),
                             REPO / "workflow" / "schemas" / "config.schema.yaml")
    runs = [run for run in plan_runs(config).runs if run.job == "train_verl"]
    assert {run.verl_kind for run in runs} == {"sft", "rl"} and any(METHODS[r.spec.method].family == "baseline"
                                                                    for r in runs)
    for run in runs:
        expected = run.spec.method if METHODS[run.spec.method].family == "baseline" else run.verl_kind
        assert done_kind(run.verl_kind, run.spec) == expected, run.key
