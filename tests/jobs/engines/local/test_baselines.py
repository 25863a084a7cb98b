"""The baselines of Table 1 on the local engine: each method's defining property, short runs, resume."""

import copy
import itertools
import json
from dataclasses import replace

import pandas as pd
import pytest
import torch

from pipeline_lib.core.baselines import BaselineSettings
from pipeline_lib.core.model import build_model, pack, response_logprobs
from pipeline_lib.core.rl.losses import PolicyLossConfig
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.jobs.engines.local import dpo as dpo_module
from pipeline_lib.jobs.engines.local import raro as raro_module
from pipeline_lib.jobs.engines.local import rl as rl_module
from pipeline_lib.jobs.engines.local.base import make_base
from pipeline_lib.jobs.engines.local.opd import OnPolicyDistillation, reverse_kl_per_token
from pipeline_lib.jobs.engines.local.rationalization import train_rationalization
from pipeline_lib.jobs.engines.local.rl import train_rl
from pipeline_lib.jobs.engines.local.rl_logit import RLLogit, answer_logprob_rewards
from pipeline_lib.jobs.methods.expert import expert_demonstrations, split_reasoning
from tests.conftest import MODEL, baseline_settings, crash_after, params, rl_spec, sft_spec

RARO = baseline_settings("raro", critic_system_prompt="You are a critic.", critic_max_new_tokens=6,
                         critic_decoding="free", critic_prompts_per_step=2, replay_fraction=0.5, replay_size=8,
                         rewards={"policy": {"policy_better": 1.0, "tie": 0.5, "expert_better": 0.0, "invalid": 0.0},
                                  "critic": {"expert_better": 1.0, "tie": 0.5, "policy_better": 0.0, "invalid": 0.0}})
DPO = baseline_settings("iterative_dpo", rounds=2, pairs_per_round=8, steps_per_round=2, batch_size=4,
                        batch_size_generate=8, lr=1e-3, weight_decay=0.0, beta=0.1, grad_clip=1.0,
                        validation_prompts=4, max_new_tokens=8, max_response_tokens=32, temperature=1.0)


def group_rl(baseline: BaselineSettings | None = None, **changes) -> RunSpec:
    """GRPO on the verifier reward, 2 steps: the settings an RL-style baseline runs with."""
    return rl_spec("grpo", {}, {}, baseline, **{"steps": 2, **changes})


@pytest.fixture(scope="module")
def tokenizer(tiny):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny / "tok")


def sequence(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# --- defining properties -------------------------------------------------------------------------------------------

def test_split_reasoning_round_trips_every_demonstration_format():
    for text in ("<think>9 + 5 = 14</think>\n<answer>(9 + 5)</answer>", "2 * 3 = 6\nThe answer is \\boxed{6}.",
                 "The council passed it 5-2.", ""):
        reasoning, answer = split_reasoning(text)
        assert reasoning + answer == text
    assert split_reasoning("<think>a</think>\n<answer>b</answer>") == ("<think>a</think>", "\n<answer>b</answer>")


def test_dpo_steps_lower_the_loss_by_raising_the_chosen_vs_rejected_margin(tokenizer):
    model = build_model(tokenizer, MODEL, 0)
    reference = copy.deepcopy(model).eval()
    prompt = [sequence(tokenizer, "Using the numbers [1, 2], make 3.")]
    chosen, rejected = [sequence(tokenizer, "<answer>1 + 2</answer>")], [sequence(tokenizer, "<answer>2 - 1</answer>")]

    def logp(m, response):
        ids, attention, mask = pack(prompt, response, tokenizer.pad_token_id)
        return response_logprobs(m, ids, attention, mask).sum(-1)

    with torch.no_grad():
        ref_c, ref_r = logp(reference, chosen), logp(reference, rejected)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, margins = [], []
    for _ in range(6):
        loss, margin = dpo_module.dpo_loss(logp(model, chosen), logp(model, rejected), ref_c, ref_r, beta=0.5)
        losses.append(float(loss.detach()))
        margins.append(float(margin))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert losses[0] == pytest.approx(float(torch.log(torch.tensor(2.0))), abs=1e-5)  # margin 0 at the reference
    assert margins[0] == pytest.approx(0.0, abs=1e-5)
    assert all(b > a for a, b in itertools.pairwise(margins))
    assert all(b < a for a, b in itertools.pairwise(losses))


def test_opd_loss_and_gradient_vanish_when_student_equals_teacher(tokenizer):
    student = build_model(tokenizer, MODEL, 0)
    method = OnPolicyDistillation(group_rl(), teacher=None)  # type: ignore[arg-type]
    prompts = [sequence(tokenizer, "Using the numbers [1, 2], make 3.")] * 2
    responses = [sequence(tokenizer, "<think>1 + 2 = 3</think>"), sequence(tokenizer, "<answer>1 + 2</answer>")]
    ids, attention, mask = pack(prompts, responses, tokenizer.pad_token_id)
    config = PolicyLossConfig(aggregation="token-mean")
    zeros = torch.zeros_like(mask)

    def loss_and_grad(teacher):
        method.teacher = teacher
        student.zero_grad()
        loss, _ = method.loss(student, ids, attention, mask, zeros, torch.zeros(2), torch.arange(2), None, config)
        loss.backward()
        return float(loss.detach()), max(float(p.grad.abs().max()) for p in student.parameters() if p.grad is not None)

    same_loss, same_grad = loss_and_grad(copy.deepcopy(student).eval())
    assert same_loss == pytest.approx(0.0, abs=1e-6) and same_grad < 1e-6
    other_loss, other_grad = loss_and_grad(build_model(tokenizer, MODEL, 1).eval())
    assert other_loss > 1e-3 and other_grad > 1e-4
    # only response positions carry KL
    with torch.no_grad():
        logits = student(input_ids=ids, attention_mask=attention).logits
        other = build_model(tokenizer, MODEL, 1)(input_ids=ids, attention_mask=attention).logits
    per_token = reverse_kl_per_token(logits, other, mask)
    assert bool((per_token[mask == 0] == 0).all()) and bool((per_token[mask == 1] > 0).all())


def test_rl_logit_reward_is_higher_for_reasoning_that_makes_the_expert_answer_likelier(tokenizer):
    model = build_model(tokenizer, MODEL, 0)
    prompt = sequence(tokenizer, "Using the numbers [9, 5, 5], make 19.")
    good, bad = "<think>9 + 5 = 14\n14 + 5 = 19</think>", "<think>5 * 5 = 25</think>"
    answer = "\n<answer>(9 + 5) + 5</answer>"
    # make `good` the reasoning under which the model predicts the expert answer: fit prompt + good + answer
    ids, attention, mask = pack([prompt], [[*sequence(tokenizer, good + answer), tokenizer.eos_token_id]],
                                tokenizer.pad_token_id)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(30):
        loss = -response_logprobs(model, ids, attention, mask).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for variant in ("logprob", "neg_perplexity"):
        rewards, logprob = answer_logprob_rewards(model, tokenizer, [prompt, prompt], [good, bad], [answer, answer],
                                                  variant)
        assert not rewards.requires_grad  # stop-gradient: the reward never trains the scorer
        assert rewards[0] > rewards[1] and logprob[0] > logprob[1]
    assert bool((rewards < 0).all() and (rewards > -float(len(tokenizer))).all())
    # batched equals one at a time
    single, _ = answer_logprob_rewards(model, tokenizer, [prompt], [bad], [answer], "logprob")
    batched, _ = answer_logprob_rewards(model, tokenizer, [prompt, prompt], [good, bad], [answer, answer], "logprob")
    torch.testing.assert_close(single[0], batched[1], atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError, match="variant"):
        answer_logprob_rewards(model, tokenizer, [prompt], [good], [answer], "perplexity")


@pytest.mark.parametrize(("reply", "expert_first", "verdict"), [
    ("<answer>1</answer>", True, "expert_better"), ("<answer>1</answer>", False, "policy_better"),
    ("<answer>2</answer>", True, "policy_better"), ("<answer>2</answer>", False, "expert_better"),
    ("<answer>tie</answer>", True, "tie"), ("<answer> TIE </answer>", False, "tie"),
    ("<answer>3</answer>", True, "invalid"), ("1", True, "invalid"), ("\\boxed{1}", True, "invalid"),
])
def test_raro_verdicts_follow_the_shuffled_order(reply, expert_first, verdict):
    assert raro_module.parse_verdict(reply, expert_first) == verdict


def test_raro_rewards_follow_the_outcome_table():
    table = RARO.rewards
    verdicts = ["expert_better", "policy_better", "tie", "invalid"]
    assert raro_module.outcome_rewards(verdicts, table["policy"]).tolist() == [0.0, 1.0, 0.5, 0.0]
    assert raro_module.outcome_rewards(verdicts, table["critic"]).tolist() == [1.0, 0.0, 0.5, 0.0]
    custom = {"expert_better": -1.0, "policy_better": 2.0, "tie": 0.25, "invalid": -3.0}
    assert raro_module.outcome_rewards(verdicts, custom).tolist() == [-1.0, 2.0, 0.25, -3.0]
    with pytest.raises(KeyError, match="invalid"):
        raro_module.outcome_rewards(verdicts, {"expert_better": 1.0, "policy_better": 0.0, "tie": 0.5})


def test_constrained_critic_replies_are_valid_verdicts_drawn_by_the_model_s_own_odds(tiny, tokenizer):
    from pipeline_lib.core.model import encode_prompts, load_model

    model = load_model(tiny / "init")
    prompts = encode_prompts(tokenizer, [raro_module.critic_messages("You are a critic.", f"q{i}", "a", "b")
                                         for i in range(3)])
    choices = [tokenizer(c, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
               for c in raro_module.CRITIC_CHOICES]
    replies = raro_module.sample_critic_choices(model, tokenizer, prompts, 400, 1.0, torch.Generator().manual_seed(0))
    assert len(replies) == 1200 and all(r in choices for r in replies)
    assert {raro_module.parse_verdict(tokenizer.decode(r, skip_special_tokens=True), True) for r in replies} <= {
        "expert_better", "policy_better", "tie"}
    # the empirical choice frequencies of prompt 0 match the model's renormalised sequence probabilities
    scores = torch.tensor([[sum_logprob(model, p, c) for c in choices] for p in prompts[:1]])
    expected = torch.softmax(scores, dim=-1)[0]
    observed = torch.tensor([sum(r == c for r in replies[:400]) / 400 for c in choices])
    assert torch.allclose(observed, expected, atol=0.08), (observed, expected)
    # near-zero temperature picks the likeliest reply
    cold = raro_module.sample_critic_choices(model, tokenizer, prompts[:1], 5, 1e-4, torch.Generator().manual_seed(1))
    assert all(r == choices[int(expected.argmax())] for r in cold)


def sum_logprob(model, prompt, reply):
    from pipeline_lib.core.model import pack, response_logprobs

    ids, attention, mask = pack([prompt], [reply], 0)
    with torch.no_grad():
        return float(response_logprobs(model.eval(), ids, attention, mask).sum())


def test_expert_demonstrations_align_with_rl_prompts_by_text(tiny, tmp_path):
    frame = pd.read_parquet(tiny / "data/rl_train.parquet")
    demos = expert_demonstrations(frame, tiny / "data/sft_train.parquet")
    sft = pd.read_parquet(tiny / "data/sft_train.parquet")
    assert demos[3] == sft["messages"][3][-1]["content"] and len(demos) == len(frame)
    shuffled = frame.sample(frac=1.0, random_state=0).reset_index(drop=True)
    assert expert_demonstrations(shuffled, tiny / "data/sft_train.parquet")[0] == demos[frame.index[
        frame["prompt"].map(lambda p: p[0]["content"]) == shuffled["prompt"][0][0]["content"]][0]]
    sft.iloc[:-1].to_parquet(tmp_path / "short.parquet")
    with pytest.raises(KeyError, match="row"):
        expert_demonstrations(frame, tmp_path / "short.parquet")


# --- short runs of every trainer -----------------------------------------------------------------------------------

def done(run_dir):
    record = json.loads((run_dir / "DONE.json").read_text())
    assert (run_dir / "final/model.safetensors").is_file() and (run_dir / "metrics.jsonl").is_file()
    return record


def test_base_is_the_untrained_starting_point_of_sft(tiny, tmp_path):
    make_base({"model": MODEL}, tiny / "tok", tmp_path, 0)
    assert done(tmp_path)["pretrained"] is False
    a, b = params(tmp_path / "final"), params(tiny / "init")  # the fixture's init is build_model(..., seed 0)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_pretrained_base_is_copied_as_it_is_in_its_own_precision(tiny, tmp_path):
    from transformers import AutoTokenizer

    from pipeline_lib.core.model import load_model, save_model_atomic

    pretrained = tmp_path / "pretrained"
    save_model_atomic(load_model(tiny / "init").to(torch.bfloat16), AutoTokenizer.from_pretrained(tiny / "tok"),
                      pretrained)
    make_base({"model": MODEL}, None, tmp_path / "run", 0, init=pretrained)  # a hub model: its own tokenizer
    assert done(tmp_path / "run")["pretrained"] is True
    from safetensors.torch import load_file

    copied, source = load_file(tmp_path / "run/final/model.safetensors"), load_file(pretrained / "model.safetensors")
    assert {t.dtype for t in copied.values()} == {torch.bfloat16}
    assert copied.keys() == source.keys() and all(torch.equal(copied[k], source[k]) for k in source)


def test_rationalization_sfts_on_annotated_demonstrations(tiny, tmp_path):
    spec = replace(sft_spec(steps=2), method="rationalization", baseline=baseline_settings(
        "rationalization", hint="The answer is {answer}.", max_new_tokens=8, temperature=1.0, batch_size=16))
    train_rationalization(spec, tiny / "data/sft_train.parquet", tiny / "init", tiny / "tok", tmp_path, 0,
                          progress=False)
    assert done(tmp_path)["kind"] == "rationalization"
    original = pd.read_parquet(tiny / "data/sft_train.parquet")
    annotated = pd.read_parquet(tmp_path / "rationalized_sft.parquet")
    assert len(annotated) == len(original)
    for before, after in zip(original["messages"], annotated["messages"], strict=True):
        assert after[0]["content"] == before[0]["content"]  # the question is unchanged (the hint is not trained on)
        assert after[-1]["content"].endswith(split_reasoning(before[-1]["content"])[1])  # expert answer kept


def test_iterative_dpo_runs_rounds_selects_on_validation_and_resumes(tiny, tmp_path, monkeypatch):
    data, demos, init = tiny / "data/rl_train.parquet", tiny / "data/sft_train.parquet", tiny / "init"
    dpo_module.train_iterative_dpo(DPO, data, demos, init, tmp_path / "straight", 0, progress=False)
    record = done(tmp_path / "straight")
    rounds = json.loads((tmp_path / "straight/rounds.json").read_text())
    assert [r["round"] for r in rounds["rounds"]] == [1, 2] and record["best_round"] == rounds["best_round"]
    best = max(rounds["rounds"], key=lambda r: (r["validation_pass@1_greedy"], -r["round"]))
    assert rounds["best_round"] == best["round"]
    a, b = params(tmp_path / "straight/final"), params(tmp_path / f"straight/rounds/round{best['round']}")
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a run killed after round 1 resumes at round 2 and ends where the uninterrupted run ended
    real = dpo_module.greedy_accuracy
    calls = []

    def die_in_round_two(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated kill")
        return real(*args, **kwargs)

    monkeypatch.setattr(dpo_module, "greedy_accuracy", die_in_round_two)
    with pytest.raises(KeyboardInterrupt):
        dpo_module.train_iterative_dpo(DPO, data, demos, init, tmp_path / "killed", 0, progress=False)
    monkeypatch.undo()
    dpo_module.train_iterative_dpo(DPO, data, demos, init, tmp_path / "killed", 0, progress=False)
    for name in ("round1", "round2"):
        a, b = params(tmp_path / f"straight/rounds/{name}"), params(tmp_path / f"killed/rounds/{name}")
        for key in a:
            torch.testing.assert_close(a[key], b[key])


def test_rl_logit_run_trains_on_the_logit_reward(tiny, tmp_path):
    spec = group_rl(baseline_settings("rl_logit", variant="neg_perplexity"))
    train_rl(spec, tiny / "data/rl_train.parquet", tiny / "init", tmp_path, 0, progress=False,
             method=RLLogit(spec, tiny / "data/sft_train.parquet"))
    assert done(tmp_path)["kind"] == "rl_logit"
    rewards = [r for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()
               for r in json.loads(line)["reward"]]
    assert all(-float("inf") < r < 0 for r in rewards)  # negative perplexities, not verifier scores
    assert "expert_answer_logprob" in json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])


def test_opd_run_distils_only_what_the_teacher_disagrees_on(tiny, tmp_path):
    data, init = tiny / "data/rl_train.parquet", tiny / "init"
    # teacher == student: zero KL on the first update (one minibatch, so it is measured before any step; later
    # steps would see Adam turn float round-off into a real step)
    one = group_rl(steps=1, minibatches=1)
    train_rl(one, data, init, tmp_path / "same", 0, progress=False, method=OnPolicyDistillation(one, init))
    same = [json.loads(line)["actor/distillation/loss"]
            for line in (tmp_path / "same/metrics.jsonl").read_text().splitlines()]
    assert done(tmp_path / "same")["kind"] == "opd" and max(same) < 1e-6
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny / "tok")
    other = build_model(tokenizer, MODEL, 1)
    other.save_pretrained(tmp_path / "teacher")
    train_rl(group_rl(), data, init, tmp_path / "other", 0, progress=False,
             method=OnPolicyDistillation(group_rl(), tmp_path / "teacher"))
    kls = [json.loads(line)["actor/distillation/loss"]
           for line in (tmp_path / "other/metrics.jsonl").read_text().splitlines()]
    assert min(kls) > 1e-3
    a, b = params(init), params(tmp_path / "other/final")
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_raro_run_mixes_policy_and_critic_groups_and_resumes_its_replay_buffer(tiny, tmp_path,
                                                                             monkeypatch):
    spec = group_rl(RARO, steps=3, checkpoint_every=1)
    data, demos, init = tiny / "data/rl_train.parquet", tiny / "data/sft_train.parquet", tiny / "init"
    train_rl(spec, data, init, tmp_path / "straight", 0, progress=False, method=raro_module.Raro(spec, demos))
    metrics = [json.loads(line) for line in (tmp_path / "straight/metrics.jsonl").read_text().splitlines()]
    assert [m["critic_replayed"] for m in metrics] == [0, 1, 1]  # half of 2 critic prompts once the buffer fills
    assert all(sum(m[f"critic_{v}"] for v in raro_module.VERDICTS) == pytest.approx(1.0) for m in metrics)
    crash_after(rl_module, 2, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        train_rl(spec, data, init, tmp_path / "killed", 0, progress=False, method=raro_module.Raro(spec, demos))
    monkeypatch.undo()
    train_rl(spec, data, init, tmp_path / "killed", 0, progress=False, method=raro_module.Raro(spec, demos))
    a, b = params(tmp_path / "straight/final"), params(tmp_path / "killed/final")
    for key in a:
        torch.testing.assert_close(a[key], b[key])
    assert (tmp_path / "straight/rollouts.jsonl").read_text() == (tmp_path / "killed/rollouts.jsonl").read_text()
    untimed = [[{k: v for k, v in json.loads(line).items() if not k.startswith("timing_s/")}
                for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
               for run in ("straight", "killed")]
    assert untimed[0] == untimed[1]


def test_raro_with_constrained_critic_decoding_gets_only_valid_verdicts_and_a_reward_signal(tiny, tmp_path):
    spec = group_rl(replace(RARO, critic_decoding="choice"))
    train_rl(spec, tiny / "data/rl_train.parquet", tiny / "init", tmp_path, 0, progress=False,
             method=raro_module.Raro(spec, tiny / "data/sft_train.parquet"))
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(m["critic_invalid"] == 0.0 for m in metrics)
    # the untrained critic splits its verdicts, so critic groups have rewards that differ (something to learn)
    assert any(0.0 < m["critic_expert_better"] < 1.0 for m in metrics)


# --- targets, specs and the workflow -------------------------------------------------------------------------------

def validated(**train):
    import yaml

    from pipeline_lib.core.config import validate_config
    from tests.conftest import REPO

    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["train"] |= train
    validate_config(config, REPO / "workflow/schemas/config.schema.yaml")
    return config


def differing(a, b):
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


def test_paired_methods_share_every_setting_but_the_advantage():
    from pipeline_lib.plan import plan_runs
    from pipeline_lib.plan.settings import engine_settings, group_rl_spec, rl_baseline_spec

    config = validated()
    task = "countdown_tiny"
    for grpo, softmax in (("grpo_exact", "softmax_exact"), ("grpo_sim", "softmax_sim")):
        assert differing(group_rl_spec(config, task, grpo, "local").to_dict(),
                         group_rl_spec(config, task, softmax, "local").to_dict()) == {"method", "estimator"}
    # an ablation cell is SoftmaxGRPO-Exact with another tau / M / step count, nothing else
    plan = plan_runs(config)
    cell, main = (plan.get("train_local", f"{task}/{name}/seed0").spec for name in ("softmax_tau1_m4", "softmax_exact"))
    assert differing(cell.to_dict(), main.to_dict()) <= {"estimator", "rl"}
    assert differing(cell.settings, main.settings) <= {"group_size", "steps"} and cell.estimator.params == {"tau": 1.0}
    # the RL-style baselines keep every shared RL setting
    shared = engine_settings(config, task, "rl", "local")
    for method in ("rl_logit", "raro", "opd"):
        assert rl_baseline_spec(config, task, method, "local").rl.flat() == shared, method
    # the paper's configuration pairs its methods the same way
    paper = validated()
    paper["train"]["methods"] = {"a": {"advantage": "grpo", "reward": "verifier"},
                                 "b": {"advantage": "softmax", "tau": 0.3, "reward": "verifier"}}
    assert differing(group_rl_spec(paper, task, "a", "local").to_dict(),
                     group_rl_spec(paper, task, "b", "local").to_dict()) == {"method", "estimator"}


def test_baseline_and_ablation_targets_and_names():
    from pipeline_lib.plan import plan_runs
    from pipeline_lib.plan.settings import ablation_method
    from pipeline_lib.plan.targets import eval_targets, runs_of

    config = validated()
    plan = plan_runs(config)
    assert ablation_method(0.1, 4) == "softmax_tau0p1_m4" and ablation_method(10.0, 8) == "softmax_tau10_m8"
    assert "results/train/countdown_tiny/raro/seed0/DONE.json" in runs_of(plan, "baseline")
    assert len(runs_of(plan, "ablation")) == len(config["train"]["ablation"]["taus"]) * 2
    evals = eval_targets(plan)
    assert "results/eval/countdown_tiny/opd/seed0/metrics.json" in evals and len(evals) == len(set(evals))
    config["train"]["baselines"]["tasks"] = []
    plan = plan_runs(config)
    assert runs_of(plan, "baseline") == [] and not any("/opd/" in p for p in eval_targets(plan))


def test_paper_baselines_run_where_the_paper_reports_them_and_table1_keeps_to_verifiable_tasks():
    from pipeline_lib.plan import plan_runs
    from pipeline_lib.plan.targets import requests_of, table1_evaluations, table1_tasks, variant_methods
    from tests.jobs.engines.conftest import paper_config

    config = paper_config()
    plan = plan_runs(config)
    method_of = variant_methods(plan)  # RL-Logit's runs are its reward variants: both on each of its tasks
    runs = requests_of(plan, "baseline")
    tasks_of = {m: sorted({r.task for r in runs if method_of.get(r.name, r.name) == m}) for m in
                ("base", "opd", "raro", "rl_logit", "iterative_dpo", "rationalization")}
    assert sorted(r.name for r in runs if r.task == "gsm8k" and r.name.startswith("rl_logit")) == \
        ["rl_logit_logprob", "rl_logit_neg_perplexity"]
    verifiable, everything = ["countdown", "deepmath", "gsm8k"], sorted(config["train"]["tasks"])
    assert tasks_of == {"base": everything, "opd": everything, "raro": ["countdown", "deepmath"],
                        "rl_logit": verifiable, "iterative_dpo": verifiable, "rationalization": verifiable}
    assert sorted(table1_tasks(config)) == verifiable
    assert {p.split("/")[2] for p in table1_evaluations(config, plan)} == set(verifiable)
    assert "results/eval/gsm8k/opd/seed0/metrics.json" in table1_evaluations(config, plan)
    # where it runs is not part of the run's spec
    assert "tasks" not in plan.get("train_trl", "gsm8k/iterative_dpo/seed0").spec.baseline.to_dict()
    # the paper's critic writes its verdict; only the tiny default constrains it
    assert config["train"]["baselines"]["raro"]["critic_decoding"] == "free"


def test_opd_teacher_spec_refuses_a_resized_sft_teacher():
    from pipeline_lib.plan.settings import opd_teacher_spec

    config = validated()
    config["train"]["baselines"]["opd"]["teacher"] |= {"init": "sft", "model": {"layers": 8}}
    with pytest.raises(ValueError, match="init: scratch"):
        opd_teacher_spec(config, "countdown_tiny")
    config["train"]["baselines"]["opd"]["teacher"]["init"] = "scratch"
    assert opd_teacher_spec(config, "countdown_tiny").model["layers"] == 8


@pytest.mark.parametrize("init", ["sft", "scratch"])
def test_the_opd_teacher_starts_from_sft_only_when_its_settings_say_so(init):
    """The teacher's start is its typed settings' ``init``, read once by the plan: from SFT it reads the SFT model
    (an input and ``--init``); from scratch neither, so the SFT run is not a dependency of it."""
    from pipeline_lib.plan import plan_runs

    config = validated()
    config["train"]["baselines"]["opd"]["teacher"]["init"] = init
    teacher = plan_runs(config).get("train_local", "countdown_tiny/opd_teacher/seed0")
    sft = "results/train/countdown_tiny/sft/seed0/DONE.json"
    assert (teacher.inputs.get("init") == sft) == (init == "sft"), teacher.inputs
    assert ("--init" in teacher.args) == (init == "sft"), teacher.args


def test_table1_shows_a_dash_where_a_method_did_not_run(tmp_path):
    from pipeline_lib.paper.results import table1

    frame = pd.DataFrame([
        {"task": "countdown_tiny", "method": "raro", "seed": 0, "pass@1_greedy": 0.25},
        {"task": "countdown_tiny", "method": "sft", "seed": 0, "pass@1_greedy": 0.5},
        {"task": "arith_tiny", "method": "sft", "seed": 0, "pass@1_greedy": 0.4},
        {"task": "countdown_tiny", "method": "base", "seed": 0, "pass@1_greedy": 0.0}])
    table1(frame, "pass@1_greedy", "test", tmp_path / "t1")
    table = pd.read_csv(tmp_path / "t1.csv")
    assert list(table["Method"]) == ["Base", "SFT", "RARO"]
    assert table.set_index("Method").loc["RARO", "arith_tiny"] == "--"
    assert table.set_index("Method").loc["RARO", "countdown_tiny"] == "25.0 (n=1)"
    assert r"RARO & -- & 25.0" in (tmp_path / "t1.tex").read_text()


def test_ablation_table_lays_out_tau_rows_and_m_columns(tmp_path):
    from pipeline_lib.paper.ablation import ablation_data, ablation_table

    cells = {}
    for tau, m, score, length in ((0.1, 4, 0.5, 30.0), (10, 4, 0.25, 20.0), (0.1, 8, 0.75, 10.0)):
        path = tmp_path / f"eval/countdown_tiny/cell_{tau}_{m}/seed0/metrics.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"pass@1_greedy": score, "mean_length_greedy": length}))
        cells[str(path)] = {"task": "countdown_tiny", "seed": 0, "tau": tau, "M": m}
    frame = ablation_data(cells)
    assert sorted(frame["tau"]) == [0.1, 0.1, 10.0]
    ablation_table(frame, "test", tmp_path / "ablation", {"steps": [10, 20]})
    table = pd.read_csv(tmp_path / "ablation.csv", dtype=str).set_index("tau")
    assert table.loc["0.1", "countdown_tiny M=4 pass@1"] == "50.0%"  # one seed: no verdict, so no bold
    assert table.loc["10", "countdown_tiny M=4 len"] == "20.0"
    assert table.loc["10", "countdown_tiny M=8 pass@1"] == "--"
    bad = tmp_path / "eval/countdown_tiny/grpo_exact/seed0/metrics.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{}")
    with pytest.raises(ValueError, match=r"grpo_exact/seed0/metrics.json has no \['tau'\]"):
        ablation_data({str(bad): {"task": "countdown_tiny", "seed": 0, "M": 4}})


def test_every_baseline_and_the_ablation_ran_end_to_end_in_the_main_job(main_tree):
    """data -> SFT -> every baseline + the ablation's cells -> eval -> Table 1 (a row per method) and the ablation: the
    README's main job's tree (tests/conftest.py main_tree), not a second run of the DAG."""
    import yaml

    from tests.conftest import REPO

    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    (task,) = config["train"]["baselines"]["tasks"]
    table = pd.read_csv(main_tree / "results/paper/tables/table1.csv")
    assert list(table["Method"]) == ["Base", "SFT", "Rationalization", "Iterative DPO",
                                     "RL-Logit (variant selected on validation)", "RARO", "OPD",
                                     "GRPO-Sim", "GRPO-Exact", "SoftmaxGRPO-Sim", "SoftmaxGRPO-Exact",
                                     "SoftmaxGRPO-ESS"]
    assert "--" not in set(table[task].astype(str))
    # RL-Logit: both reward variants trained and validated; Table 1's row the selected one, the other supplementary
    selection = json.loads((main_tree / "results/paper/data/rl_logit_selection.json").read_text())
    assert selection["split_read"] == "validation" and task in selection["tasks"]
    assert len(pd.read_csv(main_tree / "results/paper/tables/rl_logit_variants.csv")) == 2
    for method in ("base", "rationalization", "iterative_dpo", "rl_logit_logprob", "rl_logit_neg_perplexity", "raro",
                   "opd", "opd_teacher"):
        run = main_tree / "results/train" / task / method / "seed0"
        assert json.loads((run / "DONE.json").read_text())["kind"] == method.split("_logprob")[0].split(
            "_neg_perplexity")[0], method
        if method.startswith("rl_logit_"):
            assert (main_tree / "results/eval" / task / method / "seed0/validation/metrics.json").is_file(), method
        assert (run / "final/model.safetensors").is_file() and (run / "metrics.jsonl").is_file(), method
        assert any((main_tree / "results/benchmarks").rglob(f"*{method}*")), method
    ablation = pd.read_csv(main_tree / "results/paper/tables/ablation.csv", dtype=str)
    assert list(ablation["tau"]) == [f"{tau:g}" for tau in config["train"]["ablation"]["taus"]]
    for m in (4, 8):  # the schema's default group sizes (the paper's)
        assert {f"{task} M={m} pass@1", f"{task} M={m} len"} <= set(ablation.columns), list(ablation.columns)


def test_paper_config_plans_every_baseline_the_ablation_and_the_scale_study(workflow_copy):
    from tests.conftest import snakemake, with_specs

    result = snakemake(workflow_copy, "-n", "-p", "--configfile", "config/paper.yaml", full_console=True)
    assert result.returncode == 0, result.stderr[-3000:]
    plan = with_specs(result.stdout, workflow_copy)
    # every baseline on its GPU path: Base copies the pretrained model (a local job); the rest are verl / TRL / vLLM
    for rule in ("train_local", "annotate_rationales", "train_trl", "train_verl", "validate_verl", "paper_ablation",
                 "paper_scale", "paper_table1"):
        assert f"rule {rule}:" in plan or f"localrule {rule}:" in plan, rule
    local = [line for line in plan.splitlines() if "python -m pipeline_lib.jobs.engines.local." in line]
    # CPU only for Base
    assert local and all("python -m pipeline_lib.jobs.engines.local.base " in line for line in local)
    for run, entry_point in (("countdown/rationalization", "pipeline_lib.jobs.engines.verl.sft "),
                             ("gsm8k/iterative_dpo", "pipeline_lib.jobs.engines.trl.dpo run"),
                             ("deepmath/raro", "pipeline_lib.jobs.engines.verl.train rl"),
                             ("gsm8k/softmax_tau1p3_m4", "pipeline_lib.jobs.engines.verl.train rl")):
        assert any(f"--run-dir results/train/{run}/seed0 " in line and entry_point in line
                   for line in plan.splitlines()), run
    for path in ("results/train/countdown/raro/seed0/DONE.json", "results/train/poetry/opd/seed0/DONE.json",
                 "results/train/meetingbank/base/seed0/DONE.json",
                 "results/train/gsm8k/softmax_tau1p3_m4/seed0/DONE.json",
                 "results/train/countdown/softmax_exact_at_qwen25_3b/seed0/DONE.json"):
        assert path in plan, path
    assert "results/train/gsm8k/raro/seed0/DONE.json" not in plan  # Table 1 has no RARO entry for GSM8K
    assert "--init Qwen/Qwen2.5-1.5B" in plan
    assert '"hub": "Qwen/Qwen3-8B"' in plan  # OPD's verl run distils from the paper's teacher (train.baselines.opd)


def test_scale_table_groups_runs_by_base_model(tmp_path):
    from pipeline_lib.paper.scale import scale_data, scale_table

    cells = {}
    for run, method, model, score in (("grpo_exact", "grpo_exact", "Small", 0.5),
                                      ("softmax_exact", "softmax_exact", "Small", 0.75),
                                      ("grpo_exact_at_big", "grpo_exact", "Big", 0.25),
                                      ("softmax_exact_at_big", "softmax_exact", "Big", 1.0)):
        path = tmp_path / f"eval/countdown/{run}/seed0/metrics.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"pass@1_greedy": score}))
        cells[str(path)] = {"task": "countdown", "seed": 0, "method": method, "model": model}
    frame = scale_data(cells)
    scale_table(frame, "test", tmp_path / "scale")
    table = pd.read_csv(tmp_path / "scale.csv", dtype=str)
    assert list(zip(table["Base model"], table["Method"], table["countdown"], strict=True)) == [
        ("Small", "GRPO-Exact", "50.0"), ("Small", "SoftmaxGRPO-Exact", "75.0"),
        ("Big", "GRPO-Exact", "25.0"), ("Big", "SoftmaxGRPO-Exact", "100.0")]  # one seed: no verdict, no bold
    with pytest.raises(ValueError, match=r"grpo_exact_at_big/seed0/metrics.json has no \['model'\]"):
        scale_data({str(tmp_path / "eval/countdown/grpo_exact_at_big/seed0/metrics.json"):
                    {"task": "countdown", "seed": 0, "method": "grpo_exact"}})
