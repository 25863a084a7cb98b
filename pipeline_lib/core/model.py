"""Tiny causal LMs built from a ``transformers`` config, text <-> tensor helpers and batched sampling, shared by the
local trainers and evaluation (so both stand on this module, not on each other).

Checkpoints are plain ``save_pretrained`` directories, so evaluation, judging and export
load them exactly like a real model.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from pipeline_lib.core.env import hidden_package

__all__ = ["build_model", "encode_prompts", "generate", "load_model", "prefill", "response_logprobs",
           "response_logprobs_and_entropy", "save_model_atomic", "use_grouped_sdpa"]


def _transformers_without_unused_imports() -> None:
    """Have ``transformers`` see scikit-learn, and ``accelerate`` see boto3, as absent, so neither is imported.

    ``transformers.generation`` (pulled in by every tokenizer and model class) imports ``sklearn.metrics`` at import
    time when scikit-learn is installed (lm-eval installs it), for one option of assisted decoding (the assistant's
    confidence threshold); ``accelerate`` (which transformers' model code imports when installed) imports boto3 for
    its ``accelerate config`` SageMaker questions. Nothing here uses either: about 1 CPU s in each of the run's ~33
    model processes (``benchmarks/startup.py``). Each is hidden only while the one check that asks runs (transformers
    caches its answer; accelerate's module asks once, on import), so ``import sklearn`` and ``import boto3`` keep
    working for any other code in the process. A no-op for a library already imported.
    """
    if "transformers.generation.candidate_generator" not in sys.modules:
        with hidden_package("sklearn"):
            from transformers.utils.import_utils import is_sklearn_available

            is_sklearn_available()
    if importlib.util.find_spec("accelerate") is not None and "accelerate" not in sys.modules:
        with hidden_package("boto3"):
            import accelerate.commands.config  # noqa: F401  (what imports boto3 when it is found)


_transformers_without_unused_imports()


def _grouped_sdpa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                            is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """``transformers``' SDPA attention, except that on CPU the key/value heads go to SDPA as they are
    (``enable_gqa``) instead of being copied once per query head.

    ``transformers`` repeats the key/value heads whenever there is an attention mask (always, with padding); on CPU
    that is a copy of the whole KV cache per layer and decode step, a quarter of a tiny model's sampling time. The
    values are the same (SDPA repeats the heads in the same order); on other devices this is the stock function.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if query.device.type != "cpu" or key.shape[1] == query.shape[1]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = query.shape[2] > 1 and attention_mask is None and is_causal
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, is_causal=is_causal, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def use_grouped_sdpa(model: torch.nn.Module) -> torch.nn.Module:
    """Make ``"sdpa"`` attention in this process :func:`_grouped_sdpa_attention` (the same values; the stock
    function off CPU), for ``model`` and every other model here.

    It is registered under transformers' own name, not a new one: a model keeps ``attn_implementation="sdpa"``, so it
    pickles to another process (a Ray worker) and saves as a plain model, and runs there with the stock function.
    """
    from transformers import AttentionInterface

    AttentionInterface.register("sdpa", _grouped_sdpa_attention)
    return model


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
    return use_grouped_sdpa(Qwen2ForCausalLM(config))


def load_model(path: str | os.PathLike[str], dtype: torch.dtype | str = torch.float32) -> torch.nn.Module:
    """A causal LM from an HF directory or hub name; ``dtype="auto"`` keeps the checkpoint's own precision."""
    from transformers import AutoModelForCausalLM

    return use_grouped_sdpa(AutoModelForCausalLM.from_pretrained(path, dtype=dtype))


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
                      response: torch.Tensor, share_prompts: bool = True) -> torch.Tensor:
    """log pi(token_t | prefix) at every position [N, L] (0 where not a response token).

    ``ids``/``attention``/``response`` are :func:`pack`'s right-padded rows (prompt, then response). Where consecutive
    rows share their prompt (a group of M rollouts), the prompt goes through the model once per group and its
    key/value cache is shared by the group's responses (:func:`_shared_prompt_logprobs`): a group-RL batch then
    processes each prompt once instead of M times, the same values up to float rounding, gradients included
    (``share_prompts=False`` turns this off, for comparisons).
    Otherwise logits are computed only from the first column holding a response token on (``logits_to_keep``): the
    prompt positions before it predict nothing that is scored, and the vocabulary projection is the model's largest
    matmul.
    """
    return _response_logprobs(model, ids, attention, response, share_prompts, entropy=False)[0]


def response_logprobs_and_entropy(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor,
                                  response: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`response_logprobs` and, from the same logits (no second forward pass), the policy's entropy
    H(pi(. | prefix)) at every response position [N, L] (0 elsewhere): verl's ``actor/entropy`` per token."""
    logprobs, entropy = _response_logprobs(model, ids, attention, response, True, entropy=True)
    return logprobs, entropy


def _token_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis where ``mask`` is set, 0 elsewhere: logsumexp(z) - sum
    softmax(z) z (verl's entropy_from_logits). Only the masked positions, 256 at a time (cache-sized blocks: about
    a third of the time of one pass over the whole [N, T, V] tensor, benchmarks/tracking.py)."""
    selected = mask.bool()
    out = torch.zeros(mask.shape, dtype=logits.dtype)
    if not bool(selected.any()):
        return out
    out[selected] = torch.cat([torch.logsumexp(block, dim=-1) - (torch.softmax(block, dim=-1) * block).sum(-1)
                               for block in logits[selected].split(256)])
    return out


def _response_logprobs(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor, response: torch.Tensor,
                       share_prompts: bool, entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    columns = response.any(0).nonzero()
    out = torch.zeros_like(response)
    if len(columns) == 0:
        return out, (torch.zeros_like(response) if entropy else None)
    if share_prompts:
        prompt_lengths = (attention.sum(1) - response.sum(1)).long()
        starts = _prompt_starts(ids, prompt_lengths)
        if int(starts.sum()) <= len(ids) // 2:
            return _shared_prompt_logprobs(model, ids, response, prompt_lengths, starts, entropy)
    first = max(1, int(columns[0]))
    keep = ids.shape[1] - first + 1  # positions first-1 .. L-1; the last one predicts nothing
    logits = model(input_ids=ids, attention_mask=attention, logits_to_keep=keep).logits[:, :-1].float()
    targets = ids[:, first:]
    token_logprobs = -F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                      reduction="none").view(targets.shape)
    out[:, first:] = token_logprobs * response[:, first:]
    if not entropy:
        return out, None
    token_entropy = torch.zeros_like(response)
    token_entropy[:, first:] = _token_entropy(logits, response[:, first:]).to(response.dtype)
    return out, token_entropy


def prefill(model: torch.nn.Module, prompts: Sequence[Sequence[int]], rows: torch.Tensor, pad_id: int
            ) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """One forward pass over each distinct prompt, gathered to the rows that continue it (``rows[i]``: row i's
    prompt): (next-token logits [N, V], the KV cache of N rows, its attention mask [N, P]).

    Prompts are left-padded with positions counted over real tokens, as ``model.generate`` does, so every row
    continues at the same column; the gather is a differentiable ``index_select`` of the cache.
    """
    from transformers import DynamicCache

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.as_tensor(p)
        mask[row, width - len(p):] = 1
    cache = DynamicCache()
    logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                   past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
    cache.reorder_cache(rows)
    return logits[rows], cache, mask[rows]


def _prompt_starts(ids: torch.Tensor, prompt_lengths: torch.Tensor) -> torch.Tensor:
    """Rows whose prompt differs from the row before them (the rollouts of a group are consecutive)."""
    in_prompt = torch.arange(ids.shape[1])[None, :] < prompt_lengths[:, None]
    same = (prompt_lengths[1:] == prompt_lengths[:-1]) & ((ids[1:] == ids[:-1]) | ~in_prompt[1:]).all(1)
    return torch.cat([torch.ones(1, dtype=torch.bool), ~same])


def _shared_prompt_logprobs(model: torch.nn.Module, ids: torch.Tensor, response: torch.Tensor,
                            prompt_lengths: torch.Tensor, starts: torch.Tensor, entropy: bool = False
                            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Response log-probs [N, L] (and, with ``entropy``, the per-token entropy) with one forward pass per distinct
    prompt, its KV cache gathered to every row."""
    n, width = ids.shape
    first_rows = starts.nonzero()[:, 0]
    prompts = [ids[row, :length].tolist() for row, length in zip(first_rows.tolist(),
                                                                   prompt_lengths[first_rows].tolist(), strict=True)]
    first_logits, cache, prompt_mask = prefill(model, prompts, starts.long().cumsum(0) - 1, pad_id=0)
    # the responses, right-padded, continuing each row at its prompt length
    response_lengths = response.sum(1).long()
    steps = int(response_lengths.max())
    offsets = torch.arange(steps)[None, :]
    response_mask = offsets < response_lengths[:, None]
    columns = prompt_lengths[:, None] + offsets
    response_ids = ids.gather(1, columns.clamp(max=width - 1))
    logits = first_logits[:, None]  # predicts each row's first response token
    if steps > 1:
        rest = model(input_ids=response_ids[:, :-1], attention_mask=torch.cat(
            [prompt_mask, response_mask[:, :-1].long()], dim=1), position_ids=columns[:, :-1],
            past_key_values=cache, use_cache=True).logits
        logits = torch.cat([logits, rest], dim=1)
    logits = logits.float()
    token_logprobs = -F.cross_entropy(logits.reshape(-1, logits.shape[-1]), response_ids.reshape(-1),
                                      reduction="none").view(n, steps) * response_mask
    # columns past a row's response hold 0 and land beyond `width` or on its padding: every target is distinct
    out = torch.zeros(n, width + steps, dtype=token_logprobs.dtype).scatter(1, columns, token_logprobs)
    if not entropy:
        return out[:, :width] * response, None
    token_entropy = torch.zeros(n, width + steps, dtype=logits.dtype).scatter(
        1, columns, _token_entropy(logits, response_mask))
    return out[:, :width] * response, token_entropy[:, :width] * response


@torch.no_grad()
def generate(model: torch.nn.Module, prompt_ids: Sequence[Sequence[int]], *, max_new_tokens: int, greedy: bool,
             temperature: float, eos_id: int, pad_id: int) -> list[list[int]]:
    """KV-cached batched sampling; each response is cut after its first EOS (kept).

    The model's own forward with its KV cache, as ``model.generate`` runs it (left padding, positions counted over
    real tokens), but a plain loop: pure temperature sampling draws by inverse CDF (one uniform per row, a
    ``searchsorted`` over the cumulative softmax), which on CPU costs a twentieth of ``torch.multinomial`` over the
    vocabulary, the largest cost of a decode step at the tiny default's size. Consecutive rows with the same prompt
    (a group's M rollouts) share one prefill: the prompt's cache is computed once and gathered to its rows. Rows that
    have ended leave the batch (with their cache) once they are a quarter of it, so a step costs what the rows still
    writing cost; the random draws stay one per row and step, as if every row were decoded to the end. It stops once
    every row has ended.
    """
    n = len(prompt_ids)
    if max_new_tokens < 1:
        return [[] for _ in range(n)]
    distinct: list[Sequence[int]] = []
    group_of_row = []
    for row, p in enumerate(prompt_ids):
        if row == 0 or list(p) != list(prompt_ids[row - 1]):
            distinct.append(p)
        group_of_row.append(len(distinct) - 1)
    was_training = model.training
    model.eval()
    logits, cache, mask = prefill(model, distinct, torch.tensor(group_of_row), pad_id)
    position = mask.sum(1, keepdim=True) - 1
    tokens = torch.full((n, max_new_tokens), pad_id, dtype=torch.long)
    rows = torch.arange(n)  # the rows still in the batch, in the cache's order
    ended = torch.zeros(n, dtype=torch.bool)  # per row in the batch
    for step in range(max_new_tokens):
        logits = logits.float()
        if greedy:
            token = logits.argmax(-1)
        else:
            cdf = torch.softmax(logits / temperature, dim=-1).cumsum(-1)
            draw = torch.rand(n, 1)[rows] * cdf[:, -1:]
            token = torch.searchsorted(cdf, draw, right=True).squeeze(1).clamp_(max=cdf.shape[-1] - 1)
        token = token.masked_fill(ended, pad_id)
        tokens[rows, step] = token
        ended |= token == eos_id
        if step + 1 == max_new_tokens or bool(ended.all()):
            break
        if 4 * int(ended.sum()) >= len(rows):
            keep = (~ended).nonzero().squeeze(1)
            cache.reorder_cache(keep)
            rows, mask, position, token, ended = rows[keep], mask[keep], position[keep], token[keep], ended[keep]
        mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype)], dim=1)
        position = position + 1
        logits = model(input_ids=token[:, None], attention_mask=mask, position_ids=position, past_key_values=cache,
                       use_cache=True).logits[:, -1]
    model.train(was_training)
    responses = []
    for row in tokens.tolist():
        cut = row.index(eos_id) + 1 if eos_id in row else len(row)
        responses.append(row[:cut])
    return responses
