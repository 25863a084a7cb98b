"""A method trained in several variants (RL-Logit: log-probability and negative-perplexity rewards, paper App. B):
which variant Table 1 reports, chosen on validation, and the supplementary table of every variant.

    python -m pipeline_lib.paper.variants select --method rl_logit --validation RUNS.json --variants JSON \
        --data JSON --metric pass@1_greedy --out results/paper/data/rl_logit_selection.json
    python -m pipeline_lib.paper.variants table --selection JSON --test RUNS.json --label tiny \
        --stem results/paper/tables/rl_logit_variants

The paper reports "the best-performing variant for each task" without saying how it chose. Here, per task, the
variant with the higher mean over seeds of ``metric`` on its held-out validation prompts (the last training prompts,
never trained on: rule ``data_holdout``) is reported; ties go to the first listed variant. ``select`` reads ONLY the
validation evaluations and writes down the split and each file it read (``split_read``, ``files_read``), as Iterative
DPO's ``rounds.json`` records what selected its round (``selected_by``); its provenance lists those files as its only
inputs. The test-split results of every variant are shown by ``table`` (and the selected one in Table 1).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline_lib.core.cli import entry_parser, json_text
from pipeline_lib.core.io import write_json
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.paper.tables import write_table
from pipeline_lib.plan.registry import METHOD_LABELS
from pipeline_lib.plan.runs import RunId
from pipeline_lib.plan.targets import run_ids_argument

log = logging.getLogger("pipeline_lib.paper.variants")

#: Display names of the variants (RL-Logit's rewards, App. B).
VARIANT_LABELS = {"logprob": "log-probability", "neg_perplexity": "negative perplexity"}
SPLIT = "validation"


def _runs_record(runs: Mapping[str, RunId]) -> dict[str, Any]:
    return {path: dataclasses.asdict(run) for path, run in runs.items()}


def variant_label(variant: str) -> str:
    return VARIANT_LABELS.get(variant, variant)


def select(method: str, validation: Mapping[str, RunId], variants: Mapping[str, str], data: Mapping[str, str],
           metric: str) -> dict[str, Any]:
    """Per task, the variant of ``method`` with the highest mean validation ``metric`` over seeds.

    ``validation``: each variant run's validation ``metrics.json`` -> its run (the only files read); ``variants``:
    each run name -> its variant, in the configured order (ties go to the first); ``data``: each task's validation
    prompts (recorded, not read)."""
    values: dict[str, dict[str, dict[int, float]]] = {}
    for path, run in validation.items():
        if run.name not in variants:
            raise ValueError(f"--validation: {path} is run {run.name!r}, not one of {method}'s variants "
                             f"{sorted(variants)}")
        metrics = json.loads(Path(path).read_text())
        if metric not in metrics:
            raise KeyError(f"{path}: no {metric!r} (has {sorted(metrics)})")
        values.setdefault(run.task, {}).setdefault(run.name, {})[run.seed] = float(metrics[metric])
    order = list(variants)
    tasks = {}
    for task, runs in values.items():
        if task not in data:
            raise ValueError(f"--data: no validation prompts named for task {task!r}")
        seeds = {name: sorted(per_seed) for name, per_seed in runs.items()}
        if len({tuple(s) for s in seeds.values()}) != 1:
            raise ValueError(f"{task}: the variants were validated on different seeds {seeds}; select on the same "
                             "seeds")
        means = {name: sum(per_seed.values()) / len(per_seed) for name, per_seed in runs.items()}
        best = max(sorted(means, key=order.index), key=lambda name: means[name])  # max keeps the first of equals
        tasks[task] = {"selected": variants[best], "selected_run": best,
                       "variants": {variants[name]: {"run": name, SPLIT: means[name], "per_seed": runs[name]}
                                    for name in sorted(runs, key=order.index)}}
    return {"method": method, "metric": metric, "split_read": SPLIT, "test_split_read": False,
            "selected_by": f"{SPLIT} {metric}, mean over seeds; a tie goes to the first listed variant",
            "files_read": sorted(validation), "validation_data": {task: data[task] for task in sorted(tasks)},
            "note": "the paper reports the best-performing variant per task without saying how it chose",
            "tasks": {task: tasks[task] for task in sorted(tasks)}}


def read_selection(path: str | Path) -> dict[str, Any]:
    """A selection record (:func:`select`); one that did not select on the validation split is refused."""
    record = json.loads(Path(path).read_text())
    if record.get("split_read") != SPLIT or record.get("test_split_read") is not False:
        raise ValueError(f"{path}: selected on {record.get('split_read')!r} (test split read: "
                         f"{record.get('test_split_read')!r}); Table 1's variant is selected on {SPLIT} only")
    return record


def reported_rows(frame: pd.DataFrame, selection: Mapping[str, Any]) -> pd.DataFrame:
    """Table 1's rows (``frame``: one per run, its ``method`` column the run's name) with each task's selected variant
    as the method's row (``method``: the method, ``variant``: which) and the other variants left out (they are the
    supplementary table's)."""
    method = selection["method"]
    chosen = {(task, record["selected_run"]): record["selected"] for task, record in selection["tasks"].items()}
    runs = {record["run"] for task_record in selection["tasks"].values() for record in task_record["variants"].values()}
    frame = frame.copy()
    if "run" not in frame:
        frame["run"] = frame["method"]
    if "variant" not in frame:
        frame["variant"] = None
    keep = []
    for index, row in frame.iterrows():
        key = (row["task"], row["run"])
        if key in chosen:
            frame.at[index, "method"], frame.at[index, "variant"] = method, chosen[key]
        elif row["run"] in runs:
            continue
        keep.append(index)
    return frame.loc[keep].reset_index(drop=True)


def variants_table(selection: Mapping[str, Any], test: Mapping[str, RunId], label: str, stem: Path) -> list[Path]:
    """Every variant per task: its validation score (what selected), its test score (mean ± std over seeds) and
    whether Table 1 reports it."""
    metric, method = selection["metric"], selection["method"]
    scores: dict[tuple[str, str], list[float]] = {}
    for path, run in test.items():
        metrics = json.loads(Path(path).read_text())
        scores.setdefault((run.task, run.name), []).append(float(metrics[metric]))
    rows = []
    for task, record in selection["tasks"].items():
        for variant, stated in record["variants"].items():
            values = scores.get((task, stated["run"]))
            if not values:
                raise ValueError(f"--test: no test evaluation of {task}/{stated['run']}")
            mean = sum(values) / len(values)
            std = pd.Series(values).std() if len(values) > 1 else math.nan
            spread = f" ± {100 * std:.1f}" if not math.isnan(std) else ""
            rows.append({"Task": task, "Variant": variant_label(variant),
                         f"Validation {metric}": f"{100 * stated[SPLIT]:.1f}",
                         f"Test {metric}": f"{100 * mean:.1f}{spread} (n={len(values)})",
                         "In Table 1": "yes (selected)" if variant == record["selected"] else "no"})
    name = METHOD_LABELS.get(method, method)
    caption = (f"{name} reward variants (paper App. B) [{label} run]: {metric} (%) on each task's validation prompts "
               "(its last training prompts, held out of every variant's training) and on the test split, mean over "
               f"seeds. Table 1 reports, per task, the variant with the higher validation score (selected on the "
               "validation split; the paper reports the best variant without saying how it chose); the others are "
               "kept here.")
    return write_table(pd.DataFrame(rows), stem, caption, f"tab:{method}_variants")


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.paper.variants")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("select")
    p.add_argument("--method", required=True)
    p.add_argument("--validation", type=run_ids_argument, required=True,
                   help="JSON (or its file): each variant run's validation metrics.json -> its run")
    p.add_argument("--variants", type=json_text, required=True, help="JSON: each variant run -> its variant, in order")
    p.add_argument("--data", type=json_text, required=True, help="JSON: each task -> its validation prompts")
    p.add_argument("--metric", default="pass@1_greedy")
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("table")
    p.add_argument("--selection", type=Path, required=True)
    p.add_argument("--test", type=run_ids_argument, required=True,
                   help="JSON (or its file): each variant run's test metrics.json -> its run")
    p.add_argument("--label", required=True)
    p.add_argument("--stem", type=Path, required=True)
    args = parser.parse_args(argv)
    started = time.time()
    if args.command == "select":
        record = select(args.method, args.validation, json.loads(args.variants), json.loads(args.data), args.metric)
        write_json(args.out, record)
        for task, stated in record["tasks"].items():
            log.info("%s: %s variant %s selected on %s", task, args.method, stated["selected"], SPLIT)
        write_provenance([args.out], step=f"paper_{args.method}_selection", inputs=list(args.validation),
                         params={"runs": _runs_record(args.validation), "metric": args.metric,
                                 "split_read": SPLIT}, started_at=started)
    else:
        selection = read_selection(args.selection)
        paths = variants_table(selection, args.test, args.label, args.stem)
        write_provenance(paths, step=f"paper_{selection['method']}_variants", inputs=[args.selection, *args.test],
                         params={"runs": _runs_record(args.test)}, started_at=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
