"""Shared fixtures: a scratch copy of the workflow so tests never touch the checkout's results/."""

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_PARTS = ("Snakefile", "workflow", "config", "envs", "profiles")


@pytest.fixture
def workflow_copy(tmp_path: Path) -> Path:
    for part in WORKFLOW_PARTS:
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, tmp_path / part)
        else:
            shutil.copy2(source, tmp_path / part)
    return tmp_path


def touched_workflow(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """A copy of the workflow and the package in ``tmp_path`` whose every output is a placeholder Snakemake recorded
    as made (``--touch``, no real run); returns a runner of ``snakemake ARGS`` there, for dry runs after an edit."""
    for part in (*WORKFLOW_PARTS, "pipeline_lib"):
        if (REPO / part).is_dir():
            shutil.copytree(REPO / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / part, tmp_path / part)
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin:" + str(Path(sys.executable).parent),
           "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)}

    def snakemake(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)

    summary = snakemake("--summary")
    assert summary.returncode == 0, summary.stderr[-3000:]
    for line in summary.stdout.splitlines()[1:]:
        target = tmp_path / line.split("\t")[0]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
    touched = snakemake("--touch", "--forceall", "--cores", "1")
    assert touched.returncode == 0, touched.stderr[-3000:]
    return snakemake


#: Modules of the fast lane (`python -m pytest -m fast`, under 5 minutes on 2 cores): the estimators, the loss,
#: the statistics, the rewards, the theory, the data and provenance contracts. End-to-end training, workflow,
#: Slurm, verl and browser tests stay in the full suite (`.ci/run`).
FAST_MODULES = {"test_advantages", "test_losses", "test_stats", "test_rewards", "test_theory_checks", "test_audit",
                "test_provenance", "test_data", "test_llm_client", "test_reproduction", "test_batch", "test_miniature",
                "test_captions", "test_hostile_inputs", "test_environment", "test_layers"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the fast lane's tests `fast` (a test of those modules marked `slow` stays out of it)."""
    for item in items:
        if item.path.stem in FAST_MODULES and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)
