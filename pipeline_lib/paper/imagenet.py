"""The objective-study figure and table, split into ``collect`` (numbers) and ``render`` (plots).

``collect`` reads every run's ``metrics.jsonl`` into one curves CSV and a final-values CSV (M, the group size, is
their ``group_size`` column, from each run's ``DONE.json``); ``render`` draws validation pass@1 and top-1 against
step, one column of panels per M with the four objectives in each (ML has no rollouts and is drawn in every panel),
and writes the table of final values as mean +- std over seeds.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import pandas as pd

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.io import read_csv_frame, save_figure, write_csv_frame
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.paper.tables import write_table

log = logging.getLogger("pipeline_lib.paper.imagenet")
LABELS = {"ml": "ML (cross-entropy)", "reinforce": "REINFORCE", "grpo": "GRPO", "softmax": "SoftmaxGRPO"}
STYLES = {"ml": ("black", "-"), "reinforce": ("0.5", ":"), "grpo": ("tab:red", "--"), "softmax": ("tab:blue", "-")}


def run_identity(done_path: Path) -> dict[str, object]:
    done = json.loads(done_path.read_text())
    return {"objective": done["objective"], "group_size": int(done["group_size"]), "seed": int(done["seed"])}


def collect(done_paths: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    frames = []
    for done in done_paths:
        metrics = pd.read_json(done.parent / "metrics.jsonl", lines=True)
        frames.append(metrics.assign(**run_identity(done)))
    curves = pd.concat(frames, ignore_index=True)
    value_columns = [c for c in curves.columns if c.startswith("val_")]
    final = curves.loc[curves.groupby(["objective", "group_size", "seed"])["step"].idxmax()]
    summary = final.groupby(["objective", "group_size"])[value_columns].agg(["mean", "std", "count"])
    summary.columns = [f"{a}_{b}" for a, b in summary.columns]
    return curves, summary.reset_index()


def _write_csv(frame: pd.DataFrame, path: str) -> None:
    write_csv_frame(frame, path)


def render(curves: pd.DataFrame, summary: pd.DataFrame, label: str, png: str, pdf: str, table_stem: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted(int(m) for m in curves.loc[curves["objective"] != "ml", "group_size"].unique())
    fig, axes = plt.subplots(2, len(panels), figsize=(3.6 * len(panels), 6), sharex=True, squeeze=False)
    for column, group_size in enumerate(panels):
        for row, metric in enumerate(("val_pass@1", "val_top1")):
            ax = axes[row][column]
            for objective in ("ml", "reinforce", "grpo", "softmax"):
                rows = curves[(curves["objective"] == objective)
                              & ((curves["group_size"] == group_size) | (objective == "ml"))]
                if rows.empty:
                    continue
                stats = rows.groupby("step")[metric].agg(["mean", "min", "max"]).reset_index()
                color, dash = STYLES[objective]
                ax.plot(stats["step"], stats["mean"], color=color, linestyle=dash, label=LABELS[objective])
                ax.fill_between(stats["step"], stats["min"], stats["max"], color=color, alpha=0.15, linewidth=0)
            ax.set_title(f"M = {group_size}" if row == 0 else "")
            ax.set_xlabel("step" if row == 1 else "")
            ax.set_ylabel(("validation pass@1 (exact)" if row == 0 else "validation top-1") if column == 0 else "")
            ax.set_ylim(0, 1)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Objective study ({label}): mean over seeds, band = min-max")
    fig.tight_layout()
    save_figure(fig, png, pdf)

    def cell(row: pd.Series, metric: str) -> str:
        mean, std, count = row[f"{metric}_mean"], row[f"{metric}_std"], int(row[f"{metric}_count"])
        return f"{100 * mean:.1f} ± {100 * std:.1f} (n={count})" if count > 1 else f"{100 * mean:.1f} (n=1)"

    ordered = summary.assign(order=summary["objective"].map({"ml": 0, "reinforce": 1, "grpo": 2, "softmax": 3}))
    ordered = ordered.sort_values(["order", "group_size"])
    pass_k = [c[:-5] for c in summary.columns if c.startswith("val_pass@") and c.endswith("_mean")]
    table = pd.DataFrame({
        "Objective": ordered["objective"].map(LABELS),
        "M": ["-" if objective == "ml" else str(int(group_size))
              for objective, group_size in zip(ordered["objective"], ordered["group_size"], strict=True)],
        "Top-1 (%)": [cell(r, "val_top1") for _, r in ordered.iterrows()],
        **{f"{k[4:]} (%)": [cell(r, k) for _, r in ordered.iterrows()] for k in pass_k},
    })
    caption = (f"Objective study ({label}): final validation metrics, mean ± std over seeds; pass@k computed in "
               "closed form from the model's class probabilities.")
    return write_table(table, table_stem, caption, "tab:imagenet_objectives")


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.paper.imagenet")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--done", nargs="+", required=True, type=Path, help="DONE.json of every run")
    c.add_argument("--curves", required=True)
    c.add_argument("--summary", required=True)
    r = sub.add_parser("render")
    r.add_argument("--curves", required=True)
    r.add_argument("--summary", required=True)
    r.add_argument("--label", required=True)
    r.add_argument("--png", required=True)
    r.add_argument("--pdf", required=True)
    r.add_argument("--table-stem", required=True, type=Path)
    args = parser.parse_args(argv)
    started = time.time()
    if args.command == "collect":
        curves, summary = collect(args.done)
        _write_csv(curves, args.curves)
        _write_csv(summary, args.summary)
        inputs = [p for done in args.done for p in (done, done.parent / "metrics.jsonl")]
        write_provenance([args.curves, args.summary], step="paper_imagenet_data", inputs=inputs, started_at=started)
    else:
        curves, summary = read_csv_frame(args.curves), read_csv_frame(args.summary)
        paths = render(curves, summary, args.label, args.png, args.pdf, args.table_stem)
        write_provenance([args.png, args.pdf, *paths], step="paper_imagenet", inputs=[args.curves, args.summary],
                         params={"label": args.label}, started_at=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
