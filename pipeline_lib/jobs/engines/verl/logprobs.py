"""verl's per-row log-prob fallback replaced by the project's chunked log-softmax gather, in every verl process.

verl 0.9.1's ``verl.utils.torch_functional.logprobs_from_logits`` picks flash-attn's cross-entropy kernel when it is
installed, torch_npu's on Ascend, and otherwise ``logprobs_from_logits_v2``: a Python loop over rows, i.e. over tokens
under ``use_remove_padding`` (one log-softmax per token at a vocabulary of 151,936). The GPU envs have no flash-attn
(attention ``sdpa``), so the loop is what every old-log-prob, reference and training pass would run.

:func:`install` replaces that fallback, ``torch_functional.logprobs_from_logits_v2``, with
:func:`pipeline_lib.core.rl.logprobs.chunked_logprobs`. The dispatcher looks the fallback up in its module's globals
at each call, so every caller reaches the replacement, including the modules that imported ``logprobs_from_logits``
by name (the FSDP, automodel and torchtitan engines, the naive rollout, prefix grouper) and the dispatcher's own
callers in ``torch_functional``; verl's fused kernels keep priority where they are installed. Like flash-attn's
kernel, the replacement returns float32 log-probs for bf16 logits (the loop returned bf16).

It is installed by the estimators' ``verl.plugins`` entry point (:mod:`.estimators`), which ``import verl`` loads in
the driver and in every Ray worker; :func:`install` is idempotent and takes a lock, the only shared state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType

import torch

from pipeline_lib.core.rl.logprobs import chunked_logprobs

__all__ = ["FALLBACK", "MODULE", "install", "verl_fallback"]

#: verl's module holding the dispatcher and the per-row fallback, and the fallback's name there.
MODULE = "verl.utils.torch_functional"
FALLBACK = "logprobs_from_logits_v2"
_ORIGINAL = "__pipeline_verl_original__"
_lock = threading.Lock()


def _replacement(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def logprobs_from_logits_chunked(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """verl's ``logprobs_from_logits_v2`` signature, computed by :func:`chunked_logprobs`."""
        return chunked_logprobs(logits, labels)

    setattr(logprobs_from_logits_chunked, _ORIGINAL, original)
    return logprobs_from_logits_chunked


def install(module: ModuleType | None = None) -> None:
    """Replace ``logprobs_from_logits_v2`` in verl's ``torch_functional`` (imported unless given); idempotent."""
    if module is None:
        import importlib

        module = importlib.import_module(MODULE)
    with _lock:
        current = getattr(module, FALLBACK)
        if not hasattr(current, _ORIGINAL):
            setattr(module, FALLBACK, _replacement(current))


def verl_fallback(module: ModuleType | None = None) -> Callable[..., torch.Tensor]:
    """verl's own per-row fallback (the function :func:`install` replaced, or the current one if not installed):
    for the parity test and the benchmark."""
    if module is None:
        import importlib

        module = importlib.import_module(MODULE)
    current = getattr(module, FALLBACK)
    return getattr(current, _ORIGINAL, current)
