"""The plan's verl runs, translated as their jobs will translate them: what the workflow checks at parse time.

Plain Python, no verl import (``common.smk`` imports it while the workflow parses). It walks the plan, so no training
job imports it: a job reads its own spec (:mod:`.translate`), and its code digest covers no planner.
"""

from __future__ import annotations

from pathlib import Path

from pipeline_lib.jobs.engines.verl.translate import TrainPaths, rl_overrides, sft_overrides
from pipeline_lib.plan import Plan, Run

__all__ = ["plan_overrides", "run_overrides", "run_paths"]


def run_paths(run: Run, root: str | Path = ".") -> TrainPaths:
    """The files a planned verl run reads and writes, absolute under the workflow's ``root``."""
    root = Path(root).resolve()
    run_dir = root / Path(run.output).parent
    if run.verl_kind == "sft":
        return TrainPaths(run_dir=run_dir, train_files=root / run.inputs["data"], tracking=run.tracking)
    init = root / Path(run.inputs["init"]).parent / "final" if "init" in run.inputs else None  # None: the hub model
    return TrainPaths(run_dir=run_dir, train_files=root / run.inputs["data"], val_files=root / run.inputs["val"],
                      init=init, tracking=run.tracking)


def run_overrides(run: Run, root: str | Path = ".") -> list[str]:
    """The Hydra overrides of one planned verl run (``run.verl_kind``: sft or rl), as its job will pass them."""
    build = {"sft": sft_overrides, "rl": rl_overrides}[run.verl_kind or ""]
    return build(run.spec, run_paths(run, root), run.seed)


def plan_overrides(plan: Plan, root: str | Path = ".") -> list[tuple[str, str, list[str]]]:
    """(run key, verl trainer, overrides) of every verl run of the plan: what the parse-time check validates."""
    return [(run.key, run.verl_kind, run_overrides(run, root)) for run in plan.runs if run.verl_kind]
