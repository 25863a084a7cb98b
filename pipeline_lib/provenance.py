"""One provenance writer: a ``<output>.prov.json`` sidecar for every file a step makes.

A sidecar records what an auditor needs to trace a number back: the step, its
resolved parameters and config digest, every input and output with size and
sha256, the code version (git commit, dirty flag, hash of the uncommitted diff),
software versions, host and timing. Keys or secrets never belong in ``params``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from pipeline_lib.io import sha256_file, write_json

__all__ = ["SIDECAR_SUFFIX", "code_version", "config_digest", "file_record", "write_provenance"]

SIDECAR_SUFFIX = ".prov.json"
_TRACKED_PACKAGES = (
    "pipeline_lib", "torch", "numpy", "scipy", "pandas", "matplotlib", "snakemake",
    "transformers", "verl", "vllm", "math-verify", "rouge-score", "openai",
)
_REPO_ROOT = Path(__file__).resolve().parents[1]


def config_digest(config: Mapping[str, Any]) -> str:
    """sha256 of the config as canonical JSON (sorted keys), so equal configs share a digest."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _git(*args: str) -> bytes | None:
    try:
        return subprocess.run(
            ["git", "-C", str(_REPO_ROOT), *args], capture_output=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


@lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """Git commit of the package's checkout, whether it is dirty, and a hash of the diff."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    diff = _git("diff", "HEAD")
    return {
        "git_commit": commit.decode().strip() if commit else None,
        "dirty": bool(status and status.strip()),
        "diff_sha256": hashlib.sha256(diff).hexdigest() if diff else None,
        "pipeline_lib_version": _package_version("pipeline_lib"),
    }


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def software_versions() -> dict[str, str | None]:
    versions = {name: _package_version(name) for name in _TRACKED_PACKAGES}
    versions["python"] = sys.version.split()[0]
    return versions


def hardware() -> dict[str, Any]:
    """CPU model and count; GPU model/count/driver when nvidia-smi is present."""
    info: dict[str, Any] = {"hostname": socket.gethostname(), "platform": platform.platform(),
                            "cpu_count": os.cpu_count(), "cpu_model": platform.processor() or platform.machine()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if shutil.which("nvidia-smi"):
        try:
            query = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=30, check=True).stdout.strip().splitlines()
            info["gpus"] = query
            info["gpu_count"] = len(query)
        except (OSError, subprocess.SubprocessError):
            info["gpus"] = "nvidia-smi failed"
    return info


def file_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    return {"path": str(path), "bytes": path.stat().st_size, "sha256": sha256_file(path)}


def write_provenance(
    outputs: Iterable[str | os.PathLike[str]],
    *,
    step: str,
    inputs: Iterable[str | os.PathLike[str]] = (),
    params: Mapping[str, Any] | None = None,
    config_sha256: str | None = None,
    seeds: Mapping[str, int] | None = None,
    started_at: float | None = None,
) -> list[Path]:
    """Write one sidecar per output, each listing every input and output of the step."""
    outputs = [Path(p) for p in outputs]
    inputs = [Path(p) for p in inputs]
    missing = [str(p) for p in outputs + inputs if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"provenance for step {step!r}: missing file(s) {missing}")
    record = {
        "step": step,
        "params": dict(params or {}),
        # the workflow exports the digest of the whole resolved config to every job it starts
        "config_sha256": config_sha256 or os.environ.get("PIPELINE_CONFIG_SHA256"),
        "seeds": dict(seeds or {}),
        "inputs": [file_record(p) | {"provenance": str(p) + SIDECAR_SUFFIX} for p in inputs],
        "outputs": [file_record(p) for p in outputs],
        "code": code_version(),
        "software": software_versions(),
        "host": hardware(),
        "slurm": {key: os.environ[key] for key in ("SLURM_JOB_ID", "SLURM_JOB_PARTITION", "SLURM_JOB_NODELIST")
                  if key in os.environ},
        "started_at": started_at,
        "finished_at": time.time(),
    }
    sidecars = []
    for output in outputs:
        sidecar = output.with_name(output.name + SIDECAR_SUFFIX)
        write_json(sidecar, record | {"output": str(output)})
        sidecars.append(sidecar)
    return sidecars
