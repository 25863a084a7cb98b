"""Command layouts: one function per shape of training command, giving the job's inputs and the arguments after
``python -m <entry point>`` (:class:`Job`). A registry entry holds its layout function itself; this module imports
neither the registry, the runs nor the spec builders: a layout is handed its spec. :class:`Run`, one job of the
plan, lives here too.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline_lib.core.cli import file_args, run_args
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.core.tracking import TrackingSettings

__all__ = ["TOKENIZER", "Ctx", "Job", "Run", "annotation_run", "final_dir", "local_base", "local_expert",
           "local_opd", "local_opd_teacher", "local_rationalization", "local_rl", "local_sft", "run_dir", "sentinel",
           "trl_dpo", "verl_rationalization", "verl_rl", "verl_sft"]

TOKENIZER = "results/data/tokenizer/tokenizer.json"


def sentinel(task: str, name: str, seed: int) -> str:
    """A run's sentinel, ``DONE.json`` in its run directory."""
    return f"results/train/{task}/{name}/seed{seed}/DONE.json"


def final_dir(done: str) -> str:
    """The merged model beside a run's sentinel ``done``."""
    return str(Path(done).parent / "final")


def run_dir(task: str, name: str, seed: int) -> str:
    return f"results/train/{task}/{name}/seed{seed}"


@dataclass
class Job:
    """What a layout returns: the job's inputs, arguments after the entry point, and whether it takes --threads."""

    inputs: dict[str, str]
    args: list[str]
    threads: bool = True


@dataclass
class Ctx:
    """One run being built: where it lives and what it starts from."""

    config: Mapping[str, Any]
    task: str
    name: str
    method: str
    seed: int
    #: The sentinel of the run it starts from (SFT or Base, :func:`pipeline_lib.plan.runs.start_of`); None: its
    #: spec's own model (a verl RL run from the base model under ``train.rl_start: base``).
    init: str | None
    data: str  # the RL prompts it trains on
    engine: str  # where its task trains (pipeline_lib.plan.settings.engine_of): no layout asks the config for it


def _contract(c: Ctx, spec: RunSpec) -> list[str]:
    return run_args(spec.to_json(), run_dir(c.task, c.name, c.seed), c.seed)


def local_sft(c: Ctx, spec: RunSpec) -> Job:
    inputs = {"data": f"results/data/{c.task}/sft_train.parquet", "tokenizer": TOKENIZER}
    return Job(inputs, [*_contract(c, spec), "--data", inputs["data"], "--tokenizer",
                         str(Path(TOKENIZER).parent)])


def local_rl(c: Ctx, spec: RunSpec) -> Job:
    inputs = {"data": c.data, "init": c.init}
    return Job(inputs, [*_contract(c, spec), "--data", c.data, "--init", final_dir(c.init)])


def local_base(c: Ctx, spec: RunSpec) -> Job:
    """A verl task's Base is the hub model; a local task's the tiny model built on the pipeline's tokenizer."""
    if c.engine == "verl":
        return Job({}, [*_contract(c, spec), "--init", c.config["train"]["verl"]["model"]], threads=False)
    return Job({"tokenizer": TOKENIZER}, [*_contract(c, spec), "--tokenizer", str(Path(TOKENIZER).parent)],
               threads=False)


def local_rationalization(c: Ctx, spec: RunSpec) -> Job:
    annotator = sentinel(c.task, c.config["train"]["baselines"]["rationalization"]["annotator"], c.seed)
    base = sentinel(c.task, "base", c.seed)
    inputs = {"data": f"results/data/{c.task}/sft_train.parquet", "tokenizer": TOKENIZER, "annotator": annotator,
              "base": base}
    return Job(inputs, [*_contract(c, spec), "--data", inputs["data"], "--annotator", final_dir(annotator),
                         "--init", final_dir(base), "--tokenizer", str(Path(TOKENIZER).parent)])


def local_expert(c: Ctx, spec: RunSpec) -> Job:
    # the run's prompts with an expert answer (on a tiny task its rl_train; a variant run's, the held-out split's train)
    inputs = {"data": c.data, "demonstrations": f"results/data/{c.task}/sft_train.parquet", "init": c.init}
    return Job(inputs, [*_contract(c, spec), "--data", inputs["data"], "--demonstrations",
                         inputs["demonstrations"], "--init", final_dir(c.init)])


def local_opd(c: Ctx, spec: RunSpec) -> Job:
    hub = spec.baseline.teacher.hub  # a hub teacher, else the trained one (opd_teacher)
    teacher = hub or sentinel(c.task, "opd_teacher", c.seed)
    inputs = {"data": f"results/data/{c.task}/rl_train.parquet", "init": c.init,
              **({} if hub else {"teacher": teacher})}
    return Job(inputs, [*_contract(c, spec), "--data", inputs["data"], "--teacher",
                         hub or final_dir(teacher), "--init", final_dir(c.init)])


def local_opd_teacher(c: Ctx, spec: RunSpec) -> Job:
    """OPD's teacher: from the SFT model (``c.init``) or, without one, from scratch."""
    start = {} if c.init is None else {"init": c.init}
    inputs = {"data": f"results/data/{c.task}/sft_train.parquet", "tokenizer": TOKENIZER, **start}
    return Job(inputs, [*_contract(c, spec), "--data", inputs["data"], "--tokenizer",
                         str(Path(TOKENIZER).parent), *(["--init", final_dir(c.init)] if c.init is not None else []),
                         "--kind", "opd_teacher"])


def verl_sft(c: Ctx, spec: RunSpec, data: str | None = None) -> Job:
    data = data or f"results/data/{c.task}/sft_train.parquet"
    return Job({"data": data}, [*_contract(c, spec), "--data", data], threads=False)


def verl_rationalization(c: Ctx, spec: RunSpec) -> Job:
    return verl_sft(c, spec, f"{run_dir(c.task, c.name, c.seed)}/rationalized_sft.parquet")


def verl_rl(c: Ctx, spec: RunSpec) -> Job:
    """A verl RL run from the model of the run it starts from, or without ``--init`` from its spec's hub model."""
    start = {} if c.init is None else {"init": c.init}
    inputs = {"data": c.data, "val": f"results/data/{c.task}/rl_test.parquet", **start}
    return Job(inputs, [*_contract(c, spec), "--data", c.data, "--val-data", inputs["val"],
                         *(["--init", final_dir(c.init)] if c.init is not None else [])], threads=False)


def trl_dpo(c: Ctx, spec: RunSpec) -> Job:
    inputs = {"data": c.data, "demonstrations": f"results/data/{c.task}/sft_train.parquet", "init": c.init}
    return Job(inputs, [*_contract(c, spec), "--data", c.data, "--demonstrations", inputs["demonstrations"],
                         "--init", final_dir(c.init)], threads=False)


@dataclass(frozen=True)
class Run:
    """One Snakemake job of the plan: a training run (or its annotation step) with everything its rule needs."""

    task: str
    name: str  # the run directory: a method, an ablation cell (softmax_tau0p1_m4), <method>_at_<scale>, opd_teacher
    method: str  # the registry method it trains (an ablation cell trains SoftmaxGRPO-Exact)
    seed: int
    engine: str  # train.engine of the task: local or verl (ImageNet: classify)
    job: str  # the Snakemake rule: train_local, train_verl, train_trl, annotate_rationales, train_imagenet
    output: str
    inputs: dict[str, str]
    args: tuple[str, ...]
    spec: RunSpec  # what it computes with: the --spec of its command
    resources: dict[str, Any] = field(default_factory=dict)
    threads: bool = True  # the entry point takes --threads (appended from the rule's threads)
    verl_kind: str | None = None  # verl trainer (sft / rl) whose overrides the verl engine validates
    study: str = "main"
    after: tuple[str, ...] = ()  # files that must exist before the job starts; their timestamps rerun nothing
    tracking: TrackingSettings | None = None  # live tracking (config `tracking`), on the local and verl trainers

    @property
    def key(self) -> str:
        """The run's id in its rule's output pattern: ``<task>/<name>/seed<seed>``."""
        return f"{self.task}/{self.name}/seed{self.seed}"

    @property
    def entry_module(self) -> str:
        """The ``python -m`` module the job runs: its code digest is a rule parameter (reruns follow code edits)."""
        return self.args[self.args.index("-m") + 1]

    def command(self, threads: int | None = None, tracking: bool = True, files: bool = True) -> str:
        """The shell command (without the log redirection). ``tracking=False`` gives the rerun key (a change of
        dashboard reruns nothing); ``files`` passes the JSON values in files, so the command line stays short."""
        args = [*self.args, *self.extra_args(threads, tracking)]
        return " ".join(shlex.quote(a) for a in (file_args(args) if files else args))

    def extra_args(self, threads: int | None = None, tracking: bool = True) -> list[str]:
        """``--threads`` and ``--tracking``: settings of how a run executes, not of what it computes."""
        return [*(["--threads", str(threads)] if self.threads and threads is not None else []),
                *(["--tracking", self.tracking.to_json()] if tracking and self.tracking is not None else [])]

    def hyperparameters(self) -> dict[str, Any]:
        """The settings a reviewer checks first (estimator and its parameters, M, steps, lr)."""
        spec, estimator = self.spec, self.spec.estimator
        own = spec.baseline.to_dict() if spec.baseline is not None else {}
        settings = {**own, **spec.settings}  # a baseline's own section (Iterative DPO's lr), ImageNet's M
        params = estimator.params if estimator is not None else {k: settings[k] for k in ("tau",) if k in settings}
        out = {"advantage": estimator.name if estimator is not None else None,
               "params": " ".join(f"{k}={v}" for k, v in sorted(params.items())),
               "M": settings.get("group_size"), "steps": settings.get("steps"),
               "lr": settings.get("lr")}
        return {k: v for k, v in out.items() if v not in (None, "")}


def annotation_run(c: Ctx, spec: RunSpec, study: str) -> Run:
    """Rationalization on GPU, step one (its verl entry's ``prelude``): the base model writes the rationales."""
    out = f"{run_dir(c.task, c.name, c.seed)}/rationalized_sft.parquet"
    data = f"results/data/{c.task}/sft_train.parquet"
    return Run(task=c.task, name=c.name, method=c.method, seed=c.seed, engine=c.engine,
               job="annotate_rationales", output=out, inputs={"data": data},
               args=("python", "-m", "pipeline_lib.jobs.engines.verl.rationalization", "--spec", spec.to_json(),
                     "--data", data, "--out", out, "--seed", str(c.seed)),
               spec=spec, threads=False, study=study, resources=dict(spec.resources))
