"""The tau x M ablation table (paper Table "ablations") from the evaluation of every ablation run.

    python -m pipeline_lib.paper.ablation data --cells CELLS.json --out results/paper/data/ablation.csv
    python -m pipeline_lib.paper.ablation table --data CSV --label tiny --stem results/paper/tables/ablation \
        --differences JSON

Rows are temperatures tau; per task and group size M the table shows greedy pass@1 (%) and the mean greedy
response length (tokens), as in the paper (its length column is "mean answer length"), mean over seeds; a
(task, M) column's best pass@1 is in bold only where the claims rules support it (the paper bolds every best).
The caption states how the cells' settings differ
from the main runs', as the workflow computes them from the config
(:func:`pipeline_lib.paper.captions.ablation_differences`). ``--cells`` maps each run's ``metrics.json`` to its cell
(task, seed, tau, M: the plan's :func:`pipeline_lib.plan.targets.ablation_cells`, from the run's spec), never parsed
from the run's name.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline_lib.core.cli import entry_parser, json_value
from pipeline_lib.core.io import read_csv_frame, write_csv_frame
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.paper.captions import differences_text
from pipeline_lib.paper.tables import write_table
from pipeline_lib.paper.verdicts import BOLD_RULE, MIN_SEEDS, supported_best

__all__ = ["ablation_data", "ablation_table"]

log = logging.getLogger("pipeline_lib.paper.ablation")

_CELL = ("task", "seed", "tau", "M")


def ablation_data(cells: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per run (``cells``: each run's ``metrics.json`` -> its cell: task, seed, tau, M): its cell, greedy
    pass@1 and mean greedy length."""
    rows = []
    for path, cell in cells.items():
        missing = [key for key in _CELL if key not in cell]
        if missing:
            raise ValueError(f"--cells: the cell of {path} has no {missing} (an ablation cell has {list(_CELL)})")
        metrics = json.loads(Path(path).read_text())
        rows.append({"task": cell["task"], "tau": float(cell["tau"]), "M": int(cell["M"]), "seed": int(cell["seed"]),
                     "pass@1": metrics["pass@1_greedy"], "length": metrics["mean_length_greedy"]})
    return pd.DataFrame(rows)


def ablation_table(frame: pd.DataFrame, label: str, stem: Path, differences: Mapping[str, list[Any]]) -> list[Path]:
    """The table, its caption stating ``differences`` (setting -> [cells' value, main runs' value])."""
    stats = frame.groupby(["task", "M", "tau"])[["pass@1", "length"]].mean()
    seeds = frame.groupby(["task", "M", "tau"])["seed"].nunique()
    tasks, sizes, taus = sorted(frame["task"].unique()), sorted(frame["M"].unique()), sorted(frame["tau"].unique())
    per_seed: dict[str, dict[float, dict[int, float]]] = {}
    for row in frame[["task", "M", "tau", "seed", "pass@1"]].itertuples(index=False):
        per_seed.setdefault(f"{row[0]} M={row[1]}", {}).setdefault(float(row[2]), {})[int(row[3])] = float(row[4])
    marked = supported_best(per_seed)
    plain, latex = [], []
    for tau in taus:
        row_plain, row_latex = {"tau": f"{tau:g}"}, {"tau": f"{tau:g}"}
        for task in tasks:
            for m in sizes:
                key = f"{task} M={m}"
                if (task, m, tau) not in stats.index:
                    for frame_row in (row_plain, row_latex):
                        frame_row[f"{key} pass@1"] = frame_row[f"{key} len"] = "--"
                    continue
                value, length = stats.loc[(task, m, tau)]
                best = marked.get(key) == tau
                cell = f"{100 * value:.1f}%"
                row_plain[f"{key} pass@1"] = f"**{cell}**" if best else cell
                row_latex[f"{key} pass@1"] = rf"\textbf{{{100 * value:.1f}\%}}" if best else rf"{100 * value:.1f}\%"
                row_plain[f"{key} len"] = row_latex[f"{key} len"] = f"{length:.1f}"
        plain.append(row_plain)
        latex.append(row_latex)
    n_seeds = int(seeds.max()) if len(seeds) else 0
    caption = (f"Temperature (tau) and group size (M) ablation of SoftmaxGRPO-Exact [{label} run]: greedy pass@1 (%) "
               f"and mean response length (tokens) on held-out prompts, mean over {n_seeds} seed(s); for pass@1 per "
               f"(task, M), {BOLD_RULE.format(min_seeds=MIN_SEEDS)}. {differences_text(differences)}")
    raw = [c for c in latex[0] if c.endswith("pass@1")] if latex else []
    return write_table(pd.DataFrame(plain), stem, caption, "tab:ablations", latex_frame=pd.DataFrame(latex),
                       raw_columns=raw)


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.paper.ablation")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("data")
    p.add_argument("--cells", type=json_value, required=True,
                   help="JSON (or its file): each run's metrics.json -> its cell (task, seed, tau, M)")
    p.add_argument("--out", required=True)
    p = sub.add_parser("table")
    p.add_argument("--data", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--stem", type=Path, required=True)
    p.add_argument("--differences", type=json_value, required=True,
                   help="JSON file or inline JSON: setting -> [the cells' value, the main runs' value]"
                   " (captions.ablation_differences)")
    args = parser.parse_args(argv)
    started = time.time()
    if args.command == "data":
        write_csv_frame(ablation_data(args.cells), args.out)
        write_provenance([args.out], step="paper_ablation_data", inputs=list(args.cells), params={"cells": args.cells},
                         started_at=started)
    else:
        paths = ablation_table(read_csv_frame(args.data), args.label, args.stem, args.differences)
        write_provenance(paths, step="paper_ablation", inputs=[args.data], params={"differences": args.differences},
                         started_at=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
