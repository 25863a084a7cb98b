"""The chunked log-softmax gather (pipeline_lib.core.rl.logprobs) against a float64 reference (to 1e-6, relative and
absolute: a float32 result of magnitude ~20 has ulps of ~2e-6): values, gradients,
dtypes, block boundaries and concurrent callers."""

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from pipeline_lib.core.rl.logprobs import CPU_CHUNK_BYTES, chunk_rows, chunked_logprobs

VOCAB = 151_936


def reference(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.double(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def sample(rows: int, vocab: int, dtype: torch.dtype, seed: int = 0, shape: tuple[int, ...] | None = None):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(rows, vocab, generator=gen) * 4).to(dtype)
    labels = torch.randint(0, vocab, (rows,), generator=gen)
    if shape is not None:
        logits, labels = logits.reshape(*shape, vocab), labels.reshape(shape)
    return logits, labels


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("rows_per_block", [1, 7, 50, 64])
def test_equals_the_float64_reference_at_any_block_size(dtype, rows_per_block):
    logits, labels = sample(50, 1000, dtype, shape=(5, 10))
    item = 8 if dtype == torch.float64 else 4
    assert chunk_rows(1000, dtype, rows_per_block * 1000 * item) == rows_per_block
    out = chunked_logprobs(logits, labels, max_chunk_bytes=rows_per_block * 1000 * item)
    assert out.shape == labels.shape
    assert out.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    torch.testing.assert_close(out.double(), reference(logits, labels), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_equals_the_reference_at_the_papers_vocabulary(dtype):
    logits, labels = sample(37, VOCAB, dtype, seed=1)
    out = chunked_logprobs(logits, labels, max_chunk_bytes=5 * VOCAB * 4 + 3)  # blocks of 5: 37 = 7 x 5 + 2
    torch.testing.assert_close(out.double(), reference(logits, labels), rtol=1e-6, atol=1e-6)


def test_default_blocks_by_device():
    logits, labels = sample(20, 1000, torch.float32)
    out = chunked_logprobs(logits, labels)
    torch.testing.assert_close(out.double(), reference(logits, labels), rtol=1e-6, atol=1e-6)
    assert chunk_rows(VOCAB, torch.float32, CPU_CHUNK_BYTES) == 6


def test_block_memory_is_bounded():
    rows = chunk_rows(VOCAB, torch.bfloat16)
    assert rows * VOCAB * 4 <= 64 * 2**20 < (rows + 1) * VOCAB * 4
    assert chunk_rows(VOCAB, torch.float32, max_chunk_bytes=1) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_gradient_equals_the_reference(dtype):
    logits, labels = sample(23, 300, dtype, seed=2)
    upstream = torch.randn(23, generator=torch.Generator().manual_seed(3))
    ours = logits.clone().requires_grad_(True)
    (chunked_logprobs(ours, labels, max_chunk_bytes=4 * 300 * 8) * upstream).sum().backward()
    ref = logits.double().requires_grad_(True)
    (reference(ref, labels) * upstream.double()).sum().backward()
    assert ours.grad.dtype == dtype
    # bf16 gradients are the float32 gradient rounded once to bf16 (relative 2^-8)
    tol = {"rtol": 2**-8, "atol": 1e-6} if dtype == torch.bfloat16 else {"rtol": 1e-6, "atol": 1e-6}
    torch.testing.assert_close(ours.grad.double(), ref.grad, **tol)


def test_gradcheck_in_float64():
    logits, labels = sample(6, 11, torch.float64, seed=4)
    fn = lambda x: chunked_logprobs(x, labels, max_chunk_bytes=4 * 11 * 8)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (logits.requires_grad_(True),))


def test_concurrent_callers_get_their_own_answers():
    inputs = [sample(40, 2000, torch.bfloat16, seed=seed) for seed in range(8)]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda pair: chunked_logprobs(*pair, max_chunk_bytes=3 * 2000 * 4), inputs))
    for (logits, labels), out in zip(inputs, outs, strict=True):
        torch.testing.assert_close(out.double(), reference(logits, labels), rtol=1e-6, atol=1e-6)


def test_bad_inputs_are_named():
    logits, labels = sample(4, 10, torch.float32)
    with pytest.raises(ValueError, match=r"need labels of shape \(4,\), got \(3,\)"):
        chunked_logprobs(logits, labels[:3])
    with pytest.raises(TypeError, match="integer token ids"):
        chunked_logprobs(logits, labels.float())
    with pytest.raises(ValueError, match="must be positive"):
        chunk_rows(10, max_chunk_bytes=0)
