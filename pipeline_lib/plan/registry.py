"""The method registry: what each method *is*, in one entry, for every engine.

An entry names the method's family, its advantage estimator and reward (for the group-RL methods), its table label,
and for each value of ``train.engine`` the job that trains it: the Snakemake rule (``job``), the entry point, the
command layout (which inputs and flags the entry point takes) and the spec builder; on verl also the override
builder whose Hydra overrides are validated at parse time. :func:`pipeline_lib.plan.plan_runs` reads only this table
to turn a config into runs, and the paper tables take their row labels from it.

Adding a group-RL method with an advantage already in :mod:`pipeline_lib.advantages` is one :class:`Method` entry
here (``group_rl(...)``) plus its ``train.methods`` entry in the config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline_lib.engines.trl.dpo import trl_dpo_spec
from pipeline_lib.engines.verl.rationalization import rationalization_sft_spec
from pipeline_lib.engines.verl.translate import baseline_rl_spec, rl_overrides, rl_spec, sft_overrides, sft_spec
from pipeline_lib.specs import baseline_spec, rl_run_spec, sft_run_spec

__all__ = ["ENGINES", "METHODS", "METHOD_LABELS", "METHOD_ORDER", "Entry", "Method", "PlanError", "group_rl", "method"]

#: Values of ``train.engine``.
ENGINES = ("local", "verl")

SpecBuilder = Callable[[Mapping[str, Any], str, str], dict[str, Any]]  # (config, task, method) -> spec


class PlanError(ValueError):
    """The config asks for a run the registry cannot build, or sets one parameter twice with different values."""


@dataclass(frozen=True)
class Entry:
    """How one engine trains a method: ``job`` is the Snakemake rule, ``layout`` the command's shape
    (see :data:`pipeline_lib.plan.runs.LAYOUTS`), ``spec`` the run spec and, on verl, ``overrides`` its
    Hydra override builder (``(spec, paths, seed) -> list[str]``)."""

    job: str
    entry_point: str
    layout: str
    spec: SpecBuilder
    overrides: Callable[..., list[str]] | None = None
    verl_kind: str | None = None  # verl's trainer: "sft" or "rl"
    prelude: str | None = None  # a job that makes the training data first (pipeline_lib.plan.runs.PRELUDES)


@dataclass(frozen=True)
class Method:
    """One method: a row of the paper's tables and a kind of training run."""

    name: str
    label: str
    family: str  # "sft", "group_rl" or "baseline"
    engines: Mapping[str, Entry] = field(default_factory=dict)
    advantage: str | None = None  # group_rl: the name in pipeline_lib.advantages
    reward: str | None = None  # group_rl: "verifier" or "similarity"
    ours: bool = False  # the paper's method (SoftmaxGRPO): the row the judge validation reports


def _of_config(build: Callable[[Mapping[str, Any]], dict[str, Any]]) -> SpecBuilder:
    """A spec builder that reads only the config (the local engine's shared sections)."""
    return lambda config, task, method: build(config)


def _of_task(build: Callable[[Mapping[str, Any], str], dict[str, Any]]) -> SpecBuilder:
    """A spec builder of the config and the task (verl: the task's App. B row)."""
    return lambda config, task, method: build(config, task)


def _of_method(build: Callable[[Mapping[str, Any], str], dict[str, Any]]) -> SpecBuilder:
    """A spec builder of the config and the method (its own section)."""
    return lambda config, task, method: build(config, method)


LOCAL_RL = Entry("train_local", "pipeline_lib.engines.local.rl", "local_rl", _of_method(rl_run_spec))
VERL_RL = Entry("train_verl", "pipeline_lib.engines.verl.train rl", "verl_rl", rl_spec, rl_overrides, "rl")
VERL_BASELINE = Entry("train_verl", "pipeline_lib.engines.verl.train rl", "verl_rl", baseline_rl_spec, rl_overrides,
                      "rl")
#: The group-RL methods' engines: they differ from each other only in advantage and reward.
GROUP_RL = {"local": LOCAL_RL, "verl": VERL_RL}


def group_rl(name: str, label: str, advantage: str, reward: str, ours: bool = False) -> Method:
    """A group-RL method (GRPO family): ``train.rl`` / the task's App. B row with this advantage and reward."""
    return Method(name, label, "group_rl", GROUP_RL, advantage=advantage, reward=reward, ours=ours)


def _local_expert(name: str) -> Entry:
    return Entry("train_local", f"pipeline_lib.engines.local.{name}", "local_expert", _of_method(baseline_spec))


_METHODS = (
    Method("base", "Base", "baseline", {
        "local": Entry("train_local", "pipeline_lib.engines.local.base", "local_base", _of_method(baseline_spec)),
        "verl": Entry("train_local", "pipeline_lib.engines.local.base", "local_base", _of_method(baseline_spec))}),
    Method("sft", "SFT", "sft", {
        "local": Entry("train_local", "pipeline_lib.engines.local.sft", "local_sft", _of_config(sft_run_spec)),
        "verl": Entry("train_verl", "pipeline_lib.engines.verl.train sft", "verl_sft", _of_task(sft_spec),
                      sft_overrides, "sft")}),
    Method("rationalization", "Rationalization", "baseline", {
        "local": Entry("train_local", "pipeline_lib.engines.local.rationalization", "local_rationalization",
                       _of_method(baseline_spec)),
        "verl": Entry("train_verl", "pipeline_lib.engines.verl.train sft", "verl_rationalization",
                      _of_task(rationalization_sft_spec), sft_overrides, "sft", prelude="annotate")}),
    Method("iterative_dpo", "Iterative DPO", "baseline", {
        "local": _local_expert("dpo"),
        "verl": Entry("train_trl", "pipeline_lib.engines.trl.dpo run", "trl_dpo", _of_config(trl_dpo_spec))}),
    Method("rl_logit", "RL-Logit", "baseline", {"local": _local_expert("rl_logit"), "verl": VERL_BASELINE}),
    Method("raro", "RARO", "baseline", {"local": _local_expert("raro"), "verl": VERL_BASELINE}),
    Method("opd", "OPD", "baseline", {
        "local": Entry("train_local", "pipeline_lib.engines.local.opd", "local_opd", _of_method(baseline_spec)),
        "verl": VERL_BASELINE}),
    group_rl("grpo_sim", "GRPO-Sim", "grpo", "similarity"),
    group_rl("grpo_exact", "GRPO-Exact", "grpo", "verifier"),
    group_rl("softmax_sim", "SoftmaxGRPO-Sim", "softmax", "similarity", ours=True),
    group_rl("softmax_exact", "SoftmaxGRPO-Exact", "softmax", "verifier", ours=True),
    # Beyond the paper: SoftmaxGRPO with each group's tau set by a target effective sample size (App. A).
    group_rl("softmax_ess", "SoftmaxGRPO-ESS", "softmax_ess", "verifier"),
)

#: Every method by name, in the paper's table order.
METHODS: dict[str, Method] = {m.name: m for m in _METHODS}
METHOD_LABELS: dict[str, str] = {name: m.label for name, m in METHODS.items()}
METHOD_ORDER: list[str] = list(METHODS)


def method(name: str) -> Method:
    """The registry entry of ``name``; an unregistered name is an error that says where to add it."""
    if name not in METHODS:
        raise PlanError(f"method {name!r} is not registered; registered: {sorted(METHODS)} (add a Method entry to "
                        f"pipeline_lib/plan/registry.py)")
    return METHODS[name]
