"""Group advantage estimators: the functions every engine and study computes advantages with (their parameters and
verl names are catalogued in :mod:`pipeline_lib.core.rl.estimators`).

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

An estimator that chooses something per group (``softmax_ess``: its temperature) reports it per rollout
through :func:`advantage_diagnostics`, which the trainers add to ``rollouts.jsonl``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from pipeline_lib.core.rl.estimators import ADVANTAGE_ESTIMATORS, param_names

__all__ = [
    "ESS_BISECTION_STEPS",
    "GroupIndex",
    "advantage_diagnostics",
    "available_estimators",
    "broadcast_to_tokens",
    "ess_group_tau",
    "group_advantages",
    "register_advantage",
    "unregister_advantage",
]


def _dense_sorted_inverse(group_ids: torch.Tensor) -> torch.Tensor | None:
    """``torch.unique(group_ids, return_inverse=True)[1]`` without the sort, when the ids already run a, a, a+1, ...
    (non-decreasing by steps of 0 or 1, as rollouts of consecutive prompts are laid out); None otherwise.

    The inverse is then ``group_ids - a``, the same tensor unique returns; the sort it skips was half the time of the
    theory's Monte Carlo (hundreds of thousands of rollouts per call).
    """
    if group_ids.numel() == 0:
        return None
    steps = group_ids[1:] - group_ids[:-1]
    if not bool(((steps == 0) | (steps == 1)).all()):
        return None
    return (group_ids - group_ids[0]).long()


@dataclass(frozen=True)
class GroupIndex:
    """Contiguous re-indexing of arbitrary group ids, shared by the estimators."""

    inverse: torch.Tensor  # [N] long, group slot of each rollout
    counts: torch.Tensor  # [G] group sizes, in the rewards' dtype
    n_groups: int

    @classmethod
    def from_ids(cls, group_ids: torch.Tensor, dtype: torch.dtype) -> GroupIndex:
        inverse = _dense_sorted_inverse(group_ids)
        if inverse is None:
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
    """Register ``fn(rewards, index, **params)`` under one or more estimator names, each declared in
    :data:`pipeline_lib.core.rl.estimators.ADVANTAGE_ESTIMATORS`; ``fn``'s parameters after the first two must be
    exactly the fields of the declared parameter dataclass (the one declaration of what the estimator takes)."""

    def decorator(fn: AdvantageFn) -> AdvantageFn:
        taken = tuple(list(inspect.signature(fn).parameters)[2:])
        for name in names:
            if name in _REGISTRY:
                raise ValueError(f"advantage estimator {name!r} is already registered")
            declared = param_names(name)  # an undeclared name is an error naming pipeline_lib/core/rl/estimators.py
            if sorted(taken) != sorted(declared):
                raise TypeError(f"advantage estimator {name!r}: {fn.__name__} takes {list(taken)} but its parameter "
                                f"dataclass {ADVANTAGE_ESTIMATORS[name].params.__name__} declares {list(declared)}")
            _REGISTRY[name] = fn
        return fn

    return decorator


def unregister_advantage(name: str) -> None:
    """Remove estimator ``name``'s function (a test's toy estimator cleans up after itself)."""
    _REGISTRY.pop(name, None)


def available_estimators() -> list[str]:
    return sorted(_REGISTRY)


def _prepare(estimator: str, rewards: torch.Tensor, group_ids: torch.Tensor, params: dict[str, float]) -> AdvantageFn:
    """Check the estimator, its parameters' names (its dataclass's fields) and the tensors; return the function."""
    if estimator not in _REGISTRY:
        raise ValueError(f"unknown advantage estimator {estimator!r}; registered: {available_estimators()}")
    accepted = param_names(estimator)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise TypeError(
            f"advantage estimator {estimator!r} got unknown parameter(s) {unknown}; "
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
    if not bool(torch.isfinite(rewards).all()):
        bad = torch.nonzero(~torch.isfinite(rewards)).flatten()[:5].tolist()
        raise ValueError(f"rewards must be finite; non-finite at rollout index {bad}")
    return _REGISTRY[estimator]


def group_advantages(
    estimator: str, rewards: torch.Tensor, group_ids: torch.Tensor, **params: float
) -> torch.Tensor:
    """Advantages [N] for rewards [N] grouped by ``group_ids`` [N].

    ``params`` are the estimator's own hyperparameters (``tau`` for ``softmax``,
    ``eps`` for ``grpo``/``maxrl``, ``ess_fraction`` for ``softmax_ess``); an
    unknown name is an error, not ignored.
    """
    fn = _prepare(estimator, rewards, group_ids, params)
    if rewards.numel() == 0:
        return rewards.clone()
    index = GroupIndex.from_ids(group_ids.to(rewards.device), rewards.dtype)
    return fn(rewards, index, **params)


DiagnosticsFn = Callable[..., dict[str, torch.Tensor]]
_DIAGNOSTICS: dict[str, DiagnosticsFn] = {}


def advantage_diagnostics(
    estimator: str, rewards: torch.Tensor, group_ids: torch.Tensor, **params: float
) -> dict[str, list[float | None]]:
    """Per-rollout quantities an estimator chose on the way (``{"tau": [...]}`` for ``softmax_ess``).

    JSON-ready lists aligned with ``rewards`` (``None`` where undefined), so a trainer can add
    them to its ``rollouts.jsonl`` row as they are; ``{}`` for an estimator that chooses nothing.
    """
    _prepare(estimator, rewards, group_ids, params)
    if estimator not in _DIAGNOSTICS or rewards.numel() == 0:
        return {}
    index = GroupIndex.from_ids(group_ids.to(rewards.device), rewards.dtype)
    values = _DIAGNOSTICS[estimator](rewards, index, **params)
    return {key: [None if math.isnan(v) else v for v in tensor.double().tolist()] for key, tensor in values.items()}


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


# --- SoftmaxGRPO with a per-group temperature set by a target effective sample size (paper App. A) -------------

#: Bisection steps on log(beta) for groups with three or more reward levels. The bracket spans 70 nats, so 64
#: halvings leave an interval below float64 resolution: the fixed count is exact to rounding, and
#: keeps the solve one fused loop over all groups at once (no data-dependent stopping per group).
ESS_BISECTION_STEPS = 64
#: Bracket of log(beta * spread), beta = 1/tau, spread = the group's max - min reward. At the low end ESS is within
#: 1e-24 of M; at the high end it is n_top (rollouts tied at the best reward) unless another reward lies within
#: ~1e-16 of the range below the best. A target outside the bracket gets its nearest end.
_LOG_BETA_BRACKET = (-30.0, 40.0)


def _bisect_log_beta(x: torch.Tensor, nu: torch.Tensor, index: GroupIndex) -> torch.Tensor:
    """log(beta) [G] with ESS(beta * x) = nu per group, for x [N] <= 0 with max 0 per group (float64).

    ESS(beta) = (sum e^{beta x})^2 / sum e^{2 beta x} decreases in beta (its log-derivative is
    2 (E_beta[x] - E_{2 beta}[x]) <= 0), so bisection converges; every group moves in the same tensor ops.
    """
    lo = torch.full_like(nu, _LOG_BETA_BRACKET[0])
    hi = torch.full_like(nu, _LOG_BETA_BRACKET[1])
    for _ in range(ESS_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        z = index.expand(torch.exp(mid)) * x  # <= 0; the top rollouts contribute exactly 1
        ess = index.sum(torch.exp(z)).square() / index.sum(torch.exp(2.0 * z))
        too_uniform = ess > nu  # raise beta
        lo = torch.where(too_uniform, mid, lo)
        hi = torch.where(too_uniform, hi, mid)
    return 0.5 * (lo + hi)


def _check_ess_fraction(ess_fraction: float) -> float:
    fraction = float(ess_fraction)
    if not (0.0 < fraction < 1.0):  # also rejects nan
        raise ValueError(
            f"softmax_ess needs a target ESS fraction 0 < ess_fraction < 1 of the group size, got {ess_fraction} "
            "(ess_fraction = 1 is tau = inf: uniform weights, zero advantages)"
        )
    return fraction


def _ess_temperature(rewards: torch.Tensor, index: GroupIndex, ess_fraction: float) -> torch.Tensor:
    """Per-group temperature [G] (float64) whose within-group ESS = 1 / sum_i w_i^2 equals ``ess_fraction * M``.

    Returns NaN for groups with no signal (all rewards equal, singletons) and 0 for groups whose target is not
    reachable: ESS falls monotonically from M (tau -> inf) to the number n_top of rollouts tied at the group's
    best reward (tau -> 0+), so a target nu <= n_top is unreachable and the nearest reachable temperature is the
    tau -> 0+ limit. Two-level groups (binary rewards) use the closed form of App. A; groups with three or more
    levels solve ESS = nu by bisection on log tau, all groups at once. tau carries no gradient: it is a function of
    the rewards, which do not depend on the policy parameters.
    """
    fraction = _check_ess_fraction(ess_fraction)
    with torch.no_grad():
        r = rewards.detach().to(torch.float64)
        index64 = GroupIndex(index.inverse, index.counts.to(torch.float64), index.n_groups)
        top = index64.max(r)
        bottom = -index64.max(-r)
        spread = top - bottom
        flat = spread <= 0
        # x in [-1, 0]: the group's rewards with max 0 and range 1, so one bracket on beta*spread serves every scale.
        x = (r - index64.expand(top)) / index64.expand(torch.where(flat, 1.0, spread))
        size = index64.counts
        nu = fraction * size
        n_top = index64.sum((x == 0).to(torch.float64))
        two_level = index64.sum(((x != 0) & (x != -1)).to(torch.float64)) == 0
        unreachable = nu <= n_top
        # Closed form (App. A) for k = n_top of M at the high level: c = e^{spread/tau},
        # c - 1 = (k (M - nu) + sqrt(k (M - k) nu (M - nu))) / (k (nu - k)), so log c = log1p(...) stays exact
        # when nu -> M (c -> 1).
        k = n_top
        gap = torch.where(unreachable, 1.0, nu - k)
        excess = (k * (size - nu) + torch.sqrt((k * (size - k) * nu * (size - nu)).clamp(min=0.0))) / (k * gap)
        closed_log_beta = torch.log(torch.log1p(excess))
        # Bisection on log(beta * spread) for every group at once (two-level groups discard its result).
        log_beta = torch.where(two_level, closed_log_beta, _bisect_log_beta(x, nu, index64))
        tau = spread * torch.exp(-log_beta)
        tau = torch.where(unreachable, 0.0, tau)
        return torch.where(flat, math.nan, tau)


@register_advantage("softmax_ess")
def _softmax_ess_advantage(rewards: torch.Tensor, index: GroupIndex, ess_fraction: float) -> torch.Tensor:
    """SoftmaxGRPO with a per-group tau whose within-group ESS is ``ess_fraction * M`` (App. A, adaptive tau).

    ``A_i = M * softmax(R / tau_g)_i - 1`` with tau_g from :func:`_ess_temperature`. All-equal groups get 0; a
    group whose target is unreachable (ess_fraction * M <= number of rollouts tied at the best reward; for binary
    rewards: a pass rate >= ess_fraction) gets the tau -> 0+ limit, ``M 1[R_i = max] / n_top - 1``, which for
    binary rewards is MaxRL's ``R / p_hat - 1``. tau_g scales with the group's reward range, so the advantages are
    invariant to an affine change of the rewards (scale > 0). The result is detached: tau_g is chosen, not learned.
    """
    tau = index.expand(_ess_temperature(rewards, index, ess_fraction))
    with torch.no_grad():
        r = rewards.detach().to(torch.float64)
        shifted = r - index.expand(index.max(r))  # <= 0, exactly 0 at the group's best
        hard = torch.isnan(tau) | (tau == 0)  # all-equal groups and the tau -> 0+ limit: uniform over the best
        logits = torch.where(hard, torch.where(shifted == 0, 0.0, -math.inf), shifted / torch.where(hard, 1.0, tau))
        unnormalised = torch.exp(logits)
        counts = index.counts.to(torch.float64)
        total = torch.zeros_like(counts).index_add_(0, index.inverse, unnormalised)
        advantages = counts[index.inverse] * unnormalised / total[index.inverse] - 1.0
    return advantages.to(rewards.dtype)


def ess_group_tau(rewards: torch.Tensor, group_ids: torch.Tensor, ess_fraction: float) -> torch.Tensor:
    """The temperature ``softmax_ess`` chooses, per rollout [N] (float64): NaN = no signal, 0 = the tau -> 0+ limit."""
    _prepare("softmax_ess", rewards, group_ids, {"ess_fraction": ess_fraction})
    if rewards.numel() == 0:
        return rewards.new_empty(0, dtype=torch.float64)
    index = GroupIndex.from_ids(group_ids.to(rewards.device), rewards.dtype)
    return index.expand(_ess_temperature(rewards, index, ess_fraction))


_DIAGNOSTICS["softmax_ess"] = lambda rewards, index, ess_fraction: {
    "tau": index.expand(_ess_temperature(rewards, index, ess_fraction))}
