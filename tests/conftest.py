"""Shared fixtures: a scratch copy of the workflow so tests never touch the checkout's results/."""

import shutil
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


#: Modules of the fast lane (`python -m pytest -m fast`, under 5 minutes on 2 cores): the estimators, the loss,
#: the statistics, the rewards, the theory, the data and provenance contracts. End-to-end training, workflow,
#: Slurm, verl and browser tests stay in the full suite (`.ci/run`).
FAST_MODULES = {"test_advantages", "test_losses", "test_stats", "test_rewards", "test_theory_checks", "test_audit",
                "test_provenance", "test_data", "test_llm_client", "test_reproduction", "test_batch", "test_miniature",
                "test_captions", "test_hostile_inputs", "test_environment"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the fast lane's tests `fast` (a test of those modules marked `slow` stays out of it)."""
    for item in items:
        if item.path.stem in FAST_MODULES and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)
