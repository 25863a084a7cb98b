"""Numerical verification of every equation of paper Sec. 3 and App. A.

Each check compares two independently computed quantities: a closed form from
:mod:`pipeline_lib.core.theory.formulas` against a Monte Carlo estimate, a finite difference,
the advantage registry, or a brute-force search. Tolerances are stated per
check (Monte Carlo ones as a multiple of the standard error plus any known
finite-M bias), so every row can fail if either side is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch

from pipeline_lib.core.rl.advantages import ess_group_tau, group_advantages
from pipeline_lib.core.theory import formulas

__all__ = ["CHECKS", "CheckResult", "VerificationSpec", "run_checks"]

Z_LIMIT = 5.0  # Monte Carlo checks pass within 5 standard errors


@dataclass(frozen=True)
class VerificationSpec:
    group_size: int = 8
    mc_groups: int = 200_000
    seed: int = 0


@dataclass(frozen=True)
class CheckResult:
    equation: str  # the paper's label
    claim: str
    method: str  # how the independent side was computed
    error: float  # the measured discrepancy
    tolerance: float
    passed: bool

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _result(equation: str, claim: str, method: str, error: float, tolerance: float) -> CheckResult:
    error = float(error)
    return CheckResult(equation, claim, method, error, float(tolerance),
                       bool(math.isfinite(error) and error <= tolerance))


def _z(diff: float, se: float) -> float:
    """|diff| in standard errors; a zero-variance estimator must match to rounding."""
    if se > 0:
        return abs(diff) / se
    return 0.0 if abs(diff) < 1e-12 else math.inf


def _groups(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flatten a [G, M] reward matrix into (rewards, group_ids)."""
    n_groups, size = values.shape
    return values.flatten(), torch.arange(n_groups).repeat_interleave(size)


def _softmax_adv(values: torch.Tensor, tau: float) -> torch.Tensor:
    rewards, ids = _groups(values)
    return group_advantages("softmax", rewards, ids, tau=tau).view(values.shape)


def check_weights_centred(spec: VerificationSpec) -> CheckResult:
    gen = torch.Generator().manual_seed(spec.seed)
    rewards = torch.rand((2000, spec.group_size), generator=gen, dtype=torch.float64)
    adv = _softmax_adv(rewards, tau=0.3)
    shifted = _softmax_adv(rewards + 7.5, tau=0.3)
    naive = spec.group_size * torch.softmax(rewards / 0.3, dim=1) - 1.0
    error = max(adv.sum(1).abs().max().item(), (adv - shifted).abs().max().item(), (adv - naive).abs().max().item())
    return _result("eq:sage_weights", "A_i = M softmax(R/tau)_i - 1 sums to 0 per group and ignores reward shifts",
                   "registry vs dense torch.softmax on 2,000 random groups, and after a +7.5 shift", error, 1e-9)


def check_delta_gap(spec: VerificationSpec) -> CheckResult:
    """The closed-form gap equals (success advantage) - (failure advantage) from the registry."""
    M, worst = spec.group_size, 0.0
    for tau in (0.05, 0.3, 1.0, 5.0):
        for s in range(M):
            with_success = torch.tensor([1.0] * (s + 1) + [0.0] * (M - s - 1), dtype=torch.float64)
            with_failure = torch.tensor([1.0] * s + [0.0] * (M - s), dtype=torch.float64)
            b_s = _softmax_adv(with_success[None], tau)[0, 0]
            a_s = _softmax_adv(with_failure[None], tau)[0, -1]
            worst = max(worst, abs(float(b_s - a_s) - float(formulas.delta_gap(M, tau, s))))
    return _result("eq:app_sage_delta", "Delta_s = b_s - a_s in closed form",
                   "advantages of a success/failure in explicit groups via the registry", worst, 1e-12)


def check_exact_weight_mc(spec: VerificationSpec) -> CheckResult:
    """Eq. sage_exact_weight through real score functions of a categorical policy."""
    M, tau = spec.group_size, 0.3
    logits = torch.tensor([0.4, -0.2, 0.9, 0.1, -0.7, 0.3], dtype=torch.float64)
    correct = torch.tensor([1, 1, 0, 0, 0, 0], dtype=torch.bool)
    probs = torch.softmax(logits, 0)
    p = float(probs[correct].sum())
    gen = torch.Generator().manual_seed(spec.seed + 1)
    actions = torch.multinomial(probs.expand(spec.mc_groups, -1), M, replacement=True, generator=gen)
    rewards = correct[actions].to(torch.float64)
    adv = _softmax_adv(rewards, tau)
    # grad log softmax(a) = onehot(a) - probs, so (1/M) sum_i A_i grad log pi(z_i) per group is:
    onehot_weight = torch.zeros(spec.mc_groups, len(logits), dtype=torch.float64).scatter_add_(1, actions, adv) / M
    per_group = onehot_weight - (adv.sum(1, keepdim=True) / M) * probs
    grad_p = probs * (correct.to(torch.float64) - p)
    expected = float(formulas.omega_exact(M, tau, p)) * grad_p
    z = (per_group.mean(0) - expected).abs() / (per_group.std(0) / math.sqrt(spec.mc_groups))
    return _result("eq:sage_exact_weight", "E[grad J_uc] = omega_{M,tau}(p) grad p",
                   f"score-function Monte Carlo, categorical policy, {spec.mc_groups} groups (max |z| over logits)",
                   z.max().item(), Z_LIMIT)


def check_bernstein_mc(spec: VerificationSpec) -> CheckResult:
    worst = 0.0
    for tau in (0.1, 1.0):
        for p in (0.1, 0.5, 0.9):
            mc = formulas.omega_monte_carlo("softmax", spec.group_size, p, spec.mc_groups, spec.seed + 2, tau=tau)
            worst = max(worst, _z(mc["omega"] - float(formulas.omega_exact(spec.group_size, tau, p)), mc["omega_se"]))
    return _result("eq:app_sage_bernstein", "omega_{M,tau} is the Bernstein polynomial of the gaps",
                   "binary-group Monte Carlo covariance estimator (max |z|, tau in {0.1,1}, p in {.1,.5,.9})",
                   worst, Z_LIMIT)


def check_h_derivative(spec: VerificationSpec) -> CheckResult:
    p = np.linspace(0.02, 0.98, 49)
    step = 1e-5
    worst, M = 0.0, spec.group_size
    for tau in (0.1, 0.3, 1.0, 10.0):
        fd = (formulas.h_exact(M, tau, p + step) - formulas.h_exact(M, tau, p - step)) / (2 * step)
        worst = max(worst, float(np.max(np.abs(fd - formulas.omega_exact(M, tau, p)))))
        worst = max(worst, abs(float(formulas.h_exact(M, tau, 0.0))))
    return _result("eq:app_sage_h_closed_form", "h'_{M,tau} = omega_{M,tau} and h(0) = 0",
                   "central finite differences of the incomplete-beta closed form", worst, 1e-6)


def check_easy_endpoint(spec: VerificationSpec) -> CheckResult:
    M = spec.group_size
    worst = max(abs(float(formulas.omega_exact(M, tau, 1.0)) - (1 - M / (1 + (M - 1) * math.exp(1 / tau))))
                for tau in (0.1, 0.3, 1.0, 10.0))
    return _result("eq:app_sage_easy_endpoint", "omega_{M,tau}(1) = 1 - M/(1 + (M-1)e^{1/tau}), finite",
                   "Bernstein form at p = 1 vs the endpoint formula", worst, 1e-12)


def check_maxrl_limit(spec: VerificationSpec) -> CheckResult:
    p = np.linspace(0.0, 1.0, 101)
    M = spec.group_size
    error = float(np.max(np.abs(formulas.omega_exact(M, 1e-3, p) - formulas.omega_maxrl(M - 1, p))))
    return _result("eq:sage_maxrl", "tau -> 0 gives MaxRL weighting with T = M - 1",
                   "omega_exact at tau = 1e-3 vs (1 - (1-p)^{M-1})/p on 101 points", error, 1e-9)


def check_maxrl_estimator(spec: VerificationSpec) -> CheckResult:
    worst = 0.0
    for p in (0.1, 0.5, 0.9):
        mc = formulas.omega_monte_carlo("maxrl", spec.group_size, p, spec.mc_groups, spec.seed + 3)
        worst = max(worst, _z(mc["omega"] - float(formulas.omega_maxrl(spec.group_size - 1, p)), mc["omega_se"]))
    return _result("tab:weight_view (MaxRL row)", "the MaxRL estimator with M rollouts has weight MaxRL(T = M - 1)",
                   "Monte Carlo of the registry's maxrl advantages (max |z|)", worst, Z_LIMIT)


def check_mean_field(spec: VerificationSpec) -> CheckResult:
    """The limit is not uniform at p -> 0 (it needs M p >> 1), so it is checked on p >= 0.1."""
    p = np.linspace(0.1, 1.0, 46)

    def gap(M: int) -> float:
        return max(float(np.max(np.abs(formulas.omega_exact(M, tau, p) / formulas.omega_mean_field(tau, p) - 1)))
                   for tau in (0.1, 0.3, 1.0))

    coarse, fine = gap(1024), gap(4096)
    return _result("eq:sage_weight_mf", "omega_{M,tau} -> (e^{1/tau}-1)/(1-p+pe^{1/tau}) as M grows",
                   f"max relative gap on p in [0.1, 1]: {coarse:.3g} at M=1024, {fine:.3g} at M=4096 "
                   "(must be < 1e-3 and shrink like 1/M)",
                   fine if fine < coarse / 3 else math.inf, 1e-3)


def check_high_temperature(spec: VerificationSpec) -> CheckResult:
    gen = torch.Generator().manual_seed(spec.seed + 4)
    rewards = torch.rand((500, spec.group_size), generator=gen, dtype=torch.float64)
    tau = 1e4
    adv_error = (tau * _softmax_adv(rewards, tau) - (rewards - rewards.mean(1, keepdim=True))).abs().max().item()
    M = spec.group_size
    omega_error = float(np.max(np.abs(tau * formulas.omega_exact(M, tau, np.linspace(0, 1, 11)) - (M - 1) / M)))
    return _result("eq:app_sage_hitemp", "tau A_i -> R_i - mean(R) and tau omega -> (M-1)/M as tau -> inf",
                   f"registry and Bernstein form at tau = {tau:g} (error is O(1/tau))",
                   max(adv_error, omega_error), 10.0 / tau)


def _categorical_group_update(logits: torch.Tensor, rewards: torch.Tensor, M: int, tau: float, n_groups: int,
                              seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(logits, 0)
    gen = torch.Generator().manual_seed(seed)
    total = torch.zeros_like(probs)
    total_sq = torch.zeros_like(probs)
    chunk = max(1, 2_000_000 // M)
    done = 0
    while done < n_groups:
        size = min(chunk, n_groups - done)
        actions = torch.multinomial(probs.expand(size, -1), M, replacement=True, generator=gen)
        adv = _softmax_adv(rewards[actions], tau)
        per_group = torch.zeros(size, len(probs), dtype=torch.float64).scatter_add_(1, actions, adv) / M
        per_group -= (adv.sum(1, keepdim=True) / M) * probs
        total += per_group.sum(0)
        total_sq += per_group.square().sum(0)
        done += size
    mean = total / n_groups
    se = torch.sqrt((total_sq / n_groups - mean.square()) / n_groups)
    return mean, se


def check_general_objective(spec: VerificationSpec) -> CheckResult:
    """Large-M SoftmaxGRPO on scalar rewards follows grad log Z_tau (Eq. sage_general_objective)."""
    logits = torch.tensor([0.3, -0.5, 0.8, 0.0, -0.2], dtype=torch.float64)
    rewards = torch.tensor([0.0, 0.25, 0.5, 0.8, 1.0], dtype=torch.float64)
    tau = 0.5
    probs = torch.softmax(logits, 0)
    weights = torch.exp(rewards / tau)
    target = probs * (weights / (probs * weights).sum() - 1.0)  # grad_theta log Z for softmax logits
    errors = []
    for M in (8, 512):
        mean, _ = _categorical_group_update(logits, rewards, M, tau, max(2000, spec.mc_groups // M * 4), spec.seed + 5)
        errors.append(float((mean - target).norm() / target.norm()))
    # The finite-M bias is O(1/M): at M = 512 the relative error must be small and far below M = 8's.
    return _result("eq:sage_general_objective",
                   "lim_M E[grad J_uc] = grad log Z_tau for bounded scalar rewards",
                   f"categorical-policy Monte Carlo; relative error {errors[0]:.3g} at M=8, {errors[1]:.3g} at M=512",
                   errors[1], min(0.02, errors[0] / 4))


def check_nonconservative(spec: VerificationSpec) -> CheckResult:
    t = np.array([1.0, 2.0, 4.0])
    d13, d23 = formulas.nonconservative_cross_partials(t)
    step = 1e-6
    base = np.array([0.3, 0.3, 0.4])

    def diff(k: int, j: int) -> float:  # d(m_k - m_3)/dp_j along the simplex (p_3 absorbs the change)
        up, down = base.copy(), base.copy()
        up[j] += step
        up[2] -= step
        down[j] -= step
        down[2] += step
        m_up, m_down = formulas.m_coefficients(t, up), formulas.m_coefficients(t, down)
        return ((m_up[k] - m_up[2]) - (m_down[k] - m_down[2])) / (2 * step)

    error = max(abs(d13 + 1 / 15), abs(d23 - 1 / 15), abs(diff(0, 1) - d13), abs(diff(1, 0) - d23))
    return _result("eq:sage_nonconservative", "cross partials are -1/15 and 1/15 for t = (1, 2, 4): not closed",
                   "closed form vs the paper's values vs finite differences of m_k", error, 1e-8)


def check_variational(spec: VerificationSpec) -> CheckResult:
    gen = torch.Generator().manual_seed(spec.seed + 6)
    M, tau = spec.group_size, 0.3
    rewards = torch.rand(M, generator=gen, dtype=torch.float64)
    w = (_softmax_adv(rewards[None], tau)[0] + 1.0) / M

    def objective(q: torch.Tensor) -> torch.Tensor:
        kl = (q * torch.log(q * M)).sum(-1)
        return (q * rewards).sum(-1) - tau * kl

    best = objective(w).item()
    closed = tau * math.log(torch.exp(rewards / tau).mean().item())
    candidates = torch.distributions.Dirichlet(torch.ones(M, dtype=torch.float64)).sample((100_000,))
    excess = max(0.0, objective(candidates).max().item() - best)
    return _result("eq:sage_variational", "w = argmax_q sum q R - tau KL(q || uniform), value tau log mean e^{R/tau}",
                   "objective at w vs its closed-form optimum and vs 100,000 Dirichlet candidates",
                   max(abs(best - closed), excess), 1e-12)


def check_gaussian(spec: VerificationSpec) -> CheckResult:
    gen = torch.Generator().manual_seed(spec.seed + 7)
    mu, sigma, tau = 0.4, 0.1, 0.3
    samples = mu + sigma * torch.randn(spec.mc_groups * 4, generator=gen, dtype=torch.float64)
    x = torch.exp(samples / tau)
    log_z = math.log(x.mean().item())
    log_z_se = (x.std() / x.mean()).item() / math.sqrt(len(x))
    ess_ratio = (x.mean().square() / x.square().mean()).item()
    ess_se = 2 * (x.square().std() / x.square().mean()).item() / math.sqrt(len(x))  # delta-method bound
    z = max(abs(log_z - formulas.gaussian_log_partition(mu, sigma, tau)) / log_z_se,
            abs(ess_ratio - formulas.gaussian_ess_ratio(sigma, tau)) / ess_se)
    return _result("eq:app_gaussian_objective / eq:app_gaussian_ess",
                   "log Z = mu/tau + sigma^2/(2 tau^2) and ESS/M -> exp(-sigma^2/tau^2)",
                   "Monte Carlo over Gaussian rewards (max |z|)", z, Z_LIMIT)


def check_noisy_envelope(spec: VerificationSpec) -> CheckResult:
    gen = torch.Generator().manual_seed(spec.seed + 8)
    M, tau, delta = spec.group_size, 0.3, 0.05
    clean = (torch.rand((20_000, M), generator=gen) < 0.4).to(torch.float64)
    noise = (torch.rand((20_000, M), generator=gen, dtype=torch.float64) * 2 - 1) * delta
    w_clean = (_softmax_adv(clean, tau) + 1) / M
    w_noisy = (_softmax_adv(clean + noise, tau) + 1) / M
    log_ratio = (w_noisy / w_clean).log().abs().max().item()
    return _result("eq:app_noisy_envelope", "e^{-2 delta/tau} w0 <= w_noisy <= e^{2 delta/tau} w0",
                   "largest |log(w_noisy / w_clean)| over 20,000 noisy groups vs the bound 2 delta/tau",
                   log_ratio, 2 * delta / tau)


def check_noisy_omega(spec: VerificationSpec) -> CheckResult:
    M, tau, delta, p = spec.group_size, 0.3, 0.03, 0.4
    gen = torch.Generator().manual_seed(spec.seed + 9)
    clean = (torch.rand((spec.mc_groups, M), generator=gen, dtype=torch.float64) < p).to(torch.float64)
    noise = (torch.rand((spec.mc_groups, M), generator=gen, dtype=torch.float64) * 2 - 1) * delta
    adv_noisy = _softmax_adv(clean + noise, tau)
    per_group = (adv_noisy * (clean - p)).mean(1) / (p * (1 - p))
    omega_noisy = per_group.mean().item()
    se = per_group.std().item() / math.sqrt(spec.mc_groups)
    # |A_noisy - A_clean| <= M w0 (e^{2 delta/tau} - 1), which bounds |omega_noisy - omega| as below.
    w_clean = (_softmax_adv(clean, tau) + 1) / M
    bound = ((M * w_clean * (math.exp(2 * delta / tau) - 1) * (clean - p).abs()).mean(1) / (p * (1 - p))).mean().item()
    gap = abs(omega_noisy - float(formulas.omega_exact(M, tau, p)))
    return _result("eq:app_noisy_omega", "noisy binary weight stays within O(delta/tau) of omega_{M,tau}",
                   f"Monte Carlo gap {gap:.4g} vs envelope bound {bound:.4g} + {Z_LIMIT:g} SE",
                   gap, bound + Z_LIMIT * se)


def check_ess(spec: VerificationSpec) -> CheckResult:
    M, worst = spec.group_size, 0.0
    for k in range(1, M):
        for tau in (0.1, 0.5, 2.0):
            rewards = torch.tensor([1.0] * k + [0.0] * (M - k), dtype=torch.float64)
            w = (_softmax_adv(rewards[None], tau)[0] + 1) / M
            worst = max(worst, abs(formulas.ess(k, M, tau) - 1 / w.square().sum().item()))
        for nu in np.linspace(k + 0.05, M - 0.05, 7):
            worst = max(worst, abs(formulas.ess(k, M, formulas.adaptive_tau(k, M, float(nu))) - nu))
    return _result("app:tau_kl (adaptive tau)", "ESS(k, c) formula and its closed-form inverse hit the target ESS",
                   "1/sum w^2 from registry weights; ESS at adaptive_tau(k, M, nu) vs nu", worst, 1e-9)


def _ess_adv(values: torch.Tensor, fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax_ess advantages and chosen tau of a [G, M] reward matrix, through the registry."""
    rewards, ids = _groups(values)
    adv = group_advantages("softmax_ess", rewards, ids, ess_fraction=fraction).view(values.shape)
    return adv, ess_group_tau(rewards, ids, fraction).view(values.shape)[:, 0]


def _weights_ess(advantages: torch.Tensor) -> torch.Tensor:
    """Within-group ESS 1 / sum w^2 of each row, from the weights w = (A + 1) / M the advantages encode."""
    w = (advantages + 1) / advantages.shape[1]
    return 1 / w.square().sum(1)


def check_ess_estimator_binary(spec: VerificationSpec) -> CheckResult:
    gen = torch.Generator().manual_seed(spec.seed + 13)
    M, worst, checked = spec.group_size, 0.0, 0
    for fraction in (0.3, 0.5, 0.75, 0.95):
        values = (torch.rand((2000, M), generator=gen, dtype=torch.float64) < torch.rand((2000, 1), generator=gen,
                                                                                          dtype=torch.float64)).double()
        adv, tau = _ess_adv(values, fraction)
        k = values.sum(1)
        reachable = (k > 0) & (fraction * M > k)
        checked += int(reachable.sum())
        worst = max(worst, (_weights_ess(adv[reachable]) - fraction * M).abs().max().item())
        closed = torch.tensor([formulas.adaptive_tau(int(kk), M, fraction * M) for kk in k[reachable].tolist()],
                              dtype=torch.float64)
        worst = max(worst, ((tau[reachable] - closed).abs() / closed).max().item())
    return _result("app:tau_kl (softmax_ess, binary)",
                   "the softmax_ess estimator hits the target ESS nu = fM with tau = 1/log c of the closed form",
                   f"ESS of registry weights vs nu, and tau vs adaptive_tau(k, M, nu), {checked} reachable random "
                   "binary groups, f in {0.3, 0.5, 0.75, 0.95} (max abs ESS / relative tau error)", worst, 1e-9)


def check_ess_estimator_scalar(spec: VerificationSpec) -> CheckResult:
    gen = torch.Generator().manual_seed(spec.seed + 14)
    M, worst = spec.group_size, 0.0
    # Continuous rewards have one rollout at the top, so every target fM > 1 is reachable.
    for fraction in [f for f in (0.3, 0.5, 0.75, 0.95) if f * M > 1]:
        values = torch.rand((2000, M), generator=gen, dtype=torch.float64) ** 3 * 5.0  # skewed, range up to 5
        adv, _ = _ess_adv(values, fraction)
        worst = max(worst, (_weights_ess(adv) - fraction * M).abs().max().item())
    return _result("app:tau_kl (softmax_ess, scalar)",
                   "for scalar rewards the vectorised bisection finds the tau with ESS = nu in every group",
                   "ESS of registry weights vs nu on 2,000 random continuous groups per f in {0.3, 0.5, 0.75, 0.95} "
                   "(max abs error)", worst, 1e-9)


def check_ess_reinforce_limit(spec: VerificationSpec) -> CheckResult:
    gen = torch.Generator().manual_seed(spec.seed + 15)
    M = spec.group_size
    scalar = torch.rand((500, M), generator=gen, dtype=torch.float64)
    binary = (torch.rand((500, M), generator=gen, dtype=torch.float64) < 0.5).double()
    binary = binary[(binary.sum(1) > 0) & (binary.sum(1) < M)]
    worst, bound = 0.0, 0.0
    for values in (scalar, binary):
        adv, tau = _ess_adv(values, 1 - 1e-9)
        centred = values - values.mean(1, keepdim=True)
        worst = max(worst, (tau[:, None] * adv - centred).abs().max().item())
        bound = max(bound, 10.0 / tau.min().item())
    return _result("app:tau_kl (softmax_ess, nu -> M)",
                   "nu -> M sends tau -> inf and tau A_i -> R_i - mean(R): REINFORCE with the group baseline",
                   "registry at f = 1 - 1e-9 on random scalar and binary groups (error is O(1/tau))", worst, bound)


def check_ess_maxrl_limit(spec: VerificationSpec) -> CheckResult:
    M, delta, worst = spec.group_size, 1e-6, 0.0
    for k in range(1, M):
        values = torch.tensor([[1.0] * k + [0.0] * (M - k)], dtype=torch.float64)
        adv, _ = _ess_adv(values, (k + delta) / M)
        maxrl = group_advantages("maxrl", *_groups(values), eps=0.0).view(values.shape)
        worst = max(worst, (adv - maxrl).abs().max().item())
    return _result("app:tau_kl (softmax_ess, nu -> k+)",
                   "nu just above k sends tau -> 0 and the advantages to MaxRL's R / p_hat - 1 (low-temperature limit)",
                   f"registry at nu = k + {delta:g} vs the maxrl estimator, k = 1..M-1 (error ~ M delta / (2 k^2))",
                   worst, M * delta)


def check_population_shapes(spec: VerificationSpec) -> CheckResult:
    """REINFORCE is flat, ML is 1/p and large-M GRPO is proportional to 1/sqrt(p(1-p))."""
    M, worst = spec.group_size, 0.0
    for p in (0.2, 0.5, 0.8):
        reinforce = formulas.omega_monte_carlo("reinforce", M, p, spec.mc_groups, spec.seed + 10)
        ml = formulas.omega_monte_carlo("ml", M, p, spec.mc_groups, spec.seed + 11)
        worst = max(worst, _z(reinforce["omega"] - (M - 1) / M, reinforce["omega_se"]),
                    _z(ml["omega"] - float(formulas.omega_ml(p)), ml["omega_se"]))
    big = 256
    ratios = [formulas.omega_monte_carlo("grpo", big, p, max(2000, spec.mc_groups // 32), spec.seed + 12)["omega"]
              / float(formulas.omega_grpo(p)) for p in (0.2, 0.35, 0.5, 0.65, 0.8)]
    spread = (max(ratios) - min(ratios)) / float(np.mean(ratios))
    return _result("tab:weight_view", "REINFORCE weight (M-1)/M, ML weight 1/p, GRPO shape [p(1-p)]^{-1/2}",
                   f"Monte Carlo |z| for REINFORCE/ML (max {worst:.2f} <= {Z_LIMIT:g}); GRPO ratio spread at M={big}",
                   spread if worst <= Z_LIMIT else math.inf, 0.03)


CHECKS: tuple[Callable[[VerificationSpec], CheckResult], ...] = (
    check_weights_centred,
    check_exact_weight_mc,
    check_delta_gap,
    check_bernstein_mc,
    check_h_derivative,
    check_easy_endpoint,
    check_maxrl_limit,
    check_maxrl_estimator,
    check_mean_field,
    check_high_temperature,
    check_general_objective,
    check_nonconservative,
    check_variational,
    check_gaussian,
    check_noisy_envelope,
    check_noisy_omega,
    check_ess,
    check_ess_estimator_binary,
    check_ess_estimator_scalar,
    check_ess_reinforce_limit,
    check_ess_maxrl_limit,
    check_population_shapes,
)


def run_checks(spec: VerificationSpec) -> list[CheckResult]:
    return [check(spec) for check in CHECKS]
