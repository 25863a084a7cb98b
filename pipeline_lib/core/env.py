"""Environment variables the pipeline reads, each checked where it is read.

A value that cannot be what the variable means (``PIPELINE_MATH_TIMEOUT=nan`` would remove the verifier's time limit,
a base URL without a scheme reaches no server) is an :class:`EnvironmentVariableError` naming the variable and
what it accepts, never a bare ``ValueError`` from ``float()`` deep inside a worker, and never silently accepted.
Values of secrets (API keys) are never echoed.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
from collections.abc import Iterator

__all__ = ["VARIABLES", "EnvironmentVariableError", "env", "env_number", "env_text", "hidden_package"]

#: Every text variable the pipeline reads (numbers go through :func:`env_number`): name -> (pattern, meaning).
VARIABLES: dict[str, tuple[str, str]] = {
    "OPENAI_BASE_URL": (r"https?://[^\s/?#]+(/\S*)?", "an http(s):// URL"),
    "SLURM_JOB_ID": (r"[0-9]+", "a Slurm job id (digits)"),
    "SLURM_PROCID": (r"[0-9]+", "an srun task's rank (digits)"),
    "SLURM_NTASKS": (r"[0-9]+", "an srun step's number of tasks (digits)"),
    "SLURM_LOCALID": (r"[0-9]+", "an srun task's rank on its node (digits)"),
    "SOFTMAXGRPO_ATTEMPT": (r"[1-9][0-9]*", "Snakemake's attempt number (the workflow sets it)"),
    "USER": (r"[\w.@-]+", "a user name"),
    "SLURM_JOB_PARTITION": (r"[\w.,-]+", "Slurm partition name(s)"),
    "SLURM_JOB_NODELIST": (r"[\w.,\[\]-]+", "a Slurm node list"),
    "SLURMD_NODENAME": (r"[A-Za-z0-9][\w.-]*", "a host name"),
    "CUDA_VISIBLE_DEVICES": (r"[\w:., -]*", "a comma-separated list of GPU indices or UUIDs"),
    "RAY_ADDRESS": (r"auto|local|([a-z]+://)?[\w.\[\]:-]+:[0-9]+", "auto, local or host:port"),
    "PIPELINE_CONFIG_SHA256": (r"[0-9a-f]{64}", "a sha256 hex digest (the workflow sets it)"),
    "PIPELINE_CONFIG_FILE": (r"\S.*", "a file path (the workflow sets it: its resolved config, as JSON)"),
    "PIPELINE_HUB_LOCK": (r"\S.*", "a file path (the workflow sets it: the hub lock of a plan that reads the hub)"),
    "PIPELINE_REWARD_HEALTH_DIR": (r"\S.*", "a directory path (the verl engine sets it)"),
    "WANDB_ENTITY": (r"[\w.-]+", "a W&B entity name"),
    "MLFLOW_TRACKING_URI": (r"\S+", "an MLflow tracking URI"),
    "SWANLAB_LOG_DIR": (r"\S.*", "a directory path"),
    "SWANLAB_MODE": (r"cloud|local|offline|disabled", "cloud, local, offline or disabled"),
    "PIPELINE_VERL_CPU": (r"[01]", "1 to run verl on CPU (the preflight sets it), or 0/unset for a GPU run"),
    "DIST_INIT_METHOD": (r"\S+", "a torch.distributed init method (tcp://host:port, env://, file://...)"),
    "PIPELINE_VERL_CPU_SYNC_LOG": (r"\S.*", "a file path (the preflight sets it: the vLLM worker's weight digests)"),
    "PIPELINE_VERL_CPU_SKIP_SYNC": (r"[01]", "1 to skip the weight syncs after the first (a test's control) or 0"),
    "PIPELINE_CONSOLE": (r"short|full", "short (one line per job, the default) or full (Snakemake's own job blocks)"),
    "HF_HOME": (r"\S.*", "a directory path (the Hugging Face cache)"),
    "HF_ENDPOINT": (r"https?://[^\s/?#]+(/\S*)?", "an http(s):// URL (a Hugging Face hub)"),
}


class EnvironmentVariableError(ValueError):
    """An environment variable is set to a value the pipeline cannot use."""


def env_number(name: str, default: float, *, integer: bool = False, minimum: float = 0.0) -> float:
    """A finite number strictly above ``minimum`` (an integer if ``integer``), or ``default`` when unset or empty."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    kind = "an integer" if integer else "a finite number"
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise EnvironmentVariableError(f"environment variable {name}={raw[:40]!r} is not {kind} "
                                       f"(it must be {kind} > {minimum:g}; unset it for {default:g})") from None
    if not math.isfinite(value) or value <= minimum:
        raise EnvironmentVariableError(f"environment variable {name}={raw[:40]!r}: must be {kind} > {minimum:g} "
                                       f"(unset it for {default:g})")
    return value


def env_text(name: str, pattern: str, meaning: str, *, secret: bool = False) -> str | None:
    """The variable's value when it fully matches ``pattern``; None when unset or empty; else an error naming it."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return None
    if re.fullmatch(pattern, raw) is None:
        shown = "its value is not shown" if secret else f"got {raw[:80]!r}"
        raise EnvironmentVariableError(f"environment variable {name} must be {meaning} ({shown})")
    return raw


def env(name: str) -> str | None:
    """A variable of :data:`VARIABLES`, checked against its pattern; None when unset or empty."""
    pattern, meaning = VARIABLES[name]
    return env_text(name, pattern, meaning)


@contextlib.contextmanager
def hidden_package(package: str) -> Iterator[None]:
    """Inside, ``importlib.util.find_spec(package)`` is None and ``import package`` fails, as if it were not installed;
    unchanged after (and a no-op if it is already imported). For a library that imports an optional package we never
    use only because it is installed (pipeline_lib.core.model, pipeline_lib.core.tracking)."""
    if package in sys.modules:
        yield
        return
    sys.modules[package] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        del sys.modules[package]
