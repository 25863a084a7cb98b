"""Shared machinery of the local trainers: resumable checkpoints, RNG state, metrics, schedules, sampling."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline_lib.checkpoint import ConfigMismatchError

__all__ = ["TrainingCheckpoint", "cosine_with_warmup", "generate"]


def cosine_with_warmup(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / max(1, warmup)
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(1.0, progress)))


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
        state = torch.load(path, map_location="cpu", weights_only=False)
        if state.get("config_sha256") != self.config_sha256:
            raise ConfigMismatchError(f"{self.dir} belongs to config {state.get('config_sha256')}, this run has "
                                      f"{self.config_sha256}; delete the run directory to start over")
        return state


@torch.no_grad()
def generate(model: torch.nn.Module, prompt_ids: Sequence[Sequence[int]], *, max_new_tokens: int, greedy: bool,
             temperature: float, eos_id: int, pad_id: int) -> list[list[int]]:
    """KV-cached batched sampling (``model.generate``); each response is cut after its first EOS (kept)."""
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompt_ids):  # left padding, so every row continues at the same position
        ids[row, width - len(p):] = torch.tensor(p)
        mask[row, width - len(p):] = 1
    model.eval()
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=not greedy,
                         temperature=temperature if not greedy else None, top_k=0 if not greedy else None,
                         top_p=1.0 if not greedy else None, eos_token_id=eos_id, pad_token_id=pad_id)
    model.train()
    responses = []
    for row in out[:, width:].tolist():
        cut = row.index(eos_id) + 1 if eos_id in row else len(row)
        responses.append(row[:cut])
    return responses
