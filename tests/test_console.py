"""The console of a run a person can follow (issue 36): short commands with no JSON on them, one line per job, and
progress with the elapsed time and an estimate of the time left; the command-line contract defined once
(pipeline_lib.cli)."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from pipeline_lib.cli import add_run_arguments, file_args, json_file
from pipeline_lib.console import eta_line
from tests.conftest import snakemake

pytestmark = pytest.mark.fast

#: The longest shell command the console may show (a spec on the command line is 1-15 KB).
MAX_COMMAND = 300


def test_a_spec_travels_in_a_content_addressed_file_that_the_entry_points_read(tmp_path):
    spec = json.dumps({"task": "arith_tiny", "settings": {"lr": 0.003}})
    args = file_args(["python", "-m", "x", "--spec", spec, "--seed", "0"], directory=tmp_path)
    path = args[args.index("--spec") + 1]
    assert path.startswith(str(tmp_path)) and json_file(spec, tmp_path) == path  # same spec, same file
    assert json_file(spec.replace("0.003", "0.004"), tmp_path) != path  # a changed spec is a new path: it reruns
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    parsed = parser.parse_args(["--spec", path, "--seed", "1", "--run-dir", "r", "--threads", "2"])
    assert parsed.spec == spec and parsed.seed == 1 and parsed.threads == 2 and parsed.tracking is None
    assert parser.parse_args(["--spec", spec, "--seed", "1", "--run-dir", "r"]).spec == spec  # inline still works
    with pytest.raises(SystemExit):
        parser.parse_args(["--spec", str(tmp_path / "missing.json"), "--seed", "1", "--run-dir", "r"])


def test_the_estimate_of_the_time_left_follows_the_jobs_done():
    assert eta_line(10, 40, 60.0) == "10 of 40 steps (25%) done, 1m00s elapsed, about 3m00s left"
    assert eta_line(40, 40, 75.0) == "40 of 40 steps (100%) done, 1m15s elapsed"


def test_a_small_run_prints_one_short_line_per_job_and_progress_with_an_estimate(workflow_copy):
    """Two tiny data jobs, with their shell commands shown (``--printshellcmds``, off in profiles/default): each
    command is short and carries no JSON, each job gets one ``Job N: <rule> <wildcards>`` line, and the progress
    after the first job says the elapsed time and the time left."""
    targets = [f"results/data/{task}/manifest.json" for task in ("arith_tiny", "countdown_tiny")]
    result = snakemake(workflow_copy, *targets, "--cores", "1", "--printshellcmds")
    assert result.returncode == 0, result.stderr[-3000:]
    console = result.stdout + result.stderr
    commands = [line[line.index("python -m "):] for line in console.splitlines() if "python -m " in line]
    assert len(commands) == 2, console[-3000:]
    for command in commands:
        assert len(command) <= MAX_COMMAND and "{" not in command, command
    jobs = re.findall(r"^Job \d+: (data_tiny task=\w+)$", console, flags=re.M)
    assert sorted(jobs) == ["data_tiny task=arith_tiny", "data_tiny task=countdown_tiny"], console[-3000:]
    assert re.search(r"^1 of 2 steps \(50%\) done, \d+s elapsed, about \d+s left$", console, flags=re.M), console
    assert re.search(r"^2 of 2 steps \(100%\) done, \d+s elapsed$", console, flags=re.M), console
