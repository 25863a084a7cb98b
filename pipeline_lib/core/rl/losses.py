"""PPO-clip policy loss with reference KL (paper Eqs. sage_clip and sage_total).

Pure torch and engine-agnostic: the local engine optimises it directly and the
verl engine is checked against it. Shapes: every per-token tensor is [N, T]
(N rollouts, T response positions) with ``response_mask`` marking real tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pipeline_lib.core.rl.advantages import GroupIndex

__all__ = [
    "AGGREGATIONS",
    "KL_ESTIMATOR_ALIASES",
    "LossOutput",
    "PolicyLossConfig",
    "aggregate",
    "kl_estimate",
    "policy_loss",
]

#: ``group-token-mean`` is the paper's normaliser: each group's token sum divided by
#: the group's total response tokens, then averaged over groups (prompts).
AGGREGATIONS = ("group-token-mean", "token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
#: k1 = log-ratio, k2 = half squared log-ratio, k3 = verl's ``low_var_kl``.
KL_ESTIMATOR_ALIASES = {"k1": "k1", "kl": "k1", "k2": "k2", "mse": "k2", "k3": "k3", "low_var_kl": "k3"}


@dataclass(frozen=True)
class PolicyLossConfig:
    """Hyperparameters of the clipped surrogate; defaults are the paper's (App. B)."""

    clip_low: float = 0.20  # ratio floor is 1 - clip_low
    clip_high: float = 0.28  # ratio ceiling is 1 + clip_high
    beta: float = 1e-3  # reference-KL coefficient
    kl_estimator: str = "k3"
    aggregation: str = "group-token-mean"
    dual_clip_c: float | None = None  # verl's dual-clip bound for negative advantages; None = off

    def __post_init__(self) -> None:
        if not (0 <= self.clip_low < 1) or self.clip_high < 0:
            raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {self.clip_low}, {self.clip_high}")
        if self.beta < 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}")
        if self.kl_estimator not in KL_ESTIMATOR_ALIASES:
            raise ValueError(f"kl_estimator {self.kl_estimator!r} not in {sorted(KL_ESTIMATOR_ALIASES)}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation {self.aggregation!r} not in {AGGREGATIONS}")
        if self.dual_clip_c is not None and self.dual_clip_c <= 1:
            raise ValueError(f"dual_clip_c must be > 1, got {self.dual_clip_c}")


@dataclass(frozen=True)
class LossOutput:
    loss: torch.Tensor  # scalar to backpropagate
    policy_loss: torch.Tensor  # clipped surrogate part (detached)
    kl: torch.Tensor  # aggregated KL estimate (detached)
    clip_fraction: float  # fraction of real tokens where the clipped branch is active
    approx_kl_old: float  # masked mean of log(pi_old / pi_theta), a drift monitor


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    group_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a per-token matrix [N, T] to a scalar with one of :data:`AGGREGATIONS`."""
    mask = mask.to(values.dtype)
    token_sums = (values * mask).sum(-1)
    lengths = mask.sum(-1)
    if mode == "token-mean":
        return token_sums.sum() / lengths.sum().clamp(min=1)
    if mode == "seq-mean-token-mean":
        real = lengths > 0
        return (token_sums[real] / lengths[real]).mean() if bool(real.any()) else token_sums.sum() * 0
    if mode == "seq-mean-token-sum":
        return token_sums.mean()
    if mode == "group-token-mean":
        if group_ids is None:
            raise ValueError("aggregation 'group-token-mean' needs group_ids")
        index = GroupIndex.from_ids(group_ids.to(values.device), values.dtype)
        per_group = index.sum(token_sums) / index.sum(lengths).clamp(min=1)
        return per_group.mean()
    raise ValueError(f"unknown aggregation {mode!r}; choose from {AGGREGATIONS}")


def kl_estimate(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token sample estimate of KL(pi_theta || pi_ref) from the sampled token's log-probs."""
    kind = KL_ESTIMATOR_ALIASES.get(estimator)
    log_ratio = log_prob - ref_log_prob
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return 0.5 * log_ratio.square()
    if kind == "k3":
        # Clamps follow verl's low_var_kl so both engines saturate identically.
        neg = torch.clamp(-log_ratio, min=-20.0, max=20.0)
        return torch.clamp(torch.exp(neg) - neg - 1.0, min=-10.0, max=10.0)
    raise ValueError(f"unknown KL estimator {estimator!r}; choose from {sorted(KL_ESTIMATOR_ALIASES)}")


def policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    config: PolicyLossConfig,
    group_ids: torch.Tensor | None = None,
    ref_log_prob: torch.Tensor | None = None,
) -> LossOutput:
    """Clipped surrogate (Eq. sage_clip) plus ``beta`` x reference KL (Eq. sage_total).

    ``advantages`` is per rollout [N] (broadcast over its tokens) or per token [N, T].
    """
    if log_prob.shape != old_log_prob.shape or log_prob.shape != response_mask.shape:
        raise ValueError(
            f"log_prob {tuple(log_prob.shape)}, old_log_prob {tuple(old_log_prob.shape)} and "
            f"response_mask {tuple(response_mask.shape)} must share one [N, T] shape"
        )
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(-1).expand_as(log_prob)
    advantages = advantages.detach().to(log_prob.dtype)
    mask = response_mask.to(log_prob.dtype)

    log_ratio = torch.clamp(log_prob - old_log_prob.detach(), min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - config.clip_low, 1.0 + config.clip_high)
    per_token = torch.maximum(unclipped, clipped)
    if config.dual_clip_c is not None:
        bounded = torch.minimum(per_token, -advantages * config.dual_clip_c)
        per_token = torch.where(advantages < 0, bounded, per_token)
    surrogate = aggregate(per_token, mask, config.aggregation, group_ids)

    n_tokens = mask.sum().clamp(min=1)
    clip_fraction = float(((clipped > unclipped).to(mask.dtype) * mask).sum() / n_tokens)
    approx_kl_old = float((-log_ratio.detach() * mask).sum() / n_tokens)

    if ref_log_prob is not None:
        per_token_kl = kl_estimate(log_prob, ref_log_prob.detach(), config.kl_estimator)
        kl = aggregate(per_token_kl, mask, config.aggregation, group_ids)
    elif config.beta > 0:
        raise ValueError("beta > 0 needs ref_log_prob")
    else:
        kl = surrogate.new_zeros(())
    loss = surrogate + config.beta * kl if config.beta > 0 else surrogate
    return LossOutput(
        loss=loss,
        policy_loss=surrogate.detach(),
        kl=kl.detach(),
        clip_fraction=clip_fraction,
        approx_kl_old=approx_kl_old,
    )
