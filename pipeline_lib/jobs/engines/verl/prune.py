"""A verl run's scratch: where its checkpoints and rollout dumps live while it trains, and freeing them once done.

:func:`place_scratch` (before verl starts) links the run directory's ``checkpoints/``, ``probe_shards/`` and
``rollout_dump/`` to ``site.scratch_root/<task>/<name>/seed<k>/<run digest>/``, so verl's overrides name the same paths
wherever the site keeps its scratch, and a resubmitted attempt resumes through the same link. The run digest
(``run.json``) keeps the scratch of a run set aside by :func:`pipeline_lib.core.checkpoint.claim_run_dir` (its link
moves to ``stale/``) apart from the new run's.

:func:`keep_dumps` (an end step, before ``DONE.json``) copies the kept dumps under the run directory;
:func:`prune`, only once the run is finished (``final/`` exported and ``DONE.json`` written, :mod:`.runner`), frees the
scratch: until then the last checkpoint is what a resubmitted attempt resumes from, so nothing is deleted. Both are
safe to rerun after a kill anywhere inside them (the end order, :func:`pipeline_lib.core.run_end.finish_run`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from pipeline_lib.core.checkpoint import RUN_IDENTITY, read_json_state
from pipeline_lib.jobs.engines.verl.paths import checkpoint_dir, probe_shards_dir, rollout_dump_dir

__all__ = ["SCRATCH_SUFFIX", "keep_dumps", "kept_steps", "place_scratch", "prune"]

log = logging.getLogger(__name__)

_DUMP = re.compile(r"^(\d+)\.jsonl$")
#: The scratch link of the rollout dumps once :func:`keep_dumps` has put the kept ones under the run directory.
SCRATCH_SUFFIX = ".scratch"


def kept_steps(steps: list[int], dump_every: int) -> list[int]:
    """The dumps a finished run keeps: every ``dump_every``-th step and the last."""
    if dump_every < 1:
        raise ValueError(f"dump_every must be >= 1, not {dump_every}")
    return sorted({s for s in steps if s % dump_every == 0} | set(steps[-1:]))


def _dump_steps(folder: Path) -> list[int]:
    return sorted(int(m[1]) for p in folder.glob("*.jsonl") if (m := _DUMP.match(p.name))) if folder.is_dir() else []


def keep_dumps(run_dir: str | Path, dump_every: int) -> Path:
    """An end step of a finished run (before ``DONE.json``): the kept rollout dumps (:func:`kept_steps`) become real
    files under the run directory; the scratch keeps every dump (and the checkpoints) until :func:`prune`.

    Safe to run again after a kill anywhere: the link to the scratch is renamed to ``rollout_dump.scratch`` (one
    rename) before the copied folder takes its place, and a rerun copies from either name."""
    run_dir = Path(run_dir)
    dumps = rollout_dump_dir(run_dir)
    aside = dumps.with_name(dumps.name + SCRATCH_SUFFIX)
    source = aside if aside.is_symlink() else dumps
    if not source.is_symlink():  # the dumps live in the run directory (no scratch): nothing to move
        return dumps
    staging = dumps.with_name(dumps.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for step in kept_steps(_dump_steps(source), dump_every):
        shutil.copy2(source / f"{step}.jsonl", staging / f"{step}.jsonl")
    if source == dumps:
        dumps.rename(aside)
    elif dumps.is_dir() and not dumps.is_symlink():
        shutil.rmtree(dumps)  # a copy from a killed earlier try, replaced by this one
    staging.rename(dumps)
    return dumps


def prune(run_dir: str | Path, dump_every: int) -> list[Path]:
    """Free a finished run's scratch (``final/`` exported and ``DONE.json`` written): its checkpoints, the probe
    policies' shards (``probe/`` stays), every dump in the scratch, and the dumps of steps not kept
    (:func:`kept_steps`) where they are under the run directory; return what was deleted (nothing for an unfinished
    run). Safe to run again after a kill anywhere."""
    if dump_every < 1:
        raise ValueError(f"dump_every must be >= 1, not {dump_every}")
    run_dir = Path(run_dir)
    if not ((run_dir / "final").is_dir() and (run_dir / "DONE.json").is_file()):
        return []
    removed = []
    ckpt = checkpoint_dir(run_dir)
    dumps = rollout_dump_dir(run_dir)
    aside = dumps.with_name(dumps.name + SCRATCH_SUFFIX)
    shards = probe_shards_dir(run_dir)  # the probe policies' shards: exported to probe/ (kept) before DONE.json
    links = [path for path in (ckpt, shards, dumps, aside) if path.is_symlink()]
    scratch_dirs = {Path(os.path.abspath(path.parent / os.readlink(path))).parent for path in links}
    present = [path for path in (ckpt, shards, aside) if path.exists() or path.is_symlink()]
    for path in present:
        if path.exists():
            shutil.rmtree(path.resolve())  # under site.scratch_root where it is a link
    for folder in scratch_dirs:  # while the links still name it: a kill after this leaves dangling links, no folder
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()  # the run's digest folder in the scratch, empty now
    for path in present:
        if path.is_symlink():
            path.unlink()
        removed.append(path)
    if dumps.is_symlink():  # never moved back (a run pruned without keep_dumps): the old behaviour, kept dumps moved
        keep_dumps(run_dir, dump_every)
        return [*removed, *prune(run_dir, dump_every)]
    steps = _dump_steps(dumps)
    for step in sorted(set(steps) - set(kept_steps(steps, dump_every))):
        (dumps / f"{step}.jsonl").unlink()
        removed.append(dumps / f"{step}.jsonl")
    shutil.rmtree(dumps.with_name(dumps.name + ".tmp"), ignore_errors=True)
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
    """Link ``checkpoints/``, ``probe_shards/`` (hard links into the checkpoints need the same filesystem) and
    ``rollout_dump/`` of ``run_dir`` into ``scratch_dir`` (when it is outside the run
    directory); return each name's real location. A link already there is this run's (a resubmission: reused); a
    real directory already there is kept as it is (never moved or clobbered: verl resumes it in place)."""
    run_dir, scratch_dir = Path(run_dir).resolve(), Path(scratch_dir).resolve()
    inside = scratch_dir == run_dir or run_dir in scratch_dir.parents
    placed = {}
    for local in (checkpoint_dir(run_dir), probe_shards_dir(run_dir), rollout_dump_dir(run_dir)):
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
