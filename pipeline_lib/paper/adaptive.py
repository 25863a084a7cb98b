"""Adaptive temperature by effective sample size (``softmax_ess``) against fixed-tau SoftmaxGRPO and GRPO.

    python -m pipeline_lib.paper.adaptive compare --ours softmax_ess --baselines softmax_exact grpo_exact \
        --eval EVAL_RUNS.json --rollouts ROLLOUT_RUNS.json --label tiny --stem results/paper/tables/adaptive_tau
    python -m pipeline_lib.paper.adaptive tau-data --rollouts ROLLOUT_RUNS.json \
        --ess-fraction 0.5 --out results/paper/data/adaptive_tau.csv
    python -m pipeline_lib.paper.adaptive tau-figure --data CSV --label tiny --png P --pdf P

``compare`` writes two tables: ``<stem>`` (paired differences ours - baseline of held-out pass@1, greedy and
sampled, with 95% intervals from :func:`pipeline_lib.core.stats.paired_interval`, the seed as the unit) and
``<stem>_allocation`` (each method's share of the gradient budget sum_i T_i |A_i| by its prompt's pass-rate bin,
and ours - baseline per bin with t-intervals over seeds). ``tau-data``/``tau-figure`` show the per-group
temperature softmax_ess chose over training: read from the ``tau`` the local engine logs per rollout, or, for
runs without it (verl), recomputed from the logged rewards with the same estimator.

``--eval`` and ``--rollouts`` map each run's ``generations.jsonl`` / ``rollouts.jsonl`` to the run
(:class:`pipeline_lib.plan.runs.RunId`, written by the plan): a run's task, method and seed are read from there.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.io import read_csv_frame, save_figure, write_csv_frame
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.core.rl.advantages import ess_group_tau
from pipeline_lib.core.stats import INTERVAL_METHOD, paired_interval
from pipeline_lib.paper.reproduction import compare, prompt_scores
from pipeline_lib.paper.results import (
    METHOD_LABELS,
    PASS_RATE_BINS,
    PASS_RATE_MEASURE,
    allocation_data,
    bin_names,
    run_columns,
    run_ids_argument,
    runs_record,
)
from pipeline_lib.paper.tables import write_table
from pipeline_lib.plan.runs import RunId

__all__ = ["allocation_comparison", "paired_differences", "tau_data", "tau_figure"]

log = logging.getLogger("pipeline_lib.paper.adaptive")

#: The per-prompt metrics compared (the keys of :func:`pipeline_lib.paper.reproduction.prompt_scores`).
METRICS = ("pass@1_greedy", "pass@1_sampled")
LEVEL = 0.95
STATE_LABELS = {"solved": "ESS = target", "limit": "unreachable: tau -> 0 (MaxRL limit)",
                "no signal": "all rewards equal: no signal"}


def _label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def _by_run(files: Mapping[str, RunId]) -> dict[tuple[str, str, int], Path]:
    """(task, method, seed) -> its file, for ``files`` (each file -> its run)."""
    runs: dict[tuple[str, str, int], Path] = {}
    for path, run in files.items():
        key = (run.task, run.name, run.seed)
        if key in runs:
            raise ValueError(f"two files for task {key[0]} method {key[1]} seed {key[2]}: {runs[key]} and {path}")
        runs[key] = Path(path)
    return runs


def paired_differences(evaluations: Mapping[str, RunId], ours: str, baselines: list[str]) -> pd.DataFrame:
    """Per task, baseline and metric: mean(ours - baseline) of held-out per-prompt scores with a 95% interval whose
    unit is the seed (:func:`pipeline_lib.paper.reproduction.compare`, strict: both methods on the same seeds and
    test prompts, else an error naming the file); ``evaluations``: each run's ``generations.jsonl`` -> the run."""
    paths = _by_run(evaluations)
    scores = {key: prompt_scores(path) for key, path in paths.items()}
    rows = []
    for task in sorted({t for t, _, _ in paths}):
        for baseline in baselines:
            for metric in METRICS:
                comparison = compare(scores, task, ours, baseline, metric, strict=True, sources=paths)
                if comparison.result is None:
                    continue  # no sampled generations in this evaluation (eval.samples = 0)
                rows.append({"task": task, "ours": ours, "baseline": baseline, "metric": metric,
                             "ours_mean": comparison.a_mean, "baseline_mean": comparison.b_mean,
                             **comparison.result.as_dict()})
    return pd.DataFrame(rows)


def _interval(mean: float, low: float, high: float) -> str:
    """Points: ``+2.5 [+0.4, +4.6]``, or ``+2.5 (1 seed: no interval)``."""
    if np.isnan(low):
        return f"{100 * mean:+.1f} (1 seed: no interval)"
    return f"{100 * mean:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def comparison_table(frame: pd.DataFrame, label: str, stem: Path) -> list[Path]:
    rows = [{"Task": r.task, "Comparison": f"{_label(r.ours)} - {_label(r.baseline)}", "Metric": r.metric,
             "Ours (%)": f"{100 * r.ours_mean:.1f}", "Baseline (%)": f"{100 * r.baseline_mean:.1f}",
             "Difference (pp) [95% CI]": _interval(r.mean, r.low, r.high), "Interval method": r.method,
             "Seeds": int(r.n_seeds), "Prompts": int(r.n_items)} for r in frame.itertuples()]
    caption = (f"Adaptive tau by effective sample size [{label} run]: held-out pass@1 of SoftmaxGRPO-ESS minus each "
               "baseline trained on the same budget and seeds, in percentage points. " + INTERVAL_METHOD)
    return write_table(pd.DataFrame(rows), stem, caption, "tab:adaptive_tau")


def allocation_comparison(rollouts: Mapping[str, RunId], ours: str, baselines: list[str]) -> pd.DataFrame:
    """Per task: each method's mean share of its binned sum T|A| by pass-rate bin (p over each prompt's other visits:
    :func:`pipeline_lib.paper.results.allocation_bins`), and ours - baseline with seed intervals (``rollouts``: each
    run's ``rollouts.jsonl`` -> the run)."""
    data = allocation_data(rollouts)
    bins = [f"bin{i}" for i in range(len(PASS_RATE_BINS))]
    totals = data[bins].sum(axis=1)
    if (totals <= 0).any():  # a share of nothing is undefined: such runs are left out and their seeds unpaired
        empty = data.loc[totals <= 0, ["task", "method", "seed"]].to_dict("records")
        log.warning("runs with no binned gradient (every group all-equal, or no prompt visited twice), left out: %s",
                    empty)
    kept, kept_totals = data[totals > 0], totals[totals > 0]
    shares = kept.assign(**{b: kept[b] / kept_totals for b in bins},
                         unbinned=kept["unbinned"] / (kept_totals + kept["unbinned"]))
    runs = {(r.task, r.method, int(r.seed)): r for r in shares.itertuples()}
    rows = []
    for task in sorted(data["task"].unique()):
        for method in [ours, *baselines]:
            part = shares[(shares["task"] == task) & (shares["method"] == method)]
            rows.append({"task": task, "row": method, "kind": "share", "n_seeds": len(part),
                         **{f"{b}_mean": float(part[b].mean()) for b in bins},
                         "unbinned_mean": float(part["unbinned"].mean())})
        for baseline in baselines:
            seeds = sorted({s for t, m, s in runs if t == task and m == ours}
                           & {s for t, m, s in runs if t == task and m == baseline})
            row = {"task": task, "row": f"{ours}-{baseline}", "kind": "difference", "n_seeds": len(seeds)}
            if not seeds:
                rows.append(row | {f"{b}_{stat}": float("nan") for b in bins for stat in ("mean", "low", "high")})
                continue
            for b in bins:
                diff = paired_interval([getattr(runs[(task, ours, s)], b) for s in seeds],
                                       [getattr(runs[(task, baseline, s)], b) for s in seeds], level=LEVEL)
                row |= {f"{b}_mean": diff.mean, f"{b}_low": diff.low, f"{b}_high": diff.high}
            rows.append(row)
    return pd.DataFrame(rows)


def allocation_comparison_table(frame: pd.DataFrame, label: str, stem: Path) -> list[Path]:
    names = bin_names()
    rows = []
    for r in frame.to_dict("records"):
        if r["n_seeds"] == 0:
            name = _label(r["row"]) if r["kind"] == "share" else \
                " - ".join(_label(m) for m in r["row"].split("-", 1)) + " (pp)"
            cells = {n: "–" for n in [*names, "Unbinned"]}  # no run of this row had any binned gradient
        elif r["kind"] == "share":
            name = _label(r["row"])
            cells = {**{n: f"{100 * r[f'bin{i}_mean']:.1f}%" for i, n in enumerate(names)},
                     "Unbinned": f"{100 * r['unbinned_mean']:.1f}%"}
        else:
            ours, baseline = r["row"].split("-", 1)
            name = f"{_label(ours)} - {_label(baseline)} (pp)"
            cells = {**{n: _interval(r[f"bin{i}_mean"], r[f"bin{i}_low"], r[f"bin{i}_high"])
                        for i, n in enumerate(names)}, "Unbinned": "–"}
        rows.append({"Task": r["task"], "Row": name, **cells, "Seeds": int(r["n_seeds"])})
    caption = (f"Gradient allocation of SoftmaxGRPO-ESS [{label} run]: share of the token-level gradient budget "
               "sum_i T_i |A_i| spent on prompts binned by their measured pass rate p (mean over seeds of each run's "
               "share of its binned budget over all steps; Unbinned: the mean share of the whole budget not binned), "
               "and the paired difference to each baseline in percentage points with 95% t-intervals over the "
               "per-seed differences (seeds - 1 degrees of freedom; one seed: no interval). " + PASS_RATE_MEASURE)
    return write_table(pd.DataFrame(rows), stem, caption, "tab:adaptive_tau_allocation")


def tau_data(rollouts: Mapping[str, RunId], ess_fraction: float | None = None) -> pd.DataFrame:
    """One row per (run, step, group) of ``rollouts`` (each run's ``rollouts.jsonl`` -> the run): its pass rate and
    the temperature softmax_ess chose.

    ``state`` is ``solved`` (ESS = target), ``limit`` (target unreachable: the tau -> 0 limit, tau = 0) or
    ``no signal`` (all rewards equal: no tau, advantage 0). A run whose rollouts carry no ``tau`` gets it
    recomputed from its rewards with ``ess_fraction`` (an error without one).
    """
    frames = []
    for name, run in rollouts.items():
        path, identity = Path(name), run_columns(run)
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            record = json.loads(line)
            group = np.asarray(record["group"], dtype=np.int64)
            if "tau" in record:
                tau = np.array([np.nan if t is None else t for t in record["tau"]], dtype=np.float64)
            elif ess_fraction is not None:
                tau = ess_group_tau(torch.tensor(record["reward"], dtype=torch.float64), torch.from_numpy(group),
                                    ess_fraction).numpy()
            else:
                raise ValueError(f"{path} line {number}: no 'tau' per rollout (not a local softmax_ess run); pass "
                                 "--ess-fraction to recompute it from the logged rewards")
            ids, first, size = np.unique(group, return_index=True, return_counts=True)
            correct = np.bincount(np.searchsorted(ids, group), np.asarray(record["correct"], dtype=np.float64))
            frames.append(pd.DataFrame({**identity, "step": int(record["step"]), "group": ids, "size": size,
                                        "pass_rate": correct / size, "tau": tau[first]}))
    data = pd.concat(frames, ignore_index=True)
    data["state"] = np.where(data["tau"].isna(), "no signal", np.where(data["tau"] == 0, "limit", "solved"))
    return data


def tau_figure(data: pd.DataFrame, label: str, png: str, pdf: str) -> None:
    """Per task: (a) every group's tau over training, coloured by pass rate, with the per-step median; (b) shares."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted(data["task"].unique())
    fig, axes = plt.subplots(len(tasks), 2, figsize=(10, 3.4 * len(tasks)), squeeze=False)
    for row, task in enumerate(tasks):
        part = data[data["task"] == task]
        solved = part[part["state"] == "solved"]
        ax = axes[row][0]
        jitter = np.random.default_rng(0).uniform(-0.25, 0.25, len(solved))
        points = ax.scatter(solved["step"] + jitter, solved["tau"], c=solved["pass_rate"], cmap="viridis", vmin=0,
                            vmax=1, s=6, alpha=0.5, linewidths=0)
        median = solved.groupby("step")["tau"].median()
        ax.plot(median.index, median.values, color="black", linewidth=1.2, label="median over groups")
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("tau chosen for the group")
        ax.set_title(f"{task}: per-group tau (groups whose target ESS is reachable)", fontsize=9)
        ax.legend(fontsize=7)
        fig.colorbar(points, ax=ax, label="group pass rate")
        ax = axes[row][1]
        shares = part.groupby("step")["state"].value_counts(normalize=True).unstack(fill_value=0.0)
        states = [s for s in ("solved", "limit", "no signal") if s in shares.columns]
        ax.stackplot(shares.index, *(shares[s].values for s in states), labels=[STATE_LABELS[s] for s in states])
        ax.set_ylim(0, 1)
        ax.set_xlabel("step")
        ax.set_ylabel("share of groups")
        ax.set_title(f"{task}: groups by temperature state", fontsize=9)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    fig.suptitle(f"Temperatures chosen by SoftmaxGRPO-ESS over training [{label} run], all seeds")
    fig.tight_layout()
    save_figure(fig, png, pdf, dpi=140)


def _write_csv(frame: pd.DataFrame, path: str | Path) -> None:
    write_csv_frame(frame, path)


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.paper.adaptive")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compare")
    p.add_argument("--ours", default="softmax_ess")
    p.add_argument("--baselines", nargs="+", default=["softmax_exact", "grpo_exact"])
    p.add_argument("--eval", type=run_ids_argument, required=True,
                   help="JSON (or its file): each run's generations.jsonl -> the run")
    p.add_argument("--rollouts", type=run_ids_argument, required=True,
                   help="JSON (or its file): each run's rollouts.jsonl -> the run")
    p.add_argument("--label", required=True)
    p.add_argument("--stem", type=Path, required=True)
    p = sub.add_parser("tau-data")
    p.add_argument("--rollouts", type=run_ids_argument, required=True,
                   help="JSON (or its file): each run's rollouts.jsonl -> the run")
    p.add_argument("--ess-fraction", type=float, default=None)
    p.add_argument("--out", required=True)
    p = sub.add_parser("tau-figure")
    p.add_argument("--data", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--png", required=True)
    p.add_argument("--pdf", required=True)
    args = parser.parse_args(argv)
    started = time.time()
    if args.command == "compare":
        paths = comparison_table(paired_differences(args.eval, args.ours, args.baselines), args.label, args.stem)
        allocation_stem = args.stem.with_name(args.stem.name + "_allocation")
        paths += allocation_comparison_table(
            allocation_comparison(args.rollouts, args.ours, args.baselines), args.label, allocation_stem)
        write_provenance(paths, step="paper_adaptive_tau", inputs=[*args.eval, *args.rollouts],
                         params={"ours": args.ours, "baselines": args.baselines,
                                 "runs": runs_record({**args.eval, **args.rollouts})}, started_at=started)
    elif args.command == "tau-data":
        _write_csv(tau_data(args.rollouts, args.ess_fraction), args.out)
        write_provenance([args.out], step="paper_adaptive_tau_data", inputs=list(args.rollouts),
                         params={"ess_fraction": args.ess_fraction, "runs": runs_record(args.rollouts)},
                         started_at=started)
    else:
        tau_figure(read_csv_frame(args.data), args.label, args.png, args.pdf)
        write_provenance([args.png, args.pdf], step="paper_adaptive_tau_figure", inputs=[args.data],
                         started_at=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
