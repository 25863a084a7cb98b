"""Shared machinery of the local trainers: resumable checkpoints, RNG state, metrics, schedules (sampling is
:func:`pipeline_lib.core.model.generate`, which evaluation shares)."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline_lib.core.checkpoint import ConfigMismatchError, load_torch_state, set_aside
from pipeline_lib.core.model import encode_prompts

__all__ = ["DivergedError", "LazyPromptIds", "TrainingCheckpoint", "check_finite_weights", "clip_finite_gradients",
           "cosine_with_warmup"]


class DivergedError(RuntimeError):
    """A loss, gradient or weight stopped being a finite number: the run stops (non-zero) instead of finishing and
    writing NaN weights under DONE.json."""


def clip_finite_gradients(model: torch.nn.Module, loss: torch.Tensor, grad_clip: float, step: int, run: str
                          ) -> torch.Tensor:
    """``clip_grad_norm_`` (after ``loss.backward()``), refusing a non-finite loss or gradient norm before the
    optimizer step can write it into the weights; ``step`` is the 1-based step being taken."""
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    loss_value, norm_value = float(loss.detach()), float(grad_norm)
    if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
        raise DivergedError(f"{run}: step {step} diverged: loss {loss_value}, gradient norm {norm_value} (not "
                            "finite); stopped before the optimizer step, no final model written")
    return grad_norm


def check_finite_weights(model: torch.nn.Module, step: int, run: str) -> None:
    """Every parameter finite after optimizer step ``step`` (a finite gradient can still overflow a weight)."""
    bad = [name for name, value in model.named_parameters() if not bool(torch.isfinite(value).all())]
    if bad:
        raise DivergedError(f"{run}: step {step} diverged: {len(bad)} weight tensor(s) not finite after the optimizer "
                            f"step (first: {bad[0]}); no final model written")


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
            self._ids[row] = encode_prompts(self._tokenizer, [[dict(m) for m in self._prompts[row]]])[0]
        return self._ids[row]


def _unreadable_weights(directory: Path) -> str | None:
    """Why the model weights in ``directory`` cannot be loaded (none in safetensors form, or one whose header does not
    cover the file: a truncated copy), or None. Only the headers are read, so the check is cheap."""
    from safetensors import SafetensorError, safe_open

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return "no model weights in safetensors form (model.safetensors missing)"
    for file in files:
        try:
            with safe_open(file, framework="pt") as handle:
                handle.keys()
        except (SafetensorError, OSError) as exc:
            return f"{file.name} is damaged ({exc})"
    return None


class TrainingCheckpoint:
    """``run_dir/checkpoint/``: an HF model directory plus ``trainer_state.pt``, replaced as one unit.

    ``checkpoint`` may be a symbolic link (to scratch storage): the checkpoint is then written where the link points,
    replaced there as one unit (its temporary and old copies beside the target, on the same filesystem, so the
    renames stay atomic), and the link is kept; a link to a folder not made yet is followed too."""

    def __init__(self, run_dir: Path, config_sha256: str) -> None:
        self.dir = run_dir / "checkpoint"
        self.config_sha256 = config_sha256

    @property
    def location(self) -> Path:
        """Where the checkpoint's files are: ``dir``, or the folder its link resolves to."""
        return Path(os.path.realpath(self.dir)) if self.dir.is_symlink() else self.dir

    def save(self, model: torch.nn.Module, tokenizer: Any, state: dict[str, Any]) -> None:
        where = self.location
        where.parent.mkdir(parents=True, exist_ok=True)
        tmp = where.with_name(f".{where.name}.tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        torch.save(state | {"config_sha256": self.config_sha256}, tmp / "trainer_state.pt")
        old = where.with_name(f".{where.name}.old")
        if old.exists():
            shutil.rmtree(old)
        if where.exists():
            os.replace(where, old)
        os.replace(tmp, where)
        if old.exists():
            shutil.rmtree(old)

    def load(self) -> dict[str, Any] | None:
        """The trainer state to resume from, or None (start clean). A damaged checkpoint (trainer state unreadable
        or holding code, model weights truncated or missing) is set aside whole, so no rerun fails on it again."""
        where = self.location  # a damaged checkpoint behind a link is set aside there; the link stays
        path = where / "trainer_state.pt"
        if not path.is_file():
            return None
        problem = _unreadable_weights(where)
        if problem is not None:
            set_aside(where, problem)
            return None
        state = load_torch_state(path)  # an unreadable one is set aside: the run starts over
        if state is None:
            set_aside(where, "its trainer_state.pt was set aside, so its model is not resumed either")
            return None
        if state.get("config_sha256") != self.config_sha256:
            raise ConfigMismatchError(f"{self.dir} belongs to config {state.get('config_sha256')}, this run has "
                                      f"{self.config_sha256}; delete the run directory to start over")
        return state
