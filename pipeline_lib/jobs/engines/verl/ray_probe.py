"""Prove a Ray cluster is whole: the expected nodes are alive and a task really runs on each.

    python -m pipeline_lib.jobs.engines.verl.ray_probe --expect-nodes 2 [--expect-gpus G] [--out probe.json]

Connects to ``RAY_ADDRESS`` (set by :mod:`.launch`), pins one task to every alive node with a
hard node-affinity strategy, and exits non-zero (naming what is missing) unless exactly the
expected number of nodes answered. The JSON report lists, per node, the Ray node id, IP, the
Slurm node the task ran on and its PID, so a test can check the tasks ran on distinct nodes.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.env import env
from pipeline_lib.core.io import write_json

__all__ = ["main", "probe"]


def _where() -> dict[str, Any]:
    return {"hostname": socket.gethostname(), "slurm_node": env("SLURMD_NODENAME"),
            "slurm_job_id": env("SLURM_JOB_ID"), "pid": os.getpid()}


def probe(address: str | None, expect_nodes: int, expect_gpus: float = 0, timeout: float = 120) -> dict[str, Any]:
    """One task per alive node; raises RuntimeError unless every expected node ran its task."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=address or "auto", logging_level="WARNING", log_to_driver=False)
    try:
        alive = [node for node in ray.nodes() if node["Alive"]]
        gpus = sum(node["Resources"].get("GPU", 0) for node in alive)
        where = ray.remote(num_cpus=0)(_where)
        pending = {node["NodeID"]: where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id=node["NodeID"], soft=False)).remote() for node in alive}
        ready, missing = ray.wait(list(pending.values()), num_returns=len(pending), timeout=timeout)
        done = set(ready)
        answers = {node_id: ray.get(ref) for node_id, ref in pending.items() if ref in done}
        report = {
            "address": address, "expect_nodes": expect_nodes, "alive_nodes": len(alive), "gpus": gpus,
            "nodes": [{"node_id": node["NodeID"], "ip": node["NodeManagerAddress"],
                       "resources": node["Resources"], "task": answers.get(node["NodeID"])} for node in alive],
        }
    finally:
        ray.shutdown()
    problems = []
    if len(alive) != expect_nodes:
        problems.append(f"{len(alive)} alive Ray nodes, expected {expect_nodes}")
    if missing:
        problems.append(f"{len(missing)} node tasks did not finish within {timeout:.0f} s")
    if gpus < expect_gpus:
        problems.append(f"{gpus} GPUs in the cluster, expected at least {expect_gpus}")
    if problems:
        raise RuntimeError("Ray cluster probe failed: " + "; ".join(problems) + f"\n{json.dumps(report, indent=1)}")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = entry_parser(__doc__, summary="line", logs=False)
    parser.add_argument("--address", default=env("RAY_ADDRESS"),
                        help="Ray cluster address (default: RAY_ADDRESS, else 'auto')")
    parser.add_argument("--expect-nodes", type=int, required=True)
    parser.add_argument("--expect-gpus", type=float, default=0)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--out", default=None, help="write the JSON report here")
    args = parser.parse_args(argv)
    report = probe(args.address, args.expect_nodes, args.expect_gpus, args.timeout)
    print(json.dumps(report, indent=1))
    if args.out:
        write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
