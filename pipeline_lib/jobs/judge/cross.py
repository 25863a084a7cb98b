"""Cross-judge agreement for one task (the ``judge_cross`` rule).

Method-level means under the primary and the second judge (each method's score is the
mean over its seeds of the reported 0-100 score: :func:`pipeline_lib.jobs.judge.score.reported_score`, items without
a verdict at the scale's lowest score), the Spearman rank correlation of the
two orderings (the paper's "cross-judge rank correlation"), and the score offset
(primary minus second, averaged over methods). Item-level Spearman over every item both
judges scored is reported beside it. ``--primary`` and ``--second`` map each judge's ``summary.json`` to its run
(:class:`pipeline_lib.plan.runs.RunId`, written by the plan): a run's method and seed are read from there.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scipy import stats

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.io import write_json
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.jobs.judge.score import reported_score
from pipeline_lib.plan.runs import RunId
from pipeline_lib.plan.targets import run_ids_argument

__all__ = ["cross_judge", "rank_correlation"]


def rank_correlation(x: list[float], y: list[float]) -> tuple[float | None, str | None]:
    """Spearman rho, or None with the reason when it is undefined (fewer than 3 points, or a constant side)."""
    if len(x) < 3:
        return None, f"undefined: {len(x)} point(s), need at least 3"
    if len(set(x)) == 1 or len(set(y)) == 1:
        return None, "undefined: one judge gives every method the same score"
    rho = float(stats.spearmanr(x, y).statistic)
    return (rho, None) if math.isfinite(rho) else (None, "undefined")


def _load(summaries: Mapping[str, RunId]
          ) -> tuple[dict[str, list[float]], dict[tuple[str, int, int], float], dict[str, Any]]:
    by_method: dict[str, list[float]] = defaultdict(list)
    items: dict[tuple[str, int, int], float] = {}
    judge: dict[str, Any] = {}
    for name, run in summaries.items():
        path = Path(name)
        summary = json.loads(path.read_text())
        judge = summary["judge"]
        method, seed = run.name, run.seed
        reported = reported_score(summary, path)  # unscored items at the scale's lowest score
        if reported is None:
            raise ValueError(f"{path}: no item was scored ({summary['failed']} failed); rerun the judge")
        by_method[method].append(reported)
        with open(path.with_name("scores.jsonl"), encoding="utf-8") as handle:
            for line in handle:
                record = json.loads(line)
                if "score_100" in record:
                    items[(method, seed, record["prompt_index"])] = record["score_100"]
    return by_method, items, judge


def cross_judge(primary: Mapping[str, RunId], second: Mapping[str, RunId], methods: list[str]) -> dict[str, Any]:
    """The agreement of two judges over the same runs (``primary``, ``second``: each judge's summary -> its run)."""
    primary_means, primary_items, primary_judge = _load(primary)
    second_means, second_items, second_judge = _load(second)
    missing = [m for m in methods if m not in primary_means or m not in second_means]
    if missing:
        raise ValueError(f"no judge summaries for method(s) {missing}")
    rows = [{"method": m, "primary": statistics.fmean(primary_means[m]), "second": statistics.fmean(second_means[m])}
            for m in methods]
    rho, reason = rank_correlation([r["primary"] for r in rows], [r["second"] for r in rows])
    shared = sorted(set(primary_items) & set(second_items))
    item_rho, item_reason = rank_correlation([primary_items[k] for k in shared], [second_items[k] for k in shared])
    return {"primary_judge": primary_judge, "second_judge": second_judge, "methods": rows,
            "spearman_methods": rho, "spearman_methods_note": reason,
            "spearman_items": item_rho, "spearman_items_note": item_reason, "items_compared": len(shared),
            "offset_mean": statistics.fmean(r["primary"] - r["second"] for r in rows),
            "offset_abs_mean": statistics.fmean(abs(r["primary"] - r["second"]) for r in rows)}


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, summary="line", logs=False)
    parser.add_argument("--primary", type=run_ids_argument, required=True,
                        help="JSON (or its file): each primary judge summary.json -> its run")
    parser.add_argument("--second", type=run_ids_argument, required=True,
                        help="JSON (or its file): each second judge summary.json -> its run")
    parser.add_argument("--methods", nargs="+", required=True, help="methods in table order")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    result = cross_judge(args.primary, args.second, args.methods)
    write_json(args.out, result)
    inputs = [Path(p) for p in (*args.primary, *args.second)]
    inputs += [p.with_name("scores.jsonl") for p in inputs]
    write_provenance([args.out], step="judge_cross", inputs=inputs, params={"methods": args.methods})
    print(json.dumps({k: result[k] for k in ("spearman_methods", "offset_mean", "items_compared")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
