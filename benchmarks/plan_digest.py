"""Digest of what the shipped configs plan, to show a refactor changed no planned run.

Run it in two checkouts (``PYTHONPATH=. python benchmarks/plan_digest.py``) and compare the two lines it prints:
``plan`` hashes every run of ``config/config.yaml`` and ``config/paper.yaml`` (rule, key, full command, inputs,
output, resources, order-only inputs, study, verl kind, spec JSON) with the train targets and each study's requests;
``targets`` hashes the stage targets, the ablation and scale cells, the run table, the judge targets and the report's
inputs. Equal commands mean Snakemake reruns nothing. ``--dump FILE`` writes the hashed rows, one per line, to diff.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from pathlib import Path

from pipeline_lib.core.config import load_config_file
from pipeline_lib.plan import targets
from pipeline_lib.plan.runs import plan_runs, validate_planned_config

CONFIGS = ("config/config.yaml", "config/paper.yaml")


def _rows(config_path: str) -> tuple[list[str], list[str]]:
    config = validate_planned_config(load_config_file(config_path), "workflow/schemas/config.schema.yaml", ".")
    plan = plan_runs(config)
    runs = [json.dumps([config_path, run.job, run.key, run.command(threads=2), run.inputs, run.output, run.resources,
                        run.after, run.study, run.verl_kind, run.spec.to_json()], sort_keys=True, default=str)
            for run in plan.runs]
    runs.append(json.dumps([config_path, plan.train_targets,
                            {study: [dataclasses.asdict(r) for r in ids] for study, ids in plan.requests.items()}],
                           sort_keys=True))
    stages = targets.stage_targets(config, plan)
    listed = json.dumps([config_path, stages, targets.ablation_cells(plan), targets.scale_cells(config, plan),
                         plan.table(), targets.judge_targets(plan),
                         targets.report_inputs(config, plan, stages["paper"])], sort_keys=True, default=str)
    return runs, [listed]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, help="write the hashed rows here, one per line")
    args = parser.parse_args()
    runs, listed = [], []
    for config_path in CONFIGS:
        planned, stage = _rows(config_path)
        runs += planned
        listed += stage
    print(f"plan {hashlib.sha256(chr(10).join(runs).encode()).hexdigest()[:16]} ({len(runs)} rows)")
    print(f"targets {hashlib.sha256(chr(10).join(listed).encode()).hexdigest()[:16]}")
    if args.dump:
        args.dump.write_text("\n".join(runs + listed) + "\n")


if __name__ == "__main__":
    main()
