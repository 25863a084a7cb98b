"""The run plan: a method registry, one typed run spec, and one function from a config to the list of runs.

:func:`plan_runs` is the only place where runs are enumerated; the Snakemake rules, the verl parse-time validation,
the target lists and ``python -m pipeline_lib plan`` all read its result. See :mod:`.registry` for what a method is,
:mod:`pipeline_lib.core.run_spec` for the :class:`RunSpec` every engine reads, and :mod:`.settings` for how the config
becomes one (the parameter precedence, and which tau wins). The plan imports no engine: engines translate its specs
at their edge.
"""

from pipeline_lib.core.run_spec import Estimator, PlanError, RunSpec
from pipeline_lib.plan.registry import (
    ADVANTAGE_ESTIMATORS,
    METHOD_LABELS,
    METHOD_ORDER,
    METHODS,
    Entry,
    EstimatorEntry,
    Method,
    group_rl,
    method,
    register,
    unregister,
)
from pipeline_lib.plan.runs import (
    JOBS,
    VERL_CHECKED,
    JobKind,
    Plan,
    Run,
    RunId,
    baseline_tasks,
    engine_of,
    plan_runs,
    softmax_exact_method,
    trained_methods,
    validate_planned_config,
)
from pipeline_lib.plan.settings import verl_tasks

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "JOBS",
    "METHODS",
    "METHOD_LABELS",
    "METHOD_ORDER",
    "VERL_CHECKED",
    "Entry",
    "Estimator",
    "EstimatorEntry",
    "JobKind",
    "Method",
    "Plan",
    "PlanError",
    "Run",
    "RunId",
    "RunSpec",
    "baseline_tasks",
    "engine_of",
    "group_rl",
    "method",
    "plan_runs",
    "register",
    "softmax_exact_method",
    "trained_methods",
    "unregister",
    "validate_planned_config",
    "verl_tasks",
]
