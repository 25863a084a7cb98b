"""A console a person can follow: one short line per job, and progress with the elapsed time and an estimate.

Snakemake's own job block lists every input and output (a group job's 4-15 paths) and a reason naming each
updated file; on the tiny default that is ~10 lines per job. :func:`install` (called by the Snakefile while it
parses) adds a filter to Snakemake's logger that rewrites two kinds of records before any handler formats them:

* a job's start (``JOB_INFO``) becomes ``Job 12: <rule> <wildcards>`` and a reason cut to one short line;
* the progress record (``PROGRESS``) gains the elapsed time and an estimate of the time left, from the jobs done so
  far (a rough, linear estimate: the mean wall time of a finished job times the jobs left).

The records' content is all Snakemake's; nothing is added to or removed from the run. Long group jobs print their
own one-line progress per member (:mod:`pipeline_lib.engines.local.batch`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pipeline_lib.env import env

__all__ = ["ConsoleFilter", "eta_line", "install", "job_line"]

#: How much of Snakemake's rerun reason a job line keeps (the full reason: ``snakemake -n --summary``).
REASON_CHARS = 100


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def job_line(rule: str, wildcards: dict[str, Any] | None) -> str:
    """What a job does and for which run, in one line: ``train_local_group task=arith_tiny seed=0``."""
    shown = " ".join(f"{key}={value}" for key, value in (wildcards or {}).items())
    return f"{rule} {shown}".strip()


def eta_line(done: int, total: int, elapsed: float) -> str:
    """``12 of 71 steps (17%) done, 3m10s elapsed, about 15m left``: the time left assumes the jobs left take, on
    average, as long as the jobs done so far."""
    percent = f"{100 * done / total:.0f}%" if total else "100%"
    line = f"{done} of {total} steps ({percent}) done, {_duration(elapsed)} elapsed"
    if 0 < done < total:
        line += f", about {_duration(elapsed / done * (total - done))} left"
    return line


class ConsoleFilter(logging.Filter):
    """Shortens job records and adds time to progress records (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = time.monotonic()

    def filter(self, record: logging.LogRecord) -> bool:
        event = str(getattr(record, "event", "") or "")
        if event.endswith("job_info") and getattr(record, "rule_name", None):
            record.rule_msg = job_line(record.rule_name, getattr(record, "wildcards", None))
            reason = str(getattr(record, "reason", "") or "")
            record.reason = reason if len(reason) <= REASON_CHARS else reason[:REASON_CHARS - 3] + "..."
        elif event.endswith("progress") and hasattr(record, "done") and hasattr(record, "total"):
            record.event = None  # printed as the plain message below
            record.msg = eta_line(int(record.done), int(record.total), time.monotonic() - self.started)
            record.args = ()
        return True


def install(logger: logging.Logger | None = None) -> ConsoleFilter | None:
    """Add the filter to Snakemake's logger once (a second parse in the same process adds nothing); none with
    ``PIPELINE_CONSOLE=full``, which keeps Snakemake's own job blocks (every input, output and the whole reason)."""
    if env("PIPELINE_CONSOLE") == "full":
        return None
    if logger is None:
        logger = logging.getLogger("snakemake.logging")
    for existing in logger.filters:
        if isinstance(existing, ConsoleFilter):
            return existing
    console = ConsoleFilter()
    logger.addFilter(console)
    return console
