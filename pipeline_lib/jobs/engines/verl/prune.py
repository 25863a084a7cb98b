"""Free a finished verl run's scratch: its resumable checkpoints, and all but every k-th rollout dump.

Only once the run is finished (``final/`` exported and ``DONE.json`` written, :mod:`.train`): until then the last
checkpoint is what a resubmitted attempt resumes from, so nothing is touched.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from pipeline_lib.jobs.engines.verl.translate import checkpoint_dir, rollout_dump_dir

__all__ = ["prune"]

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
    return removed
