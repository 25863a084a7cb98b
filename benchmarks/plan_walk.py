"""How often a reader following the config-to-runs layer's calls comes back into a module already left.

Traces the calls that planning both shipped configs makes (``plan_runs`` and ``stage_targets``) inside the layer
(``pipeline_lib.plan`` and ``core.run_spec``, ``core.config``, ``core.baselines``), builds the function-level call
graph, walks it depth first from its roots (each function once, in first-call order) and counts the moves into a
module the walk has already left. ``tests/plan/test_walk.py`` checks a weaker property: no single call chain
re-enters a module it left. Run from a checkout's root: ``PYTHONPATH=. python
benchmarks/plan_walk.py [--tree]``.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from types import FrameType
from typing import Any

from pipeline_lib.core.config import load_config_file
from pipeline_lib.plan import targets
from pipeline_lib.plan.runs import plan_runs, validate_planned_config

LAYER = ("pipeline_lib.plan.", "pipeline_lib.core.run_spec", "pipeline_lib.core.config", "pipeline_lib.core.baselines")
CONFIGS = ("config/config.yaml", "config/paper.yaml")


def _call_graph() -> dict[str, list[str]]:
    """Caller -> callees (``module:function``), in first-call order; ``ROOT`` calls the traced entry points."""
    callees: dict[str, list[str]] = defaultdict(list)
    stack: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(LAYER):
            return
        name = f"{module}:{frame.f_code.co_qualname}"
        if event == "call":
            parent = stack[-1] if stack else "ROOT"
            if name not in callees[parent]:
                callees[parent].append(name)
            stack.append(name)
        elif event == "return" and stack and stack[-1] == name:
            stack.pop()

    for path in CONFIGS:
        config = validate_planned_config(load_config_file(path), "workflow/schemas/config.schema.yaml", ".")
        sys.setprofile(profile)
        try:
            targets.stage_targets(config, plan_runs(config))
        finally:
            sys.setprofile(None)
    return callees


def _walk(callees: dict[str, list[str]]) -> list[tuple[int, str]]:
    """(depth, function) of each function in depth-first order, each once."""
    seen: set[str] = set()
    order: list[tuple[int, str]] = []
    pending = [(0, name) for name in reversed(callees["ROOT"])]
    while pending:
        depth, name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        order.append((depth, name))
        pending += [(depth + 1, child) for child in reversed(callees.get(name, [])) if child not in seen]
    return order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="store_true", help="print the walk, one function a line")
    args = parser.parse_args()
    order = _walk(_call_graph())
    left: set[str] = set()
    current, returns = None, 0
    for _, name in order:
        room = name.split(":")[0]
        if room != current:
            returns += room in left
            if current is not None:
                left.add(current)
            current = room
    if args.tree:
        print("\n".join("  " * depth + name.removeprefix("pipeline_lib.") for depth, name in order))
    print(f"{len(order)} functions in {len({name.split(':')[0] for _, name in order})} modules; the walk comes back "
          f"into a module it left {returns} times")


if __name__ == "__main__":
    main()
