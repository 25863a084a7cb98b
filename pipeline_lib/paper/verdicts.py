"""The verdict rules of the claims table, written once (the reproduction report and benchmarks/tiny_rl_check.py).

A claim is **supported** only when its paired interval (:func:`pipeline_lib.core.stats.paired_interval`) rests on at
least ``min_seeds`` training seeds (config key ``report.min_seeds``, >= 3) and excludes 0 in the claimed direction
after Holm's family-wise adjustment over every claim of the table that has enough seeds; **contradicted** when it
excludes 0 the other way under the same rule; **inconclusive** when it does not exclude 0 (never "not
reproduced": an interval that includes 0 is also consistent with the claim); and with fewer seeds the row is an
estimate with no verdict (one seed per method, as in the paper plan, gives estimates only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline_lib.core.stats import PairedDifference, holm_adjust, paired_interval

__all__ = ["ALPHA", "BOLD_RULE", "MIN_SEEDS", "Verdict", "rules", "supported_best", "verdicts"]

#: Family-wise error rate of the claims table.
ALPHA = 0.05
#: Default (and least allowed) number of seeds a verdict needs (config key ``report.min_seeds``).
MIN_SEEDS = 3

SUPPORTED = "supported"
CONTRADICTED = "contradicted (interval excludes 0 the other way)"
INCONCLUSIVE = "inconclusive (interval includes 0)"
INCONCLUSIVE_AFTER_HOLM = "inconclusive (interval excludes 0, but not after Holm)"
NOT_RUN = "cannot test (no paired result)"


def rules(min_seeds: int) -> str:
    """The rules in one paragraph, printed where the claims table is."""
    return (f"Verdict rules: a claim is *supported* only when its paired 95% interval rests on at least {min_seeds} "
            "training seeds (`report.min_seeds`) and excludes 0 in the claimed direction after Holm's adjustment "
            f"over every claim in this table that has {min_seeds} or more seeds (family-wise error rate "
            f"{ALPHA:g}); *contradicted* when it excludes 0 the other way under the same rule; *inconclusive* when "
            f"it does not (an interval that includes 0 is consistent with the claim and with its absence); with "
            f"fewer than {min_seeds} seeds the row is an estimate with no verdict.")



@dataclass(frozen=True)
class Verdict:
    """One claim's verdict and its Holm-adjusted p-value (NaN when it was not part of the tested family)."""

    text: str
    adjusted_p: float

    def format_p(self) -> str:
        return "–" if np.isnan(self.adjusted_p) else f"{self.adjusted_p:.3g}"


def verdicts(results: list[PairedDifference | None], min_seeds: int = MIN_SEEDS,
             expect_positive: list[bool] | None = None) -> list[Verdict]:
    """The verdict of each claim, Holm-adjusted over the claims with at least ``min_seeds`` seeds."""
    if min_seeds < MIN_SEEDS:
        raise ValueError(f"min_seeds must be >= {MIN_SEEDS} (a verdict from fewer seeds cannot carry seed "
                         f"variance), got {min_seeds}")
    expect_positive = expect_positive or [True] * len(results)
    tested = [r is not None and r.n_seeds >= min_seeds and r.has_interval for r in results]
    adjusted = holm_adjust([r.p_value if ok else np.nan for r, ok in zip(results, tested, strict=True)])
    out = []
    for result, ok, p, positive in zip(results, tested, adjusted, expect_positive, strict=True):
        if result is None:
            out.append(Verdict(NOT_RUN, np.nan))
        elif not ok:
            seeds = f"{result.n_seeds} seed" + ("" if result.n_seeds == 1 else "s")
            out.append(Verdict(f"no verdict: estimate from {seeds} (< {min_seeds})", np.nan))
        elif p < ALPHA:
            out.append(Verdict(SUPPORTED if (result.mean > 0) == positive else CONTRADICTED, float(p)))
        else:
            out.append(Verdict(INCONCLUSIVE_AFTER_HOLM if result.excludes_zero else INCONCLUSIVE, float(p)))
    return out


#: Caption text of every table that marks cells by :func:`supported_best`.
BOLD_RULE = ("a cell is in bold only where the claims rules support it as best (its mean above every other row of "
             "its column, paired by seed, {min_seeds}+ seeds, Holm over the table); otherwise no cell is marked")


def supported_best(columns: dict[str, dict[str, dict[int, float]]], min_seeds: int = MIN_SEEDS) -> dict[str, str]:
    """Column -> the row to mark as best, only where the verdict rules support it: the row with the highest mean
    beats every other row of its column by a seed-paired interval (one number per run) that is *supported* after
    Holm's adjustment over every such comparison of the table. A column whose top is a tie, an estimate from fewer
    than ``min_seeds`` seeds, or unpaired (no shared seeds) gets no mark: a bold cell is a claim, not a ranking.

    ``columns`` maps column -> row -> seed -> value."""
    family: list[tuple[str, str, PairedDifference | None]] = []
    for column, rows in columns.items():
        means = {row: float(np.mean(list(seeds.values()))) for row, seeds in rows.items() if seeds}
        if len(means) < 2:
            continue
        best = max(means, key=means.__getitem__)
        for other in means:
            if other == best:
                continue
            shared = sorted(set(rows[best]) & set(rows[other]))
            result = (paired_interval([rows[best][s] for s in shared], [rows[other][s] for s in shared])
                      if shared else None)
            family.append((column, best, result))
    judged = verdicts([result for _, _, result in family], min_seeds)
    out: dict[str, str] = {}
    failed: set[str] = set()
    for (column, best, _), verdict in zip(family, judged, strict=True):
        if verdict.text == SUPPORTED and column not in failed:
            out[column] = best
        else:
            failed.add(column)
            out.pop(column, None)
    return out
