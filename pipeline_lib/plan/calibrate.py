"""``python -m pipeline_lib calibrate``: the plan's estimates corrected by the first runs' measured step times.

After the first verl steps of some runs, each run directory holds verl's file-logger records (``verl_metrics*.jsonl``,
or the collected ``metrics.jsonl``) with ``timing_s/step`` (seconds per step, verl's name) and
``response_length/mean`` / ``prompt_length/mean`` (tokens). For each planned verl run this prints the estimate at
the expected lengths (:func:`pipeline_lib.plan.estimates.estimate_run`) beside the one its measured step time gives:
the measured run's own, and for a run not started yet, its estimate scaled by the measured runs' median ratio (same
task and engine kind first, else all). A step time is the median over logged steps after the first ``--skip``
(start-up, the first validation). The demonstrations' and prompts' lengths, measured from the task's built data
(:func:`measured_lengths`), replace the stated lengths where present.

    python -m pipeline_lib calibrate --configfile config/paper.yaml [--results results] [--skip 2] [--json]
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.config import ConfigError
from pipeline_lib.core.run_spec import PlanError
from pipeline_lib.plan import plan_runs
from pipeline_lib.plan.estimates import CHARS_PER_TOKEN, Lengths, estimate_run, site_settings
from pipeline_lib.plan.table import load_config

__all__ = ["calibrate", "main", "measured_lengths", "step_records"]

STEP_TIME, RESPONSE, PROMPT = "timing_s/step", "response_length/mean", "prompt_length/mean"


def step_records(run_dir: Path) -> dict[int, dict[str, Any]]:
    """Every logged training step of a run (verl's file-logger files of every attempt, then ``metrics.jsonl``; a
    later record of a step wins), by step. Torn or foreign lines are skipped: this only reads."""
    files = sorted(run_dir.glob("verl_metrics.*.jsonl"), key=lambda p: int(p.name.split(".")[1])
                   if p.name.split(".")[1].isdigit() else -1)
    by_step: dict[int, dict[str, Any]] = {}
    for path in [*files, run_dir / "verl_metrics.jsonl", run_dir / "metrics.jsonl"]:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                continue
            data = record.get("data", record)
            if isinstance(data, dict) and STEP_TIME in data:
                by_step[record["step"]] = data
    return by_step


def _measured_step(records: Mapping[int, Mapping[str, Any]], skip: int) -> dict[str, float] | None:
    """Median seconds per step (and tokens) over the steps after the first ``skip``, or None before any."""
    steps = [records[k] for k in sorted(records) if k > skip]
    if not steps:
        return None
    out = {"seconds": statistics.median(float(r[STEP_TIME]) for r in steps), "steps": float(len(steps))}
    for key, name in ((RESPONSE, "response"), (PROMPT, "prompt")):
        values = [float(r[key]) for r in steps if key in r]
        if values:
            out[name] = statistics.median(values)
    return out


def _chars(messages: Any) -> int:
    return sum(len(str(m.get("content", ""))) for m in messages) if messages is not None else 0


def measured_lengths(data_root: Path, tasks: Sequence[str]) -> dict[str, Lengths]:
    """Per task with built data: the demonstrations' mean response and the RL prompts' mean length, in tokens at
    :data:`~pipeline_lib.plan.estimates.CHARS_PER_TOKEN` (``<data_root>/<task>/sft_train.parquet``: the last
    message; ``rl_train.parquet``: the prompt's messages)."""
    import pandas as pd

    out = {}
    for task in tasks:
        sft, rl = data_root / task / "sft_train.parquet", data_root / task / "rl_train.parquet"
        if not sft.is_file():
            continue
        messages = pd.read_parquet(sft, columns=["messages"])["messages"]
        response = statistics.fmean(len(str(list(m)[-1]["content"])) for m in messages) / CHARS_PER_TOKEN
        if rl.is_file():
            prompts = pd.read_parquet(rl, columns=["prompt"])["prompt"]
            prompt = statistics.fmean(_chars(list(p)) for p in prompts) / CHARS_PER_TOKEN
        else:
            prompt = statistics.fmean(_chars(list(m)[:-1]) for m in messages) / CHARS_PER_TOKEN
        out[task] = Lengths(prompt, response, f"measured from {sft} and {rl if rl.is_file() else sft} "
                                              f"({CHARS_PER_TOKEN:g} characters per token)")
    return out


def calibrate(config: Mapping[str, Any], plan: Any, results: Path, skip: int = 2) -> list[dict[str, Any]]:
    """One row per planned verl run: the estimate, the measured step time where the run logged steps, and the
    corrected GPU-hours and attempts (its own measurement, else the median ratio of the measured runs like it)."""
    site = site_settings(config)
    tasks = sorted({run.spec.task for run in plan.runs if run.verl_kind})
    measured = measured_lengths(results / "data", tasks)
    rows = []
    for run in plan.runs:
        if run.job != "train_verl":
            continue
        planned = estimate_run(run, site)
        if planned is None or planned.wall_hours is None:
            continue
        steps = run.spec.rl.steps if run.spec.rl is not None else run.spec.sft.steps
        step = _measured_step(step_records(results / "train" / run.key), skip)
        rows.append({"run": run.key, "kind": run.verl_kind, "task": run.spec.task, "steps": steps,
                     "estimated_step_s": planned.wall_hours / steps * 3600, "measured_step_s":
                     step["seconds"] if step else None, "logged_steps": int(step["steps"]) if step else 0,
                     "measured_response": step.get("response") if step else None, "planned": planned,
                     "lengths": measured})
    ratios = {(r["task"], r["kind"]): r["measured_step_s"] / r["estimated_step_s"] for r in rows
              if r["measured_step_s"]}
    everything = statistics.median(ratios.values()) if ratios else None
    out = []
    for row in rows:
        run = next(r for r in plan.runs if r.job == "train_verl" and r.key == row["run"])
        if row["measured_step_s"]:
            step_s, basis = row["measured_step_s"], "measured"
        else:
            ratio = ratios.get((row["task"], row["kind"]), everything)
            lengths_only = estimate_run(run, site, measured=row["lengths"])
            step_s = None if ratio is None else lengths_only.wall_hours / row["steps"] * 3600 * ratio
            basis = "scaled by the measured runs' median ratio" if ratio is not None else "no measurement yet"
            if ratio is None:
                step_s, basis = lengths_only.wall_hours / row["steps"] * 3600, "measured lengths only" \
                    if row["task"] in row["lengths"] else "the plan's estimate"
        corrected = estimate_run(run, site, measured=row["lengths"], step_hours=step_s / 3600)
        planned = row["planned"]
        out.append({"run": row["run"], "estimated_step_s": round(row["estimated_step_s"], 1),
                    "measured_step_s": None if row["measured_step_s"] is None else round(row["measured_step_s"], 1),
                    "logged_steps": row["logged_steps"], "basis": basis,
                    "gpu_hours": round(planned.gpu_hours, 1), "corrected_gpu_hours": round(corrected.gpu_hours, 1),
                    "attempts": planned.attempts, "corrected_attempts": corrected.attempts,
                    "checkpoint_every": planned.checkpoint_every,
                    "corrected_checkpoint_every": corrected.checkpoint_every,
                    "measured_response_tokens": row["measured_response"]})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib calibrate", summary="line", logs=False)
    parser.add_argument("--configfile", nargs="+", default=["config/config.yaml"], help="config file(s), merged")
    parser.add_argument("--results", type=Path, default=Path("results"), help="the results directory")
    parser.add_argument("--skip", type=int, default=2, help="first steps left out (start-up, first validation)")
    parser.add_argument("--json", action="store_true", help="one JSON object per run instead of the table")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.configfile)
        plan = plan_runs(config)
    except (ConfigError, PlanError) as exc:
        print(f"python -m pipeline_lib calibrate: {exc}", file=sys.stderr)
        return 2
    rows = calibrate(config, plan, args.results, args.skip)
    if args.json:
        print("\n".join(json.dumps(row) for row in rows))
        return 0
    header = ("run", "step s (est.)", "step s (meas.)", "GPU-h", "GPU-h corr.", "attempts", "corr.", "basis")
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(v) for v in (row["run"], row["estimated_step_s"], row["measured_step_s"] or "-",
                                          row["gpu_hours"], row["corrected_gpu_hours"], row["attempts"],
                                          row["corrected_attempts"], row["basis"])))
    return 0
