"""The console of a run a person can follow (issue 36): short commands with no JSON on them, one line per finished job
with the progress, elapsed time and an estimate of the time left weighed by what each rule costs, errors in full;
the command-line contract defined once (pipeline_lib.core.cli)."""

from __future__ import annotations

import argparse
import json
import logging
import re

import pytest
from snakemake_interface_logger_plugins.common import LogEvent

from pipeline_lib.core.cli import add_run_arguments, file_args, json_file
from pipeline_lib.core.console import ConsoleFilter, benchmark_priors
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


def _record(event: str, **fields) -> logging.LogRecord:
    """A record as Snakemake's logger makes it: the message, and the event and its fields as ``extra``."""
    record = logging.LogRecord("snakemake.logging", logging.INFO, __file__, 0, fields.pop("msg", ""), (), None)
    record.__dict__.update(event=LogEvent(event), **fields)
    return record


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_estimate_weighs_the_jobs_left_by_what_their_rule_costs(tmp_path):
    """A made-up run through the real filter: 2 data jobs (10 s and 20 s, the second in parallel), 2 training jobs
    whose rule an earlier run's benchmarks say take 100 s, and `all`. The estimate is the work left (each rule's cost:
    its mean here, else its benchmarks' mean, else the mean of the jobs done) over the parallelism measured so far;
    a linear estimate would say 40 s left after the first job, not 220 s."""
    (tmp_path / "train_local").mkdir()
    for seed, seconds in ((0, 90.0), (1, 110.0)):
        (tmp_path / "train_local" / f"arith_tiny_seed{seed}.tsv").write_text(f"s\th:m:s\n{seconds}\t0:01:30\n")
    (tmp_path / "broken.tsv").write_text("no column s\n1\n")
    priors = benchmark_priors(tmp_path)
    assert priors == {"train_local": 100.0}
    clock = _Clock()
    console = ConsoleFilter(priors=priors, clock=clock)
    shown = []

    def log(event: str, **fields) -> None:
        record = _record(event, **fields)
        if console.filter(record):
            shown.append(record.msg)

    log("run_info", msg="Job stats: ...", stats={"data_tiny": 2, "train_local": 2, "all": 1, "total": 5})
    log("job_started", msg="Execute 2 jobs...", jobs=[1, 2])
    log("job_info", jobid=1, rule_name="data_tiny", wildcards={"task": "arith_tiny"}, reason="Missing output files")
    log("job_info", jobid=2, rule_name="data_tiny", wildcards={"task": "countdown_tiny"}, reason="Missing output")
    clock.now = 10.0
    log("job_finished", msg="Finished jobid: 1 (Rule: data_tiny)", job_id=1)
    log("progress", msg=None, done=1, total=5)
    # work left: data_tiny 1 x 10 s + train_local 2 x 100 s + all 1 x 10 s (mean so far) = 220 s; parallelism 1
    assert shown[-1] == "[1/5 00:10 ~03:40 left] data_tiny arith_tiny  10s"
    clock.now = 20.0
    log("job_finished", msg="Finished jobid: 2 (Rule: data_tiny)", job_id=2)
    log("progress", msg=None, done=2, total=5)
    # 2 x 100 s + 15 s = 215 s of work over a parallelism of (10 + 20) s / 20 s = 1.5: 143 s
    assert shown[-1] == "[2/5 00:20 ~02:23 left] data_tiny countdown_tiny  20s"
    log("job_started", msg="Execute 1 jobs...", jobs=[3])
    log("job_info", jobid=3, rule_name="train_local", wildcards={"task": "arith_tiny", "method": "grpo_exact",
                                                                "seed": 1}, reason="Missing output files")
    clock.now = 80.0
    log("job_finished", msg="Finished jobid: 3 (Rule: train_local)", job_id=3)
    log("progress", msg=None, done=3, total=5)
    # the rule's own 60 s now, not the prior, + `all` at the mean of the jobs done (30 s) = 90 s over a parallelism
    # of (10 + 20 + 60) s / 80 s = 1.125: 80 s
    assert shown[-1] == "[3/5 01:20 ~01:20 left] train_local arith_tiny/grpo_exact seed 1  01:00"
    assert len(shown) == 4  # the job table, then one line per finished job, nothing else
    log("job_error", msg="Error in rule train_local, jobid: 4", rule_name="train_local", log=["logs/x.log"])
    assert shown[-1] == "Error in rule train_local, jobid: 4"  # errors pass as Snakemake prints them


def test_a_dry_run_prints_one_line_per_planned_job_with_its_reason():
    console, shown = ConsoleFilter(), []
    for jobid, wildcards in ((5, {"task": "countdown_tiny", "seed": 0}), (6, {})):
        record = _record("job_info", jobid=jobid, rule_name="train_local_group" if wildcards else "paper_table1",
                         wildcards=wildcards, reason="Missing output files: " + "x" * 200)
        assert console.filter(record)
        shown.append(record.msg)
    assert shown[0] == f"Job 5: train_local_group countdown_tiny seed 0 (Missing output files: {'x' * 75}...)"
    assert shown[1].startswith("Job 6: paper_table1 (Missing")
    record = _record("job_info", jobid=7, rule_name="train_local", wildcards={"run": "arith_tiny/sft/seed2"}, reason="")
    assert console.filter(record) and record.msg == "Job 7: train_local arith_tiny/sft seed 2"


def test_a_failed_job_shows_its_log_path_and_error(tmp_path):
    """Snakemake's error block passes whole through the console: the rule, the log's path and, with
    ``show-failed-logs``, the log's text."""
    (tmp_path / "Snakefile").write_text(
        "from pipeline_lib.core.console import install\ninstall()\n\n"
        "rule boom:\n    output: 'out.txt'\n    log: 'logs/boom.log'\n"
        "    shell: 'echo the planted failure > {log}; exit 3'\n")
    result = snakemake(tmp_path, "--cores", "1", "--show-failed-logs")
    console = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Error in rule boom" in console and "logs/boom.log" in console, console[-3000:]
    assert "the planted failure" in console, console[-3000:]


def test_a_small_run_prints_one_short_line_per_job_and_progress_with_an_estimate(workflow_copy):
    """Two tiny data jobs, with their shell commands shown (``--printshellcmds``, off in profiles/default): each
    command is short and carries no JSON, and each finished job is one line saying the progress, the elapsed time,
    the estimate of the time left (while jobs are left), the rule, its run and how long it took."""
    targets = [f"results/data/{task}/manifest.json" for task in ("arith_tiny", "countdown_tiny")]
    result = snakemake(workflow_copy, *targets, "--cores", "1", "--printshellcmds")
    assert result.returncode == 0, result.stderr[-3000:]
    console = result.stdout + result.stderr
    commands = [line[line.index("python -m "):] for line in console.splitlines() if "python -m " in line]
    assert len(commands) == 2, console[-3000:]
    for command in commands:
        assert len(command) <= MAX_COMMAND and "{" not in command, command
    first = re.findall(r"^\[1/2 \d\d:\d\d ~\d\d:\d\d left\] data_tiny (\w+)  \d+s$", console, flags=re.M)
    last = re.findall(r"^\[2/2 \d\d:\d\d\] data_tiny (\w+)  \d+s$", console, flags=re.M)
    assert sorted(first + last) == ["arith_tiny", "countdown_tiny"], console[-3000:]
    assert "Finished jobid" not in console and "Job stats" in console, console[-3000:]
