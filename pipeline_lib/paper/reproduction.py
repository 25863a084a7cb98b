"""``reproduction_report.md``: our tables beside the paper's published numbers, with deltas where comparable.

Only a ``paper``-labelled run is compared number for number. A ``tiny`` (or ``test``) run maps its
miniature tasks onto the paper's columns for orientation (``countdown_tiny`` ~ Countdown,
``arith_tiny`` ~ GSM8K) but prints no deltas: a 0.7M-parameter model on synthetic tasks is not
the paper's 1.5B model, and a delta would invite a comparison that does not exist.

    python -m pipeline_lib.paper.reproduction --reference config/paper_reference.yaml --label tiny \
        --table1 results/paper/data/table1.csv --allocation results/paper/data/gradient_allocation.csv --out R.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

from pipeline_lib.io import write_text
from pipeline_lib.paper.results import METHOD_LABELS, PASS_RATE_BINS
from pipeline_lib.paper.tables import to_markdown
from pipeline_lib.provenance import write_provenance

#: Which paper column each of our tasks stands in for.
TASK_TO_PAPER = {"gsm8k": "gsm8k", "countdown": "countdown", "deepmath": "deepmath",
                 "arith_tiny": "gsm8k", "countdown_tiny": "countdown"}


def _fmt(value: float | None) -> str:
    return "–" if value is None or pd.isna(value) else f"{value:.1f}"


def table1_section(ours: pd.DataFrame, reference: dict, comparable: bool, metric: str) -> str:
    columns = reference["columns"]
    stats = ours.groupby(["method", "task"])[metric].agg(["mean", "std", "count"])
    rows = []
    for method, paper_values in reference["rows"].items():
        row = {"Method": METHOD_LABELS.get(method, method)}
        for task in sorted(ours["task"].unique()):
            column = TASK_TO_PAPER.get(task)
            paper = paper_values[columns.index(column)] if column in columns else None
            mine = 100 * stats.loc[(method, task)]["mean"] if (method, task) in stats.index else None
            cell = f"ours {_fmt(mine)} / paper {_fmt(paper)}"
            if comparable and mine is not None and paper is not None:
                cell += f" (Δ {mine - paper:+.1f})"
            row[f"{task} (paper: {column or 'none'})"] = cell
        rows.append(row)
    return to_markdown(pd.DataFrame(rows))


def allocation_section(ours: pd.DataFrame, reference: dict) -> str:
    bins = [f"bin{i}" for i in range(len(PASS_RATE_BINS))]
    summed = ours.groupby(["task", "method"])[bins].sum()
    rows = []
    for (task, method), values in summed.iterrows():
        total = values.sum()
        key = f"{TASK_TO_PAPER.get(task, task)}/{method}"
        paper = reference["rows"].get(key)
        row = {"Run": f"{task} {METHOD_LABELS.get(method, method)}"}
        for i, name in enumerate(reference["columns"]):
            mine = 100 * values[bins[i]] / total if total else None
            row[name] = f"{_fmt(mine)} / {_fmt(paper[i]) if paper else '–'}"
        rows.append(row)
    return to_markdown(pd.DataFrame(rows))


def reward_health_section(table1: pd.DataFrame | None) -> list[str]:
    """Evaluations whose verifier timed out on or failed some items (eval's ``reward_{timeouts,failures}_<mode>``):
    those items count as wrong in pass@1, so the report says where, and how many. Empty when there are none."""
    if table1 is None or table1.empty:
        return []
    columns = [c for c in table1.columns if c.startswith(("reward_timeouts_", "reward_failures_"))]
    if not columns:
        return []
    hit = table1[(table1[columns].fillna(0) > 0).any(axis=1)]
    if hit.empty:
        return []
    identity = [c for c in ("task", "method", "seed") if c in hit.columns]
    rows = hit[identity + columns].fillna(0)
    return ["## Verifier timeouts and failures", "",
            "These evaluations had items the math verifier timed out on or failed (its worker died or raised); "
            "each scored 0, so the pass@1 above counts them as wrong answers.", "",
            to_markdown(rows.astype({c: int for c in columns})), ""]


def build_report(label: str, reference: dict, table1: pd.DataFrame | None, allocation: pd.DataFrame | None) -> str:
    comparable = label == "paper"
    parts = [
        "# Reproduction report",
        "",
        f"Run label: **{label}**. " + ("Numbers are compared with the paper's; Δ = ours − paper (points)."
                                      if comparable else
                                      "This is a miniature run: our numbers sit beside the paper's for orientation "
                                      "only, with no deltas (different model, data and scale)."),
        "",
        "Tables of the paper whose stages have not run in this configuration are listed as not reproduced; "
        "no number below is copied from the paper into our columns.",
        "",
    ]
    if table1 is not None and not table1.empty:
        parts += ["## Table 1 (verifiable accuracy, greedy pass@1 %)", "",
                  table1_section(table1, reference["table1"], comparable, "pass@1_greedy"), ""]
    else:
        parts += ["## Table 1", "", "Not reproduced in this run.", ""]
    parts += reward_health_section(table1)
    if allocation is not None and not allocation.empty:
        parts += ["## Gradient allocation (% of sum T_i |A_i|, ours / paper)", "",
                  allocation_section(allocation, reference["gradient_allocation"]), ""]
    for name in ("nonverifiable", "ablation_gsm8k", "ablation_countdown", "scale", "judge_validation"):
        parts += [f"## {name}", "", "Not reproduced in this run (its stage is not part of this configuration yet).", ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline_lib.paper.reproduction", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--table1", type=Path, default=None)
    parser.add_argument("--allocation", type=Path, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    started = time.time()
    reference = yaml.safe_load(args.reference.read_text())
    table1 = pd.read_csv(args.table1) if args.table1 else None
    allocation = pd.read_csv(args.allocation) if args.allocation else None
    write_text(args.out, build_report(args.label, reference, table1, allocation))
    inputs = [p for p in (args.reference, args.table1, args.allocation) if p]
    write_provenance([args.out], step="paper_reproduction_report", inputs=inputs, params={"label": args.label},
                     started_at=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
