"""Paired comparisons between methods: the one place confidence intervals are computed.

Method comparisons in this pipeline are paired: two methods share seeds (same SFT start, same data order)
and are scored on the same held-out prompts. The unit of replication is the training seed: with 3-5 seeds a
bootstrap over seeds has too few distinct draws to be trusted (with 3 seeds its percentile interval is about
[min, max] of the per-seed values), so :func:`paired_interval` is a t-interval built from the per-seed
paired differences. Its half-width has two parts: the seed-to-seed variance of the per-seed differences over
the number of seeds, scaled by the t quantile with (seeds - 1) degrees of freedom, and, because every seed is
scored on the same finite set of test prompts (a shared draw that seed-to-seed variation cannot reveal), the
prompt-to-prompt variance of the seed-averaged per-prompt differences over the number of prompts, scaled by
the t quantile with (prompts - 1) degrees of freedom; half-width = sqrt(t_seeds^2 v_seeds + t_prompts^2
v_prompts). Giving each part its own degrees of freedom keeps the coverage at or above the nominal level with 3
seeds (Welch-Satterthwaite's pooled degrees of freedom fall to ~92.5% there when seeds dominate;
tests/core/test_stats.py simulates both). Quantities that exist once per run (a gradient-allocation share) have only
the seed part. With one seed the seed variance is unknown: the mean is reported with no interval.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy import optimize
from scipy import stats as scipy_stats

__all__ = ["INTERVAL_METHOD", "PairedDifference", "holm_adjust", "paired_interval"]

#: The method of every interval :func:`paired_interval` returns, in one sentence (printed beside the numbers).
INTERVAL_METHOD = ("Intervals are 95% t-intervals with the training seed as the unit: around the mean of the per-seed "
                   "paired differences a − b, a half-width combining the seed-to-seed variance (t quantile with "
                   "seeds − 1 degrees of freedom) and, for per-prompt scores, whose test prompts every seed shares, "
                   "the prompt-to-prompt variance of the seed-averaged differences (t with prompts − 1); one seed "
                   "gives an estimate with no interval.")
#: Short names of the interval kinds, as tables print them beside each interval.
T_SEEDS_PROMPTS = "t, seeds + prompts"
T_SEEDS = "t, seeds"
NO_INTERVAL = "1 seed: no interval"


@dataclass(frozen=True)
class PairedDifference:
    """Mean of ``a - b`` with an interval at ``level`` (NaN bounds with one seed) and the variance parts it is built
    from; :attr:`p_value` matches the interval (p < 1 - level exactly when it excludes 0)."""

    mean: float
    low: float
    high: float
    level: float
    n_seeds: int
    n_items: int
    seed_var: float
    prompt_var: float
    method: str

    @property
    def p_value(self) -> float:
        """Two-sided p-value matching the interval: twice the tail at which the half-width equals |mean| (NaN with
        one seed)."""
        if not self.has_interval:
            return math.nan
        if self.mean == 0.0:
            return 1.0
        if self.seed_var + self.prompt_var == 0.0:
            return 0.0
        smallest = 1e-15
        distance = abs(self.mean)
        if self._half_width(smallest) < distance:
            return 0.0
        log_tail = optimize.brentq(lambda x: self._half_width(math.exp(x)) - distance, math.log(smallest),
                                   math.log(0.5), xtol=1e-10)
        return min(1.0, 2.0 * math.exp(log_tail))

    def _half_width(self, tail: float) -> float:
        """Half-width at two-sided tail ``2 * tail``: each variance part scaled by its own t quantile."""
        variance = scipy_stats.t.isf(tail, self.n_seeds - 1) ** 2 * self.seed_var if self.seed_var else 0.0
        if self.prompt_var:
            variance += scipy_stats.t.isf(tail, self.n_items - 1) ** 2 * self.prompt_var
        return math.sqrt(variance)

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def excludes_zero(self) -> bool:
        return self.has_interval and (self.low > 0.0 or self.high < 0.0)

    def as_dict(self) -> dict:
        return asdict(self) | {"excludes_zero": self.excludes_zero, "p_value": self.p_value}

    def format(self, scale: float = 1.0, digits: int = 1, with_method: bool = False) -> str:
        """``+2.5 [+0.4, +4.6]``, values multiplied by ``scale`` (100 for percentages); ``with_method`` appends the
        interval's kind (``(t, seeds)``); one seed: ``+2.5 (1 seed: no interval)``."""
        if not self.has_interval:
            return f"{self.mean * scale:+.{digits}f} ({self.method})"
        text = (f"{self.mean * scale:+.{digits}f} [{self.low * scale:+.{digits}f}, "
                f"{self.high * scale:+.{digits}f}]")
        return f"{text} ({self.method})" if with_method else text


def _as_matrix(values: np.ndarray | list, name: str) -> np.ndarray:
    matrix = np.asarray(values, dtype=np.float64)
    if matrix.ndim == 1:
        matrix = matrix[:, None]
    if matrix.ndim != 2 or matrix.size == 0:
        raise ValueError(f"{name}: expected a non-empty [seeds, items] array, got shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    return matrix


def paired_interval(a: np.ndarray | list, b: np.ndarray | list, *, level: float = 0.95) -> PairedDifference:
    """``mean(a) - mean(b)`` with a t-interval whose unit is the seed, for scores shaped [seeds, items].

    Row s of ``a`` and ``b`` comes from seed s, column j from test item j (the same items for every seed).
    A 1-d input is one number per run (seeds only). See the module docstring for the variance.
    """
    a, b = _as_matrix(a, "a"), _as_matrix(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"paired scores must have one shape, got {a.shape} and {b.shape}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    diff = a - b
    n_seeds, n_items = diff.shape
    mean = float(diff.mean())
    if n_seeds < 2:
        return PairedDifference(mean, math.nan, math.nan, level, n_seeds, n_items, math.nan, math.nan, NO_INTERVAL)
    seed_var = float(diff.mean(axis=1).var(ddof=1)) / n_seeds
    prompt_var = float(diff.mean(axis=0).var(ddof=1)) / n_items if n_items > 1 else 0.0
    point = PairedDifference(mean, mean, mean, level, n_seeds, n_items, seed_var, prompt_var,
                             T_SEEDS_PROMPTS if n_items > 1 else T_SEEDS)
    half = point._half_width((1.0 - level) / 2.0)
    return replace(point, low=mean - half, high=mean + half)


def holm_adjust(p_values: list[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error control over the whole list); NaN entries stay NaN
    and do not count towards the family."""
    p = np.asarray(p_values, dtype=np.float64)
    adjusted = np.full_like(p, np.nan)
    tested = np.flatnonzero(np.isfinite(p))
    order = tested[np.argsort(p[tested], kind="stable")]
    m = len(order)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[index]))
        adjusted[index] = running
    return adjusted
