"""The ``softmaxgrpo/*`` curves on the verl engine, live, in the step's own metrics dict (``docs/tracking.md``).

verl's trainer (``RayPPOTrainer.fit``, the legacy trainer the translator selects) computes advantages with
``compute_advantage`` and collects the step's curves with ``compute_data_metrics``, both looked up as globals of
``verl.trainer.ppo.ray_trainer`` when called. verl gives an estimator no way to return metrics, so
:func:`install` wraps those two functions once per process:

- after ``compute_advantage``, an estimator's per-rollout choices (softmax_ess's tau,
  :func:`pipeline_lib.advantages.advantage_diagnostics`) are stored in the batch itself, as the per-rollout array
  ``non_tensor_batch["softmaxgrpo_tau"]``;
- ``compute_data_metrics`` adds :func:`pipeline_lib.group_metrics.group_step_metrics` of the batch (the local
  engine's function): pass rate, groups with no signal, mean |advantage|, median tau and the gradient allocation.

No state outlives a call: each step's numbers travel in that step's batch, so concurrent runs, threads or Ray
actors never share them. The wrappers are installed under a lock, at most once per process; the estimators' plugin
(:mod:`.estimators`, loaded by ``import verl`` in every process) arms :func:`install_on_import`, which installs them
when verl's trainer module is first imported (importing it from the plugin would cost every Ray worker seconds).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np
import torch

from pipeline_lib.advantages import advantage_diagnostics
from pipeline_lib.group_metrics import group_step_metrics

__all__ = ["TAU_KEY", "TRAINER_MODULE", "install", "install_on_import", "verl_group_metrics"]

TRAINER_MODULE = "verl.trainer.ppo.ray_trainer"
#: The per-rollout array of the estimator's chosen temperature (NaN where a group has none) in ``non_tensor_batch``.
TAU_KEY = "softmaxgrpo_tau"
_WRAPPED = "__softmaxgrpo_wrapped__"
_lock = threading.Lock()


def _estimator_choices(data: Any, adv_estimator: Any, config: Mapping[str, Any] | None) -> np.ndarray | None:
    """Per-rollout tau of one of our estimators that chooses it (None for every other estimator)."""
    from pipeline_lib.engines.verl.estimators import ESTIMATORS, group_index

    name = getattr(adv_estimator, "value", adv_estimator)
    if name not in ESTIMATORS or "uid" not in data.non_tensor_batch or config is None:
        return None
    method, keys = ESTIMATORS[name]
    params = {key: float(config.get(key)) for key in keys}  # present: the estimator itself has just read them
    rewards = data.batch["token_level_rewards"].sum(dim=-1)
    chosen = advantage_diagnostics(method, rewards, group_index(data.non_tensor_batch["uid"]), **params)
    if "tau" not in chosen:
        return None
    return np.array([np.nan if tau is None else tau for tau in chosen["tau"]], dtype=np.float64)


def verl_group_metrics(data: Any) -> dict[str, float]:
    """:func:`group_step_metrics` of a verl batch after ``compute_advantage`` ({} without group uids).

    Correctness is the reward's ``acc`` where it returned one (verl stores it in ``non_tensor_batch``), else
    score >= 1, as on the local engine; |A_i| is the mean |advantage| over the rollout's response tokens.
    """
    from pipeline_lib.engines.verl.estimators import group_index

    if "uid" not in data.non_tensor_batch or "advantages" not in data.batch.keys():  # noqa: SIM118 (TensorDict)
        return {}
    mask = data.batch["response_mask"].to(torch.float32)
    lengths = mask.sum(dim=-1)
    if "acc" in data.non_tensor_batch:
        correct = torch.as_tensor(np.asarray(data.non_tensor_batch["acc"], dtype=np.float32))
    else:
        correct = (data.batch["token_level_scores"].sum(dim=-1) >= 1.0).to(torch.float32)
    abs_advantage = (data.batch["advantages"].abs() * mask).sum(dim=-1) / lengths.clamp(min=1.0)
    chosen = {}
    if TAU_KEY in data.non_tensor_batch:
        chosen = {"tau": [None if np.isnan(t) else float(t) for t in data.non_tensor_batch[TAU_KEY]]}
    return group_step_metrics(correct.cpu(), abs_advantage.cpu(), lengths.cpu(), group_index(
        data.non_tensor_batch["uid"]), chosen)


def _wrap_compute_advantage(original: Any) -> Any:
    def compute_advantage(data: Any, adv_estimator: Any, *args: Any, config: Any = None, **kwargs: Any) -> Any:
        data = original(data, adv_estimator, *args, config=config, **kwargs)
        tau = _estimator_choices(data, adv_estimator, config)
        if tau is not None:
            data.non_tensor_batch[TAU_KEY] = tau
        return data

    setattr(compute_advantage, _WRAPPED, original)
    compute_advantage.__doc__ = original.__doc__
    return compute_advantage


def _wrap_compute_data_metrics(original: Any) -> Any:
    def compute_data_metrics(batch: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {**original(batch, *args, **kwargs), **verl_group_metrics(batch)}

    setattr(compute_data_metrics, _WRAPPED, original)
    compute_data_metrics.__doc__ = original.__doc__
    return compute_data_metrics


def install(trainer_module: ModuleType | None = None) -> None:
    """Wrap the trainer module's ``compute_advantage`` and ``compute_data_metrics`` (idempotent, thread-safe)."""
    module = trainer_module or importlib.import_module(TRAINER_MODULE)
    with _lock:
        for name, wrap in (("compute_advantage", _wrap_compute_advantage),
                           ("compute_data_metrics", _wrap_compute_data_metrics)):
            current = getattr(module, name)
            if not hasattr(current, _WRAPPED):
                setattr(module, name, wrap(current))


class _InstallingLoader(importlib.abc.Loader):
    """verl's own loader of the trainer module, then :func:`install` on the fresh module."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        install(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename... for tracebacks and inspect
        return getattr(self.inner, name)


class _TrainerImportHook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != TRAINER_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _InstallingLoader(spec.loader)
        return spec


def install_on_import() -> None:
    """Install now if verl's trainer module is loaded, else when it is first imported (once per process)."""
    with _lock:
        if TRAINER_MODULE not in sys.modules:
            if not any(isinstance(finder, _TrainerImportHook) for finder in sys.meta_path):
                sys.meta_path.insert(0, _TrainerImportHook())
            return
    install(sys.modules[TRAINER_MODULE])
