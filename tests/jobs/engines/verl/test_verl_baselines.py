"""The verl engine's baselines (issue 8) on CPU: the RL-Logit agent loop against a rollout server backed by a real
tiny model, and the OPD / RL-Logit runs of the paper config through verl's own config checks."""

import asyncio
import json

import hydra
import pytest
import torch
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, DictConfigWrap, ToolListWrap

from pipeline_lib.core.model import build_model, encode_prompts, pack, response_logprobs
from pipeline_lib.jobs.engines.local.rl_logit import answer_logprob_rewards
from pipeline_lib.jobs.engines.verl.rl_logit_loop import AGENT_LOOP_CONFIG, RLLogitAgentLoop, agent_loop_name
from pipeline_lib.jobs.engines.verl.translate import rl_overrides, verl_baseline
from pipeline_lib.jobs.engines.verl.validate import VerlOverrideError, planned_runs, validate_planned_runs, validate_rl
from pipeline_lib.jobs.methods.expert import split_reasoning
from pipeline_lib.plan import METHODS
from pipeline_lib.plan.registry import variant_runs
from pipeline_lib.plan.settings import group_rl_spec, rl_baseline_spec, with_variant
from tests.conftest import MODEL
from tests.jobs.engines.verl.conftest import PATHS, paper_baselines
from tests.tiny_rollout_server import TinyRolloutServer

MESSAGES = [{"role": "user", "content": "Using the numbers [9, 5, 5], make 19."}]
GOOD, BAD = "<think>9 + 5 = 14\n14 + 5 = 19</think>", "<think>5 * 5 = 25</think>"
ANSWER = "\n<answer>(9 + 5) + 5</answer>"
RESPONSE_LENGTH = 40


@pytest.fixture(scope="module")
def tokenizer(tiny):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny / "tok")


def ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def fitted(tokenizer):
    """A tiny model fitted to answer MESSAGES with GOOD + ANSWER: the expert answer is likely after GOOD only."""
    model = build_model(tokenizer, MODEL, 0)
    prompt = encode_prompts(tokenizer, [MESSAGES])[0]
    batch = pack([prompt], [[*ids(tokenizer, GOOD + ANSWER), tokenizer.eos_token_id]], tokenizer.pad_token_id)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(40):
        loss = -response_logprobs(model, *batch).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def agent_loop(tokenizer, server, variant):
    """The loop as verl's AgentLoopWorker builds it: hydra-instantiated from the registry file we hand verl."""
    entries = {entry.name: entry for entry in OmegaConf.load(AGENT_LOOP_CONFIG)}
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 128,
                                                                 "response_length": RESPONSE_LENGTH}},
                               "data": {}})
    return hydra.utils.instantiate(entries[agent_loop_name(variant)], trainer_config=DictConfigWrap(config),
                                   server_manager=server, tokenizer=tokenizer, processor=None, hf_model_type=None,
                                   dataset_cls=None, data_config=DictConfigWrap(config.data), tools=ToolListWrap([]))


def run_loop(tokenizer, server, variant, extra_info, temperature=1.0):
    async def go():  # verl builds each loop inside the worker's running event loop
        loop = agent_loop(tokenizer, server, variant)
        assert isinstance(loop, RLLogitAgentLoop) and loop.variant == variant
        return await loop.run({"temperature": temperature, "top_p": 1.0, "top_k": -1, "logprobs": False},
                              raw_prompt=MESSAGES, extra_info=extra_info)

    return asyncio.run(go())


def local_reward(model, tokenizer, prompt_ids, response_ids, variant):
    """The local engine's RL-Logit reward of one rollout (its own tokenization of z and a*)."""
    reasoning = split_reasoning(tokenizer.decode(response_ids, skip_special_tokens=True))[0]
    reward, logprob = answer_logprob_rewards(model, tokenizer, [prompt_ids], [reasoning], [ANSWER], variant)
    return float(reward[0]), float(logprob[0]), reasoning


@pytest.mark.parametrize("variant", ["logprob", "neg_perplexity"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_rl_logit_loop_reward_equals_the_local_engines_on_the_same_model_and_rollout(tokenizer, fitted, variant,
                                                                                    temperature):
    server = TinyRolloutServer(fitted, tokenizer.eos_token_id, RESPONSE_LENGTH, seed=3)
    info = {"index": 0, "split": "train", "reference": GOOD + ANSWER}
    out = run_loop(tokenizer, server, variant, info, temperature)
    assert out.prompt_ids == encode_prompts(tokenizer, [MESSAGES])[0]
    reward, logprob, reasoning = local_reward(fitted, tokenizer, out.prompt_ids, out.response_ids, variant)
    if temperature == 0:  # greedy decoding reproduces the fitted reasoning, so z is non-trivial
        assert reasoning == GOOD
    assert out.reward_score == pytest.approx(reward, rel=1e-4, abs=1e-4)
    assert out.extra_fields["reward_extra_info"]["expert_answer_logprob"] == pytest.approx(logprob, rel=1e-4,
                                                                                           abs=1e-4)
    assert reward < 0
    # one rollout request, then one scoring request of prompt + z + a* + EOS that samples nothing it keeps
    rollout, scoring = server.calls
    assert rollout["prompt_ids"] == out.prompt_ids
    assert scoring["sampling_params"] | {"max_tokens": 1, "prompt_logprobs": 0} == scoring["sampling_params"]
    assert scoring["prompt_ids"] == (out.prompt_ids + ids(tokenizer, reasoning) + ids(tokenizer, ANSWER)
                                     + [tokenizer.eos_token_id])


def test_rl_logit_loop_rewards_reasoning_that_makes_the_expert_answer_likelier(tokenizer, fitted):
    server = TinyRolloutServer(fitted, tokenizer.eos_token_id, RESPONSE_LENGTH)
    prompt = encode_prompts(tokenizer, [MESSAGES])[0]

    async def score(variant, reasoning):
        loop = agent_loop(tokenizer, server, variant)
        response = ids(tokenizer, reasoning + "\n<answer>whatever</answer>")
        output = AgentLoopOutput(prompt_ids=prompt, response_ids=response, response_mask=[1] * len(response),
                                 metrics={})
        return await loop.answer_logprob(output, GOOD + ANSWER)

    for variant in ("logprob", "neg_perplexity"):
        (good, n_good), (bad, n_bad) = asyncio.run(score(variant, GOOD)), asyncio.run(score(variant, BAD))
        assert n_good == n_bad == len(ids(tokenizer, ANSWER)) + 1
        assert good > bad + 1.0
        reference, _ = answer_logprob_rewards(fitted, tokenizer, [prompt, prompt], [GOOD, BAD], [ANSWER, ANSWER],
                                              "logprob")
        assert [good, bad] == pytest.approx(reference.tolist(), rel=1e-4, abs=1e-4)


def test_rl_logit_loop_leaves_validation_rows_to_the_verifier_and_needs_the_reference(tokenizer, fitted):
    server = TinyRolloutServer(fitted, tokenizer.eos_token_id, RESPONSE_LENGTH)
    out = run_loop(tokenizer, server, "logprob", {"index": 4, "split": "test", "reference": GOOD + ANSWER})
    assert out.reward_score is None and len(server.calls) == 1  # verl's reward loop scores it with the task verifier
    with pytest.raises(KeyError, match=r"extra_info.reference; row 7"):
        run_loop(tokenizer, server, "logprob", {"index": 7, "split": "train"})
    with pytest.raises(ValueError, match="variant 'perplexity'"):
        RLLogitAgentLoop(variant="perplexity")


# --- the paper's OPD and RL-Logit runs through verl's own config checks ---------------------------------------------


#: The baselines the registry trains as verl RL jobs.
VERL_BASELINES = [name for name, entry in METHODS.items() if verl_baseline(entry)]


def baseline_runs(config):
    names = {*VERL_BASELINES, *variant_runs(config)}  # RL-Logit: one run per reward variant
    return {label: overrides for label, _, overrides in planned_runs(config) if label.split("/")[1] in names}


def test_every_paper_opd_and_rl_logit_run_translates_and_passes_verls_validation():
    config = paper_baselines()
    runs = baseline_runs(config)
    assert set(runs) == {f"{t}/opd/seed0" for t in ("gsm8k", "countdown", "deepmath", "poetry", "meetingbank",
                                                    "openthoughts")} | \
        {f"{t}/rl_logit_{v}/seed0" for t in ("gsm8k", "countdown", "deepmath") for v in ("logprob", "neg_perplexity")}
    for label, overrides in runs.items():
        task, name, _ = label.split("/")
        method = variant_runs(config).get(name, (name,))[0]
        verl_config = validate_rl(overrides, label=label)
        grpo_spec = group_rl_spec(config, task, "grpo_sim", "verl")
        grpo = validate_rl(rl_overrides(grpo_spec, PATHS, 0))
        for key in ("actor_rollout_ref.rollout.n", "data.train_batch_size", "trainer.total_training_steps",
                    "actor_rollout_ref.actor.ppo_mini_batch_size", "data.max_response_length", "trainer.nnodes",
                    "trainer.n_gpus_per_node", "actor_rollout_ref.actor.optim.lr"):  # the GRPO run's App. B row
            if method == "opd" and key == "trainer.n_gpus_per_node":  # the teacher takes a share (below)
                continue
            assert OmegaConf.select(verl_config, key) == OmegaConf.select(grpo, key), (label, key)
        distillation = OmegaConf.select(verl_config, "distillation")
        agent = verl_config.actor_rollout_ref.rollout.agent
        if method == "opd":
            teacher = distillation.teacher_models.teacher_model
            assert distillation.enabled and teacher.model_path == "Qwen/Qwen3-8B"
            assert (distillation.distillation_loss.loss_mode, distillation.distillation_loss.use_policy_gradient,
                    distillation.distillation_loss.use_task_rewards) == ("k1", True, False)
            # the teacher's GPUs come out of the task's own: the paper's 8 GPUs (16 on 2 nodes), not a node more
            assert distillation.n_gpus_per_node + verl_config.trainer.n_gpus_per_node == grpo.trainer.n_gpus_per_node
            assert distillation.nnodes == verl_config.trainer.nnodes == grpo.trainer.nnodes
            assert not verl_config.actor_rollout_ref.actor.use_kl_loss  # verl drops it with the policy loss
            assert agent.default_agent_loop == "single_turn_agent"
            assert rl_baseline_spec(config, task, "opd", "verl").resources == grpo_spec.resources
        else:
            assert not distillation.enabled
            assert agent.default_agent_loop == name  # rl_logit_<variant>: the variant's registered loop
            assert agent.agent_loop_config_path == str(AGENT_LOOP_CONFIG)
            assert rl_baseline_spec(config, task, "rl_logit", "verl").resources == grpo_spec.resources
    config["train"]["baselines"]["rl_logit"]["variants"] = ["neg_perplexity"]
    loops = {label: OmegaConf.select(validate_rl(o), "actor_rollout_ref.rollout.agent.default_agent_loop")
             for label, o in baseline_runs(config).items() if "rl_logit" in label}
    assert sorted(loops) == [f"{t}/rl_logit_neg_perplexity/seed0" for t in ("countdown", "deepmath", "gsm8k")]
    assert set(loops.values()) == {"rl_logit_neg_perplexity"}


@pytest.mark.parametrize("override,message", [
    # 8 teacher GPUs cannot hold replicas of 3-way tensor parallelism: verl's DistillationConfig rejects it
    ("distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=3",
     r"(?s)train run gsm8k/opd/seed0.*distillation.*per_replica_world_size \(3\) must divide"),
    ("distillation.distillation_loss.use_policy_gradient=false",  # k1 is only OPD as a policy-gradient reward
     r"(?s)train run gsm8k/opd/seed0.*k1"),
    ("distillation.teacher_models.teacher_model.model_pth=/x", r"train run gsm8k/opd/seed0.*model_pth"),
    ("actor_rollout_ref.rollout.agent.default_agent_loop=rl_logit_logporb",
     r"train run gsm8k/rl_logit_logprob/seed0.*rl_logit_logporb.*not registered"),
])
def test_a_wrong_baseline_setting_fails_validation_naming_the_run(tmp_path, override, message):
    config = paper_baselines()
    config["train"]["tasks"] = ["gsm8k"]
    config["train"]["baselines"]["methods"] = ["rl_logit" if "agent" in override else "opd"]
    config["train"]["ablation"]["tasks"] = config["train"]["scale"]["tasks"] = []
    config["train"]["verl"]["extra_overrides"]["rl"] = [override]
    config["train"]["task_settings"]["gsm8k"]["methods"] = []  # only the baseline (and SFT) run: the override is theirs
    with pytest.raises(VerlOverrideError, match=message):
        validate_planned_runs(config, cache_dir=tmp_path)


def test_opd_needs_a_teacher_model_and_gpus_it_can_split():
    config = paper_baselines()
    config["train"]["baselines"]["opd"]["teacher"]["hub"] = None
    with pytest.raises(ValueError, match=r"train.baselines.opd.teacher.hub must name the teacher.*'gsm8k'"):
        rl_overrides(rl_baseline_spec(config, "gsm8k", "opd", "verl"), PATHS, 0)
    config = paper_baselines()
    config["train"]["baselines"]["opd"]["verl"]["tensor_parallel_size"] = 3
    with pytest.raises(ValueError, match=r"tensor_parallel_size \(3\) must divide train.baselines.opd.verl.gpus_per"):
        rl_overrides(rl_baseline_spec(config, "gsm8k", "opd", "verl"), PATHS, 0)
    config["train"]["baselines"]["opd"]["verl"] |= {"gpus_per_node": 2, "tensor_parallel_size": 1}
    with pytest.raises(ValueError, match=r"gpus_per_node = 2 leaves the student 6 GPUs.*do not split the 512"):
        rl_overrides(rl_baseline_spec(config, "gsm8k", "opd", "verl"), PATHS, 0)
    config["train"]["baselines"]["opd"]["verl"] |= {"gpus_per_node": 8}
    with pytest.raises(ValueError, match=r"leaves no GPU"):
        rl_overrides(rl_baseline_spec(config, "gsm8k", "opd", "verl"), PATHS, 0)
    config["train"]["baselines"]["opd"]["verl"] |= {"gpus_per_node": 4, "tensor_parallel_size": 2}
    verl_config = validate_rl(rl_overrides(rl_baseline_spec(config, "deepmath", "opd", "verl"), PATHS, 0))
    assert (verl_config.distillation.nnodes, verl_config.distillation.n_gpus_per_node) == (2, 4)
    assert (verl_config.trainer.nnodes, verl_config.trainer.n_gpus_per_node) == (2, 4)
    assert rl_baseline_spec(config, "deepmath", "opd", "verl").resources == {"nodes": 2, "gres": "gpu:8"}


@pytest.mark.parametrize("method", ["opd", "rl_logit"])
def test_the_train_entry_point_dry_runs_a_verl_baseline(tmp_path, capsys, method):
    from pipeline_lib.jobs.engines.verl.train import main

    spec = rl_baseline_spec(paper_baselines(), "countdown", method, "verl")
    spec = (with_variant(spec, "logprob") if method == "rl_logit" else spec).to_json()
    main(["rl", "--spec", spec, "--data", str(tmp_path / "rl_train.parquet"), "--val-data", str(tmp_path / "t.pq"),
          "--init", str(tmp_path / "sft/final"), "--run-dir", str(tmp_path / "run"), "--seed", "0", "--dry-run"])
    out = capsys.readouterr().out
    command = json.loads(out[out.index("{\n"):])["command"]
    assert command[7:9] == ["-m", "verl.trainer.main_ppo"]
    expected = "distillation.enabled=true" if method == "opd" else \
        "actor_rollout_ref.rollout.agent.default_agent_loop=rl_logit_logprob"
    assert expected in command
    assert not (tmp_path / "run").exists()
