"""Retries that fit the failure: a resubmitted long job runs again after a time limit, after any other failure once.

Snakemake's ``retries`` is one count per rule (an int in Snakemake 9, not a function of the failure), and the Slurm
executor resubmits a failed job whatever failed. So the job records why each of its attempts ended, in
``<run dir>/attempts.json``, and an attempt refuses to start (in seconds, before any GPU work) when the failures that
were not a time limit already reached :data:`FAILURES_ALLOWED`:

- ``terminated``: SIGTERM (what Slurm sends at the time limit, on preemption and on ``scancel``) or SIGINT; the job
  records it and dies of the signal. An attempt that recorded nothing (SIGKILL, a lost node) counts the same:
  resumable, resubmitted as often as the rule's ``retries`` (the estimate's attempts) allows.
- ``failed``: any other end (an exception, verl exiting non-zero, a broken interconnect's NCCL timeout): once more,
  then refused.

Snakemake's attempt number (``SOFTMAXGRPO_ATTEMPT``, set by the rule's shell from ``resources.attempt``) starts a new
series at 1, so a run fixed and started again by hand is not refused for an old failure. Without it (a job run by
hand, the tests) nothing is recorded or refused.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from pipeline_lib.core.env import env
from pipeline_lib.core.io import write_json

__all__ = ["ATTEMPTS_NAME", "ATTEMPT_ENV", "FAILURES_ALLOWED", "RetryRefusedError", "guard_attempt", "refusal"]

log = logging.getLogger("pipeline_lib.core.attempts")

ATTEMPT_ENV = "SOFTMAXGRPO_ATTEMPT"
#: Each attempt's end, in the run directory: the job's record, not any run's state (never set aside with it).
ATTEMPTS_NAME = "attempts.json"
#: Attempts that may end in a failure other than a time limit: the first, and one more.
FAILURES_ALLOWED = 2


class RetryRefusedError(RuntimeError):
    """This attempt is not started: earlier attempts failed for reasons a resubmission does not fix."""


def _read(path: Path) -> list[dict[str, Any]]:
    """The recorded attempts (none where the file is missing or unreadable: a torn record refuses nothing)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return list(record.get("attempts", [])) if isinstance(record, dict) else []


def refusal(attempts: list[dict[str, Any]]) -> str | None:
    """Why a new attempt after ``attempts`` (this series, oldest first) must not start, or None."""
    failed = [a for a in attempts if a.get("end") == "failed"]
    if len(failed) < FAILURES_ALLOWED:
        return None
    return (f"{len(failed)} earlier attempts failed for reasons other than a time limit, which a resubmission does "
            "not fix: " + "; ".join(f"attempt {a.get('attempt')}: {a.get('why')}" for a in failed)
            + ". Fix the cause (the job logs), then start Snakemake again (a new series of attempts)")


@contextlib.contextmanager
def guard_attempt(run_dir: str | os.PathLike[str], attempt: int | None = None) -> Iterator[None]:
    """Record this attempt's end in ``run_dir/attempts.json`` and refuse to start after too many failures
    (:func:`refusal`). ``attempt``: Snakemake's attempt number (default: ``$SOFTMAXGRPO_ATTEMPT``; none: no guard)."""
    if attempt is None and (raw := env(ATTEMPT_ENV)) is not None:
        attempt = int(raw)
    if attempt is None:
        yield
        return
    path = Path(run_dir) / ATTEMPTS_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    series = [] if attempt == 1 else _read(path)
    for earlier in series:
        if earlier.get("end") == "running":  # nothing recorded: SIGKILL after the time limit's grace, a lost node
            earlier["end"], earlier["why"] = "killed", "ended without a record (SIGKILL or a lost node)"
    why = refusal(series)
    if why is not None:
        write_json(path, {"attempts": [*series, {"attempt": attempt, "end": "refused", "why": why}]})
        raise RetryRefusedError(f"{path}: attempt {attempt} refused: {why}")
    mine = {"attempt": attempt, "slurm_job_id": env("SLURM_JOB_ID"), "started": time.time(),
            "end": "running"}
    series.append(mine)
    write_json(path, {"attempts": series})

    def finish(end: str, why: str) -> None:
        mine.update(end=end, why=why, ended=time.time())
        write_json(path, {"attempts": series})

    def on_signal(number: int, frame: FrameType | None) -> None:
        finish("terminated", f"{signal.Signals(number).name} (a time limit, preemption or scancel)")
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)  # die of the signal, as Slurm expects

    previous = {number: signal.signal(number, on_signal) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    except BaseException as error:
        if mine["end"] == "running":
            finish("failed", f"{type(error).__name__}: {str(error)[:300]}")
        raise
    else:
        finish("ok", "")
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
