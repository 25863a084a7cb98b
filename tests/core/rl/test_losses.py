"""PPO-clip + KL loss: the paper's normaliser, clipping, KL estimators and gradients."""

import pytest
import torch

from pipeline_lib.core.rl.advantages import broadcast_to_tokens
from pipeline_lib.core.rl.losses import PolicyLossConfig, aggregate, kl_estimate, policy_loss

MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float64)
GROUPS = torch.tensor([0, 0, 1, 1])


def random_logprobs(seed: int, requires_grad: bool = False) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    lp = -torch.rand(MASK.shape, generator=gen, dtype=torch.float64) * 3
    return lp.requires_grad_(requires_grad)


def test_group_token_mean_is_the_papers_normaliser():
    values = torch.arange(16, dtype=torch.float64).view(4, 4)
    # group 0 has 3 + 2 tokens, group 1 has 4 + 1 tokens
    g0 = (0 + 1 + 2 + 4 + 5) / 5
    g1 = (8 + 9 + 10 + 11 + 12) / 5
    assert aggregate(values, MASK, "group-token-mean", GROUPS).item() == pytest.approx((g0 + g1) / 2)
    real_tokens = [0, 1, 2, 4, 5, 8, 9, 10, 11, 12]
    assert aggregate(values, MASK, "token-mean").item() == pytest.approx(sum(real_tokens) / 10)
    assert aggregate(values, MASK, "seq-mean-token-mean").item() == pytest.approx((1 + 4.5 + 9.5 + 12) / 4)
    assert aggregate(values, MASK, "seq-mean-token-sum").item() == pytest.approx((3 + 9 + 38 + 12) / 4)
    with pytest.raises(ValueError, match="group_ids"):
        aggregate(values, MASK, "group-token-mean")


def test_zero_advantages_and_no_kl_give_zero_gradient():
    lp = random_logprobs(0, requires_grad=True)
    out = policy_loss(lp, random_logprobs(1), torch.zeros(4, dtype=torch.float64), MASK,
                      PolicyLossConfig(beta=0.0), group_ids=GROUPS)
    out.loss.backward()
    assert torch.count_nonzero(lp.grad) == 0


def test_on_policy_gradient_is_the_unclipped_estimator():
    """At theta = theta_old clipping is inactive: grad = -sum_g sum_i A_i sum_t grad log pi / (G * T_g)."""
    old = random_logprobs(2)
    lp = old.clone().requires_grad_(True)
    adv = torch.tensor([1.5, -0.5, 0.25, -2.0], dtype=torch.float64)
    policy_loss(lp, old, adv, MASK, PolicyLossConfig(beta=0.0), group_ids=GROUPS).loss.backward()
    group_tokens = torch.tensor([5.0, 5.0, 5.0, 5.0], dtype=torch.float64)
    expected = -broadcast_to_tokens(adv, MASK) / group_tokens[:, None] / 2
    torch.testing.assert_close(lp.grad, expected)


def test_clipping_stops_gradient_outside_the_asymmetric_trust_region():
    old = torch.zeros(1, 4, dtype=torch.float64)
    mask = torch.ones(1, 4, dtype=torch.float64)
    ratios = torch.tensor([[1.5, 1.1, 0.7, 0.9]], dtype=torch.float64)
    cfg = PolicyLossConfig(clip_low=0.2, clip_high=0.28, beta=0.0, aggregation="token-mean")
    lp = ratios.log().requires_grad_(True)
    out = policy_loss(lp, old, torch.tensor([1.0]), mask, cfg)
    out.loss.backward()
    # A > 0: ratio 1.5 > 1.28 is clipped (no gradient); 0.7 < 0.8 is not clipped for A > 0 (min picks unclipped)
    assert lp.grad[0, 0] == 0 and lp.grad[0, 1] != 0 and lp.grad[0, 2] != 0
    assert out.clip_fraction == pytest.approx(0.25)
    lp2 = ratios.log().requires_grad_(True)
    out2 = policy_loss(lp2, old, torch.tensor([-1.0]), mask, cfg)
    out2.loss.backward()
    # A < 0: ratio 0.7 < 0.8 is clipped; 1.5 keeps its gradient (pessimistic bound)
    assert lp2.grad[0, 2] == 0 and lp2.grad[0, 0] != 0
    assert out2.clip_fraction == pytest.approx(0.25)


def test_dual_clip_bounds_negative_advantage_loss():
    old = torch.zeros(1, 1, dtype=torch.float64)
    lp = torch.tensor([[5.0]], dtype=torch.float64)  # ratio e^5 >> 3
    base = PolicyLossConfig(beta=0.0, aggregation="token-mean")
    unbounded = policy_loss(lp, old, torch.tensor([-1.0]), torch.ones(1, 1), base).loss
    bounded = policy_loss(lp, old, torch.tensor([-1.0]), torch.ones(1, 1),
                          PolicyLossConfig(beta=0.0, aggregation="token-mean", dual_clip_c=3.0)).loss
    assert unbounded.item() == pytest.approx(torch.exp(torch.tensor(5.0)).item())
    assert bounded.item() == pytest.approx(3.0)


def test_kl_estimators():
    lp = torch.tensor([-1.0, -2.0, -0.5], dtype=torch.float64)
    ref = torch.tensor([-1.5, -1.0, -0.5], dtype=torch.float64)
    d = lp - ref
    torch.testing.assert_close(kl_estimate(lp, ref, "k1"), d)
    torch.testing.assert_close(kl_estimate(lp, ref, "k2"), 0.5 * d**2)
    torch.testing.assert_close(kl_estimate(lp, ref, "low_var_kl"), torch.exp(-d) + d - 1)
    assert (kl_estimate(lp, ref, "k3") >= 0).all()
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_estimate(lp, ref, "k9")


def test_k3_is_unbiased_for_the_true_kl():
    """E_{x ~ pi}[k3] = KL(pi || ref) on a categorical distribution."""
    pi = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    ref = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    expected = (pi * (pi / ref).log()).sum()
    estimate = (pi * kl_estimate(pi.log(), ref.log(), "k3")).sum()
    torch.testing.assert_close(estimate, expected)


def test_kl_term_is_added_with_beta_and_reported():
    lp, old, ref = random_logprobs(3, True), random_logprobs(3), random_logprobs(4)
    adv = torch.zeros(4, dtype=torch.float64)
    out = policy_loss(lp, old, adv, MASK, PolicyLossConfig(beta=0.1), group_ids=GROUPS, ref_log_prob=ref)
    kl = aggregate(kl_estimate(lp, ref, "k3"), MASK, "group-token-mean", GROUPS)
    torch.testing.assert_close(out.loss, 0.1 * kl)
    torch.testing.assert_close(out.kl, kl.detach())
    with pytest.raises(ValueError, match="ref_log_prob"):
        policy_loss(lp, old, adv, MASK, PolicyLossConfig(beta=0.1), group_ids=GROUPS)


@pytest.mark.parametrize("kwargs, match", [
    ({"clip_low": 1.0}, "clip_low"), ({"beta": -1.0}, "beta"), ({"kl_estimator": "k7"}, "kl_estimator"),
    ({"aggregation": "mean"}, "aggregation"), ({"dual_clip_c": 0.5}, "dual_clip_c"),
])
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PolicyLossConfig(**kwargs)


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="share one"):
        policy_loss(random_logprobs(0), random_logprobs(1)[:2], torch.zeros(4), MASK, PolicyLossConfig(beta=0))
