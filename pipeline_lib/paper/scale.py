"""The model-scale table (paper Table scale_results): the paired methods at the main scale and at each other scale.

    python -m pipeline_lib.paper.scale data --metrics results/eval/T/M/seed0/metrics.json ... --main-label LABEL \
        --labels '{"qwen25_3b": "Qwen2.5-3B"}' --out results/paper/data/scale.csv
    python -m pipeline_lib.paper.scale table --data CSV --label paper --stem results/paper/tables/scale

Runs named ``<method>_at_<scale>`` belong to that scale; plain ``<method>`` runs are the main scale.
Cells are greedy pass@1 (%) on held-out prompts, mean over seeds; the better method within each
(scale, task) is in bold only where the claims rules support it (the paper bolds every better one).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import pandas as pd

from pipeline_lib.core.cli import json_value
from pipeline_lib.core.io import atomic_path
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.paper.tables import write_table
from pipeline_lib.paper.verdicts import BOLD_RULE, MIN_SEEDS, supported_best
from pipeline_lib.plan.registry import METHOD_LABELS

__all__ = ["scale_data", "scale_table"]

log = logging.getLogger("pipeline_lib.paper.scale")


def scale_data(metrics_paths: list[Path], main_label: str, labels: dict[str, str]) -> pd.DataFrame:
    rows = []
    for path in metrics_paths:
        seed_dir, run_dir, task_dir = path.parent, path.parent.parent, path.parent.parent.parent
        method, _, scale = run_dir.name.partition("_at_")
        if scale and scale not in labels:
            raise ValueError(f"{path}: scale {scale!r} is not in train.scale.models ({sorted(labels)})")
        rows.append({"task": task_dir.name, "model": labels[scale] if scale else main_label, "method": method,
                     "seed": int(seed_dir.name.removeprefix("seed")),
                     "pass@1": json.loads(path.read_text())["pass@1_greedy"]})
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m pipeline_lib.paper.scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("data")
    p.add_argument("--metrics", nargs="+", type=Path, required=True)
    p.add_argument("--main-label", required=True)
    p.add_argument("--labels", required=True, type=json_value, help="JSON file or inline JSON: scale name -> label")
    p.add_argument("--out", required=True)
    p = sub.add_parser("table")
    p.add_argument("--data", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--stem", type=Path, required=True)
    args = parser.parse_args(argv)
    started = time.time()
    if args.command == "data":
        with atomic_path(args.out) as tmp:
            scale_data(args.metrics, args.main_label, args.labels).to_csv(tmp, index=False)
        write_provenance([args.out], step="paper_scale_data", inputs=args.metrics, started_at=started)
    else:
        paths = scale_table(pd.read_csv(args.data), args.label, args.stem)
        write_provenance(paths, step="paper_scale", inputs=[args.data], started_at=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
