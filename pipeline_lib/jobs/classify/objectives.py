"""Training objectives on a classifier, all RL ones through the shared advantage registry.

``ml`` is cross-entropy. For ``reinforce``, ``grpo`` and ``softmax`` each image is a
prompt: M (``group_size``) class labels are sampled with replacement from the model's own softmax
(the rollouts), reward = 1 if the label is the true class, advantages come from
:func:`pipeline_lib.core.rl.advantages.group_advantages`, and the loss is
``-mean(log p(a) * A)`` over all rollouts. An RL objective is an estimator of the registry, run with the parameters
its run spec carries (:attr:`pipeline_lib.core.run_spec.RunSpec.estimator`: the plan reads them from the ``imagenet``
section by the estimator's parameter dataclass, so ``imagenet.tau`` reaches SoftmaxGRPO's ``tau``), by the same path
as every other run's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from pipeline_lib.core.rl.advantages import group_advantages

__all__ = ["ML", "OBJECTIVES", "ObjectiveOutput", "closed_form_metrics", "objective_loss"]

#: The maximum-likelihood objective (cross-entropy); the others are advantage estimators of the registry.
ML = "ml"
OBJECTIVES = (ML, "reinforce", "grpo", "softmax")


@dataclass(frozen=True)
class ObjectiveOutput:
    loss: torch.Tensor
    reward_mean: float  # fraction of sampled labels that were correct (NaN for ml)
    groups_with_signal: float  # fraction of images whose group had both rewards (NaN for ml)


def objective_loss(
    objective: str,
    logits: torch.Tensor,
    labels: torch.Tensor,
    group_size: int,
    params: Mapping[str, Any] | None = None,
    generator: torch.Generator | None = None,
) -> ObjectiveOutput:
    """Loss for a batch of logits [B, C] and labels [B]; ``params``: the RL objective's estimator parameters (its run
    spec's ``estimator.params``)."""
    if objective == ML:
        return ObjectiveOutput(F.cross_entropy(logits, labels), float("nan"), float("nan"))
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose from {OBJECTIVES}")
    if group_size < 1:
        raise ValueError(f"objective {objective!r} needs group_size (M) >= 1, got {group_size}")
    log_probs = F.log_softmax(logits, dim=-1)
    batch = logits.shape[0]
    samples = torch.multinomial(log_probs.detach().exp(), group_size, replacement=True, generator=generator)
    rewards = (samples == labels[:, None]).to(logits.dtype)
    group_ids = torch.arange(batch, device=logits.device).repeat_interleave(group_size)
    advantages = group_advantages(objective, rewards.flatten(), group_ids, **dict(params or {})).view(batch, group_size)
    chosen = log_probs.gather(1, samples)
    loss = -(chosen * advantages).mean()
    mixed = (rewards.amax(1) > rewards.amin(1)).to(logits.dtype).mean()
    return ObjectiveOutput(loss, float(rewards.mean()), float(mixed))


def closed_form_metrics(logits: torch.Tensor, labels: torch.Tensor, ks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """Per-example top-1, exact pass@1 (probability of the true class) and pass@k = 1 - (1 - p)^k.

    Computed in closed form from the model's distribution, never by sampling.
    """
    probs = F.softmax(logits.float(), dim=-1)
    p_true = probs.gather(1, labels[:, None]).squeeze(1)
    metrics = {"top1": (logits.argmax(-1) == labels).float(), "pass@1": p_true}
    for k in ks:
        metrics[f"pass@{k}"] = -torch.expm1(k * torch.log1p(-p_true))
    return metrics
