"""Config -> the list of runs: the one place that decides which training jobs exist.

:func:`plan_runs` asks every study for the runs it reads, adds the runs those start from (SFT, Base, the OPD teacher,
the rationalization annotator) and builds each one in one pass: registry entry -> its family's spec builder
(:mod:`pipeline_lib.plan.settings`) -> a study's typed replacement -> the entry's command layout.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pipeline_lib.core.config import ConfigError, validate_config
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.core.tracking import TrackingSettings
from pipeline_lib.plan.estimates import fit_run, memory_check, scratch_args, site_settings
from pipeline_lib.plan.layouts import TOKENIZER, Run, local_opd_teacher
from pipeline_lib.plan.layouts import Ctx as _Ctx
from pipeline_lib.plan.layouts import run_dir as _run_dir
from pipeline_lib.plan.layouts import sentinel as _done
from pipeline_lib.plan.registry import (
    METHODS,
    Entry,
    PlanError,
    before_training,
    method,
    run_names,
    starting_point,
    variant_runs,
)
from pipeline_lib.plan.settings import (
    ML_OBJECTIVE,
    ablation_cell,
    ablation_method,
    at_scale,
    check_estimator,
    engine_of,
    holdout_prompts,
    imagenet_spec,
    opd_teacher,
    opd_teacher_spec,
    reference_prompts,
    task_row,
    with_variant,
)

__all__ = ["JOBS", "TOKENIZER", "VERL_CHECKED", "JobKind", "Plan", "Run", "baseline_tasks", "engine_of",
           "key_pattern", "plan_runs", "softmax_exact_method", "start_of", "trained_methods",
           "validate_planned_config"]

#: Written by the local job ``validate_verl`` once every verl run's overrides passed verl's own checks; every verl
#: training job starts after it (an order-only prerequisite: its timestamp reruns nothing).
VERL_CHECKED = "results/checks/verl_overrides.json"
_SENTINEL = re.compile(r"^results/train/([a-z0-9_]+)/([a-z0-9_]+)/seed([0-9]+)/DONE\.json$")


@dataclass(frozen=True)
class JobKind:
    """One Snakemake rule: the file it writes in the run directory, its conda env and the resources the plan sets per
    run (App. B's compute; the site's live in the profile)."""

    output: str
    conda: str
    resources: tuple[str, ...] = ()


#: Every kind of training job, by rule name.
JOBS: dict[str, JobKind] = {
    "train_local": JobKind("DONE.json", "train-local.yaml"),  # the local PyTorch engine (CPU)
    "train_verl": JobKind("DONE.json", "train-verl.yaml", ("nodes", "gres")),  # verl SFT / RL on Slurm nodes
    "train_trl": JobKind("DONE.json", "train-verl.yaml", ("gpu",)),  # Iterative DPO: vLLM samples + TRL
    "annotate_rationales": JobKind("rationalized_sft.parquet", "train-verl.yaml", ("gpu",)),  # STaR via vLLM
    "train_imagenet": JobKind("DONE.json", "train-verl.yaml"),  # the ImageNet objective study
}


@dataclass(frozen=True)
class RunId:
    """Which run a study reads, as fields: the target lists select by them, never by splitting ``path``."""

    study: str  # the study that reads it: main, baseline, ablation, scale, scale_reference, judge, transfer, imagenet
    task: str
    name: str  # the run directory (Run.name): a method, an ablation cell, <method>_at_<scale>, ImageNet's ml/m0
    seed: int
    path: str  # its sentinel, results/train/<task>/<name>/seed<seed>/DONE.json


def key_pattern(keys: Iterable[str]) -> str:
    """A wildcard constraint matching exactly ``keys``, longest first (none: a pattern that matches nothing)."""
    ordered = sorted(set(keys), key=lambda k: (-len(k), k))
    return "|".join(re.escape(k) for k in ordered) or "(?!)"


class Plan:
    """Every run of a config, addressable by (rule, run key) for the rules and iterable for the tables."""

    def __init__(self, runs: Iterable[Run], targets: Iterable[str], requests: Mapping[str, list[RunId]]) -> None:
        self.runs = list(runs)
        #: The train stage's targets (every study's own runs, not the runs they start from), in study order.
        self.train_targets = list(targets)
        #: Per study (main, baseline, ablation, scale, scale_reference, judge, transfer, imagenet), the runs it
        #: reads, in the order its tables list them.
        self.requests = {study: list(ids) for study, ids in requests.items()}
        self._by_job: dict[tuple[str, str], Run] = {}
        for run in self.runs:
            if (run.job, run.key) in self._by_job:
                raise PlanError(f"two runs of rule {run.job} share {run.key}")
            self._by_job[run.job, run.key] = run

    def get(self, job: str, key: str) -> Run:
        return self._by_job[job, key]

    def pattern(self, job: str) -> str:
        """A wildcard constraint matching exactly the run keys of ``job`` (none: a pattern that matches nothing)."""
        return key_pattern(run.key for run in self.runs if run.job == job)

    def of(self, engine: str | None = None, job: str | None = None) -> list[Run]:
        return [r for r in self.runs if (engine is None or r.engine == engine) and (job is None or r.job == job)]

    def table(self) -> list[dict[str, Any]]:
        """One row per run: the reviewer's view of what the config will do."""
        return [{"task": r.task, "run": r.name, "method": r.method, "seed": r.seed, "engine": r.engine, "job": r.job,
                 "study": r.study, **r.hyperparameters(),
                 "resources": ",".join(f"{k}={v}" for k, v in r.resources.items()) or "-"} for r in self.runs]


# --- which task runs where ---------------------------------------------------------------------------------------

def trained_methods(config: Mapping[str, Any], task: str) -> list[str]:
    """RL methods trained on ``task``: ``train.methods``, or the task row's own ``methods`` (the paper's
    non-verifiable tasks train only the -Sim pair)."""
    methods = list(config["train"]["methods"])
    listed = task_row(config, task).get("methods")
    if listed is None:
        return methods
    unknown = sorted(set(listed) - set(methods))
    if unknown:
        raise PlanError(f"train.task_settings.{task}.methods lists {unknown}, which are not in train.methods "
                        f"({methods})")
    return list(listed)


def softmax_exact_method(config: Mapping[str, Any]) -> str:
    """The configured SoftmaxGRPO-Exact method (ours, with the verifier reward) whose tau and M the ablation varies."""
    for name in config["train"]["methods"]:
        if name in METHODS and METHODS[name].ours and METHODS[name].reward == "verifier":
            return name
    raise PlanError("the tau x M ablation needs a train.methods entry of ours (SoftmaxGRPO) with the verifier reward")


# --- method parameters --------------------------------------------------------------------------------------------

def _check_methods(config: Mapping[str, Any]) -> None:
    """Each ``train.methods`` entry agrees with its registry entry (a group-RL method, its estimator and reward)."""
    for name, entry in (config.get("train") or {}).get("methods", {}).items():
        registered = method(name)
        if registered.family != "group_rl":
            raise PlanError(f"train.methods.{name}: {name!r} is a {registered.family} method, not a group-RL one")
        for key in ("advantage", "reward"):
            if entry[key] != getattr(registered, key):
                raise PlanError(f"train.methods.{name}.{key} is {entry[key]!r} but the registry's {name!r} has "
                                f"{getattr(registered, key)!r}")


def _module(entry_point: str) -> list[str]:
    return ["python", "-m", *entry_point.split()]


# --- building runs -------------------------------------------------------------------------------------------------

#: The jobs whose entry points write to the tracking backends: the local engine's trainers, verl's, TRL's Iterative
#: DPO and the ImageNet study's.
TRACKED_JOBS = ("train_local", "train_verl", "train_trl", "train_imagenet")


def _make(c: _Ctx, entry: Entry, spec: RunSpec, study: str) -> Run:
    job = entry.layout(c, spec)
    return Run(task=c.task, name=c.name, method=c.method, seed=c.seed, engine=c.engine,
               job=entry.job, output=_done(c.task, c.name, c.seed), inputs=job.inputs,
               args=(*_module(entry.entry_point), *job.args), spec=spec, resources=dict(spec.resources),
               threads=job.threads, verl_kind=entry.verl_kind, study=study,
               after=(VERL_CHECKED,) if entry.verl_kind else ())


def start_of(config: Mapping[str, Any], task: str, name: str, seed: int, engine: str,
             scale: str | None = None) -> str | None:
    """The sentinel of the run that ``name``'s run on ``engine`` starts from (at model scale ``scale``), or None for
    its spec's own model. ``train.rl_start: sft`` is the seed's SFT run; ``base`` (App. B) the hub model on verl (no
    job to wait for), the Base run on the local engine. Iterative DPO (``from_starting_point``) starts from SFT either
    way."""
    if method(name).from_starting_point or config["train"]["rl_start"] == "sft":
        start = starting_point()
    elif engine == "verl":
        return None
    else:
        start = before_training()
    return _done(task, start if scale is None else f"{start}_at_{scale}", seed)


def _data(task: str, name: str) -> str:
    """The RL prompts a method trains on: those with the expert answer where it uses one (``demonstrations``)."""
    return reference_prompts(task) if method(name).demonstrations else f"results/data/{task}/rl_train.parquet"


def _run(config: Mapping[str, Any], task: str, name: str, seed: int, study: str, base: str | None = None,
         vary: Callable[[RunSpec], RunSpec] | None = None, scale: str | None = None,
         data: str | None = None) -> list[Run]:
    """Run ``name`` of ``task`` and ``seed``: the registry entry of method ``base`` (default ``name``) on the task's
    engine -> its family's spec builder -> the spec, with a study's typed replacement ``vary`` (an ablation cell's,
    a scale's, a variant's) -> the entry's command layout; a job its entry needs first (``prelude``) comes before it.
    ``data``: the prompts it trains on, where not its method's (a variant run's: the held-out split's train part)."""
    base = base or name
    engine, registered = engine_of(config, task), method(base)
    if engine not in registered.engines:
        raise PlanError(f"method {base!r} has no {engine} entry in the registry (task {task!r})")
    entry = registered.engines[engine]
    spec = entry.spec(config, task, base, engine)
    c = _Ctx(config, task, name, base, seed, start_of(config, task, base, seed, engine, scale),
             "" if registered.starting_point else (data or _data(task, base)), engine)
    runs = [_make(c, entry, vary(spec) if vary else spec, study)]
    if entry.prelude is not None:  # a job making the run's training data first (Rationalization on GPU: annotation)
        runs.insert(0, entry.prelude.layout(c, entry.prelude.spec(config, task), study))
    return runs


def _opd_teacher_run(config: Mapping[str, Any], task: str, seed: int) -> Run:
    if engine_of(config, task) != "local":
        raise PlanError(f"the trained OPD teacher exists on the local engine only (task {task!r}); on verl set "
                        f"train.baselines.opd.teacher.hub")
    # the teacher starts from the SFT model or from scratch (train.baselines.opd.teacher.init), not by train.rl_start
    start = _done(task, starting_point(), seed) if opd_teacher(config).init == "sft" else None
    c = _Ctx(config, task, "opd_teacher", "opd", seed, start, "", "local")
    entry = Entry("train_local", "pipeline_lib.jobs.engines.local.sft", local_opd_teacher, opd_teacher_spec)
    return _make(c, entry, opd_teacher_spec(config, task), "baseline")


def _imagenet_runs(config: Mapping[str, Any]) -> list[Run]:
    section = config.get("imagenet") or {}
    if not section.get("enabled"):
        return []
    runs = []
    for objective in section["objectives"]:
        for group_size in [0] if objective == ML_OBJECTIVE else section["group_sizes"]:
            spec = imagenet_spec(config, objective, group_size)
            for seed in section["seeds"]:
                name = f"{objective}/m{group_size}"
                runs.append(Run(task="imagenet", name=name, method=objective, seed=seed, engine="classify",
                                job="train_imagenet", output=_done("imagenet", name, seed), inputs={},
                                args=("python", "-m", "pipeline_lib.jobs.classify.train", "--spec", spec.to_json(),
                                      "--objective", objective, "--group-size", str(group_size), "--seed", str(seed),
                                      "--run-dir", _run_dir("imagenet", name, seed)),
                                spec=spec, study="imagenet"))
    return runs


# --- the studies ----------------------------------------------------------------------------------------------------

def baseline_tasks(config: Mapping[str, Any], name: str) -> list[str]:
    """Tasks one baseline runs on: its own ``train.baselines.<name>.tasks`` where set (the paper's RARO: Countdown and
    DeepMath only), else ``train.baselines.tasks``."""
    section = config["train"].get("baselines") or {}
    own = (section.get(method(name).section or name) or {}).get("tasks")
    return list(section.get("tasks", []) if own is None else own)


def _requested(config: Mapping[str, Any]) -> list[tuple[str, str, int, str, bool]]:
    """(task, run name, seed, study, is a train target) of every run some study reads, in study order."""
    train = config.get("train") or {}
    wanted = []
    for task in train.get("tasks", []):
        for name in [starting_point(), *trained_methods(config, task)]:  # SFT is evaluated too (Table 1's SFT row)
            # the start every method trains from is read, not a train target of its own
            wanted += [(task, name, seed, "main", not method(name).starting_point) for seed in train["seeds"]]
    baselines = train.get("baselines") or {}
    for name in baselines.get("methods", []):
        for task in baseline_tasks(config, name):  # a method with variants: each variant's run (RL-Logit's)
            wanted += [(task, run, seed, "baseline", True) for run in run_names(config, name)
                       for seed in baselines.get("seeds", [0])]
    ablation = train.get("ablation") or {}
    for task in ablation.get("tasks", []):
        for tau in ablation["taus"]:
            for group in ablation["group_sizes"]:
                wanted += [(task, ablation_method(tau, group), seed, "ablation", True) for seed in ablation["seeds"]]
    scale = train.get("scale") or {}
    if scale.get("tasks") and scale.get("models"):
        for task in scale["tasks"]:  # the main-scale runs the scale table compares with
            for name in scale["methods"]:
                wanted += [(task, name, seed, "scale_reference", False) for seed in scale["seeds"]]
        for task in scale["tasks"]:
            for model in scale["models"]:
                for name in scale["methods"]:
                    wanted += [(task, f"{name}_at_{model}", seed, "scale", True) for seed in scale["seeds"]]
    judge = config.get("judge") or {}
    for task in judge.get("tasks", []):
        for name in judge["methods"]:
            wanted += [(task, name, seed, "judge", False) for seed in (judge["seeds"] or train["seeds"])]
    transfer = (config.get("eval") or {}).get("transfer") or {}
    if transfer.get("task"):
        wanted += [(transfer["task"], name, seed, "transfer", False) for name in transfer["methods"]
                   for seed in train["seeds"]]
    return wanted


def plan_runs(config: Mapping[str, Any], check_estimators: bool = True) -> Plan:
    """Every job the config plans, each built once, with the runs they start from (:func:`start_of`); paths are
    relative to the workflow. ``check_estimators`` checks each distinct estimator's parameters once (no torch); a
    Slurm job's re-parse turns it off, its submitter having checked the same config."""
    _check_methods(config)
    train = config.get("train") or {}
    ablation = train.get("ablation") or {}
    cells = {ablation_method(tau, group): (tau, group) for tau in ablation.get("taus", [])
             for group in ablation.get("group_sizes", [])} if ablation.get("tasks") else {}
    ours = softmax_exact_method(config) if cells else None  # the method whose tau and M the cells vary
    scales = {f"{base}_at_{model}": (base, model) for model in (train.get("scale") or {}).get("models", {})
              for base in [starting_point(), before_training(), *train.get("methods", {})]}
    variants = variant_runs(config)  # <method>_<variant>: the method's run with that variant, on held-out training
    built: dict[tuple[str, str, int], list[Run]] = {}
    targets: list[str] = []
    requests: dict[str, list[RunId]] = {}

    def build(task: str, name: str, seed: int, study: str) -> None:
        if (task, name, seed) in built:
            return
        if name in cells:  # one tau x M cell: SoftmaxGRPO-Exact with the cell's tau and M, all else the same
            tau, group_size = cells[name]
            runs = _run(config, task, name, seed, "ablation", ours,
                        lambda spec: ablation_cell(spec, config, tau, group_size))
        elif name in scales:  # <method>_at_<scale>: the method's run with the scale's model, from its start there
            base, scale = scales[name]
            runs = _run(config, task, name, seed, "scale", base, lambda spec: at_scale(spec, config, scale), scale)
        elif name in variants:  # one variant of a method with variants (RL-Logit's reward), its validation held out
            base, variant = variants[name]
            runs = _run(config, task, name, seed, study, base, lambda spec: with_variant(spec, variant),
                        data=holdout_prompts(task)["train"])
        elif name in METHODS and METHODS[name].variants:
            raise PlanError(f"{task}/{name}/seed{seed}: {name!r} trains one run per variant "
                            f"(train.baselines.{METHODS[name].section}.{METHODS[name].variants}); name one of "
                            f"{sorted(variant_runs(config, name)) or 'them'}")
        elif name == "opd_teacher":
            runs = [_opd_teacher_run(config, task, seed)]
        else:
            runs = _run(config, task, name, seed, study)
        built[task, name, seed] = runs
        for run in runs:
            for path in run.inputs.values():
                match = _SENTINEL.match(path)
                if match:
                    build(match[1], match[2], int(match[3]), "dependency")

    for task, name, seed, study, target in _requested(config):
        build(task, name, seed, study)
        sentinel = _done(task, name, seed)
        if target and sentinel not in targets:
            targets.append(sentinel)
        request = RunId(study, task, name, seed, sentinel)
        if request not in requests.setdefault(study, []):
            requests[study].append(request)
    if check_estimators:
        for estimator in {run.spec.estimator.name + repr(sorted(run.spec.estimator.params.items())):
                          run.spec.estimator for runs in built.values() for run in runs
                          if run.spec.estimator is not None}.values():
            check_estimator(estimator)
    imagenet = _imagenet_runs(config)
    targets += [run.output for run in imagenet]
    requests["imagenet"] = [RunId("imagenet", run.task, run.name, run.seed, run.output) for run in imagenet]
    site = site_settings(config)  # the site's limits: checkpoint intervals, token bounds (plan/estimates.py)
    planned = [scratch_args(fit_run(run, site), site) for runs in built.values() for run in runs] + imagenet
    if "tracking" in config:  # how a run reports, like its resources: set once every run exists
        planned = [replace(run, tracking=TrackingSettings.for_run(config, run.key)) if run.job in TRACKED_JOBS else run
                   for run in planned]
    return Plan(planned, targets, requests)


def validate_planned_config(config: MutableMapping[str, Any], schema_path: str | os.PathLike[str],
                            base_dir: str | os.PathLike[str] | None = None) -> MutableMapping[str, Any]:
    """:func:`~pipeline_lib.core.config.validate_config`, then the plan's own refusals (a method the registry cannot
    build, a missing tau) as a :class:`~pipeline_lib.core.config.ConfigError`, so a config that cannot be planned
    fails where it is parsed. The preflight's config plans nothing."""
    validate_config(config, schema_path, base_dir,
                    untrained=tuple(name for name, m in METHODS.items() if m.before_training or m.starting_point))
    if not config.get("preflight"):
        try:
            memory_check(config, plan_runs(config))
        except PlanError as exc:
            raise ConfigError(f"invalid config (schema {Path(schema_path)}):\n  - {exc}") from None
    return config
