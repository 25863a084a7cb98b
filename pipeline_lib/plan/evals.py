"""Evaluations that share one process: the main study's checkpoints of one (task, seed).

On a 2-core machine the start-up of an evaluation job (Python, torch, transformers, the verifier's worker pool:
5-7 CPU seconds) costs more than evaluating a tiny model, so on the local engine the checkpoints Table 1 compares
on one (task, seed) — SFT and every ``train.methods`` run — are evaluated by one job (rule ``eval_checkpoints``)
that runs :mod:`pipeline_lib.eval.evaluate` once per checkpoint in one process
(:mod:`pipeline_lib.engines.local.batch`). Every evaluation keeps its own directory, outputs and provenance, exactly
what its own ``eval_checkpoint`` job would write. The rest (baselines, ablation cells, judged and verl-trained runs)
keep one job per checkpoint.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline_lib.plan.runs import engine_of
from pipeline_lib.specs import eval_spec

__all__ = ["EvalGroups", "eval_group_command", "eval_groups"]


@dataclass(frozen=True)
class EvalGroups:
    """The (task, seed) pairs whose main-study checkpoints are evaluated together, and those checkpoints' names."""

    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    methods: tuple[str, ...]

    def pattern(self, values: tuple[Any, ...]) -> str:
        """A wildcard constraint matching exactly ``values`` (none: a pattern that matches nothing)."""
        return "|".join(re.escape(str(v)) for v in values) or "(?!)"


def eval_groups(config: Mapping[str, Any]) -> EvalGroups:
    """SFT and every ``train.methods`` run on each local-engine task of ``train.tasks``, per seed."""
    train = config.get("train") or {}
    tasks = tuple(task for task in train.get("tasks", []) if engine_of(config, task) == "local")
    methods = ("sft", *train.get("methods", {})) if tasks else ()
    return EvalGroups(tasks, tuple(train.get("seeds", [])) if tasks else (), methods)


def eval_group_command(config: Mapping[str, Any], task: str, seed: int | str, threads: int) -> str:
    """The shell command of one group: ``pipeline_lib.eval.evaluate`` once per checkpoint, in one process."""
    spec = json.dumps(eval_spec(config))
    steps = [{"module": "pipeline_lib.eval.evaluate",
              "args": ["--model", f"results/train/{task}/{method}/seed{seed}/final",
                       "--data", f"results/data/{task}/rl_test.parquet", "--spec", spec, "--seed", str(seed),
                       "--out", f"results/eval/{task}/{method}/seed{seed}", "--threads", str(threads)]}
             for method in eval_groups(config).methods]
    return f"python -m pipeline_lib.engines.local.batch --steps {shlex.quote(json.dumps(steps))}"
