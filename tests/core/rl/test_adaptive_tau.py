"""softmax_ess: SoftmaxGRPO with a per-group temperature set by a target effective sample size (paper App. A).

The reference below is written per group from the definitions, with scipy's root finder for scalar rewards and
the paper's closed form (``formulas.adaptive_tau``) for binary ones, so it shares no code with the estimator.
"""

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq

from pipeline_lib.core.rl.advantages import (
    ESS_BISECTION_STEPS,
    advantage_diagnostics,
    ess_group_tau,
    group_advantages,
)
from pipeline_lib.core.theory import formulas


def reference(rewards: np.ndarray, ids: np.ndarray, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-group advantages and tau (NaN = no signal, 0 = the tau -> 0+ limit), straight from the definitions."""
    adv, taus = np.zeros_like(rewards), np.full_like(rewards, np.nan)
    for gid in np.unique(ids):
        members = np.flatnonzero(ids == gid)
        r = rewards[members]
        m, top, spread = len(r), r.max(), r.max() - r.min()
        if spread == 0:
            continue
        n_top, nu = int((r == top).sum()), fraction * m
        if nu <= n_top:
            tau = 0.0
            adv[members] = m * (r == top) / n_top - 1
        else:
            if len(np.unique(r)) == 2:
                tau = spread * formulas.adaptive_tau(n_top, m, nu)
            else:
                def gap(log_tau: float, r: np.ndarray = r, top: float = top, nu: float = nu) -> float:
                    w = np.exp((r - top) / math.exp(log_tau))
                    return w.sum() ** 2 / (w * w).sum() - nu

                tau = math.exp(brentq(gap, math.log(spread) - 40, math.log(spread) + 30, xtol=1e-14, rtol=1e-15))
            e = np.exp((r - top) / tau)
            adv[members] = m * e / e.sum() - 1
        taus[members] = tau
    return adv, taus


def ess_of(advantages: torch.Tensor) -> torch.Tensor:
    """ESS = 1 / sum w^2 of each row of [G, M] advantages, w = (A + 1) / M."""
    w = (advantages + 1) / advantages.shape[1]
    return 1 / w.square().sum(1)


def flat(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return values.flatten(), torch.arange(values.shape[0]).repeat_interleave(values.shape[1])


reward = st.sampled_from([0.0, 0.25, 0.5, 1.0]) | st.integers(0, 1000).map(lambda i: i / 1000)
groups = st.lists(st.tuples(st.integers(0, 6), reward), min_size=1, max_size=48)


@settings(max_examples=80, deadline=None)
@given(data=groups, fraction=st.floats(0.05, 0.99))
def test_matches_the_per_group_reference(data, fraction):
    """Binary, three-level, tied, singleton and all-equal groups in one batch, in any order."""
    ids = np.array([g for g, _ in data])
    rewards = np.array([r for _, r in data], dtype=np.float64)
    got = group_advantages("softmax_ess", torch.tensor(rewards), torch.tensor(ids), ess_fraction=fraction)
    tau = ess_group_tau(torch.tensor(rewards), torch.tensor(ids), fraction)
    want_adv, want_tau = reference(rewards, ids, fraction)
    np.testing.assert_allclose(got.numpy(), want_adv, rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(tau.numpy(), want_tau, rtol=1e-7, atol=0)  # NaN where the reference has NaN


def test_batch_equals_each_group_alone():
    gen = torch.Generator().manual_seed(0)
    binary = (torch.rand(40, 8, generator=gen, dtype=torch.float64) < 0.3).double()
    scalar = torch.rand(40, 8, generator=gen, dtype=torch.float64)
    values = torch.cat([binary, scalar])[torch.randperm(80, generator=gen)]
    rewards, ids = flat(values)
    batch = group_advantages("softmax_ess", rewards, ids, ess_fraction=0.6).view(80, 8)
    batch_tau = ess_group_tau(rewards, ids, 0.6).view(80, 8)
    for g in range(80):
        alone = group_advantages("softmax_ess", values[g], torch.zeros(8, dtype=torch.long), ess_fraction=0.6)
        torch.testing.assert_close(batch[g], alone, rtol=0, atol=1e-12)
        torch.testing.assert_close(batch_tau[g], ess_group_tau(values[g], torch.zeros(8, dtype=torch.long), 0.6),
                                   rtol=1e-12, atol=0, equal_nan=True)


def test_the_number_of_tensor_ops_does_not_depend_on_the_number_of_groups():
    """Vectorised: no Python loop over groups or rollouts (the bisection loop is a fixed count)."""
    from torch.overrides import TorchFunctionMode

    class Count(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    counts = []
    for n_groups in (3, 300):
        gen = torch.Generator().manual_seed(n_groups)
        rewards, ids = flat(torch.rand(n_groups, 8, generator=gen, dtype=torch.float64))
        Count.calls = 0
        with Count():
            group_advantages("softmax_ess", rewards, ids, ess_fraction=0.5)
        counts.append(Count.calls)
    assert counts[0] == counts[1] > ESS_BISECTION_STEPS


@pytest.mark.parametrize("binary", [True, False])
def test_the_target_ess_is_achieved(binary):
    gen = torch.Generator().manual_seed(1)
    size = 16
    for fraction in (0.3, 0.5, 0.8, 0.999):
        values = torch.rand(500, size, generator=gen, dtype=torch.float64)
        values = (values < 0.2).double() if binary else values
        adv = group_advantages("softmax_ess", *flat(values), ess_fraction=fraction).view(values.shape)
        top = values == values.max(1, keepdim=True).values
        reachable = (fraction * size > top.sum(1)) & (values.max(1).values > values.min(1).values)
        assert reachable.sum() > 50
        torch.testing.assert_close(ess_of(adv[reachable]), torch.full((int(reachable.sum()),), fraction * size,
                                                                      dtype=torch.float64), rtol=0, atol=1e-9)


def test_binary_tau_is_the_papers_closed_form_and_scales_with_the_reward_range():
    M, fraction = 8, 0.6
    for k in range(1, M):
        for low, high in ((0.0, 1.0), (-2.0, 3.0)):
            rewards = torch.tensor([high] * k + [low] * (M - k), dtype=torch.float64)
            tau = ess_group_tau(rewards, torch.zeros(M, dtype=torch.long), fraction)
            if fraction * M > k:
                assert tau[0].item() == pytest.approx((high - low) * formulas.adaptive_tau(k, M, fraction * M),
                                                      rel=1e-12)
            else:
                assert tau[0].item() == 0.0


def test_bisection_agrees_with_the_closed_form_on_binary_groups():
    """The scalar solve, run on two-level groups, returns the closed-form temperature."""
    from pipeline_lib.core.rl.advantages import GroupIndex, _bisect_log_beta

    M = 8
    rewards = torch.tensor([[1.0] * k + [0.0] * (M - k) for k in range(1, M)], dtype=torch.float64)
    r, ids = flat(rewards)
    index = GroupIndex.from_ids(ids, torch.float64)
    for fraction in (0.9, 0.97):
        nu = torch.full((M - 1,), fraction * M, dtype=torch.float64)
        tau = torch.exp(-_bisect_log_beta(r - 1.0, nu, index))
        want = torch.tensor([formulas.adaptive_tau(k, M, fraction * M) for k in range(1, M)], dtype=torch.float64)
        torch.testing.assert_close(tau, want, rtol=1e-10, atol=0)


def test_all_equal_and_singleton_groups_get_zero_and_no_tau():
    rewards = torch.tensor([0.7, 0.7, 0.7, 0.0, 0.0, 0.4, 1.0, 0.2], dtype=torch.float64)
    ids = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3])
    adv = group_advantages("softmax_ess", rewards, ids, ess_fraction=0.9)
    assert torch.equal(adv[:6], torch.zeros(6, dtype=torch.float64))
    assert adv[6] > 0 > adv[7]
    chosen = advantage_diagnostics("softmax_ess", rewards, ids, ess_fraction=0.9)
    assert chosen["tau"][:6] == [None] * 6 and chosen["tau"][6] > 0
    json.dumps(chosen, allow_nan=False)  # JSON-ready: no NaN reaches rollouts.jsonl


def test_unreachable_target_takes_the_zero_temperature_limit():
    """Binary: pass rate >= ess_fraction is exactly MaxRL's R / p_hat - 1; scalar: uniform over the tied best."""
    M = 8
    binary = torch.tensor([[1.0] * k + [0.0] * (M - k) for k in range(4, M)], dtype=torch.float64)
    adv = group_advantages("softmax_ess", *flat(binary), ess_fraction=0.5)
    maxrl = group_advantages("maxrl", *flat(binary), eps=0.0)
    torch.testing.assert_close(adv, maxrl, rtol=0, atol=1e-15)
    assert ess_group_tau(*flat(binary), 0.5).eq(0).all()
    scalar = torch.tensor([0.9, 0.9, 0.3, 0.1], dtype=torch.float64)
    adv = group_advantages("softmax_ess", scalar, torch.zeros(4, dtype=torch.long), ess_fraction=0.5)
    assert adv.tolist() == [1.0, 1.0, -1.0, -1.0]


def test_limits_reinforce_as_nu_approaches_group_size_and_maxrl_just_above_k():
    gen = torch.Generator().manual_seed(2)
    values = torch.rand(200, 8, generator=gen, dtype=torch.float64)
    rewards, ids = flat(values)
    adv = group_advantages("softmax_ess", rewards, ids, ess_fraction=1 - 1e-9).view(values.shape)
    tau = ess_group_tau(rewards, ids, 1 - 1e-9).view(values.shape)
    centred = values - values.mean(1, keepdim=True)
    assert tau.min() > 1e3
    assert (tau * adv - centred).abs().max() < 10 / tau.min()  # tau A -> R - mean(R), error O(1/tau)
    M = 8
    for k in range(1, M):
        binary = torch.tensor([1.0] * k + [0.0] * (M - k), dtype=torch.float64)
        near = group_advantages("softmax_ess", binary, torch.zeros(M, dtype=torch.long), ess_fraction=(k + 1e-7) / M)
        torch.testing.assert_close(near, binary * M / k - 1, rtol=0, atol=1e-6)


def test_affine_invariance_and_gradient_free_output():
    gen = torch.Generator().manual_seed(3)
    values = torch.rand(50, 6, generator=gen, dtype=torch.float64)
    rewards, ids = flat(values)
    base = group_advantages("softmax_ess", rewards, ids, ess_fraction=0.5)
    torch.testing.assert_close(group_advantages("softmax_ess", 3.5 * rewards - 2.0, ids, ess_fraction=0.5), base,
                               rtol=0, atol=1e-10)
    torch.testing.assert_close(ess_group_tau(3.5 * rewards - 2.0, ids, 0.5), 3.5 * ess_group_tau(rewards, ids, 0.5),
                               rtol=1e-10, atol=0)
    # tau is chosen from rewards, which carry no policy gradient: the advantages are constants of the loss.
    leaf = rewards.clone().requires_grad_(True)
    assert not group_advantages("softmax_ess", leaf, ids, ess_fraction=0.5).requires_grad


def test_float32_rewards_keep_their_dtype():
    gen = torch.Generator().manual_seed(4)
    values = torch.rand(30, 8, generator=gen)
    rewards, ids = flat(values)
    adv32 = group_advantages("softmax_ess", rewards, ids, ess_fraction=0.5)
    assert adv32.dtype == torch.float32
    torch.testing.assert_close(adv32, group_advantages("softmax_ess", rewards.double(), ids, ess_fraction=0.5).float())


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5, math.nan, math.inf])
def test_the_fraction_must_lie_strictly_between_zero_and_one(fraction):
    with pytest.raises(ValueError, match="0 < ess_fraction < 1"):
        group_advantages("softmax_ess", torch.tensor([0.0, 1.0]), torch.tensor([0, 0]), ess_fraction=fraction)


def test_parameters_are_checked_and_methods_without_choices_report_none():
    with pytest.raises(TypeError, match=r"unknown parameter\(s\) \['tau'\].*\['ess_fraction'\]"):
        group_advantages("softmax_ess", torch.tensor([0.0, 1.0]), torch.tensor([0, 0]), tau=0.1)
    with pytest.raises(TypeError, match="missing"):
        group_advantages("softmax_ess", torch.tensor([0.0, 1.0]), torch.tensor([0, 0]))
    assert advantage_diagnostics("softmax", torch.tensor([0.0, 1.0]), torch.tensor([0, 0]), tau=0.1) == {}
    assert ess_group_tau(torch.zeros(0), torch.zeros(0, dtype=torch.long), 0.5).numel() == 0


def test_verl_estimator_through_compute_advantage_equals_group_advantages():
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from pipeline_lib.core.rl.advantages import broadcast_to_tokens
    from pipeline_lib.jobs.engines.verl.estimators import group_index
    from pipeline_lib.jobs.engines.verl.validate import compose
    from tests.conftest import rollout_batch

    for binary in (True, False):
        algorithm = compose("ppo_trainer", ["algorithm.adv_estimator=softmax_ess",
                                            "+algorithm.ess_fraction=0.6"]).algorithm
        data, scores, uids, mask = rollout_batch(seed=5 + binary, binary=binary)
        out = compute_advantage(data, adv_estimator=algorithm.adv_estimator, gamma=algorithm.gamma,
                                lam=algorithm.lam, num_repeat=6, config=algorithm)
        expected = group_advantages("softmax_ess", scores, group_index(uids), ess_fraction=0.6)
        assert torch.equal(out.batch["advantages"], broadcast_to_tokens(expected, mask))
        assert expected.abs().sum() > 0
    without = compose("ppo_trainer", ["algorithm.adv_estimator=softmax_ess"]).algorithm
    with pytest.raises(ValueError, match=r"needs algorithm.ess_fraction.*\+algorithm.ess_fraction="):
        compute_advantage(data, adv_estimator="softmax_ess", config=without)


def test_local_rl_records_the_chosen_tau_per_rollout(tiny, tmp_path):
    from pipeline_lib.jobs.engines.local import rl as rl_module
    from tests.conftest import rl_spec

    spec = rl_spec("softmax_ess", {"ess_fraction": 0.5}, steps=2)
    rl_module.train_rl(spec, tiny / "data/rl_train.parquet", tiny / "init", tmp_path, 0, progress=False)
    for line in (tmp_path / "rollouts.jsonl").read_text().splitlines():
        record = json.loads(line)
        rewards, ids = torch.tensor(record["reward"], dtype=torch.float64), torch.tensor(record["group"])
        assert len(record["tau"]) == len(record["reward"])
        want = ess_group_tau(rewards, ids, 0.5).tolist()
        assert [None if math.isnan(t) else pytest.approx(t, rel=1e-6) for t in want] == record["tau"]

