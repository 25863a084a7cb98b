"""Tiny causal LMs built from a ``transformers`` config, and text <-> tensor helpers shared by the trainers.

Checkpoints are plain ``save_pretrained`` directories, so evaluation, judging and export
load them exactly like a real model.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["build_model", "encode_prompts", "load_model", "response_logprobs", "save_model_atomic"]


def build_model(tokenizer: Any, spec: dict[str, Any], seed: int) -> torch.nn.Module:
    """A Qwen2-architecture model sized by ``spec`` (hidden, layers, heads, kv_heads, intermediate)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=spec["hidden_size"], intermediate_size=spec["intermediate_size"],
        num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"],
        max_position_embeddings=spec["max_positions"], tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )
    return Qwen2ForCausalLM(config)


def load_model(path: str | os.PathLike[str], dtype: torch.dtype | str = torch.float32) -> torch.nn.Module:
    """A causal LM from an HF directory or hub name; ``dtype="auto"`` keeps the checkpoint's own precision."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)


def save_model_atomic(model: torch.nn.Module, tokenizer: Any, target: str | os.PathLike[str]) -> Path:
    """``save_pretrained`` into a sibling temp dir, then swap it in, so a reader never sees half a checkpoint."""
    target = Path(target)
    tmp = target.with_name(f".{target.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    old = target.with_name(f".{target.name}.old")
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    if old.exists():
        shutil.rmtree(old)
    return target


def encode_prompts(tokenizer: Any, prompts: Sequence[Sequence[dict[str, str]]]) -> list[list[int]]:
    """Chat-template token ids ending with the assistant header."""
    return [tokenizer.apply_chat_template(list(p), add_generation_prompt=True, tokenize=True, return_dict=False)
            for p in prompts]


def pack(prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]], pad_id: int
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded prompt+response ids [N, L], attention mask [N, L] and response mask [N, L]."""
    lengths = [len(p) + len(r) for p, r in zip(prompt_ids, response_ids, strict=True)]
    width = max(lengths)
    ids = torch.full((len(lengths), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(lengths), width), dtype=torch.long)
    response = torch.zeros((len(lengths), width), dtype=torch.float32)
    for row, (p, r) in enumerate(zip(prompt_ids, response_ids, strict=True)):
        ids[row, : len(p) + len(r)] = torch.tensor(list(p) + list(r), dtype=torch.long)
        attention[row, : len(p) + len(r)] = 1
        response[row, len(p): len(p) + len(r)] = 1.0
    return ids, attention, response


def response_logprobs(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor,
                      response: torch.Tensor) -> torch.Tensor:
    """log pi(token_t | prefix) at every position [N, L] (0 where not a response token).

    Logits are computed only from the first column holding a response token on (``logits_to_keep``): the prompt
    positions before it predict nothing that is scored, and the vocabulary projection is the model's largest matmul.
    """
    columns = response.any(0).nonzero()
    out = torch.zeros_like(response)
    if len(columns) == 0:
        return out
    first = max(1, int(columns[0]))
    keep = ids.shape[1] - first + 1  # positions first-1 .. L-1; the last one predicts nothing
    logits = model(input_ids=ids, attention_mask=attention, logits_to_keep=keep).logits[:, :-1].float()
    targets = ids[:, first:]
    token_logprobs = -F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                      reduction="none").view(targets.shape)
    out[:, first:] = token_logprobs * response[:, first:]
    return out
