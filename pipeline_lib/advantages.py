"""Group advantage estimators: one registry for every engine and study.

Every estimator maps one scalar reward per rollout to one advantage per rollout,
using only the rollouts that share its group id (the M samples of one prompt).
The implementation is segment arithmetic on tensors (``index_add_`` /
``scatter_reduce_``), so the cost is a handful of kernels whatever the number of
groups; there is no Python loop over rollouts or groups.

Conventions shared by all estimators:

* ``group_ids`` may be any integers, in any order; they need not be contiguous.
* A group of size 1 has no within-group comparison and gets advantage 0 (verl's
  GRPO instead gives a singleton its raw reward with mean 0 / std 1; we treat
  "no comparison" as "no signal" for every estimator alike).
* A group whose rewards are all equal gets advantage 0.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = [
    "GroupIndex",
    "available_methods",
    "broadcast_to_tokens",
    "group_advantages",
    "register_advantage",
]


@dataclass(frozen=True)
class GroupIndex:
    """Contiguous re-indexing of arbitrary group ids, shared by the estimators."""

    inverse: torch.Tensor  # [N] long, group slot of each rollout
    counts: torch.Tensor  # [G] group sizes, in the rewards' dtype
    n_groups: int

    @classmethod
    def from_ids(cls, group_ids: torch.Tensor, dtype: torch.dtype) -> GroupIndex:
        _, inverse = torch.unique(group_ids, return_inverse=True)
        n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
        counts = torch.bincount(inverse, minlength=n_groups).to(dtype)
        return cls(inverse=inverse, counts=counts, n_groups=n_groups)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Per-group sum of ``values`` [N] -> [G]."""
        out = values.new_zeros(self.n_groups)
        return out.index_add_(0, self.inverse, values)

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        return self.sum(values) / self.counts

    def max(self, values: torch.Tensor) -> torch.Tensor:
        out = values.new_full((self.n_groups,), -math.inf)
        return out.scatter_reduce_(0, self.inverse, values, reduce="amax", include_self=True)

    def expand(self, per_group: torch.Tensor) -> torch.Tensor:
        """Per-group values [G] -> per-rollout values [N]."""
        return per_group[self.inverse]


AdvantageFn = Callable[..., torch.Tensor]
_REGISTRY: dict[str, AdvantageFn] = {}


def register_advantage(*names: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register ``fn(rewards, index, **params)`` under one or more method names."""

    def decorator(fn: AdvantageFn) -> AdvantageFn:
        for name in names:
            if name in _REGISTRY:
                raise ValueError(f"advantage method {name!r} is already registered")
            _REGISTRY[name] = fn
        return fn

    return decorator


def available_methods() -> list[str]:
    return sorted(_REGISTRY)


def _method_params(fn: AdvantageFn) -> dict[str, inspect.Parameter]:
    return dict(list(inspect.signature(fn).parameters.items())[2:])


def group_advantages(
    method: str, rewards: torch.Tensor, group_ids: torch.Tensor, **params: float
) -> torch.Tensor:
    """Advantages [N] for rewards [N] grouped by ``group_ids`` [N].

    ``params`` are the method's own hyperparameters (``tau`` for ``softmax``,
    ``eps`` for ``grpo``/``maxrl``); an unknown name is an error, not ignored.
    """
    if method not in _REGISTRY:
        raise ValueError(f"unknown advantage method {method!r}; registered: {available_methods()}")
    fn = _REGISTRY[method]
    accepted = _method_params(fn)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise TypeError(
            f"advantage method {method!r} got unknown parameter(s) {unknown}; "
            f"it accepts {sorted(accepted)}"
        )
    if rewards.ndim != 1 or group_ids.ndim != 1 or rewards.shape != group_ids.shape:
        raise ValueError(
            "rewards and group_ids must be 1-D tensors of equal length, got "
            f"{tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )
    if not rewards.is_floating_point():
        raise TypeError(f"rewards must be a floating tensor, got {rewards.dtype}")
    if group_ids.is_floating_point() or group_ids.is_complex():
        raise TypeError(f"group_ids must be an integer tensor, got {group_ids.dtype}")
    if rewards.numel() == 0:
        return rewards.clone()
    if not bool(torch.isfinite(rewards).all()):
        bad = torch.nonzero(~torch.isfinite(rewards)).flatten()[:5].tolist()
        raise ValueError(f"rewards must be finite; non-finite at rollout index {bad}")
    index = GroupIndex.from_ids(group_ids.to(rewards.device), rewards.dtype)
    return fn(rewards, index, **params)


def broadcast_to_tokens(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-rollout advantages [N] -> per-token advantages [N, T], zero on padding."""
    if advantages.ndim != 1 or response_mask.ndim != 2 or response_mask.shape[0] != advantages.shape[0]:
        raise ValueError(
            f"expected advantages [N] and response_mask [N, T], got {tuple(advantages.shape)} "
            f"and {tuple(response_mask.shape)}"
        )
    return advantages.unsqueeze(-1) * response_mask.to(advantages.dtype)


def _centred(rewards: torch.Tensor, index: GroupIndex) -> torch.Tensor:
    return rewards - index.expand(index.mean(rewards))


@register_advantage("softmax", "sage")
def _softmax_advantage(rewards: torch.Tensor, index: GroupIndex, tau: float) -> torch.Tensor:
    """SoftmaxGRPO (paper Eq. sage_weights): ``A_i = M * softmax(R / tau)_i - 1`` per group."""
    tau = float(tau)
    if not math.isfinite(tau) or tau <= 0:
        raise ValueError(f"softmax advantage needs a finite temperature tau > 0, got {tau}")
    shifted = rewards - index.expand(index.max(rewards))  # <= 0, so exp never overflows
    unnormalised = torch.exp(shifted / tau)  # the group's best rollout contributes exactly 1
    size = index.expand(index.counts)
    # (M * e_i) / sum_j e_j is exactly 1 when all e are 1, so equal rewards give exactly 0.
    return (size * unnormalised) / index.expand(index.sum(unnormalised)) - 1.0


@register_advantage("grpo")
def _grpo_advantage(rewards: torch.Tensor, index: GroupIndex, eps: float = 1e-6) -> torch.Tensor:
    """GRPO z-score: (R - mean) / (unbiased std + eps), as verl computes it."""
    centred = _centred(rewards, index)
    dof = (index.counts - 1).clamp(min=1)
    std = torch.sqrt(index.sum(centred * centred) / dof)
    return centred / (index.expand(std) + eps)


@register_advantage("dr_grpo", "reinforce")
def _mean_centred_advantage(rewards: torch.Tensor, index: GroupIndex) -> torch.Tensor:
    """Dr.GRPO / REINFORCE with the group-mean baseline: R - mean(R)."""
    return _centred(rewards, index)


@register_advantage("rloo")
def _rloo_advantage(rewards: torch.Tensor, index: GroupIndex) -> torch.Tensor:
    """Leave-one-out baseline: R_i - mean_{j != i} R_j = M / (M - 1) * (R_i - mean)."""
    size = index.expand(index.counts)
    return _centred(rewards, index) * size / (size - 1).clamp(min=1)


@register_advantage("maxrl")
def _maxrl_advantage(rewards: torch.Tensor, index: GroupIndex, eps: float = 1e-6) -> torch.Tensor:
    """MaxRL: (R - mean) / (mean + eps); for binary rewards, R / p_hat - 1."""
    mean = index.expand(index.mean(rewards))
    return (rewards - mean) / (mean + eps)
