"""Resumable long jobs: atomic checkpoints, a config digest guard and the DONE sentinel.

A run owns its directory. ``checkpoint.pt`` is replaced atomically every K steps;
``DONE.json`` (the only file Snakemake is told about) is written once the final
step is reached. Resuming with a different config is refused rather than mixed.

A finished run keeps no resume state: Snakemake reruns a job whose inputs, code or parameters changed by deleting
``DONE.json`` and running it again, and that rerun must train from the start, never resume from the old run's last
step (which would leave the old model in place and call it new).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline_lib.io import atomic_path, write_json
from pipeline_lib.tracking import Tracker, TrackingSettings

__all__ = ["CHECKPOINT_NAME", "DONE_NAME", "ConfigMismatchError", "MetricsLog", "discard_resume_state",
           "load_checkpoint", "rng_state", "save_checkpoint", "set_rng_state", "write_done"]

CHECKPOINT_NAME = "checkpoint.pt"
DONE_NAME = "DONE.json"


class ConfigMismatchError(RuntimeError):
    """A checkpoint exists but was written under a different config digest."""


def rng_state() -> dict[str, Any]:
    """Global torch / numpy / python RNG states, so a resumed run draws what the uninterrupted one would."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save_checkpoint(run_dir: str | os.PathLike[str], state: dict[str, Any]) -> Path:
    target = Path(run_dir) / CHECKPOINT_NAME
    with atomic_path(target) as tmp:
        torch.save(state, tmp)
    return target


def load_checkpoint(run_dir: str | os.PathLike[str], config_sha256: str) -> dict[str, Any] | None:
    """The last checkpoint of this run, or None; raises if it belongs to another config."""
    path = Path(run_dir) / CHECKPOINT_NAME
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    if state.get("config_sha256") != config_sha256:
        raise ConfigMismatchError(
            f"{path} was written with config {state.get('config_sha256')}, this run has {config_sha256}; "
            "delete the run directory to start over"
        )
    return state


class MetricsLog:
    """``metrics.jsonl`` (one JSON line per step); on resume it is cut back to the checkpoint's step.

    With ``tracking`` every record also goes to the run's tracking backends as it is written
    (:class:`pipeline_lib.tracking.Tracker`), the kept records first, so a resumed curve has each step once.
    """

    def __init__(self, path: Path, resume_step: int, tracking: TrackingSettings | None = None) -> None:
        self.path = path
        kept = [line for line in (path.read_text().splitlines() if path.exists() else [])
                if json.loads(line)["step"] <= resume_step]
        with atomic_path(path) as tmp:
            tmp.write_text("".join(line + "\n" for line in kept))
        self.tracker = Tracker(tracking, map(json.loads, kept)) if tracking is not None else None
        self.handle = path.open("a")

    def write(self, record: dict[str, Any]) -> None:
        self.handle.write(json.dumps(record) + "\n")
        self.handle.flush()
        if self.tracker is not None:
            self.tracker.log(record)

    def close(self) -> None:
        self.handle.close()
        if self.tracker is not None:
            self.tracker.close()


def write_done(run_dir: str | os.PathLike[str], *, step: int, total_steps: int, config_sha256: str,
               **extra: Any) -> Path:
    if step != total_steps:
        raise RuntimeError(f"refusing to mark {run_dir} done at step {step} of {total_steps}")
    target = Path(run_dir) / DONE_NAME
    write_json(target, {"final_step": step, "total_steps": total_steps, "config_sha256": config_sha256, **extra})
    discard_resume_state(run_dir)
    return target


#: What a run resumes from: the classifier's ``checkpoint.pt``, the LM trainers' ``checkpoint/`` (and its swap dirs).
RESUME_STATE = (CHECKPOINT_NAME, "checkpoint", ".checkpoint.tmp", ".checkpoint.old")


def discard_resume_state(run_dir: str | os.PathLike[str]) -> None:
    """Remove a finished run's resume state (its final model lives in ``final/`` or ``final.pt``)."""
    for name in RESUME_STATE:
        path = Path(run_dir) / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
