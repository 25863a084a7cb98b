"""Run several pipeline entry points in one process: one Python, torch and transformers start-up for many jobs.

    python -m pipeline_lib.engines.local.batch --steps '[{"module": "pipeline_lib.engines.local.sft",
        "args": ["--spec", "...", "--run-dir", "results/train/T/sft/seed0", ...]}, {"module": ..., "args": [...]}]'

On a 2-core machine the start-up of a job (importing torch and transformers, ~7 CPU seconds) costs
more than a tiny training run or evaluation, so the tiny default groups its local-engine jobs: e.g.
one job per (task, seed) runs SFT, every RL method from it and their evaluations. Each step is the
module's own ``main(argv)``, exactly what its command line would run; every entry point seeds itself
from its arguments, so a step's outputs do not depend on what ran before it in the same process.
Steps run in order and the first failure stops the batch: the job fails, Snakemake removes all its outputs, and a
rerun runs every step again (a finished run keeps no resume state; the step that was killed resumes from its own
checkpoint).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from pipeline_lib.provenance import running_entry

__all__ = ["run_steps"]

log = logging.getLogger("pipeline_lib.engines.local.batch")

#: Packages whose entry points a batch may run (each has ``main(argv) -> int``). Written as prefixes, not module
#: names, so the code digest of this module does not take them for imports (each step's sidecars record its own).
ALLOWED_PREFIXES = ("pipeline_lib.data.", "pipeline_lib.engines.local.", "pipeline_lib.eval.",
                    "pipeline_lib.judge.", "pipeline_lib.classify.")


def _validate(steps: Any) -> list[dict[str, Any]]:
    if not isinstance(steps, list) or not steps:
        raise ValueError("--steps must be a non-empty JSON list of {\"module\": ..., \"args\": [...]}")
    for number, step in enumerate(steps):
        if not isinstance(step, dict) or set(step) - {"module", "args"} or "module" not in step:
            raise ValueError(f"step {number}: expected keys module and args, got {step!r}")
        module, args = step["module"], step.get("args", [])
        if not module.startswith(ALLOWED_PREFIXES) or module == __name__:
            raise ValueError(f"step {number}: {module!r} is not a batchable entry point ({ALLOWED_PREFIXES})")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"step {number} ({module}): args must be a list of strings")
    return steps


def run_steps(steps: Sequence[dict[str, Any]]) -> list[float]:
    """Run each step's ``main(args)`` in order; returns the wall seconds of each. Raises on the first failure."""
    seconds = []
    for number, step in enumerate(_validate(list(steps))):
        module = importlib.import_module(step["module"])
        started = time.perf_counter()
        log.info("step %d/%d: python -m %s %s", number + 1, len(steps), step["module"], " ".join(step["args"]))
        with running_entry(step["module"]):  # its outputs' provenance records this module's code, not the batch's
            status = module.main(list(step.get("args", [])))
        if status not in (0, None):
            raise SystemExit(f"step {number} ({step['module']}) exited with status {status}")
        seconds.append(time.perf_counter() - started)
        log.info("step %d/%d done in %.1f s", number + 1, len(steps), seconds[-1])
    return seconds


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m pipeline_lib.engines.local.batch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", required=True, help="JSON list of {module, args}")
    args = parser.parse_args(argv)
    run_steps(json.loads(args.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
