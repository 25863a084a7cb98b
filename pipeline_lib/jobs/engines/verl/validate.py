"""Entry point of rule ``validate_verl``: every verl run of the plan checked against verl (:mod:`.checks`).

:func:`validate_planned_runs` runs the full checks of :mod:`.checks` for every verl run the config plans, in the
local job ``validate_verl`` that every verl training job waits for (so nothing is submitted before every run passed),
caching each passed run by the hash of its overrides and of this engine's code under ``.snakemake/``. At parse time
the workflow translates every run (:func:`.planned.plan_overrides`) and :func:`~.checks.check_override_keys` checks
their keys.

This module walks the plan; the training entry points (:mod:`.train` for RL, :mod:`.sft` for SFT) import the checks
(:mod:`.checks`, :mod:`.compose`) and the translation only, so a change of the planner reruns no training job by its
code digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline_lib.core.cli import entry_parser, json_text
from pipeline_lib.core.io import write_json
from pipeline_lib.jobs.engines.verl.checks import (
    CACHE_DIR,
    VerlOverrideError,
    check_override_keys,
    compose,
    engine_code_digest,
    trainer_path,
    validate_rl,
    validate_sft,
)
from pipeline_lib.jobs.engines.verl.planned import plan_overrides, run_overrides, run_paths
from pipeline_lib.plan import Plan, plan_runs

__all__ = [
    "VerlOverrideError",
    "check_override_keys",
    "compose",
    "plan_overrides",
    "planned_runs",
    "run_overrides",
    "run_paths",
    "trainer_path",
    "validate_planned_runs",
    "validate_rl",
    "validate_sft",
]


# --- every run a config plans --------------------------------------------------------------------------------------

def planned_runs(config: Mapping[str, Any], root: str | Path = ".", plan: Plan | None = None
                 ) -> list[tuple[str, str, list[str]]]:
    """(label, kind, overrides) of every verl run of the plan (:func:`pipeline_lib.plan.plan_runs`): the main SFT/RL
    runs, the baselines, the tau x M ablation cells and the model-scale runs on verl tasks."""
    return plan_overrides(plan or plan_runs(config), root)


def validate_planned_runs(config: Mapping[str, Any], cache_dir: str | Path = CACHE_DIR,
                          plan: Plan | None = None) -> dict[str, Any]:
    """Validate every planned verl run (cached per overrides); raise :class:`VerlOverrideError` on the first bad one.

    The summary's ``trainer_paths`` maps each RL run to the trainer path (:func:`trainer_path`) whose start-up it was
    validated on, read back from the cache marker for a cached run."""
    started = time.perf_counter()
    runs = planned_runs(config, plan=plan)
    code = engine_code_digest()
    cache = Path(cache_dir)
    checked = 0
    paths: dict[str, str] = {}
    for label, kind, overrides in runs:
        key = hashlib.sha256(json.dumps([code, kind, overrides]).encode()).hexdigest()
        marker = cache / key
        if marker.exists():
            trainer = json.loads(marker.read_text()).get("trainer")
            if trainer:
                paths[label] = trainer
            continue
        with warnings.catch_warnings():  # verl lists every optional training backend it cannot import
            warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)
            validated = (validate_sft if kind == "sft" else validate_rl)(overrides, label=f"train run {label}")
        record: dict[str, Any] = {"run": label, "kind": kind, "overrides": overrides}
        if kind == "rl":
            record["trainer"] = paths[label] = trainer_path(validated)
        cache.mkdir(parents=True, exist_ok=True)
        tmp = marker.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(marker)
        checked += 1
    return {"runs": len(runs), "validated": checked, "cached": len(runs) - checked,
            "seconds": round(time.perf_counter() - started, 2), "trainer_paths": paths}


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of rule ``validate_verl``: validate every verl run of the resolved config, record the summary."""
    parser = entry_parser(__doc__, summary="line", logs=False)
    parser.add_argument("--config", required=True, type=json_text,
                        help="the resolved workflow config: a JSON file (what the rule passes) or inline JSON")
    parser.add_argument("--out", required=True, help="summary JSON, written once every run passed")
    args = parser.parse_args(argv)
    write_json(args.out, validate_planned_runs(json.loads(args.config)))


if __name__ == "__main__":
    main()
