"""Shared machinery of the local trainers: resumable checkpoints, RNG state, metrics, schedules, sampling."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline_lib.checkpoint import ConfigMismatchError, load_torch_state

__all__ = ["LazyPromptIds", "TrainingCheckpoint", "cosine_with_warmup", "generate"]


def cosine_with_warmup(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / max(1, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(1.0, progress)))


class LazyPromptIds(Sequence[list[int]]):
    """The chat-template token ids of ``prompts`` (one message list per row), each row encoded when first read.

    A tiny RL run reads 320 of its 2,000 training prompts (20 steps of 16), and the template costs about a tenth of a
    millisecond per prompt: encoding them all was 0.2-0.5 CPU seconds per run. Each row gets exactly what encoding the
    whole list gives it (the template sees one prompt at a time).
    """

    def __init__(self, tokenizer: Any, prompts: Sequence[Sequence[dict[str, str]]]) -> None:
        self._tokenizer, self._prompts = tokenizer, prompts
        self._ids: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self._prompts)

    def __getitem__(self, row: int) -> list[int]:  # type: ignore[override]  (rows only, no slices)
        if row not in self._ids:
            from pipeline_lib.engines.local.model import encode_prompts

            self._ids[row] = encode_prompts(self._tokenizer, [[dict(m) for m in self._prompts[row]]])[0]
        return self._ids[row]


class TrainingCheckpoint:
    """``run_dir/checkpoint/``: an HF model directory plus ``trainer_state.pt``, replaced as one unit."""

    def __init__(self, run_dir: Path, config_sha256: str) -> None:
        self.dir = run_dir / "checkpoint"
        self.config_sha256 = config_sha256

    def save(self, model: torch.nn.Module, tokenizer: Any, state: dict[str, Any]) -> None:
        tmp = self.dir.with_name(".checkpoint.tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        torch.save(state | {"config_sha256": self.config_sha256}, tmp / "trainer_state.pt")
        old = self.dir.with_name(".checkpoint.old")
        if old.exists():
            shutil.rmtree(old)
        if self.dir.exists():
            os.replace(self.dir, old)
        os.replace(tmp, self.dir)
        if old.exists():
            shutil.rmtree(old)

    def load(self) -> dict[str, Any] | None:
        path = self.dir / "trainer_state.pt"
        if not path.is_file():
            return None
        state = load_torch_state(path)  # an unreadable one is set aside: the run starts over
        if state is None:
            return None
        if state.get("config_sha256") != self.config_sha256:
            raise ConfigMismatchError(f"{self.dir} belongs to config {state.get('config_sha256')}, this run has "
                                      f"{self.config_sha256}; delete the run directory to start over")
        return state


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
    from pipeline_lib.engines.local.model import prefill

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
