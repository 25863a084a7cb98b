"""Paired comparisons between methods: the one place confidence intervals are computed.

Method comparisons in this pipeline are paired: two methods share seeds (same SFT start, same data order)
and are scored on the same held-out prompts. Two sources of noise matter: the training seed and the
finite set of test prompts. :func:`paired_bootstrap` resamples both (seeds, then prompts within the
resampled seeds, the same prompts for both methods), so an interval reflects seed-to-seed variation as
well as the test set's size. :func:`paired_seed_bootstrap` resamples seeds only, for quantities that
exist once per run (a gradient-allocation share, a judge mean).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["PairedDifference", "paired_bootstrap", "paired_seed_bootstrap"]


@dataclass(frozen=True)
class PairedDifference:
    """Mean of ``a - b`` with a percentile bootstrap interval at ``level``."""

    mean: float
    low: float
    high: float
    level: float
    n_seeds: int
    n_items: int
    n_boot: int

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0.0 or self.high < 0.0

    def as_dict(self) -> dict:
        return asdict(self) | {"excludes_zero": self.excludes_zero}

    def format(self, scale: float = 1.0, digits: int = 1) -> str:
        """``+2.5 [+0.4, +4.6]``, values multiplied by ``scale`` (100 for percentages)."""
        return (f"{self.mean * scale:+.{digits}f} [{self.low * scale:+.{digits}f}, "
                f"{self.high * scale:+.{digits}f}]")


def _as_matrix(values: np.ndarray | list, name: str) -> np.ndarray:
    matrix = np.asarray(values, dtype=np.float64)
    if matrix.ndim == 1:
        matrix = matrix[:, None]
    if matrix.ndim != 2 or matrix.size == 0:
        raise ValueError(f"{name}: expected a non-empty [seeds, items] array, got shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    return matrix


def paired_bootstrap(a: np.ndarray | list, b: np.ndarray | list, *, level: float = 0.95, n_boot: int = 10000,
                     seed: int = 0) -> PairedDifference:
    """Two-level paired bootstrap of ``mean(a) - mean(b)`` for per-item scores shaped [seeds, items].

    Row s of ``a`` and of ``b`` come from the same seed, column j from the same test item. Each bootstrap
    draw resamples seeds with replacement, then items with replacement (one draw of items per resampled
    seed, shared by both methods), and takes the mean paired difference.
    """
    a, b = _as_matrix(a, "a"), _as_matrix(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"paired scores must have one shape, got {a.shape} and {b.shape}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    diff = a - b
    n_seeds, n_items = diff.shape
    rng = np.random.default_rng(seed)
    chunk = max(1, 2_000_000 // (n_seeds * n_items))  # bounds memory for large test sets
    draws = np.concatenate([_draw(diff, rng, min(chunk, n_boot - start)) for start in range(0, n_boot, chunk)])
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(draws, [tail, 1.0 - tail])
    return PairedDifference(float(diff.mean()), float(low), float(high), level, n_seeds, n_items, n_boot)


def _draw(diff: np.ndarray, rng: np.random.Generator, count: int) -> np.ndarray:
    n_seeds, n_items = diff.shape
    seed_idx = rng.integers(0, n_seeds, size=(count, n_seeds))
    item_idx = rng.integers(0, n_items, size=(count, n_seeds, n_items))
    return diff[seed_idx[:, :, None], item_idx].mean(axis=(1, 2))


def paired_seed_bootstrap(a: np.ndarray | list, b: np.ndarray | list, *, level: float = 0.95,
                          n_boot: int = 10000, seed: int = 0) -> PairedDifference:
    """Paired bootstrap over seeds only, for one number per run (``a[s]`` and ``b[s]`` share seed s)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 1)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 1)
    result = paired_bootstrap(a, b, level=level, n_boot=n_boot, seed=seed)
    return PairedDifference(result.mean, result.low, result.high, level, a.shape[0], 1, n_boot)
