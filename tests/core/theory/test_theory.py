"""Closed forms of Sec. 3 / App. A against their stated properties and limits."""

import math

import numpy as np
import pytest

from pipeline_lib.core.theory import formulas

P = np.linspace(0.0, 1.0, 41)


@pytest.mark.parametrize("M", [2, 4, 8, 16])
@pytest.mark.parametrize("tau", [0.05, 0.3, 1.0, 10.0])
def test_h_derivative_is_omega(M, tau):
    p = np.linspace(0.01, 0.99, 33)
    step = 1e-6
    fd = (formulas.h_exact(M, tau, p + step) - formulas.h_exact(M, tau, p - step)) / (2 * step)
    np.testing.assert_allclose(fd, formulas.omega_exact(M, tau, p), rtol=1e-6, atol=1e-7)
    assert formulas.h_exact(M, tau, 0.0) == 0.0


@pytest.mark.parametrize("M", [2, 8, 16])
def test_low_temperature_limit_is_maxrl(M):
    for tau in (1e-2, 1e-3, 1e-6):
        np.testing.assert_allclose(formulas.omega_exact(M, tau, P), formulas.omega_maxrl(M - 1, P), atol=1e-8)


@pytest.mark.parametrize("M", [2, 8, 16])
def test_high_temperature_limit(M):
    tau = 1e6
    np.testing.assert_allclose(formulas.omega_exact(M, tau, P) * tau, (M - 1) / M, rtol=1e-5)


@pytest.mark.parametrize("M, tau", [(2, 0.1), (8, 0.3), (16, 1.0), (8, 5.0)])
def test_easy_endpoint(M, tau):
    assert formulas.omega_exact(M, tau, 1.0) == pytest.approx(1 - M / (1 + (M - 1) * math.exp(1 / tau)), rel=1e-12)


def test_delta_matches_the_papers_unsimplified_form():
    M, tau = 8, 0.4
    c = math.exp(1 / tau)
    s = np.arange(M)
    direct = M * (c / (M + (s + 1) * (c - 1)) - 1 / (M + s * (c - 1)))
    np.testing.assert_allclose(formulas.delta_gap(M, tau, s), direct, rtol=1e-12)
    assert (formulas.delta_gap(M, tau, s) > 0).all()


def test_extreme_temperatures_are_finite():
    for tau in (1e-8, 1e-3, 1e3, 1e9):
        assert np.isfinite(formulas.omega_exact(8, tau, P)).all()
        assert np.isfinite(formulas.h_exact(8, tau, P)).all()
        # the large-M weight at p = 0 is e^{1/tau} - 1 itself, which does overflow for tiny tau
        assert np.isfinite(formulas.omega_mean_field(tau, P[1:])).all()


def test_mean_field_at_binary_endpoints():
    tau = 0.5
    c = math.exp(1 / tau)
    assert formulas.omega_mean_field(tau, 0.0) == pytest.approx(c - 1)
    assert formulas.omega_mean_field(tau, 1.0) == pytest.approx((c - 1) / c)


def test_named_weights():
    assert formulas.omega_maxrl(5, 0.0) == 5.0
    assert formulas.omega_maxrl(1, 0.3) == pytest.approx(1.0)
    assert formulas.omega_ml(0.25) == 4.0
    assert formulas.omega_grpo(0.5) == 2.0
    assert np.isinf(formulas.omega_grpo(1.0))
    assert (formulas.omega_reinforce(P) == 1).all()


def test_cross_partials_match_the_paper():
    d13, d23 = formulas.nonconservative_cross_partials([1, 2, 4])
    assert d13 == pytest.approx(-1 / 15, abs=1e-12)
    assert d23 == pytest.approx(1 / 15, abs=1e-12)


def test_m_coefficients_match_the_papers_expansion():
    p1, p2 = 0.2, 0.5
    m = formulas.m_coefficients([1, 2, 4], [p1, p2, 1 - p1 - p2])
    np.testing.assert_allclose(m, [0.6 * p1 + 4 / 15 * p2 + 0.4, 2 / 3 * p1 + 1 / 3 * p2 + 2 / 3,
                                   0.6 * p1 + 1 / 3 * p2 + 1])


@pytest.mark.parametrize("M", [4, 8, 16])
def test_adaptive_tau_hits_the_target_ess(M):
    for k in range(1, M):
        for nu in np.linspace(k + 0.01, M - 0.01, 9):
            assert formulas.ess(k, M, formulas.adaptive_tau(k, M, float(nu))) == pytest.approx(nu, rel=1e-10)
    assert formulas.adaptive_tau(3, 8, 8.0) == math.inf


def test_ess_limits():
    assert formulas.ess(3, 8, 1e-9) == pytest.approx(3.0)  # all mass on the 3 correct rollouts
    assert formulas.ess(3, 8, 1e9) == pytest.approx(8.0)  # uniform


def test_gaussian_forms():
    assert formulas.gaussian_log_partition(0.5, 0.2, 0.25) == pytest.approx(0.5 / 0.25 + 0.04 / (2 * 0.0625))
    assert formulas.gaussian_ess_ratio(0.1, 0.1) == pytest.approx(math.exp(-1))


@pytest.mark.parametrize("objective", formulas.MC_OBJECTIVES)
def test_monte_carlo_matches_closed_forms(objective):
    M, p, tau = 8, 0.35, 0.3
    closed = {"ml": formulas.omega_ml(p), "reinforce": (M - 1) / M, "maxrl": formulas.omega_maxrl(M - 1, p),
              "softmax": formulas.omega_exact(M, tau, p)}
    mc = formulas.omega_monte_carlo(objective, M, p, 100_000, seed=3, tau=tau)
    if objective in closed:
        assert abs(mc["omega"] - float(closed[objective])) < 5 * mc["omega_se"] + 1e-12
    assert mc["mean_abs_advantage"] > 0


def test_invalid_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="M must be"):
        formulas.omega_exact(1, 0.3, 0.5)
    with pytest.raises(ValueError, match="tau"):
        formulas.omega_exact(8, 0.0, 0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        formulas.omega_exact(8, 0.3, 1.5)
    with pytest.raises(ValueError, match="0 < k < M"):
        formulas.adaptive_tau(0, 8, 4)
    with pytest.raises(ValueError, match="nu"):
        formulas.adaptive_tau(3, 8, 2)
    with pytest.raises(ValueError, match="0 < p < 1"):
        formulas.omega_monte_carlo("grpo", 8, 1.0, 100, 0)
    with pytest.raises(ValueError, match="unknown objective"):
        formulas.omega_monte_carlo("ppo", 8, 0.5, 100, 0)
