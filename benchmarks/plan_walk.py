"""How often a reader following the config-to-runs layer's calls comes back into a module already left.

Traces the calls that planning both shipped configs makes (``plan_runs`` and ``stage_targets``) inside the layer
(``pipeline_lib.plan`` and ``core.run_spec``, ``core.config``, ``core.baselines``) and prints three counts:

* **chains**: call chains that re-enter a module they left (``runs -> registry -> runs``), each chain once; the
  property ``tests/plan/test_walk.py`` holds at 0;
* **functions**: a depth-first walk of the function-level call graph from its roots (each function once, in
  first-call order), counting the moves into a module the walk has already left;
* **config**: the same walk over only the functions the config itself is handed to (an argument that is the config
  or holds it as ``.config``), the config's own path through the layer.

Run from a checkout's root: ``PYTHONPATH=. python benchmarks/plan_walk.py [--tree functions|config]``.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Mapping
from types import FrameType
from typing import Any

from pipeline_lib.core.config import load_config_file
from pipeline_lib.plan import targets
from pipeline_lib.plan.runs import plan_runs, validate_planned_config

LAYER = ("pipeline_lib.plan.", "pipeline_lib.core.run_spec", "pipeline_lib.core.config", "pipeline_lib.core.baselines")
CONFIGS = ("config/config.yaml", "config/paper.yaml")
Graph = dict[str, list[str]]


def _holds(frame: FrameType, config: Mapping[str, Any]) -> bool:
    code = frame.f_code
    args = [frame.f_locals.get(name) for name in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]]
    return any(arg is config or getattr(arg, "config", None) is config for arg in args)


def _profiler(config: Mapping[str, Any], functions: Graph, holders: Graph, chains: set[str]) -> Any:
    """A ``sys.setprofile`` hook recording, while ``config`` is planned, the calls :func:`_trace` describes."""
    stack: list[tuple[str, bool]] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(LAYER):
            return
        name = f"{module}:{frame.f_code.co_qualname}"
        if event == "call":
            caller = stack[-1][0] if stack else "ROOT"
            if name not in functions[caller]:
                functions[caller].append(name)
            holds = _holds(frame, config)
            if holds:
                holder = next((caller for caller, held in reversed(stack) if held), "ROOT")
                if name not in holders[holder]:
                    holders[holder].append(name)
            rooms = [caller.split(":")[0] for caller, _ in stack]
            rooms = [room for i, room in enumerate(rooms) if i == 0 or rooms[i - 1] != room]
            if rooms and rooms[-1] != module and module in rooms:
                start = len(rooms) - 1 - rooms[::-1].index(module)
                chains.add(" -> ".join([*rooms[start:], module]))
            stack.append((name, holds))
        elif event == "return" and stack and stack[-1][0] == name:
            stack.pop()

    return profile


def _trace() -> tuple[Graph, Graph, set[str]]:
    """Caller -> callees (``module:function``, first-call order, ``ROOT`` calling the entry points) of every layer
    function and of those the config is handed to, and the chains that re-enter a module."""
    functions: Graph = defaultdict(list)
    holders: Graph = defaultdict(list)
    chains: set[str] = set()
    for path in CONFIGS:
        config = validate_planned_config(load_config_file(path), "workflow/schemas/config.schema.yaml", ".")
        sys.setprofile(_profiler(config, functions, holders, chains))
        try:
            targets.stage_targets(config, plan_runs(config))
        finally:
            sys.setprofile(None)
    return functions, holders, chains


def _walk(callees: Graph) -> list[tuple[int, str]]:
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


def _returns(order: list[tuple[int, str]]) -> int:
    left: set[str] = set()
    current, returns = None, 0
    for _, name in order:
        room = name.split(":")[0]
        if room != current:
            returns += room in left
            if current is not None:
                left.add(current)
            current = room
    return returns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", choices=("functions", "config"), help="print that walk, one function a line")
    args = parser.parse_args()
    functions, holders, chains = _trace()
    walks = {"functions": _walk(functions), "config": _walk(holders)}
    if args.tree:
        print("\n".join("  " * depth + name.removeprefix("pipeline_lib.") for depth, name in walks[args.tree]))
    print(f"chains that come back into a module they left: {len(chains)}")
    for label, order in walks.items():
        modules = len({name.split(":")[0] for _, name in order})
        print(f"{label}: {len(order)} functions in {modules} modules; the walk comes back into a module it left "
              f"{_returns(order)} times")
    for chain in sorted(chains):
        print(f"  {chain}")


if __name__ == "__main__":
    main()
