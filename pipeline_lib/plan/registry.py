"""The method registry: what each method *is*, in one entry, for every engine.

A :class:`Method` names its family, its estimator and reward (group-RL methods), its table label, for a baseline its
config section, the settings class that section reads as (:mod:`pipeline_lib.core.baselines`) and whether it trains
on prompts with the expert answer, and for each value of ``train.engine`` the job that trains it (:class:`Entry`: the
Snakemake rule, the entry point, the command layout function, the builder of its
:class:`~pipeline_lib.core.run_spec.RunSpec`, a job that must run first and, for a verl baseline, the function of its
overrides), and whether verl checks every prompt's expert answer first (``needs_references``): what the method is
and how it trains. What other stages do with a method lives with them, reading these entries: the verl preflight's
kinds and checks (:data:`pipeline_lib.jobs.engines.verl.preflight.CHECKS`) and the report's paired comparisons
(:data:`pipeline_lib.paper.reproduction.PAIRS`). :data:`ADVANTAGE_ESTIMATORS`
(:mod:`pipeline_lib.core.rl.estimators`, re-exported here) says what each estimator takes (its parameter dataclass)
and how verl runs it. :func:`pipeline_lib.plan.plan_runs` reads only these tables to turn a config into runs, the
verl engine reads :data:`ADVANTAGE_ESTIMATORS`, and the paper tables take their row labels from here.

Adding an estimator is its function (``@register_advantage``) and parameter dataclass, one ``group_rl(...)`` entry
here with its :class:`EstimatorEntry` (or :func:`register` from elsewhere) and its ``train.methods`` entry in the
config (``tests/plan/test_new_estimator.py`` does exactly that).
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
from pipeline_lib.core.rl.estimators import ADVANTAGE_ESTIMATORS, EstimatorEntry, declare, undeclare
from pipeline_lib.core.run_spec import ENGINES, PlanError, RunSpec
from pipeline_lib.plan import layouts
from pipeline_lib.plan.layouts import Ctx, Job
from pipeline_lib.plan.settings import (
    base_spec,
    dpo_spec,
    group_rl_spec,
    rationalization_spec,
    rl_baseline_spec,
    sft_spec,
)

__all__ = ["ADVANTAGE_ESTIMATORS", "ENGINES", "METHODS", "METHOD_LABELS", "METHOD_ORDER", "Entry", "EstimatorEntry",
           "Method", "PlanError", "baseline", "before_training", "group_rl", "method", "register", "starting_point",
           "unregister", "verl_baseline", "verl_estimators"]

SpecBuilder = Callable[[Mapping[str, Any], str, str, str], RunSpec]  # (config, task, method, engine) -> spec
Layout = Callable[[Ctx, RunSpec], Job]  # the run being built and its spec -> the job's inputs and arguments


def verl_estimators() -> dict[str, tuple[str, tuple[str, ...]]]:
    """verl estimator name -> (our estimator, the algorithm-config keys it takes: its parameter dataclass's fields),
    for every estimator registered as ours; asked at each use, so one a test registers later is included."""
    return {entry.verl: (entry.name, entry.param_names) for entry in ADVANTAGE_ESTIMATORS.values() if entry.ours}


@dataclass(frozen=True)
class Entry:
    """How one engine trains a method: ``job`` is the Snakemake rule, ``entry_point`` the ``python -m`` module (and
    subcommand), ``layout`` the command's shape (the function of :mod:`pipeline_lib.plan.layouts` that gives the
    inputs and flags the entry point takes), ``spec`` the builder of its :class:`RunSpec`; ``verl_kind`` is verl's
    trainer (``sft`` / ``rl``) whose overrides the verl engine validates at parse time; ``overrides`` names the
    function (``module:function``, called with the run's spec and paths) that returns the overrides a verl baseline
    adds to its RL run's (:func:`pipeline_lib.jobs.engines.verl.translate.baseline_overrides` calls it; a name, as
    ``entry_point`` is, since the plan imports no engine)."""

    job: str
    entry_point: str
    layout: Layout
    spec: SpecBuilder
    verl_kind: str | None = None
    #: The function (called with the run's context and study, a :mod:`pipeline_lib.plan.layouts` function) that builds
    #: a job making the run's training data first (Rationalization on GPU: :func:`~.layouts.annotation_run`).
    prelude: Callable[[Ctx, str], layouts.Run] | None = None
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
    #: A baseline's settings class (:mod:`pipeline_lib.core.baselines`): its section's keys as typed fields, the
    #: run spec's ``baseline``; None where the section holds only ``tasks`` (Base).
    settings: type[BaselineSettings] | None = None
    #: Trains on prompts that carry the expert answer (a similarity reward, or a baseline that prefers / scores the
    #: demonstration): on Countdown the GOLD prompts (pipeline_lib.plan.settings.reference_prompts).
    demonstrations: bool = False
    #: group_rl: a new estimator this method brings (declared in pipeline_lib.core.rl.estimators by :func:`register`).
    new_estimator: EstimatorEntry | None = None
    #: Every training prompt must carry its expert answer (``extra_info.reference``); the verl engine checks the
    #: data before Ray starts (RARO's critic compares the expert answer with the policy's on every prompt).
    needs_references: bool = False
    #: The post-trained start (SFT): the RL runs of its task and seed start from this run's model where
    #: ``train.rl_start`` is ``sft`` (the tiny default), and the :attr:`from_starting_point` methods always; a study
    #: reads it as the start the RL methods are compared with, not as a train target or an RL run of its own.
    starting_point: bool = False
    #: Starts from the :attr:`starting_point` run's model (SFT) whatever ``train.rl_start`` says: Iterative DPO,
    #: which the paper initialises from the SFT checkpoint "to mitigate distribution mismatch" (App. B).
    from_starting_point: bool = False
    #: The model before any post-training (Base): the report says whether this run is a pretrained model or an
    #: untrained initialisation (:func:`pipeline_lib.paper.captions.base_note`).
    before_training: bool = False
    #: The demonstrations this method generates for itself, a file beside its run (Rationalization's
    #: ``rationalized_sft.parquet``): the report says how many are well-formed
    #: (:func:`pipeline_lib.paper.summary.demonstration_quality`).
    generated_demonstrations: str | None = None


LOCAL_RL = Entry("train_local", "pipeline_lib.jobs.engines.local.rl", layouts.local_rl, group_rl_spec)
VERL_RL = Entry("train_verl", "pipeline_lib.jobs.engines.verl.train rl", layouts.verl_rl, group_rl_spec, "rl")
#: The group-RL methods' engines: they differ from each other only in estimator and reward.
GROUP_RL = {"local": LOCAL_RL, "verl": VERL_RL}


def verl_baseline(overrides: str) -> Entry:
    """A baseline that runs as a verl RL job (paper App. B): the task's App. B RL row, so only the method differs,
    plus the overrides ``overrides`` (``module:function``) returns (OPD through verl's ``distillation.*`` config,
    RL-Logit and RARO through the pipeline's agent loops)."""
    return Entry("train_verl", "pipeline_lib.jobs.engines.verl.train rl", layouts.verl_rl, rl_baseline_spec, "rl",
                 overrides=overrides)


def group_rl(name: str, label: str, estimator: str | EstimatorEntry, reward: str, ours: bool = False) -> Method:
    """A group-RL method (GRPO family): ``train.rl`` / the task's App. B row with this estimator and reward. A new
    estimator comes as its :class:`EstimatorEntry` (its parameter dataclass and verl name), which :func:`register`
    declares."""
    new = estimator if isinstance(estimator, EstimatorEntry) else None
    return Method(name, label, "group_rl", GROUP_RL, advantage=new.name if new else estimator, reward=reward,
                  ours=ours, demonstrations=reward == "similarity", new_estimator=new)


def _local(name: str, spec: SpecBuilder = rl_baseline_spec, layout: Layout = layouts.local_expert) -> Entry:
    return Entry("train_local", f"pipeline_lib.jobs.engines.local.{name}", layout, spec)


def baseline(name: str, label: str, local: Entry, verl: Entry, settings: type[BaselineSettings] | None = None,
             demonstrations: bool = False, **fields: Any) -> Method:
    """A baseline: its local and verl jobs, its config section ``train.baselines.<name>`` read as ``settings`` (its
    :class:`~pipeline_lib.core.baselines.BaselineSettings` class; the spec builders find it by the method's name) and
    any further :class:`Method` field (``needs_references=True``)."""
    return Method(name, label, "baseline", {"local": local, "verl": verl}, section=name, settings=settings,
                  demonstrations=demonstrations, **fields)


_TRANSLATE = "pipeline_lib.jobs.engines.verl.translate"
_METHODS = (
    baseline("base", "Base", *[_local("base", base_spec, layouts.local_base)] * 2,  # on verl too: a copy
             before_training=True),
    Method("sft", "SFT", "sft", {
        "local": Entry("train_local", "pipeline_lib.jobs.engines.local.sft", layouts.local_sft, sft_spec),
        "verl": Entry("train_verl", "pipeline_lib.jobs.engines.verl.train sft", layouts.verl_sft, sft_spec, "sft")},
        starting_point=True),
    baseline("rationalization", "Rationalization",
             _local("rationalization", rationalization_spec, layouts.local_rationalization),
             Entry("train_verl", "pipeline_lib.jobs.engines.verl.train sft", layouts.verl_rationalization,
                   rationalization_spec, "sft", prelude=layouts.annotation_run),
             RationalizationSettings, generated_demonstrations="rationalized_sft.parquet"),
    baseline("iterative_dpo", "Iterative DPO", _local("dpo", dpo_spec),
             Entry("train_trl", "pipeline_lib.jobs.engines.trl.dpo run", layouts.trl_dpo, dpo_spec),
             IterativeDPOSettings, demonstrations=True, from_starting_point=True),
    baseline("rl_logit", "RL-Logit", _local("rl_logit"), verl_baseline(f"{_TRANSLATE}:rl_logit_overrides"),
             RLLogitSettings, demonstrations=True),
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


def starting_point() -> str:
    """The name of the post-trained start (the entry whose :attr:`Method.starting_point` is set: SFT), which the RL
    runs start from under ``train.rl_start: sft``; exactly one entry may be it."""
    return _the_one("starting_point")


def before_training() -> str:
    """The name of the model before post-training (the entry whose :attr:`Method.before_training` is set: Base), which
    the local engine's RL runs start from under ``train.rl_start: base``; exactly one entry may be it."""
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
    """Add a method (and the new estimator it brings, :attr:`Method.new_estimator`) to the registry, after the
    built-in ones. The built-in methods are registered at import; this is how a method defined elsewhere (a test's toy
    estimator) joins them, with exactly the same standing: one line, ``register(group_rl(..., EstimatorEntry(...),
    ...))``."""
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
