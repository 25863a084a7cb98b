"""The site steps' plan: which jobs wait for the GPU canary, how many GPUs it takes, and its files.

A job waits for ``gpu_canary`` when its rule asks Slurm for a GPU (a ``gpu``/``gpus`` count or a ``gres`` naming
``gpu``), whether the rule itself asks (``train_verl``'s ``gres``) or the profile's ``set-resources`` does
(``eval_checkpoint``'s ``gpu: 1``): the rules' resources are the one statement of what runs on a GPU. The tiny
default asks for none, so it plans no canary (and, reading nothing from the hub, no `fetch`).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline_lib.plan.estimates import ARCHITECTURES, disk_at_once, disk_needs, site_settings
from pipeline_lib.plan.hub import RELOCK, hub_lock_problems
from pipeline_lib.plan.runs import Plan

__all__ = ["CANARY", "CANARY_VLLM", "FETCHED", "ONLINE_STEPS", "HubLockError", "asks_gpu", "build_goes_online",
           "canary_inputs", "check_hub_lock", "fetch_inputs", "home_warnings", "link_results_root", "node_count",
           "node_gpus", "site_disk_needs"]

#: The canary's report (its rule's output) and `fetch`'s (a local rule's output).
CANARY = "results/site/canary.json"
FETCHED = "results/site/fetch.json"
#: The vLLM canary of one env (``{env}``: eval, judge), an input of the canary's report.
CANARY_VLLM = "results/site/vllm_{env}.json"

#: The steps that need outbound network, each a local rule (the submit host: compute nodes are usually offline), and
#: why; every other job reads the hub offline from the cache `fetch` fills (docs/usage.md lists them).
ONLINE_STEPS: dict[str, str] = {
    "fetch": "downloads every hub model and dataset the plan reads (and resolves the hub lock's commits)",
    "data_build_online": "a dataset whose build calls an OpenAI-compatible endpoint (Poetry's instruction synthesis, "
                         "data.datasets.poetry.synthesis)",
    "eval_alpaca_eval": "AlpacaEval's annotator (eval.transfer.alpaca_eval.annotators_config) calls its API; the "
                        "answers are generated on a GPU node by eval_alpaca_generate, offline",
}

_GRES_GPU = re.compile(r"(?:^|,)gpu(?::[\w-]+)?:(\d+)")


def _gpus(name: str, value: Any) -> int:
    """GPUs one resource asks for (0 for a callable or non-GPU resource: a per-job value is not read here)."""
    if name in ("gpu", "gpus") and isinstance(value, int | str) and str(value).isdigit():
        return int(value)
    if name in ("gres", "slurm_gres") and isinstance(value, str):
        return max((int(n) for n in _GRES_GPU.findall(value)), default=0)
    return 0


class HubLockError(RuntimeError):
    """The plan reads a hub repository the hub lock does not pin."""


def check_hub_lock(repos: list[Any], lock: str | Path, configfiles: Sequence[Any], dry_run: bool) -> list[str]:
    """Refuse a plan reading a repository :data:`~pipeline_lib.plan.hub.HUB_LOCK` does not hold at the revision its
    config asks (every one named, with the relock command); a dry run prints the same as a warning. Returns the
    problems."""
    problems = hub_lock_problems(repos, lock)
    if problems:
        command = RELOCK.format(configs=" ".join(str(path) for path in configfiles) or "<your configs>")
        text = (f"the hub lock does not pin {len(problems)} repositories the plan reads:\n  " + "\n  ".join(problems)
                + f"\nPin them on purpose (online, on the submit host): {command}")
        if not dry_run:
            raise HubLockError(text)
        print(f"WARNING (a run refuses this): {text}", file=sys.stderr)
    return problems


#: Beyond this many GB, a default under $HOME is warned about at plan time (home directories are small and quota'd).
HOME_WARN_GB = 5.0
#: What the hub cache holds per GB of a plan's models: bf16 weights, 2 bytes a parameter (the datasets are extra).
_BF16 = 2e-9


def _under_home(path: str | Path) -> bool:
    home = Path.home().resolve()
    return Path(os.path.expandvars(str(path))).expanduser().resolve().is_relative_to(home)


def home_warnings(config: Mapping[str, Any], plan: Plan, repos: Sequence[Any], conda_prefix: str | None,
                  hf_home: str) -> list[str]:
    """One line per large store that falls under $HOME by default (the hub cache, the conda envs, the results and
    scratch roots), with its size where the plan estimates it: each names the site setting that moves it."""
    site = site_settings(config)
    needs = disk_needs(config, plan) if any(run.verl_kind for run in plan.runs) else {"results": 0.0, "scratch": 0.0}
    models = sum(ARCHITECTURES[r.repo_id].params * _BF16 for r in repos
                 if r.repo_type == "model" and r.repo_id in ARCHITECTURES)
    stores = [
        ("the hub cache", hf_home, f"at least {models:,.0f} GB: the trained models' bf16 weights, more with the judges "
         "and datasets", "site.hf_home (config/paper.yaml)", any(r.repo_type == "model" for r in repos)),
        ("the conda envs", conda_prefix, "about 60 GB for the five locked envs, as profiles/slurm/config.yaml states",
         "conda-prefix (profiles/slurm/config.yaml)", conda_prefix is not None),
        ("the results", site["results_root"] or "results", f"about {needs['results']:,.0f} GB, the plan's estimate",
         "site.results_root (config/paper.yaml)", needs["results"] > HOME_WARN_GB),
        ("verl's scratch", site["scratch_root"], f"up to {needs['scratch']:,.0f} GB, the plan's estimate",
         "site.scratch_root (config/paper.yaml)", needs["scratch"] > HOME_WARN_GB),
    ]
    return [f"{what} ({size}) would go to {path}, under $HOME: set {key} to a shared filesystem with room"
            for what, path, size, key, large in stores if large and path and _under_home(path)]


def link_results_root(config: Mapping[str, Any], workdir: str | Path = ".") -> Path | None:
    """``site.results_root``: the workflow's ``results/`` becomes a link to it (made when missing); a ``results``
    that is something else is refused, naming both. None when the setting is null (results/ in the checkout)."""
    root = site_settings(config)["results_root"]
    if not root:
        return None
    target = Path(os.path.expandvars(root)).expanduser()
    link = Path(workdir, "results")
    if link.is_symlink() or link.exists():
        if link.resolve() != target.resolve():
            raise ValueError(f"site.results_root is {target}, but {link} is {link.resolve()}: move its contents "
                             f"there and replace it with a link (`ln -s {target} {link}`), or set results_root null")
        return target
    target.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target.resolve(), target_is_directory=True)
    return target


def build_goes_online(dataset: Mapping[str, Any]) -> bool:
    """Whether a paper dataset's build calls an endpoint: its spec has an instruction ``synthesis`` section."""
    return bool(dataset.get("synthesis"))


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
