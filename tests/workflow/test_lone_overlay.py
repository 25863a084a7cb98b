"""A lone one-key ``--configfile my.yaml`` is stopped with what to type (issue 36): on the command line it replaces
the profile's config/config.yaml, so it would overlay the schema's defaults, the paper plan; the documented form,
the tiny default first, plans the tiny default with the overlay on top."""

import re

import pytest

from pipeline_lib.core.config import ConfigError, check_config_files
from tests.conftest import REPO, snakemake

pytestmark = pytest.mark.fast


def test_a_lone_overlay_stops_with_the_command_to_type(workflow_copy):
    (workflow_copy / "my.yaml").write_text("train:\n  seeds: [0]\n")
    result = snakemake(workflow_copy, "-n", "--configfile", "my.yaml")
    assert result.returncode != 0
    console = result.stdout + result.stderr
    assert "snakemake --configfile config/config.yaml my.yaml" in console, console[-3000:]
    assert "Job stats" not in result.stdout  # nothing was planned


def test_the_documented_overlay_plans_the_tiny_default_with_the_change(workflow_copy):
    (workflow_copy / "my.yaml").write_text("train:\n  seeds: [0]\n")
    result = snakemake(workflow_copy, "-n", "--configfile", "config/config.yaml", "my.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    trained = re.findall(r"^Job \d+: (train_local\w*) .*seed (\d)\b", result.stdout, flags=re.M)
    assert "data_tiny" in result.stdout and trained, result.stdout[-3000:]  # the tiny default's tasks
    assert {seed for _, seed in trained} == {"0"}, trained  # the overlay's one seed


@pytest.mark.parametrize("base", ["config/config.yaml", "config/paper.yaml", "config/preflight.yaml"])
def test_every_shipped_base_is_one_alone_and_under_an_overlay(base, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the workflow's directory, where Snakemake runs
    overlay = tmp_path / "my.yaml"
    overlay.write_text("train:\n  seeds: [0]\n")
    check_config_files([REPO / base])
    check_config_files([REPO / base, overlay])
    check_config_files([])  # no file: the schema's defaults, as asked
    with pytest.raises(ConfigError, match="no base config among the config files"):
        check_config_files([overlay])
    (tmp_path / "full.yaml").write_text("label: test\ntrain:\n  seeds: [0]\n")  # a full config of yours: a base
    check_config_files([tmp_path / "full.yaml"])
