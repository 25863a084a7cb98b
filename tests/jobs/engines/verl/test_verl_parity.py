"""Engine parity on one batch: the advantages and the policy loss verl computes (its own compute_advantage with our
registered estimators, compute_policy_loss_vanilla, kl_penalty and agg_loss, on CPU tensors) equal the local engine's
(pipeline_lib.core.rl.advantages.group_advantages and pipeline_lib.core.rl.losses.policy_loss), for every estimator of
the registry.

Tolerance: float32 tensors; advantages of our own estimators are bit-identical (verl calls our function), verl's
GRPO / Dr.GRPO / RLOO agree to 1e-5 absolute and relative (the same formula summed in another order); the losses to
1e-6 absolute and 1e-5 relative.
"""

from dataclasses import replace

import pytest
import torch
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.utils.config import omega_conf_to_dataclass

from pipeline_lib.core.rl.advantages import broadcast_to_tokens, group_advantages
from pipeline_lib.core.rl.losses import PolicyLossConfig, policy_loss
from pipeline_lib.jobs.engines.verl.estimators import group_index
from pipeline_lib.jobs.engines.verl.translate import TrainPaths, rl_overrides
from pipeline_lib.jobs.engines.verl.validate import validate_rl
from pipeline_lib.plan import ADVANTAGE_ESTIMATORS, Estimator
from pipeline_lib.plan.settings import group_rl_spec
from tests.conftest import rollout_batch
from tests.jobs.engines.conftest import paper_config

#: Each estimator's parameters (the paper's tau values; App. A's ESS fraction).
PARAMS = {"softmax": {"tau": 0.1}, "sage": {"tau": 0.3}, "softmax_ess": {"ess_fraction": 0.5}}
#: verl's aggregations that the local engine also has (group-token-mean, the local default, has no verl counterpart).
SHARED_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def verl_run_config(method: str, aggregation: str):
    """The composed verl config of a paper GSM8K run with this estimator and aggregation, as the trainer gets it."""
    base = group_rl_spec(paper_config(), "gsm8k", "grpo_exact", "verl")
    spec = replace(base, estimator=Estimator(method, dict(PARAMS.get(method, {}))),
                   rl=replace(base.rl, aggregation=aggregation))
    paths = TrainPaths("/r/run", "/r/train.parquet", "/r/test.parquet", "/r/sft/final")
    return spec, validate_rl(rl_overrides(spec, paths, seed=0), label=f"parity {method}")


def local_loss_config(spec) -> PolicyLossConfig:
    """The local engine's loss settings for the same run (engines/local/rl.py builds it from these keys)."""
    rl = spec.rl
    return PolicyLossConfig(clip_low=rl.clip_low, clip_high=rl.clip_high, beta=rl.beta, kl_estimator=rl.kl_estimator,
                            aggregation=rl.aggregation)


def log_probs(mask: torch.Tensor, seed: int, max_drift: float):
    """Current, old and reference per-token log-probs, |log ratio| up to ``max_drift`` (ratios on both clip sides)."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(mask.shape, generator=gen) * 3
    current = old + (torch.rand(mask.shape, generator=gen) * 2 - 1) * max_drift
    reference = old + (torch.rand(mask.shape, generator=gen) * 2 - 1) * 0.5
    return current, old, reference


def verl_loss(verl_config, data, current, old, reference):
    """verl's actor loss as workers/utils/losses.ppo_loss assembles it: policy loss + kl_loss_coef x agg(kl)."""
    actor = omega_conf_to_dataclass(verl_config.actor_rollout_ref.actor)
    mask = data.batch["response_mask"].bool()
    loss_fn = get_policy_loss_fn(actor.policy_loss.get("loss_mode", "vanilla"))
    pg_loss, _ = loss_fn(old_log_prob=old, log_prob=current, advantages=data.batch["advantages"], response_mask=mask,
                         loss_agg_mode=actor.loss_agg_mode, config=actor)
    assert actor.use_kl_loss
    kl = agg_loss(loss_mat=kl_penalty(current, reference, actor.kl_loss_type), loss_mask=mask,
                  loss_agg_mode=actor.loss_agg_mode, **actor.global_batch_info)
    return pg_loss + actor.kl_loss_coef * kl, actor


@pytest.mark.parametrize("aggregation", SHARED_AGGREGATIONS)
@pytest.mark.parametrize("method", sorted(ADVANTAGE_ESTIMATORS))
def test_verl_and_the_local_engine_compute_the_same_advantages_and_loss_on_one_batch(method, aggregation):
    spec, verl_config = verl_run_config(method, aggregation)
    algorithm = verl_config.algorithm
    data, scores, uids, mask = rollout_batch(seed=len(method), binary=False)
    data = compute_advantage(data, adv_estimator=algorithm.adv_estimator, gamma=algorithm.gamma, lam=algorithm.lam,
                             num_repeat=6, norm_adv_by_std_in_grpo=algorithm.get("norm_adv_by_std_in_grpo", True),
                             config=algorithm)
    local_advantages = group_advantages(method, scores, group_index(uids), **PARAMS.get(method, {}))
    entry = ADVANTAGE_ESTIMATORS[method]
    if not entry.ours and entry.verl in ("grpo", "rloo"):  # verl's own estimators
        torch.testing.assert_close(data.batch["advantages"], broadcast_to_tokens(local_advantages, mask),
                                   rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(data.batch["advantages"], broadcast_to_tokens(local_advantages, mask))

    current, old, reference = log_probs(mask, seed=len(method) + 1, max_drift=0.6)  # ratios 0.55..1.8: both clips
    expected, actor = verl_loss(verl_config, data, current, old, reference)
    ours = policy_loss(current, old, local_advantages, mask, local_loss_config(spec), ref_log_prob=reference)
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.kl_loss_coef) == (
        spec.rl.clip_low, spec.rl.clip_high, spec.rl.beta)
    assert ours.clip_fraction > 0  # the clipped branch is exercised
    torch.testing.assert_close(ours.loss, expected, rtol=1e-5, atol=1e-6)


def test_large_ratios_agree_too_verls_dual_clip_being_off_as_the_local_engines():
    """verl bounds a negative advantage's loss at clip_ratio_c x |A| (default 3); the local engine only with
    dual_clip_c. The paper runs set clip_ratio_c = 1e9 (the authors' config), so with ratios up to e^2 the losses still
    agree; at verl's default they agree with dual_clip_c = 3, and not without it."""
    spec, verl_config = verl_run_config("softmax", "token-mean")
    algorithm = verl_config.algorithm
    data, scores, uids, mask = rollout_batch(seed=5, binary=False)
    data = compute_advantage(data, adv_estimator=algorithm.adv_estimator, num_repeat=6, config=algorithm)
    current, old, reference = log_probs(mask, seed=6, max_drift=2.0)  # ratios up to e^2 > 3
    advantages = group_advantages("softmax", scores, group_index(uids), tau=0.1)
    plain = policy_loss(current, old, advantages, mask, local_loss_config(spec), ref_log_prob=reference)
    expected, actor = verl_loss(verl_config, data, current, old, reference)
    assert actor.clip_ratio_c == 1e9
    torch.testing.assert_close(plain.loss, expected, rtol=1e-5, atol=1e-6)

    verl_config.actor_rollout_ref.actor.clip_ratio_c = 3.0  # verl's default
    expected, actor = verl_loss(verl_config, data, current, old, reference)
    assert not torch.allclose(plain.loss, expected, rtol=1e-5, atol=1e-6)
    config = PolicyLossConfig(**{**local_loss_config(spec).__dict__, "dual_clip_c": actor.clip_ratio_c})
    dual = policy_loss(current, old, advantages, mask, config, ref_log_prob=reference)
    torch.testing.assert_close(dual.loss, expected, rtol=1e-5, atol=1e-6)
