"""The ``softmaxgrpo/*`` curves on the verl engine, live, in the step's own metrics dict (``docs/tracking.md``).

verl gives an advantage estimator no way to return metrics, so :func:`install` wraps, once per process, the verl
functions around it. Both of verl 0.9.1's PPO trainers call ``compute_advantage`` of
``verl.trainer.ppo.ray_trainer`` (the v1 trainer through ``verl.trainer.ppo.v1.utils``, which imports it from
there); after it, the batch holds rewards, group uids, response masks and advantages, and
:func:`verl_group_metrics` (the local engine's :func:`pipeline_lib.core.rl.group_metrics.group_step_metrics`) gives the
step's pass rate, groups with no signal, mean |advantage|, median tau and gradient allocation. They reach the step's
metrics dict by the route each trainer has:

- v1 (``trainer.use_v1``, verl's default: GRPO, SoftmaxGRPO, OPD): ``PPOTrainer._compute_advantage(batch,
  metrics)`` receives the step's dict; its wrapper hands that dict to the ``compute_advantage`` calls it makes,
  through a context variable (per thread and per asyncio task, reset when it returns);
- legacy (``RayPPOTrainer.fit``: RARO, RL-Logit): ``compute_advantage`` stores the estimator's per-rollout choices
  (softmax_ess's tau) in the batch itself, as ``non_tensor_batch["softmaxgrpo_tau"]``, and the wrapped
  ``compute_data_metrics`` (a global of ``ray_trainer``, looked up by ``fit`` at each call) adds the group metrics.

Each step's numbers travel with that step's batch or call, so concurrent runs, threads and Ray actors share
nothing. The wrappers are installed under a lock, at most once per module; the estimators' plugin (:mod:`.estimators`,
loaded by ``import verl`` in every process) arms :func:`install_on_import`, which installs them when verl's trainer
modules are first imported (importing them from the plugin would cost every Ray worker seconds).
"""

from __future__ import annotations

import contextvars
import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np
import torch

from pipeline_lib.core.rl.advantages import advantage_diagnostics
from pipeline_lib.core.rl.estimators import verl_estimators
from pipeline_lib.core.rl.group_metrics import group_step_metrics

__all__ = ["TAU_KEY", "TRAINER_MODULE", "V1_TRAINER_MODULE", "group_index", "install", "install_on_import",
           "verl_group_metrics"]

TRAINER_MODULE = "verl.trainer.ppo.ray_trainer"
V1_TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"
#: The per-rollout array of the estimator's chosen temperature (NaN where a group has none) in ``non_tensor_batch``.
TAU_KEY = "softmaxgrpo_tau"
_WRAPPED = "__softmaxgrpo_wrapped__"


def group_index(index: Any) -> torch.Tensor:
    """verl's per-rollout prompt ``uid`` array (strings) -> contiguous integer group ids, vectorised."""
    _, inverse = np.unique(np.asarray(index), return_inverse=True)
    return torch.from_numpy(inverse.reshape(-1).astype(np.int64))
_lock = threading.Lock()
#: The metrics dict of the v1 trainer step whose ``_compute_advantage`` is running in this thread / task.
_step_metrics: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("softmaxgrpo_step_metrics",
                                                                                     default=None)


def _estimator_choices(data: Any, adv_estimator: Any, config: Mapping[str, Any] | None) -> np.ndarray | None:
    """Per-rollout tau of one of our estimators that chooses it (None for every other estimator)."""
    name = getattr(adv_estimator, "value", adv_estimator)
    ours = verl_estimators()
    if name not in ours or "uid" not in data.non_tensor_batch or config is None:
        return None
    method, keys = ours[name]
    # as the estimator has just read them: a key left out takes its dataclass default (MaxRL's eps)
    params = {key: float(config.get(key)) for key in keys if config.get(key) is not None}
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
        step_metrics = _step_metrics.get()
        if step_metrics is not None:  # inside the v1 trainer's _compute_advantage
            step_metrics.update(verl_group_metrics(data))
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


def _wrap_v1_compute_advantage(original: Any) -> Any:
    def _compute_advantage(self: Any, batch: Any, metrics: dict[str, Any]) -> Any:
        token = _step_metrics.set(metrics)
        try:
            return original(self, batch, metrics=metrics)
        finally:
            _step_metrics.reset(token)

    setattr(_compute_advantage, _WRAPPED, original)
    _compute_advantage.__doc__ = original.__doc__
    return _compute_advantage


def _install(module: ModuleType) -> None:
    with _lock:
        if module.__name__ == V1_TRAINER_MODULE:
            targets = ((module.PPOTrainer, "_compute_advantage", _wrap_v1_compute_advantage),)
        else:
            targets = ((module, "compute_advantage", _wrap_compute_advantage),
                       (module, "compute_data_metrics", _wrap_compute_data_metrics))
        for owner, name, wrap in targets:
            current = getattr(owner, name)
            if not hasattr(current, _WRAPPED):
                setattr(owner, name, wrap(current))


def install(trainer_module: ModuleType | None = None) -> None:
    """Wrap verl's functions (idempotent, thread-safe): those of ``trainer_module`` (``ray_trainer`` or v1's
    ``trainer_base``), or, without one, of both (importing them)."""
    if trainer_module is not None:
        _install(trainer_module)
        return
    for name in (TRAINER_MODULE, V1_TRAINER_MODULE):  # ray_trainer first: v1's utils bind its compute_advantage
        _install(importlib.import_module(name))


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
        if fullname not in (TRAINER_MODULE, V1_TRAINER_MODULE):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _InstallingLoader(spec.loader)
        return spec


def install_on_import() -> None:
    """Install into verl's trainer modules already loaded, and into the others when they are first imported."""
    with _lock:
        if not any(isinstance(finder, _TrainerImportHook) for finder in sys.meta_path):
            sys.meta_path.insert(0, _TrainerImportHook())
    for name in (TRAINER_MODULE, V1_TRAINER_MODULE):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "PPOTrainer" if name == V1_TRAINER_MODULE else "compute_advantage"):
            _install(module)
