"""Wall time of the default run and its split by stage, from Snakemake's per-job benchmark files.

Run: python benchmarks/default_run.py --run     # runs `snakemake` (the README's main job) and times it
     python benchmarks/default_run.py           # only summarises an existing results/benchmarks/
     python benchmarks/default_run.py --record  # writes the per-rule CPU reference (a change meant to cost more)

Every rule writes ``results/benchmarks/<rule>/<job>.tsv`` (Snakemake's ``benchmark:``: wall seconds ``s``
and ``cpu_time``). Per rule this prints the job count, the summed wall and CPU seconds and the share
of the summed wall time; with ``--run`` also the run's own wall-clock time (what docs/measurements.md records:
on 2 cores the jobs overlap, so the summed job time is about twice the wall time when both cores work) and
its exact CPU seconds (every process of the run, from the kernel's accounting of waited-for children).
Snakemake samples a job's CPU time (every second, then every 30 s), so the per-rule ``cpu_s`` is a lower
bound: the CPU a process spends after its last sample is not counted.

The guard: after the table it prints each rule's CPU seconds against the reference kept in the repository
(``benchmarks/reference/default_run.tsv``: a default run's per-rule CPU with the commit and machine it came from) as
a ratio, and flags a rule above :data:`FLAG_RATIO`. It never fails (exit 0 whatever the ratios): a shared machine's
noise must not fail CI, a person reads the flags. ``--record`` rewrites the reference from the run at hand, with a
CHANGELOG line saying why it costs more.
"""

from __future__ import annotations

import argparse
import os
import platform
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


#: A rule whose CPU seconds exceed the reference's by more than this factor is flagged (printed, never failed).
FLAG_RATIO = 1.10
#: The reference the guard compares with (per-rule CPU seconds of a recorded default run).
REFERENCE = Path(__file__).resolve().parent / "reference" / "default_run.tsv"


def read_reference(path: Path) -> tuple[pd.DataFrame, list[str]]:
    """The reference's rows (rule, jobs, cpu_s) and its ``#`` header lines (commit, machine, date)."""
    lines = path.read_text().splitlines()
    header = [line.removeprefix("#").strip() for line in lines if line.startswith("#")]
    frame = pd.read_csv(path, sep="\t", comment="#")
    missing = {"rule", "jobs", "cpu_s"} - set(frame.columns)
    if missing:
        raise ValueError(f"{path}: reference lacks column(s) {sorted(missing)} (expected rule, jobs, cpu_s)")
    return frame[["rule", "jobs", "cpu_s"]], header


def write_reference(path: Path, by_rule: pd.DataFrame, provenance: list[str]) -> None:
    """Write ``by_rule``'s jobs and CPU seconds per rule, under ``#`` lines saying where they came from."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = by_rule.reset_index()[["rule", "jobs", "cpu_s"]].sort_values("rule")
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(f"# {line}\n" for line in provenance) + table.to_csv(sep="\t", index=False))
    tmp.replace(path)


def compare(by_rule: pd.DataFrame, reference: pd.DataFrame, flag_ratio: float = FLAG_RATIO) -> pd.DataFrame:
    """Per rule: reference and current CPU seconds, their ratio and a flag (``over`` above ``flag_ratio``, ``new``
    for a rule the reference lacks, ``missing`` for one this run lacks, ``jobs`` when the job count changed), with a
    ``total`` row over the rules both have. ``by_rule`` is :func:`summary`'s table (indexed by rule)."""
    current = by_rule.reset_index()[["rule", "jobs", "cpu_s"]]
    merged = reference.merge(current, on="rule", how="outer", suffixes=("_ref", ""), indicator=True)
    both = merged["_merge"] == "both"
    merged["ratio"] = (merged["cpu_s"] / merged["cpu_s_ref"]).where(both & (merged["cpu_s_ref"] > 0))
    flag = pd.Series("", index=merged.index, dtype=object)
    flag[both & (merged["jobs"] != merged["jobs_ref"])] = "jobs"
    flag[merged["ratio"] > flag_ratio] = "over"
    flag[merged["_merge"] == "right_only"] = "new"
    flag[merged["_merge"] == "left_only"] = "missing"
    merged["flag"] = flag
    table = merged[["rule", "jobs_ref", "jobs", "cpu_s_ref", "cpu_s", "ratio", "flag"]].sort_values("rule")
    ref_total, cur_total = merged.loc[both, "cpu_s_ref"].sum(), merged.loc[both, "cpu_s"].sum()
    total_ratio = cur_total / ref_total if ref_total > 0 else float("nan")
    total = pd.DataFrame([{"rule": "total", "jobs_ref": merged.loc[both, "jobs_ref"].sum(),
                           "jobs": merged.loc[both, "jobs"].sum(), "cpu_s_ref": ref_total, "cpu_s": cur_total,
                           "ratio": total_ratio, "flag": "over" if total_ratio > flag_ratio else ""}])
    return pd.concat([table, total], ignore_index=True)


def guard(by_rule: pd.DataFrame, reference_path: Path) -> str:
    """The guard's report: the comparison table and a line naming the flagged rules (or saying there is none)."""
    if not reference_path.is_file():
        return (f"CPU guard: no reference at {reference_path} "
                "(python benchmarks/default_run.py --record writes it from this run)")
    reference, header = read_reference(reference_path)
    table = compare(by_rule, reference)
    over = table.loc[(table["flag"] == "over") & (table["rule"] != "total"), "rule"].tolist()
    lines = [f"CPU guard: per-rule CPU seconds against {reference_path.name} ({'; '.join(header)})",
             table.round({"cpu_s_ref": 1, "cpu_s": 1, "ratio": 2}).to_string(index=False)]
    lines.append(f"CPU guard: {len(over)} rule(s) over {FLAG_RATIO:.2f}x the reference: {', '.join(over)}"
                 if over else f"CPU guard: no rule over {FLAG_RATIO:.2f}x the reference")
    return "\n".join(lines)


def loop_seconds(repeats: int = 3) -> float:
    """This machine's speed: the fastest of ``repeats`` 10M-step Python loops (the probe `.ci/run` prints too). The
    machine's speed moved by 2x between days (docs/measurements.md), so a ratio is read against both speeds."""
    best = float("inf")
    for _ in range(repeats):
        started, total = time.perf_counter(), 0
        for step in range(10_000_000):
            total += step
        best = min(best, time.perf_counter() - started)
    return best


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="store_true", help="run `snakemake` first and time it")
    parser.add_argument("--benchmarks", type=Path, default=Path("results/benchmarks"))
    parser.add_argument("--reference", type=Path, default=REFERENCE, help="per-rule CPU reference (the guard)")
    parser.add_argument("--record", action="store_true", help="write this run's per-rule CPU as the reference")
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
    if args.record:
        machine = f"{platform.node()}, {platform.machine()}, {os.cpu_count()} cores"
        provenance = [f"commit: {_commit()}", f"machine: {machine}",
                      f"speed: a 10M-step Python loop {loop_seconds():.2f} s",
                      f"recorded: {time.strftime('%Y-%m-%d', time.gmtime())}",
                      "cpu_s: summed cpu_time of results/benchmarks/<rule>/ (sampled, a lower bound)"]
        write_reference(args.reference, table, provenance)
        print(f"wrote {args.reference}")
    else:
        print()
        print(guard(table, args.reference))
        print(f"CPU guard: this machine's speed: a 10M-step Python loop {loop_seconds():.2f} s (the reference's is in "
              "its header; CPU seconds scale with it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
