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
