"""Jobs that run several entry points in one process: the main study's runs and evaluations of one (task, seed).

On a 2-core machine the start-up of a job (Python, torch, transformers, the verifier's worker pool: 4-7 CPU
seconds) costs as much as a tiny training run's last fifth or a whole tiny evaluation, so on the local engine:

* rule ``train_local_group`` trains every ``train.methods`` run of one (task, seed) from that seed's SFT model, one
  run after another in one process;
* rule ``eval_checkpoints`` evaluates SFT and those runs of one (task, seed) in one process.

Each step is the entry point's own ``main(argv)`` (:mod:`pipeline_lib.engines.local.batch`), so every run and
evaluation keeps its own directory, outputs and provenance, exactly what its own job would write. The cost: a change
to one member reruns its whole group (a method's tau retrains the other methods of that task and seed too). Everything
else (SFT, baselines, ablation cells, judged and verl runs, their evaluations) keeps one job per run.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline_lib.plan.runs import Plan, Run, engine_of
from pipeline_lib.specs import eval_spec

__all__ = ["Groups", "batch_command", "eval_group_command", "groups", "train_group_command", "train_group_inputs",
           "train_group_runs"]


@dataclass(frozen=True)
class Groups:
    """The (task, seed) pairs whose main-study runs share a process, and the runs' names (``train.methods``)."""

    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    methods: tuple[str, ...]

    @property
    def evaluated(self) -> tuple[str, ...]:
        """The checkpoints ``eval_checkpoints`` evaluates: SFT and the methods."""
        return ("sft", *self.methods) if self.tasks else ()

    @staticmethod
    def pattern(values: Iterable[Any]) -> str:
        """A wildcard constraint matching exactly ``values`` (none: a pattern that matches nothing)."""
        return "|".join(re.escape(str(v)) for v in values) or "(?!)"


def groups(config: Mapping[str, Any]) -> Groups:
    """Every ``train.methods`` run on each local-engine task of ``train.tasks``, per seed of ``train.seeds``."""
    train = config.get("train") or {}
    tasks = tuple(task for task in train.get("tasks", []) if engine_of(config, task) == "local")
    if not tasks:
        return Groups((), (), ())
    return Groups(tasks, tuple(train["seeds"]), tuple(train["methods"]))


def batch_command(steps: list[tuple[str, list[str]]]) -> str:
    """One shell command running ``(module, args)`` steps in order in one process."""
    payload = [{"module": module, "args": args} for module, args in steps]
    return f"python -m pipeline_lib.engines.local.batch --steps {shlex.quote(json.dumps(payload))}"


def train_group_runs(plan: Plan, task: str, seed: int | str, methods: Iterable[str]) -> list[Run]:
    return [plan.get("train_local", f"{task}/{method}/seed{seed}") for method in methods]


def train_group_inputs(runs: list[Run]) -> dict[str, str]:
    """Every member's inputs, each file once (named ``<run>__<input>`` after its first member), without the files
    another member makes."""
    made, inputs = {run.output for run in runs}, {}
    for run in runs:
        for key, path in run.inputs.items():
            if path not in made and path not in inputs.values():
                inputs[f"{run.name}__{key}"] = path
    return inputs


def train_group_command(runs: list[Run], threads: int | None) -> str:
    """The members' own commands as steps of one batch (``--threads`` where an entry point takes it)."""
    steps = []
    for run in runs:
        module, args = run.entry_module, list(run.args[run.args.index("-m") + 2:])
        steps.append((module, [*args, *(["--threads", str(threads)] if run.threads and threads is not None else [])]))
    return batch_command(steps)


def eval_group_command(config: Mapping[str, Any], task: str, seed: int | str, threads: int) -> str:
    """``pipeline_lib.eval.evaluate`` once per checkpoint of the group, in one process."""
    spec = json.dumps(eval_spec(config))
    return batch_command([
        ("pipeline_lib.eval.evaluate",
         ["--model", f"results/train/{task}/{method}/seed{seed}/final",
          "--data", f"results/data/{task}/rl_test.parquet", "--spec", spec, "--seed", str(seed),
          "--out", f"results/eval/{task}/{method}/seed{seed}", "--threads", str(threads)])
        for method in groups(config).evaluated])
