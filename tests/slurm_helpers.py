"""The local Slurm cluster shared by the Slurm test modules (tests/workflow/test_slurm.py,
tests/workflow/test_slurm_resume.py).

pytest-xdist runs the two modules one after the other on one worker (tests/conftest.SHARED_WORKER), but a run that
selects tests differently may put them in two processes at once: the cluster is started by its first user and stopped
(by PID, through ``.ci/slurm/local_cluster.py stop``) by its last one, and only if a user of this file started it.
The users are process ids in a JSON file, changed under an exclusive lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, repo_env

CLUSTER = REPO / ".ci" / "slurm" / "local_cluster.py"
PROFILE = REPO / ".ci" / "slurm" / "profile"
USERS = Path(tempfile.gettempdir()) / "pipeline-ci-slurm-users.json"
USERS_LOCK = USERS.with_suffix(".lock")
#: Held (flock) by each Slurm test job that starts Ray: the 2-node probe and the resume test's verl run. Ray 2.60's
#: raylet dies when its dashboard agent takes over 15 s to start (ray-project/ray#65983), which two Ray clusters
#: starting beside a training run on 2 cores caused; one at a time, a second waits instead of failing.
RAY_LOCK = Path(tempfile.gettempdir()) / "pipeline-ci-ray.lock"


def unavailable() -> str | None:
    """Why the local cluster cannot run here (None: it can)."""
    missing = [name for name in ("sbatch", "squeue", "srun", "scontrol", "munge")
               if shutil.which(name) is None]
    missing += [name for name in ("slurmctld", "slurmd", "munged") if not Path("/usr/sbin", name).exists()]
    if missing:
        return f"Slurm binaries missing ({', '.join(missing)}): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "the local Slurm cluster runs as root"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "ray is not installed (pip install verl==0.9.1 pulls it)"
    return None


def require_slurm() -> None:
    """Skip without Slurm, or fail where ``PIPELINE_REQUIRE_SLURM=1`` (``.ci/run``)."""
    reason = unavailable()
    if reason:
        if os.environ.get("PIPELINE_REQUIRE_SLURM") == "1":
            pytest.fail(f"PIPELINE_REQUIRE_SLURM=1 but {reason}")
        pytest.skip(reason)


@contextlib.contextmanager
def _locked(lock: Path = USERS_LOCK) -> Iterator[None]:
    """An exclusive flock on ``lock`` (by default the users file's) for the caller's block."""
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _users() -> dict:
    try:
        state = json.loads(USERS.read_text())
    except (OSError, ValueError):
        state = {}
    return {"started": bool(state.get("started")), "users": list(state.get("users", []))}


def _save(state: dict) -> None:
    tmp = USERS.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(USERS)


def _cluster(command: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CLUSTER), command], capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def shared_cluster() -> Iterator[None]:
    """A running local cluster for the caller's lifetime; stopped when its last user leaves, if a user started it."""
    require_slurm()
    with _locked():
        state = _users()
        alive = [pid for pid in state["users"] if Path(f"/proc/{pid}").exists()]
        if not alive:  # no live user: a cluster running now is someone else's, unless a user that died started it
            state["started"] = _cluster("status", 60).returncode != 0 or state["started"]
        started = _cluster("start", 180)
        assert started.returncode == 0, started.stdout + started.stderr
        _save({"started": state["started"], "users": [*alive, os.getpid()]})
    try:
        yield
    finally:
        with _locked():
            state = _users()
            users = [pid for pid in state["users"] if pid != os.getpid() and Path(f"/proc/{pid}").exists()]
            stop = not users and state["started"]
            _save({"started": state["started"] and bool(users), "users": users})
            if stop:
                stopped = _cluster("stop", 120)
                assert stopped.returncode == 0, stopped.stdout + stopped.stderr
                # a slurm.conf naming a stopped controller makes every later Snakemake start wait ~9 s (its Slurm
                # plugin asks `scontrol show config`): the cluster takes its config away with it
                conf = Path("/etc/slurm/slurm.conf")
                assert not (conf.exists() and "local_cluster.py" in conf.read_text(errors="replace")), stopped.stdout


@contextlib.contextmanager
def ray_phase() -> Iterator[None]:
    """The Slurm tests' Ray phase, one at a time across test workers (:data:`RAY_LOCK`)."""
    with _locked(RAY_LOCK):
        yield


def snakemake_env() -> dict[str, str]:
    """The environment of a Snakemake run against the cluster: this checkout first, no ``SLURM_*`` of the caller."""
    return {k: v for k, v in repo_env().items() if not k.startswith("SLURM_")}


def submitted_job_ids(output: str) -> list[str]:
    """Slurm job ids the executor reports for each sbatch submission."""
    return re.findall(r"has been submitted with SLURM jobid (\d+)", output)
