"""Wall time of the default run and its split by stage, from Snakemake's per-job benchmark files.

Run: python benchmarks/default_run.py --run     # runs `snakemake` (the README's main job) and times it
     python benchmarks/default_run.py           # only summarises an existing results/benchmarks/

Every rule writes ``results/benchmarks/<rule>/<job>.tsv`` (Snakemake's ``benchmark:``: wall seconds ``s``
and ``cpu_time``). Per rule this prints the job count, the summed wall and CPU seconds and the share
of the summed wall time; with ``--run`` also the run's own wall-clock time (what docs/measurements.md records:
on 2 cores the jobs overlap, so the summed job time is about twice the wall time when both cores work) and
its exact CPU seconds (every process of the run, from the kernel's accounting of waited-for children).
Snakemake samples a job's CPU time (every second, then every 30 s), so the per-rule ``cpu_s`` is a lower
bound: the CPU a process spends after its last sample is not counted.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd


def job_table(root: Path) -> pd.DataFrame:
    """One row per benchmark file: rule (its folder under ``root``, else the file's stem), wall and CPU seconds."""
    rows = []
    for path in sorted(root.rglob("*.tsv")):
        frame = pd.read_csv(path, sep="\t")
        if frame.empty or "s" not in frame.columns:
            raise ValueError(f"{path}: not a Snakemake benchmark file (no 's' column)")
        relative = path.relative_to(root)
        rule = relative.parts[0] if len(relative.parts) > 1 else path.stem
        rows.append({"rule": rule, "job": str(relative), "wall_s": float(frame["s"].iloc[-1]),
                     "cpu_s": float(frame["cpu_time"].iloc[-1]) if "cpu_time" in frame.columns else float("nan")})
    return pd.DataFrame(rows, columns=["rule", "job", "wall_s", "cpu_s"])


def summary(jobs: pd.DataFrame) -> pd.DataFrame:
    by_rule = jobs.groupby("rule").agg(jobs=("job", "count"), wall_s=("wall_s", "sum"), cpu_s=("cpu_s", "sum"),
                                       max_job_wall_s=("wall_s", "max"))
    by_rule["share_%"] = 100 * by_rule["wall_s"] / by_rule["wall_s"].sum()
    return by_rule.sort_values("wall_s", ascending=False).round(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="store_true", help="run `snakemake` first and time it")
    parser.add_argument("--benchmarks", type=Path, default=Path("results/benchmarks"))
    parser.add_argument("snakemake_args", nargs="*", help="extra arguments for snakemake (with --run)")
    args = parser.parse_args(argv)
    wall = cpu = None
    if args.run:
        started = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(["snakemake", *args.snakemake_args], check=True)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if not args.benchmarks.is_dir():
        print(f"no {args.benchmarks}/: run the workflow first (or pass --run)", file=sys.stderr)
        return 1
    jobs = job_table(args.benchmarks)
    table = summary(jobs)
    print(table.to_string())
    print(f"\n{len(jobs)} benchmarked jobs: {jobs['wall_s'].sum():.0f} s summed wall, "
          f"{jobs['cpu_s'].sum():.0f} s CPU (sampled: a lower bound)")
    if wall is not None:
        print(f"snakemake wall-clock: {wall:.0f} s ({wall / 60:.1f} min); CPU of every process of the run: "
              f"{cpu:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
