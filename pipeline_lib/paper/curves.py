"""The training-curves figure, its own entry point (not a subcommand of :mod:`pipeline_lib.paper.results`) so that
its code digest covers only the figure's code: a plot setting here (:data:`CURVE_WINDOW`) reruns the figure alone,
not Table 1, the allocation table or the report.

    python -m pipeline_lib.paper.curves --runs RUNS.json --label tiny --png P --pdf P

``--runs`` maps each run's ``metrics.jsonl`` to the run (:class:`pipeline_lib.plan.runs.RunId`, written by the plan).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping

import pandas as pd

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.io import save_figure
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.paper.results import _method_sort_key, run_columns, run_ids_argument, runs_record
from pipeline_lib.plan.registry import METHOD_LABELS, METHODS
from pipeline_lib.plan.runs import RunId

__all__ = ["CURVE_WINDOW", "REWARD_PANELS", "curves", "curves_figure"]

#: Moving-average window (steps) of the training curves, applied to each seed's curve before the band.
CURVE_WINDOW = 5
#: Title of each reward kind's panel: rewards of different kinds are on different scales, so never on one axis.
REWARD_PANELS = {"verifier": "training reward: verifier", "similarity": "training reward: similarity",
                 "other": "training reward: other"}


def _reward_kind(method: str) -> str:
    """The registry's reward of a group-RL method ("verifier" or "similarity"); "other" for anything else."""
    entry = METHODS.get(method)
    return entry.reward if entry is not None and entry.reward in REWARD_PANELS else "other"


def curves_figure(data: pd.DataFrame, label: str):  # -> matplotlib.figure.Figure
    """One row per task; one training-reward panel per reward kind (verifier and similarity rewards are not on one
    axis), then KL and response length. Each method is its mean over seeds (line) and the min-max across seeds
    (band), each seed smoothed with a :data:`CURVE_WINDOW`-step moving average first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted(data["task"].unique())
    methods = sorted(data["method"].unique(), key=_method_sort_key)
    colours = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(methods)}
    kinds = [k for k in REWARD_PANELS if any(_reward_kind(m) == k for m in methods)]
    # verl's metric names, which both engines log (docs/tracking.md)
    panels = [("critic/score/mean", REWARD_PANELS[k], k) for k in kinds] + [
        ("actor/kl_loss", "KL to reference", None), ("response_length/mean", "response tokens", None)]
    fig, axes = plt.subplots(len(tasks), len(panels), figsize=(4.2 * len(panels), 3.2 * len(tasks)), squeeze=False)
    for row, task in enumerate(tasks):
        for column, (metric, title, kind) in enumerate(panels):
            ax = axes[row][column]
            for method in methods:
                runs = data[(data["task"] == task) & (data["method"] == method)]
                if runs.empty or metric not in runs.columns or (kind is not None and _reward_kind(method) != kind):
                    continue
                per_seed = runs.groupby(["step", "seed"])[metric].mean().unstack("seed").sort_index()
                smooth = per_seed.rolling(CURVE_WINDOW, min_periods=1).mean()
                mean = smooth.mean(axis=1)
                ax.plot(mean.index, mean.to_numpy(), color=colours[method], label=METHOD_LABELS.get(method, method),
                        linestyle="--" if method.startswith("grpo") else "-")
                if smooth.shape[1] > 1:
                    ax.fill_between(smooth.index, smooth.min(axis=1).to_numpy(), smooth.max(axis=1).to_numpy(),
                                    color=colours[method], alpha=0.2, linewidth=0)
            ax.set_title(f"{task}: {title}", fontsize=9)
            ax.set_xlabel("step")
            if row == 0 and metric != "response_length/mean" and ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    seeds = data.groupby(["task", "method"])["seed"].nunique()
    counts = f"{seeds.min()}" if seeds.min() == seeds.max() else f"{seeds.min()}-{seeds.max()}"
    fig.suptitle(f"Training curves [{label} run]: mean over seeds (line), min-max across seeds (band; "
                 f"{counts} seed(s) per run), {CURVE_WINDOW}-step moving average per seed",
                 fontsize=10)
    fig.tight_layout()
    return fig


def curves(runs: Mapping[str, RunId], label: str, png: str, pdf: str) -> None:
    """The figure of every run of ``runs`` (each run's ``metrics.jsonl`` -> the run)."""
    frames = [pd.read_json(path, lines=True).assign(**run_columns(run)) for path, run in runs.items()]
    save_figure(curves_figure(pd.concat(frames, ignore_index=True), label), png, pdf, dpi=140)


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.paper.curves")
    parser.add_argument("--runs", type=run_ids_argument, required=True,
                        help="JSON (or its file): each run's metrics.jsonl -> the run (pipeline_lib.plan.runs.RunId)")
    parser.add_argument("--label", required=True)
    parser.add_argument("--png", required=True)
    parser.add_argument("--pdf", required=True)
    args = parser.parse_args(argv)
    started = time.time()
    curves(args.runs, args.label, args.png, args.pdf)
    write_provenance([args.png, args.pdf], step="paper_training_curves", inputs=list(args.runs),
                     params={"runs": runs_record(args.runs)}, started_at=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
