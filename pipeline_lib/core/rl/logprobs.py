"""Per-token log-probabilities of labels under logits: a chunked, vectorised log-softmax gather.

Why: without flash-attn (the GPU envs state ``sdpa``), verl 0.9.1's ``logprobs_from_logits`` falls back to a Python
loop over rows (``logprobs_from_logits_v2``); with ``use_remove_padding`` a row is one token, so every old-log-prob,
reference and training pass runs one log-softmax per token at a vocabulary of 151,936. :func:`chunked_logprobs`
does the same arithmetic for a block of rows at once: each block is upcast to float32 (float64 stays float64), so
the extra memory is bounded by ``max_chunk_bytes`` whatever the number of tokens, and bf16 logits get float32
accuracy (as flash-attn's cross-entropy kernel, verl's fast path, gives them).

The backward pass is written out (``softmax - one_hot``, times the incoming gradient) and runs block by block too:
autograd through a plain chunked forward would keep every block's float32 copy alive until backward, i.e. the
whole float32 upcast the chunking avoids. Only the logits (alive anyway) and one float32 log-normaliser per row are
saved. The function keeps no state, so any number of threads and processes may call it at once.
"""

from __future__ import annotations

import torch

__all__ = ["CPU_CHUNK_BYTES", "MAX_CHUNK_BYTES", "chunk_rows", "chunked_logprobs"]

#: The float32 working copy of one block of rows may take at most this many bytes on an accelerator (64 MiB: 110 rows
#: at 151,936): few, large kernels.
MAX_CHUNK_BYTES = 64 * 2**20
#: ... and on CPU, where a block that stays in cache is fastest (4 MiB: 6 rows at 151,936; measured with
#: ``benchmarks/logprobs.py``: 64 MiB blocks were 4x slower than 4 MiB ones on one core).
CPU_CHUNK_BYTES = 4 * 2**20


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def chunk_rows(vocab: int, dtype: torch.dtype = torch.float32, max_chunk_bytes: int = MAX_CHUNK_BYTES) -> int:
    """Rows per block so that one block's upcast copy (``rows x vocab`` in the compute dtype) fits
    ``max_chunk_bytes`` (at least one row)."""
    if vocab < 1 or max_chunk_bytes < 1:
        raise ValueError(f"chunk_rows: vocab ({vocab}) and max_chunk_bytes ({max_chunk_bytes}) must be positive")
    item = torch.empty((), dtype=_compute_dtype(dtype)).element_size()
    return max(1, max_chunk_bytes // (vocab * item))


class _ChunkedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, logits: torch.Tensor, labels: torch.Tensor,
                rows: int) -> torch.Tensor:
        compute = _compute_dtype(logits.dtype)
        n = logits.shape[0]
        out = torch.empty(n, dtype=compute, device=logits.device)
        lse = torch.empty(n, dtype=compute, device=logits.device)
        for start in range(0, n, rows):
            block = logits[start:start + rows].to(compute)
            lse[start:start + rows] = torch.logsumexp(block, dim=-1)
            picked = block.gather(-1, labels[start:start + rows].unsqueeze(-1)).squeeze(-1)
            out[start:start + rows] = picked - lse[start:start + rows]
        ctx.save_for_backward(logits, labels, lse)
        ctx.rows = rows
        return out

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx,
                 grad_out: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        logits, labels, lse = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None
        rows = ctx.rows
        grad = torch.empty_like(logits)
        compute = lse.dtype
        for start in range(0, logits.shape[0], rows):
            stop = start + rows
            g = grad_out[start:stop].to(compute).unsqueeze(-1)
            # d/dx (x_y - logsumexp x) = one_hot(y) - softmax(x)
            block = torch.exp(logits[start:stop].to(compute) - lse[start:stop].unsqueeze(-1)).mul_(-g)
            block.scatter_add_(-1, labels[start:stop].unsqueeze(-1), g)
            grad[start:stop] = block.to(grad.dtype)
        return grad, None, None


def chunked_logprobs(logits: torch.Tensor, labels: torch.Tensor, max_chunk_bytes: int | None = None) -> torch.Tensor:
    """``log_softmax(logits)[..., label]`` for logits of shape ``(..., vocab)`` and integer labels of shape ``(...)``.

    Returns float32 (float64 for float64 logits), shape ``labels.shape``; exact up to float32 rounding for bf16,
    fp16 and fp32 logits; differentiable with respect to ``logits`` (the gradient has the logits' dtype). Blocks of
    rows take at most ``max_chunk_bytes`` in the compute dtype (default: :data:`CPU_CHUNK_BYTES` on CPU,
    :data:`MAX_CHUNK_BYTES` elsewhere)."""
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"chunked_logprobs: logits {tuple(logits.shape)} need labels of shape "
                         f"{tuple(logits.shape[:-1])}, got {tuple(labels.shape)}")
    if labels.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        raise TypeError(f"chunked_logprobs: labels must be integer token ids, got {labels.dtype}")
    if not logits.is_floating_point():
        raise TypeError(f"chunked_logprobs: logits must be floating point, got {logits.dtype}")
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)
    flat_labels = labels.reshape(-1).to(torch.int64)
    if max_chunk_bytes is None:
        max_chunk_bytes = CPU_CHUNK_BYTES if logits.device.type == "cpu" else MAX_CHUNK_BYTES
    rows = chunk_rows(vocab, logits.dtype, max_chunk_bytes)
    return _ChunkedLogprobs.apply(flat, flat_labels, rows).reshape(labels.shape)
