"""One step's ``softmaxgrpo/*`` curves from its group rollouts, computed the same way on both engines.

The local engine (:mod:`pipeline_lib.jobs.engines.local.rl`) and the verl engine
(:mod:`pipeline_lib.jobs.engines.verl.step_metrics`) both call :func:`group_step_metrics`, so a tiny run and a paper run
show the same quantities under the same names (``docs/tracking.md``). Everything is vectorised over rollouts and groups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

__all__ = ["PASS_RATE_BINS", "allocation_key", "group_step_metrics", "pass_rate_bin", "tau_summary"]

#: Pass-rate bins of the paper's gradient-allocation table ([low, high); the last one includes 1).
PASS_RATE_BINS = ((0.0, 0.2), (0.2, 0.5), (0.5, 0.7), (0.7, 0.9), (0.9, 1.0))


def pass_rate_bin(pass_rate: torch.Tensor) -> torch.Tensor:
    """Each pass rate's bin index in :data:`PASS_RATE_BINS` ([low, high), the last bin holding 1): the one binning
    rule of the per-step curves and the paper's allocation table (``pipeline_lib.paper.results.allocation_bins``)."""
    edges = torch.tensor([high for _, high in PASS_RATE_BINS[:-1]], dtype=torch.float64)
    return torch.bucketize(pass_rate.double(), edges, right=True)


def allocation_key(low: float, high: float) -> str:
    """The metric name of one bin's share of the step's gradient allocation."""
    return f"softmaxgrpo/allocation/pass_{low:g}-{high:g}"


def tau_summary(chosen: Mapping[str, Sequence[float | None]], group_ids: torch.Tensor) -> dict[str, float]:
    """A step's summary of what the estimator chose per group (softmax_ess's tau, ``rollouts.jsonl`` has each):
    ``softmaxgrpo/tau/median``, the median over the groups that have one (equal rewards: none)."""
    per_group: dict[int, float | None] = {}
    for group, tau in zip(group_ids.tolist(), chosen.get("tau", []), strict=False):  # policy rollouts come first
        per_group.setdefault(group, tau)
    taus = [tau for tau in per_group.values() if tau is not None]
    return {"softmaxgrpo/tau/median": float(torch.tensor(taus).median())} if taus else {}


def group_step_metrics(correct: torch.Tensor, abs_advantage: torch.Tensor, lengths: torch.Tensor,
                       group_ids: torch.Tensor, chosen: Mapping[str, Sequence[float | None]] | None = None
                       ) -> dict[str, float]:
    """The step's pass rate, its share of groups with no GRPO signal, the mean |advantage|, the estimator's choices
    (:func:`tau_summary`) and the gradient allocation: the share of sum_i T_i |A_i| (response tokens x mean |A| over
    them) spent on groups in each pass-rate bin, omitted when every advantage is zero.

    The step's allocation bins a group by its own pass rate k/M, the only one a step knows: a live monitor, not the
    paper's Table 3. With 0/1 rewards its [0.9, 1] bin holds only k = M groups, whose advantage is 0, so it is empty
    by construction; Table 3 (``pipeline_lib.paper.results.allocation_bins``) bins by the prompt's pass rate over its
    other visits in the run instead, measured apart from the group whose gradient is counted.

    ``correct`` (0/1), ``abs_advantage``, ``lengths`` and ``group_ids`` (contiguous integer ids) are per rollout.
    """
    groups = group_ids.long()
    n_groups = int(groups.max()) + 1
    counts = torch.bincount(groups, minlength=n_groups)
    present = counts > 0
    correct_sum = torch.zeros(n_groups, dtype=correct.dtype).index_add_(0, groups, correct)
    pass_rate = correct_sum[present] / counts[present].to(correct.dtype)
    metrics = {
        "softmaxgrpo/pass_rate": float(correct.mean()),
        "softmaxgrpo/groups_all_correct": float((pass_rate == 1).float().mean()),
        "softmaxgrpo/groups_all_wrong": float((pass_rate == 0).float().mean()),
        "softmaxgrpo/abs_advantage_mean": float(abs_advantage.mean()),
        **tau_summary(chosen or {}, group_ids),
    }
    weight = lengths.double() * abs_advantage.double()
    per_group = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, groups, weight)[present]
    total = float(per_group.sum())
    if total > 0:
        bins = pass_rate_bin(pass_rate)
        shares = torch.zeros(len(PASS_RATE_BINS), dtype=torch.float64).index_add_(0, bins, per_group) / total
        metrics.update({allocation_key(low, high): float(share)
                        for (low, high), share in zip(PASS_RATE_BINS, shares.tolist(), strict=True)})
    return metrics
