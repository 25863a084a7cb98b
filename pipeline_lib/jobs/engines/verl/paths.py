"""Where a verl run's files are: its inputs (:class:`TrainPaths`) and its run directory's layout.

Apart from :mod:`.translate` (whose RL overrides name the estimators' module, which verl's workers load), so a job that
only needs a run's paths (the Rationalization annotator, the pruning of a finished run) covers no RL code in its
code digest.
"""

from __future__ import annotations

from pathlib import Path

from pipeline_lib.core.tracking import TrackingSettings

__all__ = ["TrainPaths", "checkpoint_dir", "metrics_log_path", "probe_shards_dir", "reward_health_dir",
           "rollout_dump_dir"]


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def probe_shards_dir(run_dir: str | Path) -> Path:
    """The probe steps' actor model shards, hard-linked out of verl's checkpoints before its rotation deletes them
    (:mod:`.probe_keep`); in the scratch beside ``checkpoints/`` (:func:`.prune.place_scratch`), freed with it."""
    return Path(run_dir) / "probe_shards"


def rollout_dump_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "rollout_dump"


def reward_health_dir(run_dir: str | Path) -> Path:
    """Where the reward hook records verifier timeouts/failures (verl's v1 trainer hands them over nowhere)."""
    return Path(run_dir) / "reward_health"


def metrics_log_path(run_dir: str | Path) -> Path:
    """verl's file logger target; each attempt's file is rotated aside first (verl opens it with "wb")."""
    return Path(run_dir) / "verl_metrics.jsonl"


class TrainPaths:
    """The files one run reads and writes (``tracking``: where its curves go); fixed at parse time so the overrides
    are validated exactly. ``init``: the model directory an RL run starts from (another run's ``final/``); None: the
    spec's model, the base model's hub id (``train.rl_start: base``)."""

    def __init__(self, run_dir: str | Path, train_files: str | Path, val_files: str | Path | None = None,
                 init: str | Path | None = None, tracking: TrackingSettings | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.train_files = Path(train_files)
        self.val_files = Path(val_files) if val_files is not None else None
        self.init = Path(init) if init is not None else None
        self.tracking = tracking
