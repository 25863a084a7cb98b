"""The config-to-runs pass reads in one direction: following its calls from :func:`pipeline_lib.plan.plan_runs` and
:func:`pipeline_lib.plan.targets.stage_targets`, no call chain comes back into a module it has left (``runs ->
registry -> runs``). A maintainer who walks from the plan into the registry, a family's spec builder and the run spec
never has to turn back to a file already read. The chains are the ones both shipped plans execute (every method,
study and engine of the tiny default and the paper), traced as they run."""

from __future__ import annotations

import sys
from collections import Counter
from types import FrameType
from typing import Any

import pytest

from pipeline_lib.core.config import load_config_file, validate_config
from pipeline_lib.plan import plan_runs
from pipeline_lib.plan.targets import stage_targets
from tests.conftest import REPO

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"


def _returns(work: Any) -> Counter[str]:
    """Each chain of the package's (and the tests') modules, consecutive calls in one module collapsed, that
    re-enters a module it left while ``work()`` runs, with how often it ran."""
    stack: list[str | None] = []
    found: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            module = module if module.startswith(("pipeline_lib.", "tests.")) else None
            if module is not None:
                chain = [m for m in stack if m is not None]
                chain = [m for i, m in enumerate(chain) if i == 0 or chain[i - 1] != m]
                if chain and chain[-1] != module and module in chain:
                    start = len(chain) - 1 - chain[::-1].index(module)
                    found[" -> ".join([*chain[start:], module]) + f" ({frame.f_code.co_qualname})"] += 1
            stack.append(module)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
    return found


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_planning_a_shipped_config_never_calls_back_into_a_module_it_left(name):
    config = validate_config(load_config_file(REPO / "config" / name), SCHEMA, base_dir=REPO)
    assert _returns(lambda: stage_targets(config, plan_runs(config))) == Counter()


def test_the_trace_sees_a_call_back_into_a_module_it_left():
    """The check itself: a builder that calls back into the plan's module (as a spec builder asking ``runs`` which
    method is ours would) is reported."""
    from pipeline_lib.plan import registry, runs

    config = validate_config(load_config_file(REPO / "config" / "config.yaml"), SCHEMA, base_dir=REPO)
    entry = registry.METHODS["softmax_exact"].engines["local"]
    calls_back = registry.Entry(entry.job, entry.entry_point, entry.layout,
                                lambda config, task, method, engine: (runs.softmax_exact_method(config),
                                                                      entry.spec(config, task, method, engine))[1])
    original = registry.METHODS["softmax_exact"]
    registry.METHODS["softmax_exact"] = registry.Method(**{**original.__dict__, "engines": {"local": calls_back}})
    try:
        found = _returns(lambda: plan_runs(config))
    finally:
        registry.METHODS["softmax_exact"] = original
    assert "pipeline_lib.plan.runs -> tests.plan.test_walk -> pipeline_lib.plan.runs (softmax_exact_method)" in found
