"""The run plan: a method registry and one function from a config to the list of runs.

:func:`plan_runs` is the only place where runs are enumerated; the Snakemake rules, the verl parse-time validation,
the target lists and ``python -m pipeline_lib plan`` all read its result. See :mod:`.registry` for what a method is
and :mod:`.runs` for the parameter precedence.
"""

from pipeline_lib.plan.registry import METHOD_LABELS, METHOD_ORDER, METHODS, Entry, Method, PlanError, group_rl, method
from pipeline_lib.plan.runs import (
    JOBS,
    VERL_CHECKED,
    JobKind,
    Plan,
    Run,
    baseline_tasks,
    engine_of,
    plan_runs,
    softmax_exact_method,
    trained_methods,
    verl_tasks,
)

__all__ = [
    "JOBS",
    "METHODS",
    "METHOD_LABELS",
    "METHOD_ORDER",
    "VERL_CHECKED",
    "Entry",
    "JobKind",
    "Method",
    "Plan",
    "PlanError",
    "Run",
    "baseline_tasks",
    "engine_of",
    "group_rl",
    "method",
    "plan_runs",
    "softmax_exact_method",
    "trained_methods",
    "verl_tasks",
]
