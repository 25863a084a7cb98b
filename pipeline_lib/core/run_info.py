"""Run-level record written when a (non-dry) Snakemake run starts: ``results/run_info/<timestamp>/``.

Holds the resolved config, the command line, the full package list and the job graph (of the targets this run builds),
so a reviewer can see how a whole run was launched, not only how each file was made.
"""

from __future__ import annotations

import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from pipeline_lib.core.io import write_json, write_text
from pipeline_lib.core.provenance import code_version, config_digest, hardware

__all__ = ["write_run_info"]


def write_run_info(config: dict[str, Any], dag_dot: str, root: str = "results/run_info") -> Path:
    """Write the run's record; ``dag_dot`` is the running workflow's job graph in Graphviz dot (``workflow.dag.dot()``,
    the same text ``snakemake --dag`` prints for the targets this run builds), taken from the job graph Snakemake
    already built instead of planning it again in a subprocess (about 5 CPU s before the first job)."""
    out = Path(root) / time.strftime("%Y%m%dT%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "config.yaml", yaml.safe_dump(dict(config), sort_keys=True))
    packages = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    write_text(out / "packages.txt", "\n".join(packages) + "\n")
    write_text(out / "dag.dot", dag_dot.rstrip() + "\n")
    write_json(out / "run.json", {"command": sys.argv, "config_sha256": config_digest(config),
                                  "code": code_version(), "host": hardware(), "started": time.time()})
    return out
