"""Run-level record written when a (non-dry) Snakemake run starts: ``results/run_info/<timestamp>/``.

Holds the resolved config, the command line, the full package list and the job graph,
so a reviewer can see how a whole run was launched, not only how each file was made.
"""

from __future__ import annotations

import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from pipeline_lib.io import write_json, write_text
from pipeline_lib.provenance import code_version, config_digest, hardware

__all__ = ["write_run_info"]


def _configfile_args(argv: list[str]) -> list[str]:
    """The ``--configfile`` / ``--config`` arguments of the running command (to plan the same graph)."""
    out, keep = [], False
    for arg in argv:
        if arg.startswith("-"):
            keep = arg in ("--configfile", "--configfiles", "--config", "-C")
            if keep:
                out.append(arg)
        elif keep:
            out.append(arg)
    return out


def write_run_info(config: dict[str, Any], root: str = "results/run_info") -> Path:
    out = Path(root) / time.strftime("%Y%m%dT%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "config.yaml", yaml.safe_dump(dict(config), sort_keys=True))
    packages = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    write_text(out / "packages.txt", "\n".join(packages) + "\n")
    dag = subprocess.run([sys.executable, "-m", "snakemake", "--dag", "--nolock", "-n", "--quiet", "all",
                          *_configfile_args(sys.argv[1:])], capture_output=True, text=True, timeout=600)
    write_text(out / "dag.dot", dag.stdout if dag.returncode == 0 else f"// snakemake --dag failed:\n{dag.stderr}")
    write_json(out / "run.json", {"command": sys.argv, "config_sha256": config_digest(config),
                                  "code": code_version(), "host": hardware(), "started": time.time()})
    return out
