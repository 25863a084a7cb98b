"""How long the default run's jobs take end to end on N cores, in the order Snakemake would start them.

Run: python benchmarks/schedule.py --benchmarks results/benchmarks            # the last run's per-job seconds
     python benchmarks/schedule.py --benchmarks B --configfile other.yaml     # another job graph (e.g. 5 seeds)

Builds the job graph of the workflow (``--configfile``, default the tiny default) with each job's ``priority``
(:func:`pipeline_lib.plan.groups.job_priority`), takes each job's seconds from a finished run's benchmark files
(``--benchmarks``; a job with no file there, e.g. a seed that run did not have, gets the mean of the same rule's jobs
that differ from it only in the seed) and replays Snakemake's local scheduling: whenever a core is free, the ready
job of highest priority starts (Snakemake's scheduler maximises the summed priority of the jobs it starts; equal
priorities are broken at random, ``--draws`` times). It prints, side by side, the makespan with the workflow's
priorities and with none (every tie broken at random, as a run without priorities gets them), the two bounds
(summed seconds / cores and the longest chain), and, when the benchmark files' modification times are those of the
run that wrote them, the makespan that run actually had (first job start to last job end).

What it does not model: Snakemake's own start-up (parsing, the job graph, ``run_info``) and the seconds between a
job's end and the next start; the job seconds are what they were in that run, with both cores busy (a job alone on
the machine is faster). So the makespans compare orders, and the real wall time adds Snakemake's start-up.
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import re
import statistics
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def job_graph(configfile: Path) -> list[dict]:
    """Every job that a run from an empty ``results/`` would start: rule, benchmark path, priority, dependencies."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

    os.chdir(REPO)
    with SnakemakeApi(OutputSettings()) as api:
        workflow_api = api.workflow(snakefile=Path("Snakefile"), resource_settings=ResourceSettings(cores=2),
                                    config_settings=ConfigSettings(configfiles=[configfile]))
        dag_api = workflow_api.dag(DAGSettings(forceall=True))
        workflow = workflow_api._workflow  # the graph as `snakemake --forceall -n` builds it (no public accessor)
        workflow.dag_settings = dag_api.dag_settings
        workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True)
        workflow._build_dag()
        dag = workflow.dag
        dag.update_priority()
        return [{"id": job.jobid, "rule": job.rule.name, "benchmark": str(job.benchmark) if job.benchmark else None,
                 "priority": dag.priority(job), "deps": sorted({d.jobid for d in dag.dependencies[job]})}
                for job in dag.jobs]


def job_seconds(jobs: list[dict], root: Path) -> tuple[dict[int, float], dict[int, float], int]:
    """(seconds per job, end time per job from the files' mtimes, how many jobs had no file of their own)."""
    measured, ends = {}, {}
    for job in jobs:
        if job["benchmark"]:
            path = root / Path(job["benchmark"]).relative_to("results/benchmarks")
            if path.is_file():
                measured[job["id"]] = float(pd.read_csv(path, sep="\t")["s"].iloc[-1])
                ends[job["id"]] = path.stat().st_mtime
    by_pattern: dict[str, list[float]] = {}
    unseeded = {job["id"]: re.sub(r"seed[0-9]+", "seed*", job["benchmark"] or "") for job in jobs}
    for job_id, seconds in measured.items():
        by_pattern.setdefault(unseeded[job_id], []).append(seconds)
    seconds, estimated = {}, 0
    for job in jobs:
        if job["id"] in measured:
            seconds[job["id"]] = measured[job["id"]]
        elif job["benchmark"] is None:
            seconds[job["id"]] = 0.0  # the target rule `all`
        elif unseeded[job["id"]] in by_pattern:
            seconds[job["id"]] = statistics.mean(by_pattern[unseeded[job["id"]]])
            estimated += 1
        else:
            raise SystemExit(f"no benchmark file for {job['benchmark']} (nor for another seed of it) in {root}")
    return seconds, ends, estimated


def makespan(jobs: list[dict], seconds: dict[int, float], cores: int, key) -> float:
    """List scheduling: when a core frees, the ready job with the largest ``key(job)`` starts."""
    children: dict[int, list[int]] = {job["id"]: [] for job in jobs}
    waiting = {job["id"]: len(job["deps"]) for job in jobs}
    for job in jobs:
        for dep in job["deps"]:
            children[dep].append(job["id"])
    ready = [job_id for job_id, n in waiting.items() if n == 0]
    running: list[tuple[float, int]] = []
    now, finished = 0.0, 0
    while finished < len(jobs):
        ready.sort(key=key, reverse=True)
        while ready and len(running) < cores:
            job_id = ready.pop(0)
            heapq.heappush(running, (now + seconds[job_id], job_id))
        now, job_id = heapq.heappop(running)
        finished += 1
        for child in children[job_id]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    return now


def longest_chain(jobs: list[dict], seconds: dict[int, float]) -> float:
    by_id = {job["id"]: job for job in jobs}
    memo: dict[int, float] = {}

    def finish(job_id: int) -> float:
        if job_id not in memo:
            memo[job_id] = seconds[job_id] + max((finish(d) for d in by_id[job_id]["deps"]), default=0.0)
        return memo[job_id]

    return max(finish(job["id"]) for job in jobs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmarks", type=Path, default=Path("results/benchmarks"))
    parser.add_argument("--configfile", type=Path, default=Path("config/config.yaml"))
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--draws", type=int, default=200, help="random tie-breaks per order")
    args = parser.parse_args(argv)
    root = args.benchmarks.resolve()
    jobs = job_graph(args.configfile)
    seconds, ends, estimated = job_seconds(jobs, root)
    total = sum(seconds.values())
    chain = longest_chain(jobs, seconds)
    print(f"{len(jobs) - 1} jobs ({estimated} with seconds from other seeds' jobs), {total:.0f} job seconds; "
          f"bounds on {args.cores} cores: {total / args.cores:.0f} s (seconds / cores), {chain:.0f} s (longest chain)")
    rows = {}
    for name, prioritised in (("workflow priorities", True), ("no priorities", False)):
        spans = []
        for draw in range(args.draws):
            tie = random.Random(draw)
            rank = {job["id"]: ((job["priority"] or 0) if prioritised else 0, tie.random()) for job in jobs}
            spans.append(makespan(jobs, seconds, args.cores, rank.__getitem__))
        spans.sort()
        rows[name] = spans
        print(f"{name:>20}: makespan median {statistics.median(spans):.0f} s, 90th percentile "
              f"{spans[int(0.9 * len(spans))]:.0f} s, worst {spans[-1]:.0f} s ({args.draws} tie-breaks)")
    print(f"no priorities / workflow priorities, median makespan: "
          f"{statistics.median(rows['no priorities']) / statistics.median(rows['workflow priorities']):.3f}")
    if len(ends) == len([job for job in jobs if job["benchmark"]]) and not estimated:
        starts = [ends[j] - seconds[j] for j in ends]
        print(f"the run that wrote {args.benchmarks}: first job start to last job end "
              f"{max(ends.values()) - min(starts):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
