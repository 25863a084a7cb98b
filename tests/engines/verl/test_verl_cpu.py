"""verl's CPU support (pipeline_lib.engines.verl.cpu): inert unless PIPELINE_VERL_CPU=1, a bad value is named, and the
transformers rollout samples from the weights the actor last sent (the preflight runs the whole path through verl)."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from pipeline_lib.engines.verl.cpu import ENV, HFRolloutServer, cpu_enabled, cpu_overrides
from pipeline_lib.engines.verl.preflight import KINDS, PreflightError, load_preflight_config

PROBE = ("import verl, pipeline_lib.engines.verl.cpu as cpu; from verl.utils.device import get_device_name; "
         "print(cpu._installed, get_device_name())")


def _probe(value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "VERL_PLATFORM")}
    if value is not None:
        env[ENV] = value
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)


def test_cpu_support_only_when_asked():
    off, on = _probe(None), _probe("1")
    assert off.returncode == 0 and off.stdout.split()[0] == "False", off.stderr[-2000:]
    assert on.returncode == 0 and on.stdout.split() == ["True", "cpu"], on.stderr[-2000:]


def test_bad_switch_value_is_named(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert cpu_enabled() is False
    for value, enabled in (("0", False), ("1", True)):
        monkeypatch.setenv(ENV, value)
        assert cpu_enabled() is enabled
    monkeypatch.setenv(ENV, "yes")
    with pytest.raises(ValueError, match=f"environment variable {ENV} must be 1 to run verl on CPU.*got 'yes'"):
        cpu_enabled()


def test_cpu_overrides_swap_only_device_settings():
    rl = cpu_overrides("rl", gpus=2)
    assert "actor_rollout_ref.rollout.name=hf_cpu" in rl and "+ray_kwargs.ray_init.num_gpus=2" in rl
    assert not any(key.split("=")[0].lstrip("+").startswith(("algorithm.", "actor_rollout_ref.actor.optim"))
                   for key in rl)


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    """Two tiny Qwen2 checkpoints with different random weights (the rollout's start and the actor after updates)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         tie_word_embeddings=True, eos_token_id=63, pad_token_id=0)
    paths = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        path = tmp_path_factory.mktemp(f"model{seed}")
        Qwen2ForCausalLM(config).save_pretrained(path)
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast

        tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({f"t{i}": i for i in range(64)},
                                                                                        unk_token="t0")),
                                            eos_token="t63", pad_token="t0")
        tokenizer.save_pretrained(path)
        paths.append(path)
    return paths


def _sequence_logprobs(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logps = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    return logps[len(prompt) - 1:-1].gather(1, torch.tensor(tokens)[:, None])[:, 0]


def test_rollout_samples_from_the_weights_it_was_sent(two_models):
    """After load_weights, the rollout's log-probs of what it samples are the new model's (to float error), and
    measurably not the old one's: the gap the preflight bounds is the one a stale rollout would show."""
    import asyncio

    from transformers import AutoModelForCausalLM

    start, updated = two_models
    rollout = SimpleNamespace(prompt_length=8, response_length=12)
    server = HFRolloutServer(rollout, SimpleNamespace(path=str(start)), seed=0)
    new = AutoModelForCausalLM.from_pretrained(updated, dtype=torch.float32).eval()
    old = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32).eval()
    server.load_weights({name: tensor.clone() for name, tensor in new.state_dict().items()}, global_steps=1)
    prompt = [3, 4, 5, 6]
    output = asyncio.run(server.generate(prompt, {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True},
                                         request_id="r"))
    assert output.extra_fields["global_steps"] == 1 and len(output.token_ids) >= 1
    rollout_logps = torch.tensor(output.log_probs)
    assert torch.allclose(rollout_logps, _sequence_logprobs(new, prompt, output.token_ids), atol=1e-5)
    assert (rollout_logps - _sequence_logprobs(old, prompt, output.token_ids)).abs().max() > 1e-2


def test_teacher_prompt_logprobs_in_vllm_layout(two_models):
    """OPD's teacher reads per-position next-token log-probs plus one dummy row (verl's extract_prompt_logprobs)."""
    import asyncio

    from transformers import AutoModelForCausalLM

    path = two_models[0]
    server = HFRolloutServer(SimpleNamespace(prompt_length=8, response_length=4), SimpleNamespace(path=str(path)),
                             seed=0)
    ids = [3, 4, 5, 6, 7]
    output = asyncio.run(server.generate(ids, {"max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0},
                                         request_id="t"))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    expected = _sequence_logprobs(model, ids[:1], ids[1:])
    got = torch.tensor(output.extra_fields["prompt_logprobs"])[:, 0]
    assert got.shape[0] == len(ids) and output.extra_fields["prompt_ids"][:-1] == [[t] for t in ids[1:]]
    assert torch.allclose(got[:-1], expected, atol=1e-5) and got[-1] == 0.0


def test_preflight_config_names_what_is_wrong(tmp_path):
    good = {"base": "config/paper.yaml", "task": "countdown_tiny", "paper_task": "countdown", "row": {}, "sft": {},
            "model": {}, "kinds": list(KINDS), "seed": 0, "val_prompts": 2}
    assert load_preflight_config(good)[0]["task"] == "countdown_tiny"
    with pytest.raises(PreflightError, match="lacks \\['row'\\]"):
        load_preflight_config({k: v for k, v in good.items() if k != "row"})
    with pytest.raises(PreflightError, match="unknown \\['ppo'\\]"):
        load_preflight_config({**good, "kinds": ["ppo"]})
    with pytest.raises(PreflightError, match="paper_task 'nope'"):
        load_preflight_config({**good, "paper_task": "nope"})
