"""The verification report: every check passes on the real code and fails on a broken one."""

import pytest

from pipeline_lib.core.rl.advantages import group_advantages
from pipeline_lib.core.theory import checks, formulas
from pipeline_lib.core.theory.checks import CHECKS, VerificationSpec

SPEC = VerificationSpec(group_size=8, mc_groups=50_000, seed=0)


def scaled(fn, factor):
    return lambda *args, **kwargs: fn(*args, **kwargs) * factor


def softmax_registry(scale=1.0, tau_scale=1.0):
    """A broken registry: wrong advantage scale or wrong temperature for 'softmax'."""

    def broken(method, rewards, ids, **params):
        if method == "softmax":
            params = {**params, "tau": params["tau"] * tau_scale}
        return group_advantages(method, rewards, ids, **params) * (scale if method == "softmax" else 1.0)

    return broken


def ess_registry(fraction_scale=1.0, scale=1.0):
    """A broken registry: softmax_ess with a wrong target fraction or a wrong advantage scale."""

    def broken(method, rewards, ids, **params):
        if method != "softmax_ess":
            return group_advantages(method, rewards, ids, **params)
        params = {**params, "ess_fraction": min(params["ess_fraction"] * fraction_scale, 1 - 1e-12)}
        return group_advantages(method, rewards, ids, **params) * scale

    return broken


# check name -> (object to patch, attribute, replacement)
BREAKAGES = {
    "check_weights_centred": (checks, "group_advantages", softmax_registry(scale=1.001)),
    "check_exact_weight_mc": (formulas, "omega_exact", scaled(formulas.omega_exact, 1.05)),
    "check_delta_gap": (formulas, "delta_gap", scaled(formulas.delta_gap, 1 + 1e-6)),
    "check_bernstein_mc": (formulas, "omega_exact", scaled(formulas.omega_exact, 1.05)),
    "check_h_derivative": (formulas, "h_exact", scaled(formulas.h_exact, 1.01)),
    "check_easy_endpoint": (formulas, "omega_exact", scaled(formulas.omega_exact, 1.001)),
    "check_maxrl_limit": (formulas, "omega_maxrl", lambda T, p: theory_omega_maxrl(T + 1, p)),
    "check_maxrl_estimator": (formulas, "omega_maxrl", lambda T, p: theory_omega_maxrl(T + 1, p)),
    "check_mean_field": (formulas, "omega_mean_field", scaled(formulas.omega_mean_field, 1.01)),
    "check_high_temperature": (checks, "group_advantages", softmax_registry(scale=1.01)),
    "check_general_objective": (checks, "group_advantages", softmax_registry(tau_scale=2.0)),
    "check_nonconservative": (formulas, "nonconservative_cross_partials",
                              lambda t: tuple(1.01 * v for v in theory_cross_partials(t))),
    "check_variational": (checks, "group_advantages", softmax_registry(tau_scale=1.1)),
    "check_gaussian": (formulas, "gaussian_log_partition", lambda *a: theory_gaussian(*a) + 0.01),
    "check_noisy_envelope": (checks, "group_advantages", softmax_registry(tau_scale=0.5)),
    "check_noisy_omega": (formulas, "omega_exact", scaled(formulas.omega_exact, 1.5)),
    "check_ess": (formulas, "ess", scaled(formulas.ess, 1.001)),
    "check_ess_estimator_binary": (checks, "group_advantages", ess_registry(fraction_scale=1.001)),
    "check_ess_estimator_scalar": (checks, "group_advantages", ess_registry(fraction_scale=1.001)),
    "check_ess_reinforce_limit": (checks, "group_advantages", ess_registry(scale=1.01)),
    "check_ess_maxrl_limit": (checks, "group_advantages", ess_registry(fraction_scale=1.01)),
    "check_population_shapes": (formulas, "omega_grpo", lambda p: theory_omega_grpo(p) ** 2),
}
theory_omega_maxrl = formulas.omega_maxrl
theory_cross_partials = formulas.nonconservative_cross_partials
theory_gaussian = formulas.gaussian_log_partition
theory_omega_grpo = formulas.omega_grpo


def test_every_check_has_a_breakage():
    assert {check.__name__ for check in CHECKS} == set(BREAKAGES)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_check_passes_on_the_real_code(check):
    result = check(SPEC)
    assert result.passed, result


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_check_fails_when_its_subject_is_wrong(check, monkeypatch):
    target, attribute, replacement = BREAKAGES[check.__name__]
    monkeypatch.setattr(target, attribute, replacement)
    result = check(SPEC)
    assert not result.passed, result
