"""Paired bootstrap intervals: coverage on known distributions, pairing, and bad input."""

import numpy as np
import pytest

from pipeline_lib.stats import paired_bootstrap, paired_seed_bootstrap


def test_interval_covers_the_true_difference_at_about_the_nominal_rate():
    rng = np.random.default_rng(1)
    covered = 0
    trials = 200
    for trial in range(trials):
        a = rng.normal(0.3, 1.0, size=(1, 100))
        b = rng.normal(0.0, 1.0, size=(1, 100))
        result = paired_bootstrap(a, b, n_boot=2000, seed=trial)
        covered += result.low <= 0.3 <= result.high
    assert 0.88 <= covered / trials <= 0.99


def test_pairing_removes_shared_item_noise():
    rng = np.random.default_rng(0)
    item_difficulty = rng.normal(0.0, 5.0, size=(3, 200))
    a = item_difficulty + 0.2 + rng.normal(0.0, 0.1, size=(3, 200))
    b = item_difficulty + rng.normal(0.0, 0.1, size=(3, 200))
    result = paired_bootstrap(a, b, n_boot=2000)
    assert result.excludes_zero and result.low > 0.15 and result.high < 0.25
    assert result.n_seeds == 3 and result.n_items == 200


def test_seed_noise_widens_the_interval():
    rng = np.random.default_rng(0)
    noise = rng.normal(0.0, 0.05, size=(3, 200))
    seed_shift = np.array([[-0.3], [0.0], [0.3]])
    calm = paired_bootstrap(0.1 + noise, np.zeros((3, 200)), n_boot=2000)
    shaky = paired_bootstrap(0.1 + noise + seed_shift, np.zeros((3, 200)), n_boot=2000)
    assert (shaky.high - shaky.low) > 5 * (calm.high - calm.low)
    assert not shaky.excludes_zero and calm.excludes_zero


def test_seed_only_bootstrap_and_formatting():
    result = paired_seed_bootstrap([0.5, 0.6, 0.7], [0.4, 0.4, 0.4], n_boot=4000)
    assert result.mean == pytest.approx(0.2)
    assert 0.1 - 1e-9 <= result.low <= result.mean <= result.high <= 0.3 + 1e-9
    assert result.format(scale=100).startswith("+20.0 [")


@pytest.mark.parametrize("a, b", [([[1.0, np.nan]], [[0.0, 0.0]]), ([[1.0, 2.0]], [[0.0]]), ([], [])])
def test_bad_input_is_refused(a, b):
    with pytest.raises(ValueError):
        paired_bootstrap(a, b)
