"""The pass-rate probe of the gradient-allocation table (Table 3): fresh samples of each probed group's prompt from
the policy its run kept at the start of the group's window, scored by the task's verifier.

    python -m pipeline_lib.jobs.eval.probe --run results/train/T/M/seedK --init INIT --data TRAIN.parquet \
        --spec JSON --seed K --out results/probe/T/M/seedK

Why a probe: Table 3 bins each group's gradient budget by its prompt's pass rate p, which must be measured apart
from the group whose gradient is counted (binned by its own k/M, the [0.9, 1] bin holds only all-correct groups, whose
advantage is 0 under every estimator). A prompt's other visits in the run measure it only where prompts come back: a
paper-scale Countdown run visits ~128k of ~490k prompts once each. So an RL run keeps its policy every
``train.rl.probe_every`` steps (``probe/step_<s>/``; :meth:`pipeline_lib.core.run_spec.RLSettings.probe_steps`),
and this job samples, for up to ``groups`` groups per window drawn uniformly with the seed, ``samples`` answers of
the group's prompt from the window's kept policy (steps s+1 .. s+probe_every use the policy after step s; the first
window uses the run's ``--init``), at the run's own rollout temperature and response cap, scored by the task's
verifier. p = correct / samples, independent of the group's own rewards.

Writes ``probe.jsonl`` (one line per window: ``window`` (its kept step), ``model``, and per probed group ``step``,
``group``, ``row`` (its training row), ``correct`` (of ``samples``)) and ``summary.json`` (per window the groups
visited and probed, the mean p), with provenance.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from pipeline_lib.core.checkpoint import probe_dir
from pipeline_lib.core.cli import add_seed_argument, add_spec_argument, add_threads_argument, entry_parser
from pipeline_lib.core.io import write_json, write_text
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.jobs.eval.backends import open_backend
from pipeline_lib.jobs.eval.evaluate import correct_verdict, verifier_rows

log = logging.getLogger("pipeline_lib.jobs.eval.probe")

__all__ = ["ROW_FIELDS", "choose_groups", "probe", "read_visits", "window_of"]

#: The ``rollouts.jsonl`` field naming each rollout's training row, by engine: the local engine's ``prompt_index``,
#: verl's ``prompt_row`` (its prompt matched to the training parquet's rows).
ROW_FIELDS = ("prompt_row", "prompt_index")


def window_of(steps: np.ndarray, kept: Sequence[int]) -> np.ndarray:
    """Each visit's window: the last kept step before it (a visit at step t is sampled by the policy after t - 1
    updates, so the policy kept after step s samples steps s + 1 .. next kept step)."""
    ordered = np.asarray(sorted(kept), dtype=np.int64)
    return ordered[np.searchsorted(ordered, np.asarray(steps, dtype=np.int64) - 1, side="right") - 1]


def read_visits(path: Path) -> dict[str, np.ndarray]:
    """Every group of a run's ``rollouts.jsonl``: its step, group index within the step and training row."""
    steps, groups, rows = [], [], []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        field = next((f for f in ROW_FIELDS if f in record), None)
        if field is None or "group" not in record or "step" not in record:
            raise ValueError(f"{path} line {number}: needs `step`, `group` and one of {list(ROW_FIELDS)} (a verl run's "
                             "rollouts.jsonl written before prompt_row existed: collect it again from the run's dumps)")
        group = np.asarray(record["group"], dtype=np.int64)
        row = np.asarray(record[field], dtype=np.int64)
        if len(group) != len(row):
            raise ValueError(f"{path} line {number}: `group` and `{field}` of different lengths")
        ids, first = np.unique(group, return_index=True)
        mixed = np.flatnonzero(row != row[first][np.searchsorted(ids, group)])
        if len(mixed):
            raise ValueError(f"{path} line {number}: group {int(group[mixed[0]])} holds rollouts of more than one "
                             "training row")
        steps.append(np.full(len(ids), int(record["step"]), dtype=np.int64))
        groups.append(ids)
        rows.append(row[first])
    if not steps:
        raise ValueError(f"{path}: no rollouts")
    visits = {"step": np.concatenate(steps), "group": np.concatenate(groups), "row": np.concatenate(rows)}
    unmatched = int((visits["row"] < 0).sum())
    if unmatched:
        raise ValueError(f"{path}: {unmatched} groups name no training row (row -1: their prompt matched no row of "
                         "the training data when the run was collected), so they cannot be probed")
    return visits


def choose_groups(windows: np.ndarray, per_window: int | None, seed: int) -> np.ndarray:
    """Indices of the probed groups: per window up to ``per_window`` (None: all) drawn uniformly with ``seed``, so
    each window's probed groups are a simple random sample of its visits."""
    if per_window is None:
        return np.arange(len(windows))
    keys = np.random.default_rng(seed).random(len(windows))
    order = np.lexsort((keys, windows))  # by window, then at random within it
    ranked = windows[order]
    starts = np.searchsorted(ranked, ranked, side="left")
    rank = np.arange(len(ranked)) - starts
    return np.sort(order[rank < per_window])


def _model_of(window: int, run_dir: Path, init: str) -> str:
    if window == 0:
        return init
    path = probe_dir(run_dir, window)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: the policy this run kept after step {window} for the probe is missing "
                                "(train.rl.probe_every was set when the run trained? a run trained without it must "
                                "be retrained to be probed)")
    return str(path)


def probe(run_dir: Path, init: str, data: Path, spec: Mapping[str, Any], seed: int, work_dir: Path
          ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Probe one run: the lines of ``probe.jsonl`` and the summary."""
    every, samples, per_window = int(spec["probe_every"]), int(spec["samples"]), spec.get("groups")
    total = int(spec["steps"])
    kept = [0, *range(every, total, every)]
    visits = read_visits(run_dir / "rollouts.jsonl")
    frame = pd.read_parquet(data)
    if int(visits["row"].max()) >= len(frame):
        raise ValueError(f"{run_dir / 'rollouts.jsonl'}: training row {int(visits['row'].max())} beyond the "
                         f"{len(frame)} rows of {data} (not this run's training data?)")
    windows = window_of(visits["step"], kept)
    chosen = choose_groups(windows, per_window, seed)
    backend_spec = dict(spec["generation"])
    lines, summary = [], {"samples": samples, "groups_per_window": per_window, "probe_every": every, "windows": []}
    for window in kept:
        picked = chosen[windows[chosen] == window]
        visited = int((windows == window).sum())
        if not len(picked):
            summary["windows"].append({"window": window, "groups_visited": visited, "groups_probed": 0})
            continue
        rows, inverse = np.unique(visits["row"][picked], return_inverse=True)
        prompts = [[dict(m) for m in frame["prompt"].iloc[int(r)]] for r in rows]
        model = _model_of(window, run_dir, init)
        log.info("window %d (%s): %d groups over %d prompts, %d samples each", window, model, len(picked), len(rows),
                 samples)
        torch.manual_seed(seed * 1_000_003 + window)
        with open_backend(Path(model), backend_spec, seed + window, work_dir) as backend:
            outputs = backend.generate(prompts, samples=samples, greedy=False)
        flat_rows = [int(rows[i]) for i, per in enumerate(outputs) for _ in per]
        verdicts = verifier_rows(frame, [g.text for per in outputs for g in per], flat_rows)
        owner = np.repeat(np.arange(len(rows)), [len(per) for per in outputs])
        correct = np.bincount(owner, np.asarray([correct_verdict(v) for v in verdicts], dtype=float), len(rows))
        drawn = np.bincount(owner, minlength=len(rows))
        if not np.all(drawn == samples):
            raise RuntimeError(f"window {window}: the backend returned {sorted(set(drawn.tolist()))} samples per "
                               f"prompt where {samples} were asked")
        per_group = correct[inverse]
        lines.append({"window": window, "model": model, "samples": samples,
                      "step": visits["step"][picked].tolist(), "group": visits["group"][picked].tolist(),
                      "row": visits["row"][picked].tolist(), "correct": per_group.astype(int).tolist()})
        summary["windows"].append({"window": window, "groups_visited": visited, "groups_probed": len(picked),
                                   "prompts": len(rows), "mean_p": float(per_group.mean() / samples)})
    summary["groups_visited"] = len(windows)
    summary["groups_probed"] = len(chosen)
    return lines, summary


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.jobs.eval.probe")
    parser.add_argument("--run", type=Path, required=True, help="the probed RL run (its rollouts.jsonl, probe/)")
    parser.add_argument("--init", required=True, help="the model the run started from (the first window's policy)")
    parser.add_argument("--data", type=Path, required=True, help="the run's training prompts (its --data)")
    add_spec_argument(parser, "the probe: probe_every, steps, samples, groups (per window; null: all), generation "
                              "(the backend's settings at the run's rollout temperature and response cap)")
    parser.add_argument("--out", type=Path, required=True)
    add_seed_argument(parser)
    add_threads_argument(parser)
    args = parser.parse_args(argv)
    started = time.time()
    torch.set_num_threads(args.threads)
    spec = json.loads(args.spec)
    args.out.mkdir(parents=True, exist_ok=True)
    lines, summary = probe(args.run, args.init, args.data, spec, args.seed, args.out)
    write_text(args.out / "probe.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    write_json(args.out / "summary.json", summary)
    models = [Path(line["model"]) / "config.json" for line in lines if Path(line["model"]).is_dir()]
    write_provenance([args.out / "probe.jsonl", args.out / "summary.json"], step="probe_pass_rate",
                     inputs=[args.run / "rollouts.jsonl", args.data, *models], params={"spec": spec},
                     seeds={"probe": args.seed}, started_at=started)
    log.info("probed %d of %d groups", summary["groups_probed"], summary["groups_visited"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
