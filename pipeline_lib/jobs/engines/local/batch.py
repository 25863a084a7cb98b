"""Run several pipeline entry points in one process: one Python, torch and transformers start-up for many jobs.

    python -m pipeline_lib.jobs.engines.local.batch --steps .snakemake/specs/<digest>.json

where the file (written by the plan, pipeline_lib.plan.groups.batch_command) holds the steps, each carrying its
spec as a JSON value (not a spec's JSON text quoted in a string),
``[{"module": "pipeline_lib.jobs.engines.local.sft", "args": ["--spec", {"method": "sft", ...}, "--run-dir", ...]},
...]``;
a step's ``main`` gets each such value back as the JSON text its own command line would pass (:func:`argv`).
With file descriptor 3 open (the rules point it at the console), one line per step goes there.

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

import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from pipeline_lib.core.cli import entry_parser, json_text
from pipeline_lib.core.provenance import running_entry

__all__ = ["argv", "run_steps"]

log = logging.getLogger("pipeline_lib.jobs.engines.local.batch")

#: Packages whose entry points a batch may run (each has ``main(argv) -> int``). Written as prefixes, not module
#: names, so the code digest of this module does not take them for imports (each step's sidecars record its own).
ALLOWED_PREFIXES = ("pipeline_lib.core.data.", "pipeline_lib.jobs.engines.local.", "pipeline_lib.jobs.eval.",
                    "pipeline_lib.jobs.judge.", "pipeline_lib.jobs.classify.")


def _validate(steps: Any) -> list[dict[str, Any]]:
    if not isinstance(steps, list) or not steps:
        raise ValueError("--steps must be a non-empty JSON list of {\"module\": ..., \"args\": [...]}")
    for number, step in enumerate(steps):
        if not isinstance(step, dict) or set(step) - {"module", "args"} or "module" not in step:
            raise ValueError(f"step {number}: expected keys module and args, got {step!r}")
        module, args = step["module"], step.get("args", [])
        if not module.startswith(ALLOWED_PREFIXES) or module == __name__:
            raise ValueError(f"step {number}: {module!r} is not a batchable entry point ({ALLOWED_PREFIXES})")
        if not isinstance(args, list) or not all(
                isinstance(a, str) or (index and isinstance(a, (dict, list)) and isinstance(args[index - 1], str)
                                       and args[index - 1].startswith("--")) for index, a in enumerate(args)):
            raise ValueError(f"step {number} ({module}): args must be a list of strings (a flag's value may be a "
                             "JSON object or list)")
    return steps


def argv(args: Sequence[Any]) -> list[str]:
    """A step's command-line arguments: each JSON value (a spec) as its JSON text, the rest unchanged; the text is
    what the member's own command passes (``json.dumps`` of the value the plan parsed from it)."""
    return [a if isinstance(a, str) else json.dumps(a) for a in args]


def _what(step: dict[str, Any]) -> str:
    """A step in a few words: its entry point and the run it writes (``local.rl arith_tiny/grpo/seed0``)."""
    args, module = step.get("args", []), ".".join(step["module"].split(".")[-2:])  # wherever the package keeps it
    for flag in ("--run-dir", "--out"):
        if flag in args[:-1]:
            return f"{module} {args[args.index(flag) + 1].removeprefix('results/').removeprefix('train/')}"
    return module


def _console() -> TextIO | None:
    """File descriptor 3, where the rule's shell line points it at the console (``3>&2 > {log} 2>&1``)."""
    try:
        return os.fdopen(3, "w", buffering=1, closefd=False)
    except OSError:
        return None


def run_steps(steps: Sequence[dict[str, Any]], console: TextIO | None = None) -> list[float]:
    """Run each step's ``main(args)`` in order; returns the wall seconds of each. Raises on the first failure.

    With ``console``, one line per step there: which step of how many, what it runs, the time so far and an estimate
    of the time left (the mean of the steps done times the steps left)."""
    seconds: list[float] = []
    steps = _validate(list(steps))
    began = time.perf_counter()
    for number, step in enumerate(steps):
        module = importlib.import_module(step["module"])
        started = time.perf_counter()
        args = argv(step.get("args", []))
        log.info("step %d/%d: python -m %s %s", number + 1, len(steps), step["module"], " ".join(args))
        if console is not None:
            left = f", about {sum(seconds) / len(seconds) * (len(steps) - number):.0f} s left" if seconds else ""
            print(f"    [batch {number + 1}/{len(steps)}] {_what(step)} "
                  f"({time.perf_counter() - began:.0f} s in{left})", file=console, flush=True)
        with running_entry(step["module"]):  # its outputs' provenance records this module's code, not the batch's
            status = module.main(args)
        if status not in (0, None):
            raise SystemExit(f"step {number} ({step['module']}) exited with status {status}")
        seconds.append(time.perf_counter() - started)
        log.info("step %d/%d done in %.1f s", number + 1, len(steps), seconds[-1])
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.jobs.engines.local.batch")
    parser.add_argument("--steps", required=True, type=json_text,
                        help="JSON list of {module, args} (a flag's value may be a JSON value: a spec): a JSON file "
                             "(what the plan writes) or inline JSON")
    args = parser.parse_args(argv)
    run_steps(json.loads(args.steps), console=_console())
    return 0


if __name__ == "__main__":
    sys.exit(main())
