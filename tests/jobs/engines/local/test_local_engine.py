"""The local engine on tiny shapes: SFT learns, RL updates, resume reproduces, evaluation scores."""

import json

import pytest
import torch
from transformers import AutoTokenizer

from pipeline_lib.core.model import build_model, load_model, save_model_atomic
from pipeline_lib.jobs.engines.local import rl as rl_module
from pipeline_lib.jobs.engines.local import sft as sft_module
from pipeline_lib.jobs.eval.evaluate import evaluate, pass_at_k
from tests.conftest import MODEL, crash_after, params, rl_spec, sft_spec


def test_sft_reduces_loss_and_writes_a_loadable_checkpoint(tiny, tmp_path):
    spec = sft_spec(steps=30, checkpoint_every=30)
    sft_module.train_sft(spec, tiny / "data/sft_train.parquet", tiny / "tok", tmp_path, 0, progress=False)
    losses = [json.loads(line)["train/loss"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
    assert json.loads((tmp_path / "DONE.json").read_text())["final_step"] == 30
    load_model(tmp_path / "final")


def test_two_rl_steps_change_the_parameters(tiny, tmp_path):
    rl_module.train_rl(rl_spec(steps=2), tiny / "data/rl_train.parquet", tiny / "init", tmp_path, 0, progress=False)
    before, after = params(tiny / "init"), params(tmp_path / "final")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    rollouts = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 and len(rollouts[0]["advantage"]) == 12
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all((m["softmaxgrpo/reward_timeouts"], m["softmaxgrpo/reward_failures"]) == (0, 0)
               for m in metrics)  # logged every step
    for record in rollouts:  # SoftmaxGRPO advantages sum to zero within each group
        for group in range(3):
            assert abs(sum(a for a, g in zip(record["advantage"], record["group"], strict=True) if g == group)) < 1e-5


def test_rl_resume_after_a_kill_reproduces_the_uninterrupted_run(tiny, tmp_path, monkeypatch):
    data, init = tiny / "data/rl_train.parquet", tiny / "init"
    rl_module.train_rl(rl_spec(), data, init, tmp_path / "straight", 0, progress=False)
    crash_after(rl_module, 2, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        rl_module.train_rl(rl_spec(), data, init, tmp_path / "killed", 0, progress=False)
    monkeypatch.undo()
    rl_module.train_rl(rl_spec(), data, init, tmp_path / "killed", 0, progress=False)
    a, b = params(tmp_path / "straight/final"), params(tmp_path / "killed/final")
    for key in a:
        torch.testing.assert_close(a[key], b[key])
    assert (tmp_path / "straight/rollouts.jsonl").read_text() == (tmp_path / "killed/rollouts.jsonl").read_text()
    # another config does not resume this state: test_resume_rule.py


def test_sft_resume_reproduces(tiny, tmp_path, monkeypatch):
    data, tok = tiny / "data/sft_train.parquet", tiny / "tok"
    sft_module.train_sft(sft_spec(), data, tok, tmp_path / "straight", 0, progress=False)
    crash_after(sft_module, 3, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        sft_module.train_sft(sft_spec(), data, tok, tmp_path / "killed", 0, progress=False)
    monkeypatch.undo()
    sft_module.train_sft(sft_spec(), data, tok, tmp_path / "killed", 0, progress=False)
    a, b = params(tmp_path / "straight/final"), params(tmp_path / "killed/final")
    for key in a:
        torch.testing.assert_close(a[key], b[key])


def test_evaluation_scores_with_the_verifier(tiny):
    metrics, generations = evaluate(tiny / "init", tiny / "data/rl_test.parquet",
                                    {"batch_size": 8, "samples": 2, "max_new_tokens": 8, "temperature": 1.0,
                                     "pass_k": [2]}, 0)
    assert metrics["prompts"] == 8 and len(generations) == 8 * 3
    assert 0 <= metrics["pass@1_greedy"] <= 1 and metrics["mean_length_greedy"] > 0
    assert {"score", "valid_expression"} <= set(generations[0])
    assert {k: metrics[k] for k in metrics if k.startswith("reward_")} == {
        f"reward_{kind}_{mode}": 0 for kind in ("timeouts", "failures", "unscorable") for mode in ("greedy", "sample")}


def test_pass_at_k_estimator():
    assert pass_at_k(4, 0, 2) == 0.0 and pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)


def test_a_rerun_after_an_input_changed_trains_again_instead_of_resuming_the_finished_run(tiny, tmp_path):
    """Snakemake reruns a job whose input changed by deleting DONE.json and running it again, with the same paths:
    the rerun must train on the new input from step 0, not resume at the old run's last step."""
    init = tmp_path / "init"
    save_model_atomic(load_model(tiny / "init"), AutoTokenizer.from_pretrained(tiny / "init"), init)
    data, run = tiny / "data/rl_train.parquet", tmp_path / "run"
    rl_module.train_rl(rl_spec(steps=2), data, init, run, 0, progress=False)
    assert not (run / "checkpoint").exists()  # a finished run keeps only final/
    sft_module.train_sft(sft_spec(), tiny / "data/sft_train.parquet", tiny / "tok", tmp_path / "sft", 0, progress=False)
    assert not (tmp_path / "sft/checkpoint").exists()
    save_model_atomic(load_model(tmp_path / "sft/final"), AutoTokenizer.from_pretrained(
        tmp_path / "sft/final"), init)  # the upstream model changed in place
    (run / "DONE.json").unlink()
    rl_module.train_rl(rl_spec(steps=2), data, init, run, 0, progress=False)
    rl_module.train_rl(rl_spec(steps=2), data, init, tmp_path / "fresh", 0, progress=False)
    rerun, fresh = params(run / "final"), params(tmp_path / "fresh/final")
    for key in fresh:
        torch.testing.assert_close(rerun[key], fresh[key])
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2


def _left_padded(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(p)
        mask[row, width - len(p):] = 1
    return ids, mask


def test_greedy_sampling_equals_transformers_generate(tiny):
    """The sampler's own decode loop continues each left-padded row exactly as ``model.generate`` does."""
    from pipeline_lib.core.model import generate

    tokenizer = AutoTokenizer.from_pretrained(tiny / "tok")
    torch.manual_seed(3)
    model = build_model(tokenizer, MODEL, 1).eval()
    with torch.no_grad():  # sharpen the random model: greedy continuations depend on attention, hence on positions
        for name, weight in model.named_parameters():
            if "self_attn" in name or "lm_head" in name or "embed" in name:
                weight.mul_(6)
    texts = ["Use [1, 2, 3]", "make 7", "make 7", "make 7", "each number once. Answer in", "x", "x"]
    prompts = [tokenizer.encode(text) for text in texts]  # repeated prompts share one prefill, as a group's do
    ours = generate(model, prompts, max_new_tokens=12, greedy=True, temperature=1.0, eos_id=tokenizer.eos_token_id,
                    pad_id=tokenizer.pad_token_id)
    ids, mask = _left_padded(prompts, tokenizer.pad_token_id)
    theirs = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    expected = []
    for row in theirs[:, ids.shape[1]:].tolist():
        expected.append(row[: row.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in row else row)
    assert ours == expected
    assert len({tuple(r) for r in ours}) > 1


def test_sampling_draws_tokens_with_the_softmax_probabilities(tiny):
    """Inverse-CDF sampling: first-token frequencies over 20,000 draws match softmax(logits / T) (temperature 2)."""
    from pipeline_lib.core.model import generate

    tokenizer = AutoTokenizer.from_pretrained(tiny / "tok")
    model = build_model(tokenizer, MODEL, 2).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8)
    prompt = tokenizer.encode("Use [1, 2, 3] and + - * to make 6")
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1] / 2.0, dim=-1)
    torch.manual_seed(0)
    draws = generate(model, [prompt] * 20_000, max_new_tokens=1, greedy=False, temperature=2.0,
                     eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id)
    counts = torch.bincount(torch.tensor([d[0] for d in draws]), minlength=len(probs)).double()
    expected = 20_000 * probs.double()
    frequent = expected > 50
    assert frequent.sum() >= 3  # several tokens are likely: the check compares a distribution, not one mode
    # every frequent token within 5 binomial standard deviations, and no draw of a token with probability < 1e-7
    sd = (expected * (1 - probs.double())).sqrt()
    assert ((counts - expected).abs()[frequent] < 5 * sd[frequent]).all()
    assert counts[probs < 1e-7].sum() == 0


def test_shared_prompt_logprobs_equal_one_forward_per_row_values_and_gradients(tiny):
    """Rows of a group share their prompt's forward pass: the same log-probs and gradients as each row on its own."""
    from pipeline_lib.core.model import pack, response_logprobs

    tokenizer = AutoTokenizer.from_pretrained(tiny / "tok")
    model = build_model(tokenizer, MODEL, 4)
    with torch.no_grad():  # attention that matters, so a wrong position or mask would show
        for name, weight in model.named_parameters():
            if "self_attn" in name:
                weight.mul_(4)
    generator = torch.Generator().manual_seed(0)
    prompts = [tokenizer.encode(t) for t in ["Use [1, 2, 3] and + - * to make 6", "make 7", "x y z w v"]]
    group_size = 4
    rows = [p for p in prompts for _ in range(group_size)]
    responses = [torch.randint(5, 300, (int(torch.randint(1, 12, (1,), generator=generator)),),
                               generator=generator).tolist() for _ in rows]
    ids, attention, response = pack(rows, responses, tokenizer.pad_token_id)

    shared = response_logprobs(model, ids, attention, response)
    (shared * torch.linspace(0.5, 1.5, shared.numel()).view_as(shared)).sum().backward()
    shared_grads = {name: w.grad.clone() for name, w in model.named_parameters()}
    model.zero_grad()
    alone = torch.cat([response_logprobs(model, ids[i:i + 1], attention[i:i + 1], response[i:i + 1])
                       for i in range(len(rows))])
    (alone * torch.linspace(0.5, 1.5, alone.numel()).view_as(alone)).sum().backward()

    assert torch.equal(shared != 0, response.bool())
    torch.testing.assert_close(shared, alone, atol=1e-5, rtol=1e-5)
    for name, w in model.named_parameters():
        torch.testing.assert_close(shared_grads[name], w.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_grouped_kv_attention_equals_transformers_sdpa_and_is_not_saved(tiny, tmp_path):
    """The local engine's "sdpa" attention (key/value heads not repeated on CPU) gives the stock SDPA's logits on a
    padded batch and its gradients up to summation order; a checkpoint saves as a plain sdpa model."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from pipeline_lib.core.model import _grouped_sdpa_attention, pack, response_logprobs, use_grouped_sdpa

    tokenizer = AutoTokenizer.from_pretrained(tiny / "tok")
    model = build_model(tokenizer, MODEL, 5)
    assert model.config._attn_implementation == "sdpa"
    assert AttentionInterface._global_mapping["sdpa"] is _grouped_sdpa_attention
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # heads really are grouped
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "self_attn" in name:
                weight.mul_(4)
    save_model_atomic(model, tokenizer, tmp_path / "model")
    assert json.loads((tmp_path / "model/config.json").read_text()).get("_attn_implementation") in (None, "sdpa")

    prompts = [tokenizer.encode(t) for t in ["Use [1, 2, 3] and + - * to make 6", "make 7", "x y"]]
    ids, attention, response = pack(prompts, [[7, 8, 9, 10], [11], [12, 13]], tokenizer.pad_token_id)
    left_ids, left_mask = _left_padded(prompts, tokenizer.pad_token_id)
    weights = torch.linspace(0.5, 1.5, ids.numel()).view_as(ids)
    results = []
    try:
        for attention_function in (_grouped_sdpa_attention, sdpa_attention_forward):
            AttentionInterface.register("sdpa", attention_function)
            model.zero_grad()
            with torch.no_grad():
                logits = model(input_ids=left_ids, attention_mask=left_mask).logits
            (response_logprobs(model, ids, attention, response) * weights).sum().backward()
            results.append((logits, {name: w.grad.clone() for name, w in model.named_parameters()}))
    finally:
        use_grouped_sdpa(model)
    (grouped_logits, grouped_grads), (stock_logits, stock_grads) = results
    assert torch.equal(grouped_logits, stock_logits)
    for name, grad in grouped_grads.items():
        torch.testing.assert_close(grad, stock_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_rows_that_end_early_leave_the_batch_without_changing_the_other_rows(tiny):
    """Greedy decoding with an end token many rows write at different steps (so ended rows leave the batch
    mid-generation) equals ``model.generate``, row by row."""
    import pandas as pd

    from pipeline_lib.core.model import generate

    tokenizer = AutoTokenizer.from_pretrained(tiny / "tok")
    model = build_model(tokenizer, MODEL, 7).eval()
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "self_attn" in name or "lm_head" in name or "embed" in name:
                weight.mul_(6)
    frame = pd.read_parquet(tiny / "data/rl_train.parquet")
    prompts = [tokenizer.encode(p[0]["content"][: 8 + 3 * i]) for i, p in enumerate(frame["prompt"])]
    unended = generate(model, prompts, max_new_tokens=16, greedy=True, temperature=1.0, eos_id=-1,
                       pad_id=tokenizer.pad_token_id)
    first: dict[int, dict[int, int]] = {}  # token -> row -> first step it is written (before the last step)
    for row, tokens in enumerate(unended):
        for step, token in enumerate(tokens[:-1]):
            first.setdefault(token, {}).setdefault(row, step)
    eos = max(first, key=lambda t: (len(set(first[t].values())), len(first[t])))
    ours = generate(model, prompts, max_new_tokens=16, greedy=True, temperature=1.0, eos_id=eos,
                    pad_id=tokenizer.pad_token_id)
    ends = [len(row) for row in ours if row[-1] == eos]
    assert 4 * len(ends) >= len(prompts) and len(set(ends)) >= 4, ends  # many rows end, at different steps
    ids, mask = _left_padded(prompts, tokenizer.pad_token_id)
    theirs = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=16, do_sample=False,
                            eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)
    expected = [row[: row.index(eos) + 1] if eos in row else row for row in theirs[:, ids.shape[1]:].tolist()]
    assert ours == expected
    assert [row[: len(o)] for row, o in zip(unended, ours, strict=True)] == ours  # ending changes no other row
