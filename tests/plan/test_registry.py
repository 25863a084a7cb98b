"""Every field of a registry entry that points elsewhere points at something that exists: a layout function and a
prelude of the plan, a verl overrides function, a preflight kind of the preflight config, the methods of a paired
comparison."""

import importlib

import pytest

from pipeline_lib.core.config import load_config_file
from pipeline_lib.plan import layouts
from pipeline_lib.plan.registry import (
    METHODS,
    PlanError,
    baseline,
    pairs,
    preflight_kinds,
    register,
    starting_point,
    unregister,
)
from pipeline_lib.plan.runs import prelude
from tests.conftest import REPO


def test_every_entrys_layout_is_a_layout_function_and_its_prelude_one_the_plan_builds():
    for name, m in METHODS.items():
        for engine, entry in m.engines.items():
            assert getattr(layouts, entry.layout.__name__) is entry.layout, (name, engine)
            assert entry.prelude is None or callable(prelude(entry)), (name, engine, entry.prelude)


def test_every_verl_overrides_name_is_a_function_of_the_verl_engine():
    named = {name: m.engines["verl"].overrides for name, m in METHODS.items() if m.engines.get("verl")
             and m.engines["verl"].overrides}
    assert named, "no verl baseline names its overrides"
    for name, where in named.items():
        module, _, function = where.partition(":")
        assert module.startswith("pipeline_lib.jobs.engines.verl.") and callable(
            getattr(importlib.import_module(module), function, None)), (name, where)
        assert METHODS[name].engines["verl"].verl_kind == "rl", name  # they add to an RL run's overrides


def test_preflight_kinds_are_the_registrys_and_the_preflight_config_names_only_those():
    kinds = preflight_kinds()
    assert len(kinds) == len({m.preflight.kind for m in METHODS.values() if m.preflight})  # one method per kind
    for kind, m in kinds.items():
        assert "verl" in m.engines and m.engines["verl"].verl_kind in ("sft", "rl"), kind
    listed = load_config_file(REPO / "config/preflight.yaml")["preflight"]["kinds"]
    assert set(listed) - {"eval"} == set(kinds)  # the preflight trains every kind the registry declares


@pytest.mark.parametrize("table", ["verifiable", "nonverifiable"])
def test_paired_comparisons_name_registered_methods_once_each_in_row_order(table):
    rows = sorted(row for m in METHODS.values() for row in m.compared_with.get(table, {}).values())
    assert rows == list(range(len(rows)))  # one comparison per row of the report's list, none skipped
    found = pairs(table)
    assert len(found) == len(set(found)) == len(rows)
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
