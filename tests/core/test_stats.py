"""Paired intervals with the seed as the unit: coverage on simulated seeds and prompts, pairing, Holm, bad input."""

import math

import numpy as np
import pytest

from pipeline_lib.core.stats import NO_INTERVAL, T_SEEDS, holm_adjust, paired_interval

TRUE_DIFFERENCE = 0.1
PROMPTS = 200
#: (seed sd, per-prompt effect sd, per-seed-and-prompt noise sd) of the simulated paired differences
REGIMES = {"seeds dominate": (0.05, 0.1, 0.3), "prompts dominate": (0.005, 0.4, 0.3),
           "both": (0.03, 0.4, 0.3), "seeds dominate, no noise": (0.05, 0.1, 0.0)}


def simulate(rng: np.random.Generator, seeds: int, seed_sd: float, prompt_sd: float, noise_sd: float) -> np.ndarray:
    """Paired differences [seeds, prompts]: the true difference, a shift per training seed, an effect per test prompt
    (one test set, shared by every seed, itself a draw from the population of prompts) and per-(seed, prompt) noise."""
    return (TRUE_DIFFERENCE + rng.normal(0.0, seed_sd, (seeds, 1)) + rng.normal(0.0, prompt_sd, (1, PROMPTS))
            + rng.normal(0.0, noise_sd, (seeds, PROMPTS)))


def todays_bootstrap(diff: np.ndarray, rng: np.random.Generator, n_boot: int = 1000) -> tuple[float, float]:
    """The interval the report printed before issue 27, kept here only to show it falls short: resample seeds, then
    prompts independently for each resampled seed, percentile interval."""
    n_seeds, n_items = diff.shape
    seed_idx = rng.integers(0, n_seeds, size=(n_boot, n_seeds))
    item_idx = rng.integers(0, n_items, size=(n_boot, n_seeds, n_items))
    draws = diff[seed_idx[:, :, None], item_idx].mean(axis=(1, 2))
    low, high = np.quantile(draws, [0.025, 0.975])
    return float(low), float(high)


@pytest.mark.parametrize("seeds", [3, 5])
@pytest.mark.parametrize("regime", list(REGIMES))
def test_coverage_is_at_least_93_percent_at_3_and_5_seeds(regime, seeds):
    rng = np.random.default_rng(seeds)
    trials = 1000
    covered = 0
    for _ in range(trials):
        result = paired_interval(simulate(rng, seeds, *REGIMES[regime]), np.zeros((seeds, PROMPTS)))
        covered += result.low <= TRUE_DIFFERENCE <= result.high
    assert covered / trials >= 0.93  # measured 0.953-0.98 (conservative where seeds and prompts both matter)


@pytest.mark.parametrize("seeds", [3, 5])
def test_the_bootstrap_printed_before_falls_short(seeds):
    """Seeds-then-prompts resampling: with 3-5 seeds it under-covers, most of all when the shared test set matters
    (it draws prompts independently per seed, so their shared draw averages away): 79-90% here, below the 93% that
    :func:`paired_interval` clears."""
    rng = np.random.default_rng(10 + seeds)
    trials = 300
    for regime in ("seeds dominate", "prompts dominate"):
        covered = 0
        for _ in range(trials):
            low, high = todays_bootstrap(simulate(rng, seeds, *REGIMES[regime]), rng)
            covered += low <= TRUE_DIFFERENCE <= high
        assert covered / trials < 0.93, regime


def test_three_seed_intervals_are_not_the_range_of_the_seeds():
    """With one number per run and 3 seeds the interval is a t-interval (2 df), far wider than [min, max]."""
    result = paired_interval([0.5, 0.6, 0.7], [0.4, 0.4, 0.4])
    assert result.mean == pytest.approx(0.2) and result.method == T_SEEDS and result.n_items == 1
    half = 4.302653 * 0.1 / math.sqrt(3)  # t(0.975, 2) x sd / sqrt(n)
    assert result.low == pytest.approx(0.2 - half, rel=1e-5) and result.high == pytest.approx(0.2 + half, rel=1e-5)
    assert result.low < 0.1 and result.high > 0.3 and not result.excludes_zero
    assert result.format(scale=100) == "+20.0 [-4.8, +44.8]"
    assert result.format(scale=100, with_method=True) == "+20.0 [-4.8, +44.8] (t, seeds)"


def test_pairing_removes_shared_item_noise():
    rng = np.random.default_rng(0)
    item_difficulty = rng.normal(0.0, 5.0, size=(3, 200))
    a = item_difficulty + 0.2 + rng.normal(0.0, 0.1, size=(3, 200))
    b = item_difficulty + rng.normal(0.0, 0.1, size=(3, 200))
    result = paired_interval(a, b)
    assert result.excludes_zero and result.low > 0.1 and result.high < 0.3  # unpaired: sd 5 per item
    assert result.n_seeds == 3 and result.n_items == 200


def test_seed_noise_widens_the_interval():
    rng = np.random.default_rng(0)
    noise = rng.normal(0.0, 0.05, size=(3, 200))
    seed_shift = np.array([[-0.3], [0.0], [0.3]])
    calm = paired_interval(0.1 + noise, np.zeros((3, 200)))
    shaky = paired_interval(0.1 + noise + seed_shift, np.zeros((3, 200)))
    assert (shaky.high - shaky.low) > 5 * (calm.high - calm.low)
    assert not shaky.excludes_zero and calm.excludes_zero


def test_p_value_matches_the_interval():
    """p < 0.05 exactly when the 95% interval excludes 0 (the verdicts rely on it)."""
    rng = np.random.default_rng(3)
    for shift in np.linspace(0.0, 0.2, 15):
        result = paired_interval(shift + rng.normal(0.0, 0.05, (3, 50)), np.zeros((3, 50)))
        assert (result.p_value < 0.05) == result.excludes_zero
        at_p = paired_interval(shift + rng.normal(0.0, 0.05, (3, 50)), np.zeros((3, 50)), level=0.5)
        assert at_p.level == 0.5
    exact = paired_interval(np.full((3, 4), 0.2), np.zeros((3, 4)))
    assert (exact.low, exact.high, exact.p_value) == (pytest.approx(0.2), pytest.approx(0.2), 0.0)


def test_one_seed_gives_an_estimate_without_an_interval():
    result = paired_interval([[1.0, 0.0, 1.0, 1.0]], [[0.0, 0.0, 1.0, 0.0]])
    assert result.mean == pytest.approx(0.5) and result.method == NO_INTERVAL
    assert math.isnan(result.low) and math.isnan(result.p_value) and not result.excludes_zero
    assert result.format(scale=100) == "+50.0 (1 seed: no interval)"


def test_holm_adjusts_step_down_and_ignores_untested_entries():
    adjusted = holm_adjust([0.01, 0.04, math.nan, 0.03])
    assert adjusted[0] == pytest.approx(0.03) and adjusted[3] == pytest.approx(0.06)
    assert adjusted[1] == pytest.approx(0.06) and math.isnan(adjusted[2])  # monotone: max(0.06, 0.04)


@pytest.mark.parametrize("a, b", [([[1.0, np.nan]], [[0.0, 0.0]]), ([[1.0, 2.0]], [[0.0]]), ([], [])])
def test_bad_input_is_refused(a, b):
    with pytest.raises(ValueError):
        paired_interval(a, b)
