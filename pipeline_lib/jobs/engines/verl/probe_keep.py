"""The pass-rate probe's policies on verl: kept past verl's checkpoint rotation, exported at the run's end.

An RL run with ``train.rl.probe_every`` saves at every probe step (``trainer.save_freq`` is the gcd of the checkpoint
and probe intervals, :func:`.translate.save_freq`), but verl keeps only its last ``max_actor_ckpt_to_keep`` (2)
actors. While verl runs, a :class:`ProbeKeeper` (a thread of the job's own process, never of verl's) hard-links the
model shards and the Hugging Face config/tokenizer of ``checkpoints/global_step_<s>/actor/`` (not the optimizer or the
extra state) into ``probe_shards/step_<s>/`` once verl's tracker has reached ``s`` (the tracker is written after the
whole checkpoint). Links, not copies: the folder costs no disk until verl deletes its checkpoint, and it lies in the
same scratch filesystem (:func:`.prune.place_scratch`); across filesystems a copy is made instead. A step's folder is
filled under a temporary name and renamed, so a folder named ``step_<s>`` is always complete.

At the end (an end step before ``DONE.json``, :func:`export_probes`) each kept step becomes ``probe/step_<s>/`` in
Hugging Face format with verl's FSDP merger; the shards go with the scratch (:func:`.prune.prune`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from pipeline_lib.core.checkpoint import probe_dir
from pipeline_lib.jobs.engines.verl.paths import checkpoint_dir, probe_shards_dir

__all__ = ["POLL_S", "ProbeKeeper", "actor_files", "drop_after", "export_probes", "keep_step", "kept", "missing",
           "sweep"]

log = logging.getLogger(__name__)

#: Seconds between the keeper's looks at verl's tracker: far below the time verl takes for the two saves after a
#: probe step's (the earliest its rotation deletes that step's actor).
POLL_S = 5.0
TRACKER = "latest_checkpointed_iteration.txt"
_STEP = re.compile(r"^step_(\d+)$")
#: The actor files a policy needs (verl's merger reads the FSDP layout, the shards and ``huggingface/``).
_MODEL_SHARD = "model_world_size_{world}_rank_{rank}.pt"


def _tracker_step(ckpt: Path) -> int | None:
    """verl's last complete checkpoint, or None (no tracker, or one mid-write: read again at the next look)."""
    try:
        text = (ckpt / TRACKER).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def actor_files(actor: Path) -> list[Path] | None:
    """The files of a complete actor checkpoint that make its policy, relative to ``actor``: ``fsdp_config.json``,
    every rank's model shard and ``huggingface/`` (config, tokenizer); None where one is missing."""
    try:
        world = int(json.loads((actor / "fsdp_config.json").read_text())["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    shards = [Path(_MODEL_SHARD.format(world=world, rank=rank)) for rank in range(world)]
    hf = actor / "huggingface"
    if not all((actor / shard).is_file() for shard in shards) or not (hf / "config.json").is_file():
        return None
    extra = [p.relative_to(actor) for p in sorted(hf.rglob("*")) if p.is_file()]
    return [Path("fsdp_config.json"), *shards, *extra]


def _link(source: Path, target: Path) -> None:
    """A hard link (no disk while the checkpoint lives), a copy where the two are on different filesystems."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def keep_step(ckpt: Path, shards: Path, step: int) -> bool:
    """Link step ``step``'s policy files into ``shards/step_<step>/`` (filled as ``.tmp``, then renamed); whether the
    folder is there now. False where the step's actor is gone or incomplete."""
    target = shards / f"step_{step}"
    if target.is_dir():
        return True
    actor = ckpt / f"global_step_{step}" / "actor"
    files = actor_files(actor)
    if files is None:
        return False
    staging = shards / f"step_{step}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for name in files:
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            _link(actor / name, staging / name)
    except FileNotFoundError:  # verl's rotation deleted it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
        return False
    staging.rename(target)
    log.info("kept the policy of step %d (%s) for the pass-rate probe in %s", step, actor, target)
    return True


def kept(shards: Path) -> list[int]:
    """The steps whose complete folder is in ``shards``."""
    if not shards.is_dir():
        return []
    return sorted(int(m[1]) for p in shards.iterdir() if p.is_dir() and (m := _STEP.match(p.name)))


def missing(run_dir: Path, steps: Sequence[int]) -> list[int]:
    """The probe steps without their kept policy."""
    have = set(kept(probe_shards_dir(run_dir)))
    return [s for s in steps if s not in have]


def sweep(run_dir: Path, steps: Sequence[int]) -> list[int]:
    """One look: every probe step up to verl's tracker whose actor is still in ``checkpoints/`` is kept; returns the
    steps newly kept."""
    ckpt, shards = checkpoint_dir(run_dir), probe_shards_dir(run_dir)
    reached = _tracker_step(ckpt)
    todo = [s for s in missing(run_dir, steps) if reached is not None and s <= reached]
    if not todo:
        return []
    shards.mkdir(parents=True, exist_ok=True)
    return [s for s in todo if keep_step(ckpt, shards, s)]


def drop_after(run_dir: Path, step: int) -> list[int]:
    """Remove the kept policies of steps after ``step``: verl redoes those steps (a resume from an earlier
    checkpoint, :func:`.train.logged_resume_point`), so their weights will be another policy."""
    shards = probe_shards_dir(run_dir)
    dropped = [s for s in kept(shards) if s > step]
    for s in dropped:
        shutil.rmtree(shards / f"step_{s}")
    return dropped


class ProbeKeeper:
    """While verl runs (``with ProbeKeeper(run_dir, steps):``): one sweep before, a thread sweeping every
    :data:`POLL_S` seconds, one sweep after verl exits. A sweep that fails is logged and retried at the next look;
    the one after exit raises."""

    def __init__(self, run_dir: Path, steps: Sequence[int], poll_s: float | None = None) -> None:
        self.run_dir, self.steps = Path(run_dir), list(steps)
        self.poll_s = POLL_S if poll_s is None else poll_s
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one sweep at a time (the thread's and the last one)
        self._thread: threading.Thread | None = None

    def _sweep(self) -> None:
        with self._lock:
            sweep(self.run_dir, self.steps)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._sweep()
            except Exception:  # a filesystem hiccup: the next look retries, the sweep after exit raises
                log.exception("%s: keeping the probe policies failed; retrying in %.0f s", self.run_dir, self.poll_s)

    def __enter__(self) -> ProbeKeeper:
        if self.steps:
            self._sweep()
            self._thread = threading.Thread(target=self._loop, name="probe-keeper", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._sweep()


def export_probes(run_dir: Path, steps: Sequence[int], merge: Callable[[Path, Path], Path]) -> list[Path]:
    """The end step: each probe step's kept shards -> ``probe/step_<s>/`` (``merge``: verl's FSDP merger, which
    publishes by a rename). A step whose folder is there is skipped, so a rerun after a kill redoes only the rest."""
    shards = probe_shards_dir(run_dir)
    lost = missing(run_dir, [s for s in steps if not (probe_dir(Path(run_dir), s) / "config.json").is_file()])
    if lost:
        raise FileNotFoundError(f"{shards}: no kept policy of probe step(s) {lost}, so their probe/step_<s> cannot be "
                                "exported; they were lost from the scratch (rerun the run from scratch: delete "
                                f"{run_dir})")
    done = []
    for step in steps:
        target = probe_dir(Path(run_dir), step)
        if not (target / "config.json").is_file():
            target.parent.mkdir(exist_ok=True)
            merge(shards / f"step_{step}", target)
        done.append(target)
    return done
