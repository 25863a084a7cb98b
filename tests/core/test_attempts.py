"""Retries that fit the failure (pipeline_lib/core/attempts.py): after a time limit as often as the rule allows, after
any other failure once; with Snakemake 9's own `retries` and `attempt` (the local executor: the Slurm executor
plugin evaluates the same resources per attempt before it submits)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline_lib.core.attempts import ATTEMPT_ENV, RetryRefusedError, guard_attempt, refusal
from tests.conftest import REPO


def _job(run_dir: Path, actions: str, attempt: int) -> int:
    env = os.environ | {ATTEMPT_ENV: str(attempt), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "tests.attempt_job", str(run_dir), actions], env=env,
                          cwd=REPO, capture_output=True, timeout=60).returncode


def _ends(run_dir: Path) -> list[str]:
    return [a["end"] for a in json.loads((run_dir / "attempts.json").read_text())["attempts"]]


def test_time_limits_resubmit_but_a_failure_only_once_more(tmp_path):
    cut = tmp_path / "cut"
    cut.mkdir()
    codes = [_job(cut, "timeout,timeout,sigkill,timeout,ok", k) for k in range(1, 6)]
    assert codes[:4] == [-15, -15, -9, -15] and codes[4] == 0 and (cut / "DONE.json").is_file()
    assert _ends(cut) == ["terminated", "terminated", "killed", "terminated", "ok"]
    broken = tmp_path / "broken"
    broken.mkdir()
    codes = [_job(broken, "fail", k) for k in range(1, 5)]
    assert all(code != 0 for code in codes)
    assert (broken / "bodies.txt").read_text().split() == ["1", "2"]  # attempts 3 and 4 never started
    assert _ends(broken) == ["failed", "failed", "refused", "refused"]
    assert _job(broken, "ok", 1) == 0  # started again by hand (attempt 1): a new series


def test_a_time_limit_after_a_failure_still_resumes_and_the_refusal_names_the_failures(tmp_path):
    assert refusal([{"attempt": 1, "end": "failed", "why": "x"}, {"attempt": 2, "end": "terminated"}]) is None
    why = refusal([{"attempt": 1, "end": "failed", "why": "OOM"}, {"attempt": 3, "end": "failed", "why": "NCCL"}])
    assert "attempt 1: OOM" in why and "attempt 3: NCCL" in why
    for attempt in (1, 2):
        with pytest.raises(ValueError), guard_attempt(tmp_path, attempt):
            raise ValueError("bad input row 7")
    with pytest.raises(RetryRefusedError, match="bad input row 7"), guard_attempt(tmp_path, 3):
        pytest.fail("a refused attempt ran its body")
    with guard_attempt(tmp_path, None):  # no Snakemake attempt (by hand, tests): no record, no refusal
        pass


SNAKEFILE = """
rule job:
    output: "{run}/DONE.json"
    resources: attempt=lambda wildcards, attempt: attempt
    retries: 5
    shell: "SOFTMAXGRPO_ATTEMPT={resources.attempt} python -m tests.attempt_job {wildcards.run} ACTIONS"
"""


@pytest.mark.parametrize(("actions", "bodies", "ok"), [("timeout,timeout,timeout,ok", 4, True), ("fail", 2, False),
                                                       ("fail,timeout,ok", 3, True)])
def test_snakemakes_retries_reach_the_job_as_its_attempt(tmp_path, actions, bodies, ok):
    (tmp_path / "Snakefile").write_text(textwrap.dedent(SNAKEFILE).replace("ACTIONS", actions))
    (tmp_path / "run").mkdir()
    done = subprocess.run([sys.executable, "-m", "snakemake", "-c1", "run/DONE.json", "--retries", "5"],
                          cwd=tmp_path, env=os.environ | {"PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300)
    assert (done.returncode == 0) == ok, done.stderr[-2000:]
    assert len((tmp_path / "run" / "bodies.txt").read_text().split()) == bodies
    if not ok:
        assert _ends(tmp_path / "run") == ["failed", "failed", "refused", "refused", "refused", "refused"]
