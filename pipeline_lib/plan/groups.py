"""Jobs that run several entry points in one process, on the local engine: the main study's runs of one (task, seed)
(``train_local_group``), the ablation's cells of one (task, seed) (``train_ablation_group``), ImageNet's runs of one
seed (``train_imagenet_group``), and every evaluation of one (task, seed) (:func:`eval_batches`).

Why: on 2 cores a job's start-up (about 4 CPU s) costs more than a whole tiny evaluation. Each step is the entry
point's own ``main(argv)``, so every run keeps its own directory, outputs and provenance; the cost is that a change to
one member reruns its group.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline_lib.core.cli import JSON_FLAGS, json_file
from pipeline_lib.plan.registry import METHODS, PlanError
from pipeline_lib.plan.runs import Plan, Run
from pipeline_lib.plan.settings import eval_spec

__all__ = ["EvalBatch", "Groups", "ablation_groups", "batch_command", "eval_batch_command", "eval_batches", "groups",
           "imagenet_groups", "job_priority", "pattern", "train_group_command", "train_group_inputs", "train_groups"]


@dataclass(frozen=True)
class Groups:
    """Runs sharing a process per (task, seed): the runs named ``methods`` (of rule ``job``), one after another."""

    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    methods: tuple[str, ...]
    job: str = "train_local"  # the rule each member would otherwise run as

    def runs(self, plan: Plan, task: str, seed: int | str) -> list[Run]:
        """The members of the (task, seed) group, in ``methods`` order."""
        return [plan.get(self.job, f"{task}/{method}/seed{seed}") for method in self.methods]


def pattern(values: Iterable[Any]) -> str:
    """A wildcard constraint matching exactly ``values`` (none: a pattern that matches nothing)."""
    return "|".join(re.escape(str(v)) for v in values) or "(?!)"


def _study_runs(plan: Plan, study: str, job: str) -> list[Run]:
    """The runs of rule ``job`` that ``study`` reads, in its order."""
    by_output = {run.output: run for run in plan.of(job=job)}
    return [by_output[request.path] for request in plan.requests.get(study, []) if request.path in by_output]


def groups(plan: Plan) -> Groups:
    """The main study's RL runs on the local engine, one group per (task, seed)."""
    return _every_pair([run for run in _study_runs(plan, "main", "train_local")
                        if METHODS[run.method].family == "group_rl"], "train_local", "main study")


def _every_pair(runs: list[Run], job: str, study: str) -> Groups:
    """The group of ``runs``, which must be the same names on every task and seed."""
    tasks, seeds, names = (tuple(dict.fromkeys(getattr(run, key) for run in runs)) for key in ("task", "seed", "name"))
    if len(runs) != len(tasks) * len(seeds) * len(names):
        raise PlanError(f"the {study}'s runs are not every one of {names} on every task {tasks} and seed {seeds}")
    return Groups(tasks, seeds, names, job)


def ablation_groups(plan: Plan) -> Groups:
    """The tau x M ablation's cells of each local-engine (task, seed)."""
    return _every_pair(_study_runs(plan, "ablation", "train_local"), "train_local", "ablation")


def imagenet_groups(config: Mapping[str, Any], plan: Plan) -> Groups:
    """With ``imagenet.one_job_per_seed``, every ImageNet run of one seed; otherwise none."""
    runs = plan.of(job="train_imagenet") if (config.get("imagenet") or {}).get("one_job_per_seed") else []
    return _every_pair(runs, "train_imagenet", "ImageNet study")


def train_groups(config: Mapping[str, Any], plan: Plan) -> dict[str, Groups]:
    """Every group rule (``train_local_group``, ``train_ablation_group``, ``train_imagenet_group``) and its groups."""
    return {"train_local_group": groups(plan), "train_ablation_group": ablation_groups(plan),
            "train_imagenet_group": imagenet_groups(config, plan)}


def job_priority(rule: str, run: Run | None = None) -> int:
    """The job's Snakemake ``priority``: on 2 cores, SFT first (everything of its task and seed waits on it), then
    the other training runs, then evaluations; ImageNet fills an idle core rather than waiting for the end, where it
    left the other core idle; the theory's Monte Carlo is the last filler (``benchmarks/schedule.py``)."""
    if rule.startswith("data_"):
        return 50  # every training run waits on its task's data and the tokenizer: they go first
    if rule in ("train_imagenet", "train_imagenet_group"):
        return 10
    if rule == "paper_theory_data":
        return -10
    if rule.startswith("eval_checkpoint") or rule == "eval_validation":
        return 20
    if rule.startswith("train") or rule == "annotate_rationales":
        registered = METHODS.get(run.method) if run is not None else None
        return 40 if registered is not None and registered.starting_point else 30
    return 0


def _step_args(args: list[str]) -> list[Any]:
    """A step's arguments with each JSON flag's value (``--spec``...) as JSON itself, not text quoted in the steps
    file; the batch turns each back into the identical argument."""
    return [json.loads(arg) if index and args[index - 1] in JSON_FLAGS and arg.lstrip()[:1] in ("{", "[") else arg
            for index, arg in enumerate(args)]


def batch_command(steps: list[tuple[str, list[str]]]) -> str:
    """One shell command running ``(module, args)`` steps in order in one process; the steps travel in a JSON file."""
    payload = [{"module": module, "args": _step_args(args)} for module, args in steps]
    return f"python -m pipeline_lib.jobs.engines.local.batch --steps {shlex.quote(json_file(json.dumps(payload)))}"


def train_group_inputs(runs: list[Run]) -> dict[str, str]:
    """Every member's inputs, each file once (``<run>__<input>``), without the files another member makes."""
    made, inputs = {run.output for run in runs}, {}
    for run in runs:
        for key, path in run.inputs.items():
            if path not in made and path not in inputs.values():
                inputs[f"{run.name}__{key}"] = path
    return inputs


def train_group_command(runs: list[Run], threads: int | None) -> str:
    """The members' own commands as steps of one batch."""
    steps = []
    for run in runs:
        module, args = run.entry_module, list(run.args[run.args.index("-m") + 2:])
        steps.append((module, [*args, *run.extra_args(threads)]))
    return batch_command(steps)


@dataclass(frozen=True)
class EvalBatch:
    """Every checkpoint of one (task, seed) the run evaluates, in one process (rule ``eval_checkpoints_<name>``)."""

    task: str
    seed: int
    methods: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.task}_seed{self.seed}"

    def paths(self, stage: str, filename: str) -> list[str]:
        """One path per member, e.g. ``paths("eval", "metrics.json")`` or ``paths("train", "DONE.json")``."""
        return [f"results/{stage}/{self.task}/{method}/seed{self.seed}/{filename}" for method in self.methods]


_EVALUATION = re.compile(r"results/eval/(?P<task>[^/]+)/(?P<method>[^/]+)/seed(?P<seed>[0-9]+)/metrics\.json")


def eval_batches(plan: Plan, evaluations: Iterable[str]) -> list[EvalBatch]:
    """The ``evaluations`` (metrics paths) of checkpoints trained on the local engine, one batch per (task, seed) in
    first-listed order; other paths are left to their own rules."""
    local = {run.key for run in plan.of(engine="local")}
    members: dict[tuple[str, int], list[str]] = {}
    for path in evaluations:
        match = _EVALUATION.fullmatch(path)
        if match is None or f"{match['task']}/{match['method']}/seed{match['seed']}" not in local:
            continue
        methods = members.setdefault((match["task"], int(match["seed"])), [])
        if match["method"] not in methods:
            methods.append(match["method"])
    return [EvalBatch(task, seed, tuple(methods)) for (task, seed), methods in members.items()]


def eval_batch_command(config: Mapping[str, Any], batch: EvalBatch, threads: int) -> str:
    """``pipeline_lib.jobs.eval.evaluate`` once per member, with the arguments its own job would get."""
    spec = json.dumps(eval_spec(config, batch.task))
    return batch_command([
        ("pipeline_lib.jobs.eval.evaluate",
         ["--model", f"results/train/{batch.task}/{method}/seed{batch.seed}/final",
          "--data", f"results/data/{batch.task}/rl_test.parquet", "--spec", spec, "--seed", str(batch.seed),
          "--out", f"results/eval/{batch.task}/{method}/seed{batch.seed}", "--threads", str(threads)])
        for method in batch.methods])
