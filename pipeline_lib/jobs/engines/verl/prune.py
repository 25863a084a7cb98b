"""A verl run's scratch: where its checkpoints and rollout dumps live while it trains, and freeing them once done.

:func:`place_scratch` (before verl starts) links the run directory's ``checkpoints/`` and ``rollout_dump/`` to
``site.scratch_root/<task>/<name>/seed<k>/<run digest>/``, so verl's overrides name the same paths wherever the site
keeps its scratch, and a resubmitted attempt resumes through the same link. The run digest (``run.json``) keeps the
scratch of a run set aside by :func:`pipeline_lib.core.checkpoint.claim_run_dir` (its link moves to ``stale/``) apart
from the new run's.

:func:`prune`, only once the run is finished (``final/`` exported and ``DONE.json`` written, :mod:`.train`): until
then the last checkpoint is what a resubmitted attempt resumes from, so nothing is touched.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from pipeline_lib.core.checkpoint import RUN_IDENTITY, read_json_state
from pipeline_lib.jobs.engines.verl.translate import checkpoint_dir, rollout_dump_dir

__all__ = ["place_scratch", "prune"]

log = logging.getLogger(__name__)

_DUMP = re.compile(r"^(\d+)\.jsonl$")


def prune(run_dir: str | Path, dump_every: int) -> list[Path]:
    """Delete the checkpoints and the rollout dumps of steps not a multiple of ``dump_every`` (the last step's kept)
    of a finished run; return what was deleted (nothing for an unfinished run)."""
    if dump_every < 1:
        raise ValueError(f"dump_every must be >= 1, not {dump_every}")
    run_dir = Path(run_dir)
    if not ((run_dir / "final").is_dir() and (run_dir / "DONE.json").is_file()):
        return []
    removed = []
    ckpt = checkpoint_dir(run_dir)
    scratch_dirs = {path.resolve().parent for path in (ckpt, rollout_dump_dir(run_dir)) if path.is_symlink()}
    if ckpt.exists() or ckpt.is_symlink():
        if ckpt.exists():
            shutil.rmtree(ckpt.resolve())  # under site.scratch_root where it is a link
        if ckpt.is_symlink():
            ckpt.unlink()
        removed.append(ckpt)
    dumps = rollout_dump_dir(run_dir)
    steps = sorted(int(m[1]) for p in dumps.glob("*.jsonl") if (m := _DUMP.match(p.name))) if dumps.is_dir() else []
    for step in steps[:-1]:
        if step % dump_every:
            (dumps / f"{step}.jsonl").unlink()
            removed.append(dumps / f"{step}.jsonl")
    if dumps.is_symlink() and dumps.is_dir():  # the kept dumps are results: back under the run directory
        scratch = dumps.resolve()
        staging = dumps.with_name(dumps.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(scratch, staging)
        dumps.unlink()
        staging.rename(dumps)
        shutil.rmtree(scratch)
    for folder in scratch_dirs:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()  # the run's digest folder in the scratch, empty now
    return removed


def _scratch_target(run_dir: Path, scratch_dir: Path, name: str) -> Path:
    """Where ``run_dir/name`` lives in the scratch: under the digest of the run that owns ``run_dir`` now."""
    owner = read_json_state(run_dir / RUN_IDENTITY)
    digest = owner.get("run_sha256") if isinstance(owner, dict) else None
    if not digest:
        raise FileNotFoundError(f"{run_dir / RUN_IDENTITY}: no run digest; claim the run directory before placing "
                                "its scratch (pipeline_lib.core.checkpoint.claim_run_dir)")
    return scratch_dir / str(digest)[:16] / name


def place_scratch(run_dir: str | Path, scratch_dir: str | Path) -> dict[str, Path]:
    """Link ``checkpoints/`` and ``rollout_dump/`` of ``run_dir`` into ``scratch_dir`` (when it is outside the run
    directory); return each name's real location. A link already there is this run's (a resubmission: reused); a
    real directory already there is kept as it is (never moved or clobbered: verl resumes it in place)."""
    run_dir, scratch_dir = Path(run_dir).resolve(), Path(scratch_dir).resolve()
    inside = scratch_dir == run_dir or run_dir in scratch_dir.parents
    placed = {}
    for local in (checkpoint_dir(run_dir), rollout_dump_dir(run_dir)):
        if inside:
            placed[local.name] = local
            continue
        target = _scratch_target(run_dir, scratch_dir, local.name)
        if local.is_symlink():
            pointed = Path(os.readlink(local))
            pointed = pointed if pointed.is_absolute() else local.parent / pointed
            if pointed.resolve() != target.resolve() and not pointed.exists():  # dangling, not this run's: replaced
                local.unlink()
            else:
                if pointed.resolve() != target.resolve():
                    log.warning("%s: links to %s, not %s (site.scratch_root changed mid-run?): resuming from the "
                                "link as it is", local, pointed, target)
                pointed.mkdir(parents=True, exist_ok=True)
                placed[local.name] = pointed.resolve()
                continue
        elif local.exists():
            log.warning("%s: a real directory, kept in place (not moved to the scratch %s)", local, target)
            placed[local.name] = local
            continue
        target.mkdir(parents=True, exist_ok=True)
        local.symlink_to(target, target_is_directory=True)
        placed[local.name] = target
    return placed
