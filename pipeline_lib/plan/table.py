"""``python -m pipeline_lib plan [--configfile FILE ...]``: the run table of a config, before anything runs.

One row per training job of :func:`pipeline_lib.plan.plan_runs` (task, run, method, seed, engine, rule, study, the
key hyperparameters and the resources the plan sets), then the number of jobs per rule. Config files merge in order,
as Snakemake's ``--configfile A B`` does, and the schema fills what they leave out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline_lib.config import ConfigError, load_config_file, merge_config, validate_config
from pipeline_lib.plan.runs import Plan, plan_runs

__all__ = ["load_config", "main", "render"]

#: The schema of the workflow run from the current directory (as Snakemake reads it), else this checkout's.
SCHEMA_PATH = Path("workflow") / "schemas" / "config.schema.yaml"
REPO = Path(__file__).resolve().parents[2]
COLUMNS = ("task", "run", "method", "seed", "engine", "job", "study", "advantage", "params", "M", "steps", "lr",
           "resources")


def load_config(paths: Sequence[str | Path], schema: str | Path | None = None) -> dict[str, Any]:
    """The validated config of ``paths`` merged in order (schema defaults filled)."""
    schema = schema or (SCHEMA_PATH if SCHEMA_PATH.is_file() else REPO / SCHEMA_PATH)
    config: dict[str, Any] = {}
    for path in paths:
        merge_config(config, load_config_file(path))
    return dict(validate_config(config, schema))


def render(plan: Plan) -> str:
    """The run table as aligned text, then the job count per rule."""
    rows = [{column: row.get(column, "") for column in COLUMNS} for row in plan.table()]
    cells = [[str(row[c]) if row[c] is not None else "" for c in COLUMNS] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    counts = Counter(run.job for run in plan.runs)
    lines += ["", f"{len(plan.runs)} jobs: " + ", ".join(f"{job} {n}" for job, n in sorted(counts.items()))]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline_lib plan", description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", nargs="+", default=["config/config.yaml"],
                        help="config file(s), merged in order (default: the tiny default config/config.yaml)")
    parser.add_argument("--json", action="store_true", help="one JSON object per run instead of the table")
    args = parser.parse_args(argv)
    try:
        plan = plan_runs(load_config(args.configfile))
    except ConfigError as exc:  # a sentence that names the file or key, not a traceback
        print(f"python -m pipeline_lib plan: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print("\n".join(json.dumps(row) for row in plan.table()))
    else:
        print(render(plan))
    return 0
