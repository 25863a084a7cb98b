"""Closed forms of the paper's theory (Sec. 3 and App. A), stable in the limits.

Binary rewards: with ``u = exp(-1/tau)`` and ``v = 1 - u`` every expression is
written with bounded quantities, so tau down to 1e-6 (c = e^{1/tau} overflows)
and tau up to 1e6 (c - 1 underflows) evaluate without inf/nan or cancellation.
The Monte Carlo estimators draw binary groups and push them through the same
advantage registry the trainers use, so a figure made here is evidence about
the code that trains, not about a re-derivation.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from scipy.special import betainc
from scipy.stats import binom

from pipeline_lib.core.rl.advantages import group_advantages
from pipeline_lib.core.rl.estimators import params_from

__all__ = [
    "MC_OBJECTIVES",
    "adaptive_tau",
    "delta_gap",
    "ess",
    "gaussian_ess_ratio",
    "gaussian_log_partition",
    "h_exact",
    "m_coefficients",
    "nonconservative_cross_partials",
    "omega_exact",
    "omega_grpo",
    "omega_maxrl",
    "omega_mean_field",
    "omega_ml",
    "omega_monte_carlo",
    "omega_reinforce",
    "weight_function",
]

FloatArray = NDArray[np.float64]


def _check_group(M: int, tau: float) -> None:
    if int(M) != M or M < 2:
        raise ValueError(f"group size M must be an integer >= 2, got {M}")
    if not (tau > 0):  # also rejects nan
        raise ValueError(f"temperature tau must be > 0, got {tau}")


def _uv(tau: float) -> tuple[float, float]:
    """u = e^{-1/tau} = 1/c and v = 1 - u = (c - 1)/c, both in [0, 1]."""
    if math.isinf(tau):
        return 1.0, 0.0
    return math.exp(-1.0 / tau), -math.expm1(-1.0 / tau)


def _probabilities(p: ArrayLike) -> FloatArray:
    arr = np.asarray(p, dtype=np.float64)
    if np.any((arr < 0) | (arr > 1)) or np.any(np.isnan(arr)):
        raise ValueError("pass probabilities p must lie in [0, 1]")
    return arr


def delta_gap(M: int, tau: float, s: ArrayLike) -> FloatArray:
    """Success-minus-failure advantage gap given s other successes (Eq. app_sage_delta).

    Written as ``M v ((M-1)u + s v) / ((M u + s v)(M u + (s+1) v))``, i.e. the
    paper's expression divided through by c^2; at s = 0 the common factor u is
    cancelled so the tau -> 0 limit (M - 1) is exact.
    """
    _check_group(M, tau)
    u, v = _uv(tau)
    s_arr = np.asarray(s, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        general = M * v * ((M - 1) * u + s_arr * v) / ((M * u + s_arr * v) * (M * u + (s_arr + 1) * v))
        at_zero = (M - 1) * v / (M * u + v)
    return np.where(s_arr == 0, at_zero, general)


def omega_exact(M: int, tau: float, p: ArrayLike) -> FloatArray:
    """Exact finite-M prompt weight: Bernstein polynomial of the gaps (Eq. app_sage_bernstein)."""
    p_arr = _probabilities(p)
    s = np.arange(M)
    gaps = delta_gap(M, tau, s)
    pmf = binom.pmf(s[:, None], M - 1, p_arr.reshape(1, -1))
    return (gaps @ pmf).reshape(p_arr.shape)


def h_exact(M: int, tau: float, p: ArrayLike) -> FloatArray:
    """Exact scalar objective with h' = omega and h(0) = 0 (Eq. app_sage_h_closed_form)."""
    p_arr = _probabilities(p)
    s = np.arange(M)
    gaps = delta_gap(M, tau, s)
    incomplete = betainc((s + 1)[:, None], (M - s)[:, None], p_arr.reshape(1, -1))
    return (gaps @ incomplete / M).reshape(p_arr.shape)


def omega_mean_field(tau: float, p: ArrayLike) -> FloatArray:
    """Large-M weight (c - 1)/(1 - p + p c) (Eq. sage_weight_mf), computed as v/(u(1-p) + p)."""
    if not (tau > 0):
        raise ValueError(f"temperature tau must be > 0, got {tau}")
    p_arr = _probabilities(p)
    u, v = _uv(tau)
    with np.errstate(divide="ignore"):
        return v / (u * (1.0 - p_arr) + p_arr)


def omega_maxrl(T: int, p: ArrayLike) -> FloatArray:
    """MaxRL(T) weight (1 - (1-p)^T)/p, with its p -> 0 limit T."""
    if int(T) != T or T < 1:
        raise ValueError(f"MaxRL truncation T must be an integer >= 1, got {T}")
    p_arr = _probabilities(p)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = -np.expm1(T * np.log1p(-p_arr)) / p_arr
    return np.where(p_arr == 0, float(T), value)


def omega_grpo(p: ArrayLike) -> FloatArray:
    """GRPO population weight [p(1-p)]^{-1/2}; infinite at both ends."""
    p_arr = _probabilities(p)
    with np.errstate(divide="ignore"):
        return 1.0 / np.sqrt(p_arr * (1.0 - p_arr))


def omega_reinforce(p: ArrayLike) -> FloatArray:
    """REINFORCE weight: uniform over difficulty."""
    return np.ones_like(_probabilities(p))


def omega_ml(p: ArrayLike) -> FloatArray:
    """Maximum-likelihood weight 1/p (d log p = dp / p)."""
    p_arr = _probabilities(p)
    with np.errstate(divide="ignore"):
        return 1.0 / p_arr


#: Objectives the Monte Carlo estimator understands. ``ml`` uses the oracle advantage
#: R/p - 1 with the true p (available only in simulation); the others go through
#: :func:`pipeline_lib.core.rl.advantages.group_advantages` exactly as in training.
MC_OBJECTIVES = ("ml", "grpo", "reinforce", "maxrl", "softmax")


def omega_monte_carlo(
    objective: str,
    M: int,
    p: float,
    n_groups: int,
    seed: int,
    tau: float | None = None,
) -> dict[str, float]:
    """Monte Carlo estimate of the expected update weight and of mean |A| at pass rate p.

    Draws ``n_groups`` groups of M Bernoulli(p) rewards. Because R_i is independent
    of the other rollouts, E[A_i grad log pi(z_i)] = omega(p) grad p with
    omega(p) = E[A_i (R_i - p)] / (p (1 - p)); that sample covariance is the
    unbiased estimator reported here, with its standard error.
    """
    if objective not in MC_OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose from {MC_OBJECTIVES}")
    if not 0 < p < 1:
        raise ValueError(f"Monte Carlo weight needs 0 < p < 1, got {p}")
    generator = torch.Generator().manual_seed(int(seed))
    rewards = (torch.rand((n_groups, M), generator=generator, dtype=torch.float64) < p).to(torch.float64)
    if objective == "ml":
        advantages = rewards / p - 1.0
    else:
        # the estimator's parameters by its dataclass's field names (softmax: tau), as a training run's are
        params = params_from(objective, {} if tau is None else {"tau": tau})
        group_ids = torch.arange(n_groups).repeat_interleave(M)
        advantages = group_advantages(objective, rewards.flatten(), group_ids, **params).view(n_groups, M)
    # One covariance sample per group (the mean over its members) keeps samples independent.
    per_group = (advantages * (rewards - p)).mean(dim=1) / (p * (1.0 - p))
    abs_per_group = advantages.abs().mean(dim=1)
    n = float(n_groups)
    return {
        "omega": float(per_group.mean()),
        "omega_se": float(per_group.std(unbiased=True) / math.sqrt(n)),
        "mean_abs_advantage": float(abs_per_group.mean()),
        "mean_abs_advantage_se": float(abs_per_group.std(unbiased=True) / math.sqrt(n)),
    }


def m_coefficients(t: ArrayLike, p: ArrayLike) -> FloatArray:
    """Expected M=2 SoftmaxGRPO coefficient per reward level, m_k = 2 sum_l p_l t_k/(t_k + t_l)."""
    t_arr = np.asarray(t, dtype=np.float64)
    p_arr = np.asarray(p, dtype=np.float64)
    pair = t_arr[:, None] / (t_arr[:, None] + t_arr[None, :])
    return 2.0 * pair @ p_arr


def nonconservative_cross_partials(t: ArrayLike) -> tuple[float, float]:
    """Cross partials of the M=2 three-level one-form on the simplex p3 = 1 - p1 - p2.

    Returns (d(m1 - m3)/dp2, d(m2 - m3)/dp1) (Eq. sage_nonconservative); equal values
    would make the one-form closed. m_k is linear in p, so the partials are exact.
    """
    t_arr = np.asarray(t, dtype=np.float64)
    if t_arr.shape != (3,) or np.any(t_arr <= 0):
        raise ValueError(f"need three positive exponentiated reward levels, got {t}")
    pair = t_arr[:, None] / (t_arr[:, None] + t_arr[None, :])
    # d m_k / d p_j on the simplex = 2 (pair[k, j] - pair[k, 3])
    grad = 2.0 * (pair[:, :2] - pair[:, 2:3])
    d13_dp2 = grad[0, 1] - grad[2, 1]
    d23_dp1 = grad[1, 0] - grad[2, 0]
    return float(d13_dp2), float(d23_dp1)


def ess(k: int, M: int, tau: float) -> float:
    """Within-group effective sample size with k of M correct (App. A.4), stable for small tau."""
    if not 0 <= k <= M:
        raise ValueError(f"need 0 <= k <= M, got k={k}, M={M}")
    if not (tau > 0):
        raise ValueError(f"temperature tau must be > 0, got {tau}")
    u, _ = _uv(tau)
    # (k c + M - k)^2 / (k c^2 + M - k), numerator and denominator divided by c^2
    return (k + (M - k) * u) ** 2 / (k + (M - k) * u * u)


def adaptive_tau(k: int, M: int, nu: float) -> float:
    """Temperature whose within-group ESS equals nu, for k of M correct (closed form, App. A.4)."""
    if not 0 < k < M:
        raise ValueError(f"adaptive tau needs 0 < k < M (all-equal groups carry no signal), got k={k}, M={M}")
    if not k < nu <= M:
        raise ValueError(f"target ESS nu must lie in (k, M] = ({k}, {M}], got {nu}")
    a = k * (M - k)
    c = (a + math.sqrt(a * nu * (M - nu))) / (k * (nu - k))
    return math.inf if c <= 1.0 else 1.0 / math.log(c)


def gaussian_log_partition(mu: float, sigma: float, tau: float) -> float:
    """log E[exp(R/tau)] for R ~ N(mu, sigma^2) (Eq. app_gaussian_objective)."""
    return mu / tau + sigma**2 / (2.0 * tau**2)


def gaussian_ess_ratio(sigma: float, tau: float) -> float:
    """Large-group ESS/M for Gaussian rewards, exp(-sigma^2/tau^2) (Eq. app_gaussian_ess)."""
    return math.exp(-(sigma**2) / tau**2)


def weight_function(name: str, M: int, tau: float | None = None) -> Callable[[ArrayLike], FloatArray]:
    """The population weight of a named objective as a function of p, for plots and tables."""
    if name == "ml":
        return omega_ml
    if name == "grpo":
        return omega_grpo
    if name == "reinforce":
        return omega_reinforce
    if name == "maxrl":
        return lambda p: omega_maxrl(M - 1, p)
    if name == "softmax":
        if tau is None:
            raise ValueError("weight function 'softmax' needs tau")
        return lambda p: omega_exact(M, tau, p)
    raise ValueError(f"unknown objective {name!r}")

