"""The model-scale table (paper Table scale_results): the paired methods at the main scale and at each other scale.

    python -m pipeline_lib.paper.scale data --cells CELLS.json --out results/paper/data/scale.csv
    python -m pipeline_lib.paper.scale table --data CSV --label paper --stem results/paper/tables/scale

``--cells`` maps each run's ``metrics.json`` to its cell: task, seed, method and base model label (the plan's
:func:`pipeline_lib.plan.targets.scale_cells`; a run's scale is a field, never parsed from its name).
Cells are greedy pass@1 (%) on held-out prompts, mean over seeds; the better method within each
(scale, task) is in bold only where the claims rules support it (the paper bolds every better one).
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
from pipeline_lib.paper.tables import write_table
from pipeline_lib.paper.verdicts import BOLD_RULE, MIN_SEEDS, supported_best
from pipeline_lib.plan.registry import METHOD_LABELS

__all__ = ["scale_data", "scale_table"]

log = logging.getLogger("pipeline_lib.paper.scale")


_CELL = ("task", "seed", "method", "model")


def scale_data(cells: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per run (``cells``: each run's ``metrics.json`` -> its cell: task, seed, method, base model label)."""
    rows = []
    for path, cell in cells.items():
        missing = [key for key in _CELL if key not in cell]
        if missing:
            raise ValueError(f"--cells: the cell of {path} has no {missing} (a scale cell has {list(_CELL)})")
        rows.append({"task": cell["task"], "model": cell["model"], "method": cell["method"], "seed": int(cell["seed"]),
                     "pass@1": json.loads(Path(path).read_text())["pass@1_greedy"]})
    return pd.DataFrame(rows)


def scale_table(frame: pd.DataFrame, label: str, stem: Path) -> list[Path]:
    stats = frame.groupby(["model", "method", "task"])["pass@1"].mean()
    tasks = sorted(frame["task"].unique())
    models = list(dict.fromkeys(frame["model"]))  # main scale first, then config order
    per_seed: dict[str, dict[str, dict[int, float]]] = {}
    for row in frame[["model", "task", "method", "seed", "pass@1"]].itertuples(index=False):
        per_seed.setdefault(f"{row[0]}/{row[1]}", {}).setdefault(row[2], {})[int(row[3])] = float(row[4])
    marked = supported_best(per_seed)
    plain, latex = [], []
    for model in models:
        for method in dict.fromkeys(frame[frame["model"] == model]["method"]):
            row_plain = {"Base model": model, "Method": METHOD_LABELS.get(method, method)}
            row_latex = dict(row_plain)
            for task in tasks:
                if (model, method, task) not in stats.index:
                    row_plain[task] = row_latex[task] = "--"
                    continue
                value = stats.loc[(model, method, task)]
                best = marked.get(f"{model}/{task}") == method
                row_plain[task] = f"**{100 * value:.1f}**" if best else f"{100 * value:.1f}"
                row_latex[task] = rf"\textbf{{{100 * value:.1f}}}" if best else f"{100 * value:.1f}"
            plain.append(row_plain)
            latex.append(row_latex)
    caption = (f"Verifier-based accuracy (%) across model scales under matched conditions [{label} run]: greedy pass@1 "
               "on held-out prompts, mean over seeds; within each model size and task, "
               f"{BOLD_RULE.format(min_seeds=MIN_SEEDS)}.")
    return write_table(pd.DataFrame(plain), stem, caption, "tab:scale_results", latex_frame=pd.DataFrame(latex),
                       raw_columns=tasks)


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.paper.scale")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("data")
    p.add_argument("--cells", type=json_value, required=True,
                   help="JSON (or its file): each run's metrics.json -> its cell (task, seed, method, model)")
    p.add_argument("--out", required=True)
    p = sub.add_parser("table")
    p.add_argument("--data", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--stem", type=Path, required=True)
    args = parser.parse_args(argv)
    started = time.time()
    if args.command == "data":
        write_csv_frame(scale_data(args.cells), args.out)
        write_provenance([args.out], step="paper_scale_data", inputs=list(args.cells), params={"cells": args.cells},
                         started_at=started)
    else:
        paths = scale_table(read_csv_frame(args.data), args.label, args.stem)
        write_provenance(paths, step="paper_scale", inputs=[args.data], started_at=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
