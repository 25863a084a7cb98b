"""verl 0.9.1 dispatches a run to its v1 (TransferQueue) trainer or to the legacy one on ``trainer.use_v1``; validation
runs the start-up of the path the run will take, and our agent-loop managers get the data type that trainer passes.

Which of our agent loops each path meets: RARO (own manager + loops) and RL-Logit (own loop under verl's manager) run
on the legacy trainer (``translate.LEGACY_TRAINER``), which hands the manager a ``DataProto`` with ``meta_info``;
GRPO/SoftmaxGRPO and OPD run on v1 with verl's own ``AgentLoopManagerTQ`` and ``single_turn_agent``, so no agent loop
or manager of ours receives v1's ``TensorDict`` (the v1 rows below check that validation refuses one that would).
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import numpy as np
import pytest

from pipeline_lib.core.model import build_model, save_model_atomic
from pipeline_lib.core.run_spec import RLSettings
from pipeline_lib.jobs.engines.local.rl_logit import answer_logprob_rewards
from pipeline_lib.jobs.engines.verl.translate import TrainPaths, rl_overrides
from pipeline_lib.jobs.engines.verl.validate import VerlOverrideError, compose, trainer_path, validate_rl
from pipeline_lib.jobs.methods.expert import split_reasoning
from pipeline_lib.plan.settings import group_rl_spec, rl_baseline_spec, with_variant
from tests.conftest import MODEL
from tests.jobs.engines.conftest import paper_config
from tests.jobs.engines.verl.conftest import PATHS, paper_baselines
from tests.tiny_rollout_server import TinyRolloutServer

RARO_MANAGER = "pipeline_lib.jobs.engines.verl.raro_loop.RaroAgentLoopManager"
TQ_MANAGER = "verl.trainer.ppo.v1.AgentLoopManagerTQ"


@pytest.fixture(scope="module")
def softmax_run():
    return rl_overrides(group_rl_spec(paper_baselines(), "gsm8k", "softmax_exact", "verl"), PATHS, 0)


@pytest.mark.parametrize("extra,message", [
    # the trainer-mode lookup exists on v1 only: the same key passes on legacy, fails on v1
    (["trainer.v1.trainer_mode=nonsense"], r"starting verl's v1 trainer.*Unknown trainer 'nonsense'"),
    (["trainer.use_v1=false", "trainer.v1.trainer_mode=nonsense"], None),
    # a legacy (DataProto) manager on v1, and v1's manager on legacy
    ([f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={RARO_MANAGER}"],
     r"v1 trainer.*RaroAgentLoopManager.*must be a verl AgentLoopManagerTQ"),
    (["trainer.use_v1=false", f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={TQ_MANAGER}"],
     r"legacy trainer.*AgentLoopManagerTQ.*must be a verl AgentLoopManager, not"),
    # TransferQueue's own start-up checks (sampler name) run for v1 runs
    (["+transfer_queue.controller.sampler=NoSuchSampler"], r"v1 trainer.*NoSuchSampler.*not a TransferQueue sampler"),
    (["trainer.use_v1=false", "+transfer_queue.controller.sampler=NoSuchSampler"], None),
])
def test_validation_runs_the_start_up_of_the_trainer_the_run_uses(softmax_run, extra, message):
    if message is None:
        assert trainer_path(validate_rl([*softmax_run, *extra], label="gsm8k/softmax_exact/seed0")) == "legacy"
        return
    with pytest.raises(VerlOverrideError, match=rf"(?s)gsm8k/softmax_exact/seed0.*{message}"):
        validate_rl([*softmax_run, *extra], label="gsm8k/softmax_exact/seed0")


def test_raro_on_the_v1_trainer_fails_validation():
    """Dropping RARO's legacy pin would hand its DataProto manager a TensorDict at step 1; validation says so."""
    overrides = rl_overrides(rl_baseline_spec(paper_baselines(("raro",)), "countdown", "raro", "verl"), PATHS, 0)
    assert trainer_path(validate_rl(overrides)) == "legacy"
    with pytest.raises(VerlOverrideError, match=r"(?s)v1 trainer.*RaroAgentLoopManager.*AgentLoopManagerTQ"):
        validate_rl([*overrides, "trainer.use_v1=true"])


@pytest.mark.slow
def test_verls_legacy_manager_runs_the_rl_logit_loop_on_the_dataproto_the_legacy_trainer_passes(tiny, tmp_path):
    """RL-Logit's run as composed for the paper (legacy path, verl's own ``AgentLoopManager``, our loop registered),
    two Ray agent-loop workers, a real tiny model as the rollout server, and a ``DataProto`` batch built as
    ``RayPPOTrainer`` builds it (``meta_info.global_steps``, uids, repeated ``n`` times): every rollout's reward
    (``rm_scores``) is the local engine's log pi(a* | q, z) of that rollout."""
    import ray
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.experimental.agent_loop import AgentLoopManager
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    tokenizer = AutoTokenizer.from_pretrained(tiny / "tok")
    model = build_model(tokenizer, MODEL | {"max_positions": 1024}, 0).eval()
    save_model_atomic(model, tokenizer, tmp_path / "init")
    paper = with_variant(rl_baseline_spec(paper_config(), "countdown", "rl_logit", "verl"), "logprob")
    spec = replace(paper, rl=RLSettings.from_flat({**paper.settings, "prompts_per_step": 2, "mini_batch_per_device": 2,
                                                   "gpus_per_node": 1, "nodes": 1, "group_size": 2,
                                                   "max_prompt_tokens": 128, "max_response_tokens": 16, "steps": 2},
                                                  "verl"))
    paths = TrainPaths(tmp_path / "run", tiny / "data/rl_train.parquet", tiny / "data/rl_test.parquet",
                       tmp_path / "init")
    workers = "actor_rollout_ref.rollout.agent.num_workers=2"
    config = compose("ppo_trainer", [*rl_overrides(spec, paths, seed=0), workers])
    assert trainer_path(config) == "legacy" and not config.actor_rollout_ref.rollout.agent.get(
        "agent_loop_manager_class")  # so RayPPOTrainer uses verl's AgentLoopManager
    dataset = RLHFDataset(str(paths.train_files), tokenizer, config.data)
    size, n = config.data.train_batch_size, config.actor_rollout_ref.rollout.n
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(size)]))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(size)], dtype=object)
    batch = batch.repeat(repeat_times=n, interleave=True)
    batch.meta_info["global_steps"] = 1
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        server = TinyRolloutServer(model, tokenizer.eos_token_id, spec.rl.max_response_tokens, seed=1)
        out = AgentLoopManager.create(config=config, llm_client=server).generate_sequences(batch)
    finally:
        ray.shutdown()
    assert isinstance(out, DataProto) and len(out) == size * n
    prompt_len = out.batch["prompts"].shape[1]
    rewards = out.batch["rm_scores"].sum(-1)
    assert bool((rewards < 0).all())  # log-probs of the expert answer, not the verifier's 0/1
    for row in range(len(out)):
        mask = out.batch["attention_mask"][row].bool()
        prompt_ids = out.batch["prompts"][row][mask[:prompt_len]].tolist()
        response_ids = out.batch["responses"][row][mask[prompt_len:]].tolist()
        reference = batch.non_tensor_batch["extra_info"][row]["reference"]
        reasoning = split_reasoning(tokenizer.decode(response_ids, skip_special_tokens=True))[0]
        expected, _ = answer_logprob_rewards(model, tokenizer, [prompt_ids], [reasoning],
                                             [split_reasoning(reference)[1]], "logprob")
        assert float(rewards[row]) == pytest.approx(float(expected[0]), rel=1e-4, abs=1e-4), row
