"""verl's per-row log-prob fallback replaced by the project's chunked gather (pipeline_lib.jobs.engines.verl.logprobs):
equal to verl's own ``logprobs_from_logits_v2``, reached by verl's callers after the plugin loads, differentiable."""

import importlib

import pytest
import torch
import verl  # noqa: F401  (loads the verl.plugins entry points, ours among them)
from verl.utils import torch_functional

from pipeline_lib.core.rl.logprobs import chunked_logprobs
from pipeline_lib.jobs.engines.verl.logprobs import FALLBACK, install, verl_fallback

#: verl 0.9.1's modules that call ``logprobs_from_logits`` (imported by name or as the module's own global)
CALLERS = ["verl.utils.torch_functional", "verl.workers.engine.fsdp.transformer_impl",
           "verl.workers.rollout.naive.naive_rollout"]  # and prefix_grouper_utils: needs the optional prefix_grouper


def sample(rows: int, vocab: int, dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, vocab, generator=gen) * 4).to(dtype), torch.randint(0, vocab, (rows,), generator=gen)


def test_the_plugin_replaced_the_fallback_once():
    assert not torch_functional.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE  # else verl's fused kernel runs, not a fallback
    current = getattr(torch_functional, FALLBACK)
    assert current.__module__ == "pipeline_lib.jobs.engines.verl.logprobs"
    original = verl_fallback()
    assert original.__module__ == "verl.utils.torch_functional" and original.__name__ == FALLBACK
    install()
    install(torch_functional)
    assert getattr(torch_functional, FALLBACK) is current and verl_fallback() is original


@pytest.mark.parametrize("name", CALLERS)
def test_verls_callers_reach_the_chunked_path(name):
    module = importlib.import_module(name)
    dispatcher = module.logprobs_from_logits
    assert dispatcher.__globals__[FALLBACK] is getattr(torch_functional, FALLBACK)
    logits, labels = sample(9, 151_936, torch.bfloat16)
    out = dispatcher(logits=logits, labels=labels)
    assert out.dtype == torch.float32  # verl's loop returns bf16 for bf16 logits; the chunked path float32
    torch.testing.assert_close(out, chunked_logprobs(logits, labels), rtol=0, atol=0)


def test_equals_verls_own_fallback():
    original = verl_fallback()
    logits, labels = sample(41, 151_936, torch.float32, seed=1)
    torch.testing.assert_close(chunked_logprobs(logits, labels, max_chunk_bytes=6 * 151_936 * 4),
                               original(logits, labels), rtol=1e-6, atol=1e-6)
    # bf16: verl's loop rounds each log-prob to bf16; ours (float32) rounded to bf16 is within one bf16 ulp of it
    logits, labels = sample(41, 151_936, torch.bfloat16, seed=2)
    ours = chunked_logprobs(logits, labels, max_chunk_bytes=6 * 151_936 * 4)
    theirs = original(logits, labels)
    assert theirs.dtype == torch.bfloat16
    torch.testing.assert_close(ours.to(torch.bfloat16), theirs, rtol=2**-7, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_pass_gradient_through_verls_dispatcher(dtype):
    logits, labels = sample(3 * 5, 4000, dtype, seed=3)
    upstream = torch.randn(3, 5, generator=torch.Generator().manual_seed(4))
    ours = logits.reshape(3, 5, 4000).clone().requires_grad_(True)
    (torch_functional.logprobs_from_logits(ours, labels.reshape(3, 5)) * upstream).sum().backward()
    theirs = logits.reshape(3, 5, 4000).clone().requires_grad_(True)
    (verl_fallback()(theirs, labels.reshape(3, 5)).float() * upstream).sum().backward()
    ref = logits.reshape(3, 5, 4000).double().requires_grad_(True)
    logp = torch.log_softmax(ref, -1).gather(-1, labels.reshape(3, 5, 1)).squeeze(-1)
    (logp * upstream.double()).sum().backward()
    tol = {"rtol": 2**-8, "atol": 1e-6} if dtype == torch.bfloat16 else {"rtol": 1e-6, "atol": 1e-6}
    torch.testing.assert_close(ours.grad.double(), ref.grad, **tol)
    if dtype == torch.float32:  # verl's bf16 loop differentiates a bf16 log-softmax: further from the reference
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-6)
