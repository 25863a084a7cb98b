"""The method registry: what each method *is* and how each engine trains it, one entry per method.

What other stages do with a method lives with them, reading these entries: the preflight's kinds
(:data:`pipeline_lib.jobs.engines.verl.preflight.CHECKS`) and the report's pairs
(:data:`pipeline_lib.paper.reproduction.PAIRS`). Adding an estimator is its function and parameter dataclass, one
``group_rl(...)`` line here (or :func:`register` from elsewhere) and its ``train.methods`` entry
(``tests/plan/test_new_estimator.py`` does exactly that).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline_lib.core import baselines as baseline_settings
from pipeline_lib.core.baselines import (
    BaselineSettings,
    IterativeDPOSettings,
    OPDSettings,
    RaroSettings,
    RationalizationSettings,
    RLLogitSettings,
)
from pipeline_lib.core.rl.estimators import ADVANTAGE_ESTIMATORS, EstimatorEntry, declare, undeclare, verl_estimators
from pipeline_lib.core.run_spec import ENGINES, PlanError, RunSpec
from pipeline_lib.plan import layouts
from pipeline_lib.plan.layouts import Ctx, Job
from pipeline_lib.plan.settings import (
    annotation_spec,
    base_spec,
    dpo_spec,
    group_rl_spec,
    rationalization_spec,
    rl_baseline_spec,
    sft_spec,
)

__all__ = ["ADVANTAGE_ESTIMATORS", "ENGINES", "METHODS", "METHOD_LABELS", "METHOD_ORDER", "Entry", "EstimatorEntry",
           "Method", "PlanError", "Prelude", "baseline", "before_training", "group_rl", "method", "register",
           "run_names", "starting_point", "unregister", "variant_runs", "verl_baseline", "verl_estimators"]

SpecBuilder = Callable[[Mapping[str, Any], str, str, str], RunSpec]  # (config, task, method, engine) -> spec
Layout = Callable[[Ctx, RunSpec], Job]  # the run being built and its spec -> the job's inputs and arguments


@dataclass(frozen=True)
class Prelude:
    """A job that makes a run's training data before it: its spec builder ``(config, task) -> RunSpec`` and its
    layout ``(run's context, spec, study) -> Run``."""

    spec: Callable[[Mapping[str, Any], str], RunSpec]
    layout: Callable[[Ctx, RunSpec, str], layouts.Run]


@dataclass(frozen=True)
class Entry:
    """How one engine trains a method: the Snakemake rule, the ``python -m`` module (and subcommand), the command's
    layout (:mod:`pipeline_lib.plan.layouts`) and its family's spec builder."""

    job: str
    entry_point: str
    layout: Layout
    spec: SpecBuilder
    verl_kind: str | None = None  # verl's trainer (sft / rl), whose overrides are validated at parse time
    #: A job making the run's training data first (Rationalization on GPU: the annotation).
    prelude: Prelude | None = None
    #: A verl baseline's extra overrides: ``module:function`` of the engine (the plan imports no engine), called by
    #: :func:`pipeline_lib.jobs.engines.verl.translate.baseline_overrides`.
    overrides: str | None = None


@dataclass(frozen=True)
class Method:
    """One method: a row of the paper's tables and a kind of training run."""

    name: str
    label: str
    family: str  # "sft", "group_rl" or "baseline"
    engines: Mapping[str, Entry] = field(default_factory=dict)
    # group_rl: the estimator's name in pipeline_lib.core.rl.advantages (an ADVANTAGE_ESTIMATORS entry)
    advantage: str | None = None
    reward: str | None = None  # group_rl: "verifier" or "similarity"
    ours: bool = False  # the paper's method (SoftmaxGRPO): the row the judge validation reports
    #: A baseline's config section (``train.baselines.<section>``), None for the main methods.
    section: str | None = None
    #: A baseline's settings class (:mod:`pipeline_lib.core.baselines`); None where its section holds only ``tasks``.
    settings: type[BaselineSettings] | None = None
    #: Trains on prompts that carry the expert answer (on Countdown the GOLD prompts).
    demonstrations: bool = False
    #: group_rl: a new estimator this method brings (:func:`register` declares it).
    new_estimator: EstimatorEntry | None = None
    #: Every training prompt must carry its expert answer; verl checks the data before Ray starts (RARO's critic).
    needs_references: bool = False
    #: The post-trained start (SFT) that RL runs start from under ``train.rl_start: sft``; not a train target itself.
    starting_point: bool = False
    #: Starts from SFT whatever ``train.rl_start`` says: Iterative DPO (App. B: "to mitigate distribution mismatch").
    from_starting_point: bool = False
    #: The model before any post-training (Base).
    before_training: bool = False
    #: The demonstrations it writes beside its run (Rationalization's), whose quality the report states.
    generated_demonstrations: str | None = None
    #: The key of its section listing its variants (RL-Logit's ``variants``): each variant is its own run
    #: ``<name>_<variant>`` (:func:`variant_runs`), Table 1 reports the one selected on validation.
    variants: str | None = None


LOCAL_RL = Entry("train_local", "pipeline_lib.jobs.engines.local.rl", layouts.local_rl, group_rl_spec)
VERL_RL = Entry("train_verl", "pipeline_lib.jobs.engines.verl.train rl", layouts.verl_rl, group_rl_spec, "rl")
#: The group-RL methods' engines: they differ from each other only in estimator and reward.
GROUP_RL = {"local": LOCAL_RL, "verl": VERL_RL}


def verl_baseline(overrides: str) -> Entry:
    """A baseline run as a verl RL job with the task's App. B row, plus the overrides ``overrides`` returns."""
    return Entry("train_verl", "pipeline_lib.jobs.engines.verl.train rl", layouts.verl_rl, rl_baseline_spec, "rl",
                 overrides=overrides)


def group_rl(name: str, label: str, estimator: str | EstimatorEntry, reward: str, ours: bool = False) -> Method:
    """A group-RL method: this estimator (a new one as its :class:`EstimatorEntry`) and reward."""
    new = estimator if isinstance(estimator, EstimatorEntry) else None
    return Method(name, label, "group_rl", GROUP_RL, advantage=new.name if new else estimator, reward=reward,
                  ours=ours, demonstrations=reward == "similarity", new_estimator=new)


def _local(name: str, spec: SpecBuilder = rl_baseline_spec, layout: Layout = layouts.local_expert) -> Entry:
    return Entry("train_local", f"pipeline_lib.jobs.engines.local.{name}", layout, spec)


def baseline(name: str, label: str, local: Entry, verl: Entry, settings: type[BaselineSettings] | None = None,
             demonstrations: bool = False, **fields: Any) -> Method:
    """A baseline: its local and verl jobs, its section ``train.baselines.<name>`` read as ``settings``, and any further
    :class:`Method` field."""
    return Method(name, label, "baseline", {"local": local, "verl": verl}, section=name, settings=settings,
                  demonstrations=demonstrations, **fields)


_TRANSLATE = "pipeline_lib.jobs.engines.verl.translate"
_METHODS = (
    baseline("base", "Base", *[_local("base", base_spec, layouts.local_base)] * 2,  # on verl too: a copy
             before_training=True),
    Method("sft", "SFT", "sft", {
        "local": Entry("train_local", "pipeline_lib.jobs.engines.local.sft", layouts.local_sft, sft_spec),
        "verl": Entry("train_verl", "pipeline_lib.jobs.engines.verl.sft", layouts.verl_sft, sft_spec, "sft")},
        starting_point=True),
    baseline("rationalization", "Rationalization",
             _local("rationalization", rationalization_spec, layouts.local_rationalization),
             Entry("train_verl", "pipeline_lib.jobs.engines.verl.sft", layouts.verl_rationalization,
                   rationalization_spec, "sft", prelude=Prelude(annotation_spec, layouts.annotation_run)),
             RationalizationSettings, generated_demonstrations="rationalized_sft.parquet"),
    baseline("iterative_dpo", "Iterative DPO", _local("dpo", dpo_spec),
             Entry("train_trl", "pipeline_lib.jobs.engines.trl.dpo run", layouts.trl_dpo, dpo_spec),
             IterativeDPOSettings, demonstrations=True, from_starting_point=True),
    baseline("rl_logit", "RL-Logit", _local("rl_logit"), verl_baseline(f"{_TRANSLATE}:rl_logit_overrides"),
             RLLogitSettings, demonstrations=True, variants="variants"),
    baseline("raro", "RARO", _local("raro"), verl_baseline(f"{_TRANSLATE}:raro_overrides"), RaroSettings,
             demonstrations=True, needs_references=True),
    baseline("opd", "OPD", _local("opd", layout=layouts.local_opd), verl_baseline(f"{_TRANSLATE}:opd_overrides"),
             OPDSettings),
    group_rl("grpo_sim", "GRPO-Sim", "grpo", "similarity"),
    group_rl("grpo_exact", "GRPO-Exact", "grpo", "verifier"),
    group_rl("softmax_sim", "SoftmaxGRPO-Sim", "softmax", "similarity", ours=True),
    group_rl("softmax_exact", "SoftmaxGRPO-Exact", "softmax", "verifier", ours=True),
    # Beyond the paper: SoftmaxGRPO with each group's tau set by a target effective sample size (App. A).
    group_rl("softmax_ess", "SoftmaxGRPO-ESS", "softmax_ess", "verifier"),
)

#: Every method by name, in the paper's table order.
METHODS: dict[str, Method] = {m.name: m for m in _METHODS}
for _method in _METHODS:  # each baseline's settings class, found by the spec builders by the method's name
    if _method.settings is not None:
        baseline_settings.declare(_method.section or _method.name, _method.settings)
METHOD_LABELS: dict[str, str] = {name: m.label for name, m in METHODS.items()}
METHOD_ORDER: list[str] = list(METHODS)


def variant_runs(config: Mapping[str, Any], name: str | None = None) -> dict[str, tuple[str, str]]:
    """Each variant run -> (its method, its variant), for every method with variants (only ``name``'s, where given):
    ``train.baselines.<section>.<variants key>``, in the listed order."""
    baselines = (config.get("train") or {}).get("baselines") or {}
    runs = {}
    for entry in METHODS.values():
        if entry.variants is None or (name is not None and entry.name != name):
            continue
        section = baselines.get(entry.section or entry.name) or {}
        for variant in section.get(entry.variants) or []:
            runs[f"{entry.name}_{variant}"] = (entry.name, variant)
    return runs


def run_names(config: Mapping[str, Any], name: str) -> list[str]:
    """The runs method ``name`` trains: its variant runs where it has variants, else the one run ``name``."""
    return list(variant_runs(config, name)) if method(name).variants else [name]


def starting_point() -> str:
    """The post-trained start (SFT): the one entry with :attr:`Method.starting_point`."""
    return _the_one("starting_point")


def before_training() -> str:
    """The model before post-training (Base): the one entry with :attr:`Method.before_training`."""
    return _the_one("before_training")


def _the_one(flag: str) -> str:
    names = [name for name, entry in METHODS.items() if getattr(entry, flag)]
    if len(names) != 1:
        raise PlanError(f"exactly one registered method must have Method.{flag} set, got {names}")
    return names[0]


def method(name: str) -> Method:
    """The registry entry of ``name``; an unregistered name is an error that says where to add it."""
    if name not in METHODS:
        raise PlanError(f"method {name!r} is not registered; registered: {sorted(METHODS)} (add a Method entry to "
                        f"pipeline_lib/plan/registry.py)")
    return METHODS[name]


def register(entry: Method) -> Method:
    """Add a method defined elsewhere (a test's toy estimator or baseline), and what it brings, after the built-in
    ones, with the same standing."""
    if entry.name in METHODS:
        raise PlanError(f"method {entry.name!r} is already registered")
    if entry.new_estimator is not None:
        try:
            declare(entry.new_estimator)
        except ValueError as exc:
            raise PlanError(str(exc)) from None
    if entry.settings is not None:
        try:
            baseline_settings.declare(entry.section or entry.name, entry.settings)
        except ValueError as exc:
            raise PlanError(str(exc)) from None
    if entry.family == "group_rl" and entry.advantage not in ADVANTAGE_ESTIMATORS:
        raise PlanError(f"method {entry.name!r}: estimator {entry.advantage!r} is not declared; declared: "
                        f"{sorted(ADVANTAGE_ESTIMATORS)} (pipeline_lib/core/rl/estimators.py, or group_rl(..., "
                        f"EstimatorEntry(...)))")
    METHODS[entry.name] = entry
    METHOD_LABELS[entry.name] = entry.label
    METHOD_ORDER.append(entry.name)
    return entry


def unregister(name: str) -> None:
    """Remove a method registered with :func:`register` (and the estimator it brought): a test cleans up after
    itself."""
    entry = METHODS.pop(name, None)
    METHOD_LABELS.pop(name, None)
    if name in METHOD_ORDER:
        METHOD_ORDER.remove(name)
    if entry is not None and entry.new_estimator is not None:
        undeclare(entry.new_estimator.name)
    if entry is not None and entry.settings is not None:
        baseline_settings.undeclare(entry.section or entry.name)
