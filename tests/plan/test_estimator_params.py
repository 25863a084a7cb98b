"""An estimator's parameters are declared once (its dataclass in pipeline_lib.core.rl.estimators); the schema, the
plan's
check and the functions follow from it, and planning imports no torch."""

import subprocess
import sys
import textwrap
from dataclasses import dataclass, fields

import pytest

from pipeline_lib.core.config import load_schema, with_estimator_params
from pipeline_lib.core.rl import advantages
from pipeline_lib.core.rl.estimators import (
    ADVANTAGE_ESTIMATORS,
    EstimatorEntry,
    check_params,
    declare,
    param,
    undeclare,
)
from tests.conftest import REPO, repo_env

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"

#: Makes ``import torch`` fail: a meta-path finder ahead of every other refuses it.
BLOCKER = textwrap.dedent("""
    import importlib.abc, sys

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError(f"{name} is blocked in this process")

    sys.meta_path.insert(0, NoTorch())
""")
#: Plans both configs behind the blocker.
NO_TORCH = BLOCKER + textwrap.dedent("""
    from pipeline_lib.core.config import load_config_file
    from pipeline_lib.plan import plan_runs, validate_planned_config

    for name in ("config.yaml", "paper.yaml"):
        config = validate_planned_config(load_config_file(f"config/{name}"), "workflow/schemas/config.schema.yaml")
        print(name, len(plan_runs(config).runs))
    print("torch imported:", "torch" in sys.modules)
""")


def test_both_configs_plan_in_a_process_where_importing_torch_fails():
    probe = subprocess.run([sys.executable, "-c", BLOCKER + "import torch"], cwd=REPO, env=repo_env(),
                           capture_output=True, text=True, timeout=300)
    assert probe.returncode != 0 and "torch is blocked" in probe.stderr  # the blocker blocks
    result = subprocess.run([sys.executable, "-c", NO_TORCH], cwd=REPO, env=repo_env(), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = dict(line.split() for line in result.stdout.splitlines()[:2])
    assert int(counts["config.yaml"]) > 0 and int(counts["paper.yaml"]) > 0
    assert "torch imported: False" in result.stdout


def test_the_methods_schema_is_the_dataclasses_fields():
    entry = with_estimator_params(load_schema(SCHEMA))["properties"]["train"]["properties"]["methods"][
        "additionalProperties"]["properties"]
    declared = {f.name: f for e in ADVANTAGE_ESTIMATORS.values() for f in fields(e.params)}
    assert set(entry) == {"advantage", "reward", *declared}
    for name, field in declared.items():
        assert entry[name] == {"type": "number", **field.metadata}
    assert entry["tau"]["exclusiveMinimum"] == 0 and entry["ess_fraction"]["exclusiveMaximum"] == 1


def test_every_registered_function_takes_exactly_its_declared_parameters():
    for name, entry in ADVANTAGE_ESTIMATORS.items():
        taken = list(advantages.inspect.signature(advantages._REGISTRY[name]).parameters)[2:]
        assert sorted(taken) == sorted(entry.param_names), name


@dataclass(frozen=True)
class _Width:
    width: float = param("A width.", exclusiveMinimum=0)


def test_a_function_that_disagrees_with_its_dataclass_is_refused_at_registration():
    declare(EstimatorEntry("toy_width", _Width))
    try:
        with pytest.raises(TypeError, match=r"takes \['tau'\] but its parameter dataclass _Width declares \['width'\]"):
            advantages.register_advantage("toy_width")(lambda rewards, index, tau: rewards)
    finally:
        undeclare("toy_width")
    with pytest.raises(ValueError, match="unknown advantage estimator 'toy_width'"):
        advantages.register_advantage("toy_width")(lambda rewards, index, width: rewards)


@pytest.mark.parametrize(("name", "params", "error", "message"), [
    ("softmax", {}, TypeError, r"needs parameter\(s\) \['tau'\]"),
    ("softmax", {"tau": 0.0}, ValueError, r"tau = 0.0 breaks exclusiveMinimum 0"),
    ("softmax_ess", {"ess_fraction": 1.0}, ValueError, r"breaks exclusiveMaximum 1"),
    ("grpo", {"tau": 0.1}, TypeError, r"unknown parameter\(s\) \['tau'\]"),
    ("maxrl", {"eps": float("nan")}, ValueError, r"finite number"),
])
def test_the_plans_parameter_check_reads_the_dataclass(name, params, error, message):
    with pytest.raises(error, match=message):
        check_params(name, params)
    check_params("grpo", {})  # a default fills in
    check_params("maxrl", {"eps": 0.0})  # a bound's edge (minimum 0) is fine
