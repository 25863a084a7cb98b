"""A console a person can follow: one short line per finished job, with the run's progress, elapsed time and an
estimate of the time left; errors in full.

Snakemake's own job block lists every input and output (a group job's 4-15 paths) and a reason naming each
updated file, then a timestamp, a "Finished jobid" line and a progress line: ~10 lines per job on the tiny default.
:func:`install` (called by the Snakefile while it parses) adds a filter to Snakemake's logger that rewrites its
records before any handler formats them:

* while jobs run, a job's start (``JOB_INFO``) and Snakemake's "Execute N jobs" and "Finished jobid" records are
  held back; when a job finishes, the progress record that follows prints one line for it::

      [12/71 03:41 ~05:10 left] train_local countdown_tiny/grpo_exact seed 1  38s

  (jobs done of the run's total, the elapsed time, the estimate of the time left, the rule, its run: the wildcards'
  values, and how long the job took);
* in a dry run (no job starts), each planned job is one line with a short reason: ``Job 12: <rule> <run> (reason)``;
* the scheduler's "Select jobs to execute..." is dropped;
* errors (``JOB_ERROR``, ``GROUP_ERROR``) and everything else pass as Snakemake prints them: a failed job shows its
  rule, log path, command and (``show-failed-logs``) its log.

The estimate (:class:`Estimate`) weighs the jobs left by what they cost: a job of a rule costs the mean duration of
that rule's jobs finished in this run; a rule with none finished yet costs the mean of its benchmark files of an
earlier run (``results/benchmarks/<rule>[/...].tsv``, column ``s``; a rule named ``<family>_<run>``, such as
``eval_checkpoints_arith_tiny_seed0``, takes its family's files) if there are any, else the mean duration of all jobs
finished so far. The jobs left per rule are the run's job table (Snakemake's "Job stats") minus the jobs
finished. The work left, divided by the parallelism measured so far (the finished jobs' summed durations over the
elapsed time, at least 1), is the time left. Nothing is added to or removed from the run; long group jobs print their
own one-line progress per member (:mod:`pipeline_lib.jobs.engines.local.batch`).
"""

from __future__ import annotations

import csv
import logging
import re
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pipeline_lib.core.env import env

__all__ = ["BENCHMARKS", "ConsoleFilter", "Estimate", "benchmark_priors", "clock_time", "install", "job_line",
           "run_name"]

#: How much of Snakemake's rerun reason a dry run's job line keeps (the full reason: ``snakemake -n --summary``).
REASON_CHARS = 100

#: Snakemake's messages that say nothing a person follows (the scheduler's rounds).
QUIET = ("Select jobs to execute...",)

#: Where the workflow writes each job's benchmark (``results/benchmarks/<rule>.tsv`` or ``<rule>/<run>.tsv``).
BENCHMARKS = Path("results") / "benchmarks"


def clock_time(seconds: float) -> str:
    """``03:41`` (minutes:seconds), ``1:02:09`` from an hour on."""
    minutes, seconds = divmod(max(0, round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes:02d}:{seconds:02d}"


def _duration(seconds: float) -> str:
    return f"{round(seconds)}s" if seconds < 60 else clock_time(seconds)


def run_name(wildcards: Mapping[str, Any] | None) -> str:
    """Which run a job is, from its wildcards' values: ``countdown_tiny/grpo_exact seed 1``."""
    wildcards = dict(wildcards or {})
    seed = wildcards.pop("seed", None)
    name = re.sub(r"/seed(\d+)$", r" seed \1", "/".join(str(value) for value in wildcards.values()))  # a run's id
    return f"{name} seed {seed}".strip() if seed is not None else name


def job_line(rule: str, wildcards: Mapping[str, Any] | None) -> str:
    """What a job does and for which run, in one line: ``train_local_group countdown_tiny seed 0``."""
    return f"{rule} {run_name(wildcards)}".strip()


def benchmark_priors(root: Path = BENCHMARKS) -> dict[str, float]:
    """Rule -> the mean wall time (column ``s``) of its benchmark files under ``root`` (an earlier run's); rules with
    no readable file are left out."""
    times: dict[str, list[float]] = defaultdict(list)
    for path in Path(root).rglob("*.tsv") if Path(root).is_dir() else ():
        rule = path.relative_to(root).parts[0].removesuffix(".tsv")
        try:
            with path.open(newline="", encoding="utf-8") as handle:
                times[rule] += [float(row["s"]) for row in csv.DictReader(handle, delimiter="\t")]
        except (OSError, KeyError, ValueError):
            continue  # a half-written or foreign file: no prior from it
    return {rule: statistics.fmean(values) for rule, values in times.items() if values}


class Estimate:
    """The time left of a run, weighing the jobs left by what their rule costs (see the module docstring)."""

    def __init__(self, jobs: Mapping[str, int] | None = None, priors: Mapping[str, float] | None = None) -> None:
        self.jobs = Counter(jobs or {})  # rule -> the run's jobs of it (Snakemake's job table)
        self.priors = dict(priors or {})
        self.durations: dict[str, list[float]] = defaultdict(list)

    def finished(self, rule: str, seconds: float) -> None:
        self.durations[rule].append(seconds)

    def cost(self, rule: str) -> float | None:
        """The expected wall time of one job of ``rule``."""
        if self.durations.get(rule):
            return statistics.fmean(self.durations[rule])
        prior = max((name for name in self.priors if rule == name or rule.startswith(name + "_")), key=len,
                    default=None)
        if prior is not None:
            return self.priors[prior]
        seen = [seconds for values in self.durations.values() for seconds in values]
        return statistics.fmean(seen) if seen else None

    def left(self, elapsed: float) -> float | None:
        """Seconds left: the work left over the parallelism so far; none before a job has finished or without a
        job table."""
        busy = sum(sum(values) for values in self.durations.values())
        if not busy or not self.jobs:
            return None
        work = 0.0
        for rule, count in self.jobs.items():
            remaining = count - len(self.durations.get(rule, ()))
            if remaining > 0:
                work += remaining * (self.cost(rule) or 0.0)
        return work / max(1.0, busy / elapsed if elapsed > 0 else 1.0)


class ConsoleFilter(logging.Filter):
    """Rewrites Snakemake's job and progress records into one line per job (see the module docstring)."""

    def __init__(self, priors: Mapping[str, float] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self.started = clock()
        self.estimate = Estimate(priors=priors)
        self.running = False  # a job has started: this is no dry run
        self.jobs: dict[int, tuple[str, dict[str, Any], float]] = {}  # jobid -> rule, wildcards, start
        self.done: list[tuple[str, str, float]] = []  # finished since the last progress record: rule, run, seconds

    def filter(self, record: logging.LogRecord) -> bool:
        event = str(getattr(record, "event", "") or "")
        if event == "run_info" and isinstance(getattr(record, "stats", None), Mapping) and not self.estimate.jobs:
            self.estimate.jobs.update({rule: int(count) for rule, count in record.stats.items() if rule != "total"})
        elif not event and record.msg in QUIET:
            return False
        elif event == "job_started":
            self.running = True
            return False
        elif event == "group_info" and self.running:
            return False
        elif event == "job_info" and getattr(record, "rule_name", None):
            return self._job_info(record)
        elif event == "job_finished":
            rule, wildcards, start = self.jobs.pop(int(record.job_id), ("?", {}, self.clock()))
            seconds = self.clock() - start
            self.estimate.finished(rule, seconds)
            self.done.append((rule, run_name(wildcards), seconds))
            return False
        elif event == "progress" and hasattr(record, "done") and hasattr(record, "total"):
            record.event = None  # printed as the plain message below
            record.msg = self._progress(int(record.done), int(record.total))
            record.args = ()
        return True

    def _job_info(self, record: logging.LogRecord) -> bool:
        if self.running:
            self.jobs[int(record.jobid)] = (record.rule_name, dict(getattr(record, "wildcards", None) or {}),
                                            self.clock())
            return False
        reason = str(getattr(record, "reason", "") or "")
        reason = reason if len(reason) <= REASON_CHARS else reason[:REASON_CHARS - 3] + "..."
        record.event = None  # one plain line, no timestamp
        record.msg = f"Job {record.jobid}: {job_line(record.rule_name, getattr(record, 'wildcards', None))}" + (
            f" ({reason})" if reason else "")
        record.args = ()
        return True

    def _progress(self, done: int, total: int) -> str:
        """One line per job finished since the last progress record (a group job's members finish together)."""
        elapsed = self.clock() - self.started
        left = self.estimate.left(elapsed) if done < total else None
        finished, self.done = self.done or [("", "", 0.0)], []
        lines = []
        for index, (rule, run, seconds) in enumerate(finished):
            count = done - len(finished) + index + 1
            head = f"{count}/{total} {clock_time(elapsed)}" + (f" ~{clock_time(left)} left" if left is not None
                                                              and count < total else "")
            lines.append(f"[{head}] {rule} {run}".rstrip() + (f"  {_duration(seconds)}" if rule else ""))
        return "\n".join(lines)


def install(logger: logging.Logger | None = None, benchmarks: Path = BENCHMARKS) -> ConsoleFilter | None:
    """Add the filter to Snakemake's logger once (a second parse in the same process adds nothing), with the
    benchmark files of an earlier run under ``benchmarks`` as priors; none with ``PIPELINE_CONSOLE=full``, which
    keeps Snakemake's own job blocks (every input, output and the whole reason)."""
    if env("PIPELINE_CONSOLE") == "full":
        return None
    if logger is None:
        logger = logging.getLogger("snakemake.logging")
    for existing in logger.filters:
        if isinstance(existing, ConsoleFilter):
            return existing
    console = ConsoleFilter(priors=benchmark_priors(benchmarks))
    logger.addFilter(console)
    return console
