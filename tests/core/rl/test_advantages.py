"""Advantage registry: definitions, invariances, limits, stability and errors."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_lib.core.rl.advantages import available_estimators, broadcast_to_tokens, group_advantages

PARAMS = {"softmax": {"tau": 0.3}, "sage": {"tau": 0.3}}


def naive(estimator: str, rewards: np.ndarray, ids: np.ndarray, tau: float = 0.3, eps: float = 1e-6) -> np.ndarray:
    """Per-group Python reference, written straight from the definitions."""
    out = np.zeros_like(rewards)
    for gid in np.unique(ids):
        members = np.flatnonzero(ids == gid)
        r = rewards[members]
        m = len(r)
        if m == 1:
            continue
        if estimator in ("softmax", "sage"):
            e = np.exp((r - r.max()) / tau)
            out[members] = m * e / e.sum() - 1
        elif estimator == "grpo":
            out[members] = (r - r.mean()) / (r.std(ddof=1) + eps)
        elif estimator in ("dr_grpo", "reinforce"):
            out[members] = r - r.mean()
        elif estimator == "rloo":
            out[members] = [r[i] - np.delete(r, i).mean() for i in range(m)]
        elif estimator == "maxrl":
            out[members] = (r - r.mean()) / (r.mean() + eps)
        else:
            raise AssertionError(estimator)
    return out


groups = st.lists(
    st.tuples(st.integers(-50, 50), st.floats(0.0, 1.0, allow_nan=False)), min_size=1, max_size=60
)


def test_registry_lists_the_paper_estimators():
    assert {"softmax", "grpo", "dr_grpo", "rloo", "reinforce", "maxrl"} <= set(available_estimators())


@pytest.mark.parametrize("estimator", ["softmax", "grpo", "dr_grpo", "rloo", "reinforce", "maxrl"])
@settings(max_examples=60, deadline=None)
@given(data=groups)
def test_matches_per_group_reference(estimator, data):
    ids = np.array([g for g, _ in data])
    rewards = np.array([r for _, r in data], dtype=np.float64)
    got = group_advantages(estimator, torch.tensor(rewards), torch.tensor(ids), **PARAMS.get(estimator, {}))
    np.testing.assert_allclose(got.numpy(), naive(estimator, rewards, ids), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("estimator", ["softmax", "grpo", "dr_grpo", "rloo", "reinforce", "maxrl"])
@settings(max_examples=40, deadline=None)
@given(data=groups)
def test_advantages_sum_to_zero_per_group(estimator, data):
    ids = torch.tensor([g for g, _ in data])
    adv = group_advantages(estimator, torch.tensor([r for _, r in data], dtype=torch.float64), ids,
                           **PARAMS.get(estimator, {}))
    for gid in ids.unique():
        assert abs(adv[ids == gid].sum().item()) < 1e-9


@pytest.mark.parametrize("estimator", ["softmax", "grpo", "dr_grpo", "rloo", "reinforce"])
@settings(max_examples=40, deadline=None)
@given(data=groups, shift=st.floats(-100, 100))
def test_shift_invariance(estimator, data, shift):
    ids = torch.tensor([g for g, _ in data])
    rewards = torch.tensor([r for _, r in data], dtype=torch.float64)
    base = group_advantages(estimator, rewards, ids, **PARAMS.get(estimator, {}))
    moved = group_advantages(estimator, rewards + shift, ids, **PARAMS.get(estimator, {}))
    torch.testing.assert_close(base, moved, atol=1e-6, rtol=0)


def test_maxrl_is_not_shift_invariant_but_binary_exact():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    ids = torch.zeros(4, dtype=torch.long)
    adv = group_advantages("maxrl", rewards, ids, eps=0.0)
    torch.testing.assert_close(adv, rewards / 0.5 - 1)  # R / p_hat - 1


def test_low_temperature_is_best_of_group():
    rewards = torch.tensor([0.2, 0.9, 0.9, 0.1, 0.5, 0.7, 0.3, 0.7], dtype=torch.float64)
    ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv = group_advantages("softmax", rewards, ids, tau=1e-4)
    expected = torch.tensor([-1, 1, 1, -1, -1, 1, -1, 1], dtype=torch.float64)  # M/k - 1 with M=4, k=2
    torch.testing.assert_close(adv, expected)


def test_high_temperature_is_centred_reward_over_tau():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(64, generator=gen, dtype=torch.float64)
    ids = torch.arange(64) // 8
    tau = 1e5
    adv = group_advantages("softmax", rewards, ids, tau=tau)
    centred = group_advantages("reinforce", rewards, ids)
    torch.testing.assert_close(adv * tau, centred, atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_softmax_is_stable_at_extremes(dtype):
    gen = torch.Generator().manual_seed(1)
    rewards = (torch.rand(512, generator=gen, dtype=torch.float64) * 2000 - 1000).to(dtype)
    ids = torch.arange(512) // 16
    for tau in (1e-4, 1e-2, 1.0, 1e4):
        adv = group_advantages("softmax", rewards, ids, tau=tau)
        assert torch.isfinite(adv).all()
        assert adv.dtype == dtype
        assert (adv >= -1).all() and (adv <= 15 + 1e-3).all()  # A in [-1, M - 1]


@pytest.mark.parametrize("estimator", ["softmax", "grpo", "dr_grpo", "rloo", "reinforce", "maxrl"])
def test_singletons_and_equal_groups_get_exactly_zero(estimator):
    rewards = torch.tensor([0.7, 0.3, 0.3, 0.3, 5.0, 1.0, 1.0])
    ids = torch.tensor([9, 4, 4, 4, -3, 2, 2])
    adv = group_advantages(estimator, rewards, ids, **PARAMS.get(estimator, {}))
    assert torch.equal(adv, torch.zeros(7))


def test_group_ids_need_not_be_contiguous_or_sorted():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    a = group_advantages("softmax", rewards, torch.tensor([7, 1000, 7, 1000, 7, 1000]), tau=0.5)
    b = group_advantages("softmax", rewards, torch.tensor([0, 1, 0, 1, 0, 1]), tau=0.5)
    assert torch.equal(a, b)


@pytest.mark.parametrize("tau", [0.0, -1.0, math.inf, math.nan])
def test_bad_temperature_is_a_clear_error(tau):
    with pytest.raises(ValueError, match="tau"):
        group_advantages("softmax", torch.ones(4), torch.zeros(4, dtype=torch.long), tau=tau)


def test_errors_name_the_problem():
    rewards, ids = torch.ones(4), torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="unknown advantage estimator 'gpro'"):
        group_advantages("gpro", rewards, ids)
    with pytest.raises(TypeError, match="unknown parameter"):
        group_advantages("grpo", rewards, ids, tau=0.1)
    with pytest.raises(TypeError, match="tau"):
        group_advantages("softmax", rewards, ids)
    with pytest.raises(ValueError, match="equal length"):
        group_advantages("grpo", rewards, ids[:3])
    with pytest.raises(ValueError, match=r"non-finite at rollout index \[2\]"):
        group_advantages("grpo", torch.tensor([0.0, 1.0, math.nan, 1.0]), ids)
    with pytest.raises(TypeError, match="integer"):
        group_advantages("grpo", rewards, ids.float())


def test_empty_batch_returns_empty():
    assert group_advantages("softmax", torch.empty(0), torch.empty(0, dtype=torch.long), tau=1.0).numel() == 0


def test_broadcast_to_tokens_zeroes_padding():
    adv = torch.tensor([2.0, -1.0])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert torch.equal(broadcast_to_tokens(adv, mask), torch.tensor([[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="response_mask"):
        broadcast_to_tokens(adv, mask[:1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=40), st.integers(-5, 5),
       st.sampled_from([torch.int64, torch.int32]), st.booleans())
def test_group_index_skips_the_sort_only_where_it_gives_what_unique_gives(runs, start, dtype, shuffle):
    """Ids laid out as consecutive runs (a, a, a+1, ...) take the path without torch.unique's sort; gaps, repeats
    out of order and shuffles take unique. The inverse is the same tensor either way."""
    from pipeline_lib.core.rl.advantages import GroupIndex, _dense_sorted_inverse

    ids = torch.tensor([start + i for i, run in enumerate(runs) for _ in range(run)], dtype=dtype)
    if ids.numel() == 0:
        return
    if shuffle:
        ids = ids[torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(len(runs)))]
    expected = torch.unique(ids, return_inverse=True)[1]
    index = GroupIndex.from_ids(ids, torch.float64)
    assert index.inverse.dtype == torch.int64 and torch.equal(index.inverse, expected)
    assert torch.equal(index.counts, torch.bincount(expected).double()) and index.n_groups == int(expected.max()) + 1
    assert _dense_sorted_inverse(torch.arange(5).repeat_interleave(8) + start) is not None  # the rollout layout
    assert _dense_sorted_inverse(torch.tensor([0, 0, 2, 2])) is None  # a gap: unique renumbers it
    assert _dense_sorted_inverse(torch.tensor([1, 1, 0, 0])) is None  # out of order: unique sorts it
