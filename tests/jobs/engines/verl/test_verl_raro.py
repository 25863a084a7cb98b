"""RARO on the verl engine (issue 8) on CPU: the policy and critic agent loops against a rollout server backed by a
real tiny model, the replay buffer, the batch layout, and the paper's RARO runs through verl's own config checks."""

import asyncio
import json
from dataclasses import replace

import hydra
import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap

from pipeline_lib.core.model import build_model, encode_prompts, pack, response_logprobs
from pipeline_lib.core.run_spec import RLSettings
from pipeline_lib.jobs.engines.verl import raro_loop
from pipeline_lib.jobs.engines.verl.raro_loop import (
    AGENT_LOOP_CONFIG,
    CRITIC_LOOP,
    POLICY_LOOP,
    MixSchedule,
    RaroCriticLoop,
    RaroDataset,
    RaroLoopSettings,
    RaroPolicyLoop,
    ReplayBuffer,
    check_training_data,
)
from pipeline_lib.jobs.engines.verl.translate import TrainPaths, raro_replay_dir, rl_overrides
from pipeline_lib.jobs.engines.verl.validate import VerlOverrideError, planned_runs, validate_rl
from pipeline_lib.jobs.methods.raro import VERDICTS, critic_messages, parse_verdict
from pipeline_lib.plan.settings import engine_settings, rl_baseline_spec
from tests.conftest import MODEL
from tests.jobs.engines.conftest import paper_config
from tests.tiny_rollout_server import TinyRolloutServer

QUESTION = [{"role": "user", "content": "Using the numbers [9, 5, 5], make 19."}]
EXPERT = "<answer>(9 + 5) + 5</answer>"
SYSTEM = "You are a critic."
RESPONSE_LENGTH = 24
# distinct values, so each verdict's reward is recognisable
POLICY_TABLE = {"policy_better": 1.0, "tie": 0.25, "expert_better": -1.0, "invalid": -0.5}
CRITIC_TABLE = {"expert_better": 2.0, "tie": 0.5, "policy_better": -2.0, "invalid": -0.75}


@pytest.fixture(scope="module")
def tokenizer(tiny):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny / "tok")


def ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def fit(tokenizer, pairs, steps=60):
    """A real tiny model trained to reply ``reply`` to each of ``pairs``' prompts (greedy decoding then repeats it)."""
    model = build_model(tokenizer, MODEL, 0)
    prompts = encode_prompts(tokenizer, [p for p, _ in pairs])
    batch = pack(prompts, [[*ids(tokenizer, r), tokenizer.eos_token_id] for _, r in pairs], tokenizer.pad_token_id)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        loss = -response_logprobs(model, *batch).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def judged(answer, reply):
    """The policy answers QUESTION with ``answer``; as critic it replies ``reply`` whatever the order."""
    question = QUESTION[0]["content"]
    return [(QUESTION, answer)] + [(critic_messages(SYSTEM, question, *order), reply)
                                   for order in ((EXPERT, answer), (answer, EXPERT))]


@pytest.fixture(scope="module")
def says_one(tokenizer):
    return fit(tokenizer, judged("<answer>19</answer>", "<answer>1</answer>"))


@pytest.fixture(scope="module")
def says_tie(tokenizer):
    return fit(tokenizer, judged("<answer>19</answer>", "<answer>tie</answer>"))


def trainer_config(state_dir=None, prompt_length=240):
    return OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"prompt_length": prompt_length, "response_length": RESPONSE_LENGTH}},
        "data": {"seed": 5}, "trainer": {"save_freq": 2},
        "raro": {"critic_system_prompt": SYSTEM, "critic_max_new_tokens": 8, "replay_size": 4,
                 "rewards": {"policy": POLICY_TABLE, "critic": CRITIC_TABLE}, "state_dir": state_dir}})


def agent_loop(name, tokenizer, server, replay, config=None):
    """The loop as verl's AgentLoopWorker builds it: hydra-instantiated from the registry file we hand verl."""
    config = config or trainer_config()
    entries = {entry.name: entry for entry in OmegaConf.load(AGENT_LOOP_CONFIG)}
    return hydra.utils.instantiate(entries[name], trainer_config=DictConfigWrap(config), server_manager=server,
                                   tokenizer=tokenizer, processor=None, hf_model_type=None, dataset_cls=None,
                                   data_config=DictConfigWrap(config.data), tools=ToolListWrap([]), replay=replay)


def row(index, uid="u0", slot=-1, reference=EXPERT):
    return {"raw_prompt": QUESTION, "index": index, "uid": uid, "raro_slot": slot,
            "extra_info": {"index": index, "split": "train", "reference": reference}}


PARAMS = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "logprobs": False}


def expert_position(tokenizer, prompt_ids, answer):
    """1 or 2: where EXPERT stands in a critic prompt (as built by the local engine's critic_messages)."""
    question = QUESTION[0]["content"]
    for position, order in ((1, (EXPERT, answer)), (2, (answer, EXPERT))):
        if list(prompt_ids) == encode_prompts(tokenizer, [critic_messages(SYSTEM, question, *order)])[0]:
            return position
    raise AssertionError("the request is not a critic prompt of (EXPERT, answer)")


# --- the policy loop: reward = rewards.policy[critic verdict] ---------------------------------------------------------

def run_policy(tokenizer, model, indices, buffer):
    server = TinyRolloutServer(model, tokenizer.eos_token_id, RESPONSE_LENGTH)

    async def go():
        await buffer.begin_step(1)
        return [await agent_loop(POLICY_LOOP, tokenizer, server, buffer).run(dict(PARAMS), **row(i))
                for i in indices]

    return asyncio.run(go()), server


def test_policy_reward_follows_the_outcome_table_for_each_verdict(tokenizer, says_one, says_tie):
    buffer = ReplayBuffer(size=4, seed=5)
    assert isinstance(agent_loop(POLICY_LOOP, tokenizer, None, buffer), RaroPolicyLoop)
    outs, server = run_policy(tokenizer, says_one, range(8), buffer)
    seen = set()
    for k, out in enumerate(outs):
        rollout, critic = server.calls[2 * k], server.calls[2 * k + 1]
        answer = tokenizer.decode(out.response_ids, skip_special_tokens=True)
        assert answer == "<answer>19</answer>" and rollout["prompt_ids"] == out.prompt_ids
        assert critic["sampling_params"]["max_tokens"] == 8  # critic_max_new_tokens
        # the critic said "1": the policy fooled it exactly when its own answer was shown first
        verdict = "expert_better" if expert_position(tokenizer, critic["prompt_ids"], answer) == 1 else "policy_better"
        assert out.reward_score == POLICY_TABLE[verdict]
        assert out.extra_fields["reward_extra_info"]["raro_critic_row"] == 0
        seen.add(verdict)
    assert seen == {"expert_better", "policy_better"}  # the seeded order puts the expert first and second
    assert sorted(p["index"] for p in buffer.pending) == list(range(8))  # every answer is kept for replay

    outs, _ = run_policy(tokenizer, says_tie, range(2), ReplayBuffer(size=4, seed=5))
    assert [o.reward_score for o in outs] == [POLICY_TABLE["tie"]] * 2
    untrained = build_model(tokenizer, MODEL, 1).eval()
    outs, _ = run_policy(tokenizer, untrained, range(2), ReplayBuffer(size=4, seed=5))
    for out in outs:  # a model that never learnt the format: every verdict invalid
        assert out.reward_score == POLICY_TABLE["invalid"]
        assert out.extra_fields["reward_extra_info"]["raro_verdict"] == VERDICTS.index("invalid")


def test_policy_order_is_seeded_not_by_arrival(tokenizer):
    async def orders(buffer, calls):
        await buffer.begin_step(1)
        return [await buffer.add(i, "q", "e", a) for i, a in calls]

    calls = [(i, f"answer {j}") for i in range(6) for j in range(3)]
    first = asyncio.run(orders(ReplayBuffer(4, seed=1), calls))
    again = asyncio.run(orders(ReplayBuffer(4, seed=1), calls[::-1]))
    assert first == again[::-1] and 0 < sum(first) < len(first)
    assert first != asyncio.run(orders(ReplayBuffer(4, seed=2), calls))


# --- the critic loop: every rollout of a row judges the same pair -----------------------------------------------------

def run_critic_group(tokenizer, model, buffer, rows, step=1):
    server = TinyRolloutServer(model, tokenizer.eos_token_id, RESPONSE_LENGTH)

    async def go():
        await buffer.begin_step(step)
        return await asyncio.gather(*(agent_loop(CRITIC_LOOP, tokenizer, server, buffer).run(dict(PARAMS), **r)
                                      for r in rows))

    return asyncio.run(go()), server


def test_all_rollouts_of_a_critic_row_see_one_fresh_pair(tokenizer, says_one):
    buffer = ReplayBuffer(size=4, seed=5)
    assert isinstance(agent_loop(CRITIC_LOOP, tokenizer, None, buffer), RaroCriticLoop)
    outs, server = run_critic_group(tokenizer, says_one, buffer, [row(3, uid="g", slot=0)] * 4)
    fresh = [c for c in server.calls if c["prompt_ids"] == encode_prompts(tokenizer, [QUESTION])[0]]
    assert len(fresh) == 1 and len(server.calls) == 5  # one policy answer written, four verdicts
    assert len({tuple(o.prompt_ids) for o in outs}) == 1  # the same pair, in the same order
    expert_first = bool(outs[0].extra_fields["reward_extra_info"]["raro_expert_first"])
    position = expert_position(tokenizer, outs[0].prompt_ids, "<answer>19</answer>")
    assert position == (1 if expert_first else 2)
    verdict = parse_verdict(tokenizer.decode(outs[0].response_ids, skip_special_tokens=True), expert_first)
    assert verdict == ("expert_better" if expert_first else "policy_better")
    assert [o.reward_score for o in outs] == [CRITIC_TABLE[verdict]] * 4
    assert all(o.extra_fields["reward_extra_info"]["raro_replayed"] == 0 for o in outs)
    assert buffer.pending == []  # a critic row's fresh answer is not a policy rollout: not replayed later


def test_replay_rows_take_distinct_buffered_pairs_and_share_them_within_the_row(tokenizer, says_one):
    buffer = ReplayBuffer(size=4, seed=5)

    async def fill():
        await buffer.begin_step(1)
        for i in range(3):
            await buffer.add(i, QUESTION[0]["content"], EXPERT, f"<answer>{i}</answer>")
        await buffer.end_step(1)

    asyncio.run(fill())
    rows = [row(7, uid="a", slot=0)] * 3 + [row(8, uid="b", slot=1)] * 3 + [row(9, uid="c", slot=-1)] * 3
    outs, server = run_critic_group(tokenizer, says_one, buffer, rows, step=2)
    assert len(server.calls) == 9 + 1  # nine verdicts, one fresh answer (row c)
    prompts = [{tuple(o.prompt_ids) for o in outs[k:k + 3]} for k in (0, 3, 6)]
    assert all(len(p) == 1 for p in prompts) and len(set().union(*prompts)) == 3
    replayed = [tokenizer.decode(next(iter(p)), skip_special_tokens=True) for p in prompts[:2]]
    pairs = [buffer.pairs[int(buffer.order[slot])]["answer"] for slot in (0, 1)]
    assert all(answer in text for answer, text in zip(pairs, replayed, strict=True))
    assert [o.extra_fields["reward_extra_info"]["raro_replayed"] for o in outs] == [1] * 6 + [0] * 3


# --- the replay buffer ------------------------------------------------------------------------------------------------

def test_replay_buffer_is_fifo_in_a_fixed_order_and_survives_a_restart(tmp_path):
    async def step(buffer, number, answers):
        await buffer.begin_step(number)
        for index, answer in answers:
            await buffer.add(index, f"q{index}", f"e{index}", answer)
        return await buffer.end_step(number)

    async def claims(buffer, number):
        await buffer.begin_step(number)
        return [await buffer.claim(f"u{slot}", 10 + slot, slot) for slot in range(3)]

    buffer = ReplayBuffer(size=4, seed=0, state_dir=str(tmp_path), save_freq=2)
    assert asyncio.run(step(buffer, 1, [(2, "b"), (1, "z"), (1, "a")])) == 3
    assert [(p["index"], p["answer"]) for p in buffer.pairs] == [(1, "a"), (1, "z"), (2, "b")]
    for number in range(2, 6):
        asyncio.run(step(buffer, number, [(number, "x")]))
    assert [(p["index"], p["answer"]) for p in buffer.pairs] == [(2, "x"), (3, "x"), (4, "x"), (5, "x")]
    # kept: the newest state and those of the last two checkpoint steps (save_freq 2)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [f"after_step_{s:08d}.json" for s in (2, 4, 5)]
    saved = json.loads((tmp_path / "after_step_00000004.json").read_text())
    assert [p["answer"] for p in saved["pairs"]] == ["b", "x", "x", "x"] and saved["step"] == 4

    # a resumed run (verl restarts at step 5 from its step-4 checkpoint) sees the buffer as it was after step 4
    resumed = ReplayBuffer(size=4, seed=0, state_dir=str(tmp_path), save_freq=2)
    original = ReplayBuffer(size=4, seed=0, state_dir=str(tmp_path / "other"), save_freq=2)
    original.pairs, original.completed = [dict(p) for p in saved["pairs"]], 4
    assert asyncio.run(claims(resumed, 5)) == asyncio.run(claims(original, 5))
    assert [c["pair"]["answer"] for c in asyncio.run(claims(resumed, 5))] != []
    with pytest.raises(FileNotFoundError, match=r"resumes at step 4 but the buffer after step 3"):
        asyncio.run(ReplayBuffer(4, 0, str(tmp_path)).begin_step(4))
    with pytest.raises(RuntimeError, match="end of step 6 but step 5"):
        asyncio.run(resumed.end_step(6))


def test_verls_agent_loop_manager_runs_mixed_raro_batches_through_the_buffer_actor(tiny, tokenizer, tmp_path):
    """verl's own machinery end to end on CPU: RaroAgentLoopManager (the paper run's composed config), two Ray
    AgentLoopWorkers running the registered loops, the named buffer actor, a real tiny model as the rollout server."""
    import uuid

    import ray
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    from pipeline_lib.core.model import save_model_atomic
    from pipeline_lib.jobs.engines.verl.validate import compose

    model = build_model(tokenizer, MODEL | {"max_positions": 1024}, 0)
    save_model_atomic(model, tokenizer, tmp_path / "init")
    paper = rl_baseline_spec(paper_config(), "countdown", "raro", "verl")
    spec = replace(paper, rl=RLSettings.from_flat({**paper.settings, "prompts_per_step": 4, "mini_batch_per_device": 2,
                                                   "gpus_per_node": 1, "nodes": 1, "group_size": 3,
                                                   "max_prompt_tokens": 128, "max_response_tokens": 16, "steps": 3},
                                                  "verl"),
                   baseline=replace(paper.baseline, critic_prompts_per_step=2, replay_size=6))
    paths = TrainPaths(tmp_path / "run", tiny / "data/rl_train.parquet", tiny / "data/rl_test.parquet",
                       tmp_path / "init")
    extra = ["actor_rollout_ref.rollout.agent.num_workers=2"]
    config = compose("ppo_trainer", [*rl_overrides(spec, paths, seed=0), *extra])
    dataset = RaroDataset(str(paths.train_files), tokenizer, config.data)
    tables = {0: config.raro.rewards.policy, 1: config.raro.rewards.critic}
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        server = TinyRolloutServer(model.eval(), tokenizer.eos_token_id, spec.rl.max_response_tokens)
        manager = raro_loop.RaroAgentLoopManager.create(config=config, llm_client=server)
        size, n = config.data.train_batch_size, config.actor_rollout_ref.rollout.n
        for step in (1, 2):
            batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range((step - 1) * size, step * size)]))
            batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(size)], dtype=object)
            batch = batch.repeat(repeat_times=n, interleave=True)
            batch.meta_info["global_steps"] = step
            out = manager.generate_sequences(batch)
            agents, extra = batch.non_tensor_batch["agent_name"], out.non_tensor_batch
            assert list(agents) == [POLICY_LOOP] * 4 * n + [CRITIC_LOOP] * 2 * n
            assert extra["raro_critic_row"].tolist() == [0] * 4 * n + [1] * 2 * n
            rewards = out.batch["rm_scores"].sum(-1).tolist()  # verl's rm_scores: the reward manager is skipped
            for reward, critic_row, verdict in zip(rewards, extra["raro_critic_row"], extra["raro_verdict"],
                                                   strict=True):
                assert reward == tables[int(critic_row)][VERDICTS[int(verdict)]]
            for uid in set(batch.non_tensor_batch["uid"][agents == CRITIC_LOOP]):
                rows = np.flatnonzero(batch.non_tensor_batch["uid"] == uid)
                assert len({tuple(out.batch["prompts"][r].tolist()) for r in rows}) == 1
            # step 1 has nothing to replay; from step 2 on the replay slot (round(0.5 * 2) = 1 row) replays
            assert int(extra["raro_replayed"].sum()) == (0 if step == 1 else n)
        saved = json.loads((raro_replay_dir(paths.run_dir) / "after_step_00000002.json").read_text())
        assert len(saved["pairs"]) == 6 and saved["step"] == 2
    finally:
        raro_loop._ACTOR = None
        ray.shutdown()


# --- the batch: policy and critic rows -------------------------------------------------------------------------------

def test_every_step_holds_the_configured_mix_deterministically_by_seed():
    schedule = MixSchedule(rows=10, policy_per_step=4, critic_per_step=3, replay_slots=2, steps=6, seed=0)
    items = [schedule.item(i) for i in range(len(schedule))]
    assert len(items) == 6 * 7
    policy_rows = []
    for step in range(6):
        block = items[step * 7:(step + 1) * 7]
        assert [loop for loop, _, _ in block] == [POLICY_LOOP] * 4 + [CRITIC_LOOP] * 3
        assert [slot for _, _, slot in block] == [-1] * 4 + [0, 1, -1]
        assert len({r for _, r, _ in block[4:]}) == 3  # distinct critic questions within a step
        policy_rows += [r for _, r, _ in block[:4]]
    # policy rows walk a permutation of all rows per pass, like a shuffled sampler
    assert sorted(policy_rows[:10]) == list(range(10)) and sorted(policy_rows[10:20]) == list(range(10))
    assert policy_rows[:10] != policy_rows[10:20]
    again = MixSchedule(rows=10, policy_per_step=4, critic_per_step=3, replay_slots=2, steps=6, seed=0)
    other = MixSchedule(rows=10, policy_per_step=4, critic_per_step=3, replay_slots=2, steps=6, seed=1)
    assert [again.item(i) for i in range(len(again))] == items
    assert [other.item(i) for i in range(len(other))] != items
    with pytest.raises(IndexError):
        schedule.item(len(schedule))
    with pytest.raises(ValueError, match="at least 12 task rows"):
        MixSchedule(rows=10, policy_per_step=4, critic_per_step=12, replay_slots=2, steps=6, seed=0)


def test_the_dataset_lays_out_the_training_file_and_leaves_validation_alone(tiny, tokenizer):
    train, test = tiny / "data/rl_train.parquet", tiny / "data/rl_test.parquet"
    config = OmegaConf.create({"train_files": str(train), "prompt_key": "prompt", "max_prompt_length": 256,
                               "filter_overlong_prompts": True, "truncation": "error", "return_raw_chat": True,
                               "seed": 3, "cache_dir": str(tiny / "cache"),
                               "raro": {"policy_per_step": 4, "critic_per_step": 2, "replay_slots": 1, "steps": 3}})
    dataset = RaroDataset(str(train), tokenizer, config)
    assert len(dataset) == 3 * 6
    frame = pd.read_parquet(train)
    for position in range(len(dataset)):
        item = dataset[position]
        loop, row_index, slot = dataset.schedule.item(position)
        assert item["agent_name"] == loop and item["raro_slot"] == slot
        assert item["index"] == frame["extra_info"].iloc[row_index]["index"]
        assert item["extra_info"]["reference"] == frame["extra_info"].iloc[row_index]["reference"]
    assert RaroDataset(str(train), tokenizer, config)[7]["index"] == dataset[7]["index"]
    validation = RaroDataset(str(test), tokenizer, config)
    assert validation.schedule is None and len(validation) == len(pd.read_parquet(test))
    assert "agent_name" not in validation[0]
    assert check_training_data(train) == len(frame)


def test_training_data_without_expert_answers_fails_naming_the_file(tmp_path):
    path = tmp_path / "rl_train.parquet"
    pd.DataFrame({"extra_info": [{"index": 0, "reference": "a"}, {"index": 1, "reference": ""}]}).to_parquet(path)
    with pytest.raises(ValueError, match=r"rl_train.parquet: 1 of 2 rows have no expert answer .* row 1"):
        check_training_data(path)
    pd.DataFrame({"extra_info": [{"index": 0, "numbers": np.array([1, 2])}]}).to_parquet(path)
    with pytest.raises(KeyError, match=r"extra_info.reference; this file has none"):
        check_training_data(path)


# --- the paper's RARO runs --------------------------------------------------------------------------------------------

def test_every_paper_raro_run_translates_and_passes_verls_validation():
    config = paper_config()
    runs = [(label, overrides) for label, _, overrides in planned_runs(config) if "/raro/" in label]
    assert sorted(label for label, _ in runs) == ["countdown/raro/seed0", "deepmath/raro/seed0"]
    settings = config["train"]["baselines"]["raro"]
    for label, overrides in runs:
        task = label.split("/")[0]
        row = engine_settings(config, task, "rl", "verl")
        verl_config = validate_rl(overrides, label=label)
        assert verl_config.data.train_batch_size == row["prompts_per_step"] + settings["critic_prompts_per_step"]
        # one PPO update per step over both roles, as the task's GRPO run; the legacy trainer (its manager's contract)
        assert verl_config.actor_rollout_ref.actor.ppo_mini_batch_size == verl_config.data.train_batch_size
        assert verl_config.trainer.use_v1 is False
        assert verl_config.data.shuffle is False and verl_config.data.max_prompt_length == row["max_prompt_tokens"]
        assert verl_config.actor_rollout_ref.rollout.prompt_length >= (row["max_prompt_tokens"]
                                                                      + 2 * row["max_response_tokens"])
        assert verl_config.data.raro.replay_slots == round(settings["replay_fraction"]
                                                           * settings["critic_prompts_per_step"])
        raro = RaroLoopSettings.from_config(verl_config)
        assert raro.policy_rewards == settings["rewards"]["policy"] and raro.replay_size == settings["replay_size"]
        assert raro.state_dir.endswith(f"results/train/{task}/raro/seed0/raro_replay")


def test_a_broken_raro_setting_fails_validation_naming_the_run(tmp_path):
    config = paper_config()
    spec = rl_baseline_spec(config, "countdown", "raro", "verl")
    paths = TrainPaths(tmp_path / "run", tmp_path / "rl_train.parquet", tmp_path / "rl_test.parquet", tmp_path / "sft")
    overrides = rl_overrides(spec, paths, seed=0)
    assert raro_replay_dir(tmp_path / "run").name == "raro_replay"
    typo = [o.replace("raro_loop.RaroAgentLoopManager", "raro_loop.RaroAgentLoopManagr") for o in overrides]
    with pytest.raises(VerlOverrideError, match=r"countdown/raro/seed0: .*agent loop manager.*RaroAgentLoopManagr"):
        validate_rl(typo, label="countdown/raro/seed0")
    registry = tmp_path / "loops.yaml"
    registry.write_text("- name: raro_policy\n  _target_: pipeline_lib.jobs.engines.verl.raro_loop.RaroPolicyLop\n")
    moved = [o.split("=")[0] + f"={registry}" if o.startswith("actor_rollout_ref.rollout.agent.agent_loop_config_path")
             else o for o in overrides]
    with pytest.raises(VerlOverrideError, match=r"RaroPolicyLop"):
        validate_rl(moved, label="countdown/raro/seed0")
    uneven = replace(spec, baseline=replace(spec.baseline, critic_prompts_per_step=9))
    with pytest.raises(ValueError, match=r"73 prompts must split evenly over the 8 GPUs"):
        rl_overrides(uneven, paths, seed=0)
    choice = replace(spec, baseline=replace(spec.baseline, critic_decoding="choice"))
    with pytest.raises(ValueError, match=r"critic_decoding 'choice'"):
        rl_overrides(choice, paths, seed=0)
