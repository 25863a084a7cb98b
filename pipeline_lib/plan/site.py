"""The site steps' plan: which jobs wait for the GPU canary, how many GPUs it takes, and its files.

A job waits for ``gpu_canary`` when its rule asks Slurm for a GPU (a ``gpu``/``gpus`` count or a ``gres`` naming
``gpu``), whether the rule itself asks (``train_verl``'s ``gres``) or the profile's ``set-resources`` does
(``eval_checkpoint``'s ``gpu: 1``): the rules' resources are the one statement of what runs on a GPU. The tiny
default asks for none, so it plans no canary (and, reading nothing from the hub, no `fetch`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pipeline_lib.plan.estimates import disk_at_once, site_settings
from pipeline_lib.plan.runs import Plan

__all__ = ["CANARY", "CANARY_VLLM", "FETCHED", "asks_gpu", "canary_inputs", "fetch_inputs", "node_count", "node_gpus",
           "site_disk_needs"]

#: The canary's report (its rule's output) and `fetch`'s (a local rule's output).
CANARY = "results/site/canary.json"
FETCHED = "results/site/fetch.json"
#: The vLLM canary of one env (``{env}``: eval, judge), an input of the canary's report.
CANARY_VLLM = "results/site/vllm_{env}.json"

_GRES_GPU = re.compile(r"(?:^|,)gpu(?::[\w-]+)?:(\d+)")


def _gpus(name: str, value: Any) -> int:
    """GPUs one resource asks for (0 for a callable or non-GPU resource: a per-job value is not read here)."""
    if name in ("gpu", "gpus") and isinstance(value, int | str) and str(value).isdigit():
        return int(value)
    if name in ("gres", "slurm_gres") and isinstance(value, str):
        return max((int(n) for n in _GRES_GPU.findall(value)), default=0)
    return 0


def asks_gpu(resources: Mapping[str, Any]) -> bool:
    """Whether a rule's resources (after the profile's ``set-resources``) ask for a GPU: a ``gpu``/``gpus`` entry,
    or a ``gres`` one (either may be a per-job function, as ``train_verl``'s ``gres`` is)."""
    for name, value in resources.items():
        if hasattr(value, "is_evaluable"):  # Snakemake's Resource: a per-job function, or what was written
            value = value.is_evaluable if value.is_evaluable() else value.raw
        if name in ("gpu", "gpus") and (callable(value) or _gpus(name, value) > 0):
            return True
        if name in ("gres", "slurm_gres") and (callable(value) or _gpus(name, value) > 0):
            return True
    return False


def node_gpus(plan: Plan) -> int:
    """GPUs of the largest node any planned run uses (``gres: gpu:G`` per node, or ``gpu: G``): the canary's
    all-reduce runs across that many, so a node shape the runs need is the one it checks."""
    counts = [_gpus(name, value) for run in plan.runs for name, value in run.resources.items()]
    return max([1, *counts])


def node_count(plan: Plan) -> int:
    """Nodes of the widest planned run (``nodes``): the canary takes that many, so a 2-node job's interconnect is
    checked before any 2-node job waits out NCCL's timeout on it."""
    return max([1, *(int(run.resources.get("nodes", 1)) for run in plan.runs)])


def site_disk_needs(config: Mapping[str, Any], plan: Plan, jobs: int | None = None) -> dict[str, dict[str, float]]:
    """What the canary checks under each root, the results directory and ``site.scratch_root``: the largest run's
    need and what can be written at once with at most ``jobs`` running (the profile's ``jobs``;
    :func:`pipeline_lib.plan.estimates.disk_at_once`)."""
    needs = disk_at_once(config, plan, jobs)
    return {"results": needs["results"], site_settings(config)["scratch_root"]: needs["scratch"]}


def canary_inputs(resources_of: Callable[[str], Mapping[str, Any]], mark: Callable[[str], Any]
                 ) -> Callable[[str], Callable[[Any], list[Any]]]:
    """``canary_inputs(...)(rule)``: an input function giving the canary's report (``mark``ed: Snakemake's
    ``ancient``, so a new canary run reruns nothing) to every job of ``rule`` if that rule asks for a GPU.
    ``resources_of`` reads a rule's resources when the DAG is built, after the profile's ``set-resources`` have
    reached every rule."""
    return lambda rule: (lambda wildcards: [mark(CANARY)] if asks_gpu(resources_of(rule)) else [])


def fetch_inputs(hub: list[Any], mark: Callable[[str], Any]) -> Callable[[Any], list[Any]]:
    """An input function giving `fetch`'s report to jobs that read the hub (offline, from the cache it fills); none
    where the plan reads nothing from the hub."""
    return lambda wildcards: [mark(FETCHED)] if hub else []
