"""``python -m pipeline_lib reruns`` on the paper plan and the tiny default (issue 58): an edit reruns the jobs whose
code it changes and no other. The jobs and their code come from the workflow's own DAG and ``code`` parameters
(:func:`pipeline_lib.plan.reruns.planned_jobs`), so these are the reruns Snakemake's params trigger would plan."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline_lib.plan.reruns import Job, changed_code, edited_since, planned_jobs, rerun_jobs
from tests.conftest import REPO, repo_env

ADVANTAGES = "pipeline_lib/core/rl/advantages.py"
VERL_LAUNCHER = "pipeline_lib/jobs/engines/verl/launch.py"  # RL's: SFT runs under torchrun on one node
VERL_RUNNER = "pipeline_lib/jobs/engines/verl/runner.py"  # what every verl run does, SFT and RL


@pytest.fixture(scope="module")
def paper() -> list[Job]:
    return planned_jobs([REPO / "config" / "paper.yaml"], root=REPO)


@pytest.fixture(scope="module")
def tiny() -> list[Job]:
    return planned_jobs([REPO / "config" / "config.yaml"], root=REPO)


def _rules(reruns: list[tuple[Job, list[str]]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job, _ in reruns:
        counts[job.rule] = counts.get(job.rule, 0) + 1
    return counts


def _kind(job: Job) -> str:
    """A training job's method directory (``gsm8k/sft/seed0`` -> ``sft``), from its ``run`` wildcard."""
    return job.name.removeprefix("run=").split("/")[1]


def _verl_sft(job: Job) -> bool:
    """A verl SFT run: SFT, or Rationalization's SFT on its rationales."""
    return job.rule == "train_verl" and _kind(job) in ("sft", "rationalization")


def test_the_paper_plan_has_its_verl_jobs_and_each_job_its_code(paper: list[Job]) -> None:
    verl = [job for job in paper if job.rule == "train_verl"]
    assert len(verl) >= 70 and all(VERL_RUNNER in job.files for job in verl)
    assert all((VERL_LAUNCHER in job.files) != _verl_sft(job) for job in verl)
    assert all(job.gpu_hours > 0 for job in verl) and sum(job.gpu_hours for job in verl) > 10_000
    assert all(job.files for job in paper)


@pytest.mark.parametrize("edited", [
    "pipeline_lib/jobs/engines/local/rl.py",  # the CPU engine
    "pipeline_lib/jobs/classify/train.py",  # the ImageNet classifier
    "pipeline_lib/core/data/imagenet.py",
    "pipeline_lib/plan/estimates.py",  # a cost estimate
    "pipeline_lib/plan/runs.py",
    "pipeline_lib/paper/tables.py",  # a paper table step
    "pipeline_lib/paper/results.py",
    "pipeline_lib/jobs/eval/evaluate.py",
])
def test_an_edit_outside_the_verl_jobs_code_reruns_no_verl_job(paper: list[Job], edited: str) -> None:
    assert (REPO / edited).is_file(), edited
    rules = _rules(rerun_jobs(paper, [edited]))
    assert "train_verl" not in rules, (edited, rules)


def test_an_edit_of_the_verl_launcher_reruns_every_verl_rl_job_and_nothing_else(paper: list[Job]) -> None:
    reruns = rerun_jobs(paper, [VERL_LAUNCHER])
    assert _rules(reruns) == {"train_verl": sum(job.rule == "train_verl" and not _verl_sft(job) for job in paper)}


def test_an_edit_of_the_shared_verl_steps_reruns_every_verl_job_and_nothing_else(paper: list[Job]) -> None:
    reruns = rerun_jobs(paper, [VERL_RUNNER])
    assert _rules(reruns) == {"train_verl": sum(job.rule == "train_verl" for job in paper)}


def test_a_comment_or_docstring_edit_of_the_advantages_reruns_nothing(paper: list[Job]) -> None:
    source = (REPO / ADVANTAGES).read_bytes()
    reworded = source.replace(b'"""', b'"""Reworded. ', 1).replace(b"\n\n", b"\n\n# a comment\n", 1)
    assert reworded != source
    assert changed_code({ADVANTAGES: (source, reworded)}) == []
    assert rerun_jobs(paper, changed_code({ADVANTAGES: (source, reworded)})) == []


def _arithmetic_edit(source: bytes) -> bytes:
    """A change of what the estimator computes: the first subtraction of its code (not of a docstring) made an
    addition."""
    import ast

    tree = ast.parse(source)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub))
    node.op = ast.Add()
    return ast.unparse(tree).encode()


def test_an_edit_of_the_advantage_arithmetic_reruns_every_rl_job_and_no_local_sft_job(tiny: list[Job]) -> None:
    source = (REPO / ADVANTAGES).read_bytes()
    edited = changed_code({ADVANTAGES: (source, _arithmetic_edit(source))})
    assert edited == [ADVANTAGES]
    reruns = {job for job, _ in rerun_jobs(tiny, edited)}
    group_rl = [job for job in tiny if job.rule in ("train_local_group", "train_ablation_group")]
    assert group_rl and set(group_rl) <= reruns
    trained = [job for job in reruns if job.rule == "train_local"]
    assert trained and not [job for job in trained if _kind(job) in ("sft", "rationalization", "base")], trained


def test_an_edit_of_the_advantage_arithmetic_reruns_every_verl_rl_job(paper: list[Job]) -> None:
    source = (REPO / ADVANTAGES).read_bytes()
    reruns = {job for job, _ in rerun_jobs(paper, changed_code({ADVANTAGES: (source, _arithmetic_edit(source))}))}
    rl = [job for job in paper if job.rule == "train_verl" and not _verl_sft(job)]
    assert rl and set(rl) <= reruns


def test_an_edit_of_the_advantage_arithmetic_reruns_no_verl_sft_job(paper: list[Job]) -> None:
    """verl SFT runs have their own entry point (verl/sft.py), whose code holds no RL code (issue 58)."""
    source = (REPO / ADVANTAGES).read_bytes()
    reruns = rerun_jobs(paper, changed_code({ADVANTAGES: (source, _arithmetic_edit(source))}))
    sft = [job for job in paper if _verl_sft(job)]
    assert sft and not [job for job, _ in reruns if _verl_sft(job)]


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                   capture_output=True)


def test_since_a_revision_counts_code_edits_and_sets_wording_edits_aside(tmp_path: Path) -> None:
    module = tmp_path / "pipeline_lib" / "m.py"
    module.parent.mkdir()
    module.write_text('def f(x):\n    """Doubles."""\n    return x * 2\n')
    (tmp_path / "notes.txt").write_text("a\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "start")
    module.write_text('def f(x):\n    """Doubles x, said better."""\n    # a comment\n    return x * 2\n')
    assert edited_since("HEAD", tmp_path) == ([], ["pipeline_lib/m.py"])
    module.write_text("def f(x):\n    return x * 3\n")
    (tmp_path / "new.py").write_text("X = 1\n")
    assert edited_since("HEAD", tmp_path) == (["new.py", "pipeline_lib/m.py"], [])


def test_the_command_says_no_verl_job_reruns_for_an_edit_of_the_cpu_trainer() -> None:
    result = subprocess.run([sys.executable, "-m", "pipeline_lib", "reruns", "--configfile", "config/paper.yaml",
                             "pipeline_lib/jobs/engines/local/rl.py"], cwd=REPO, env=repo_env(),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "train_verl" not in result.stdout and "edited code: 1 file" in result.stdout, result.stdout
    assert len(result.stdout.splitlines()) <= 40  # one screen
    launcher = subprocess.run([sys.executable, "-m", "pipeline_lib", "reruns", "--configfile", "config/paper.yaml",
                               "--json", VERL_LAUNCHER], cwd=REPO, env=repo_env(), capture_output=True, text=True,
                              timeout=600)
    assert launcher.returncode == 0, launcher.stderr[-3000:]
    rows = [json.loads(line) for line in launcher.stdout.splitlines()]
    assert rows and {row["rule"] for row in rows} == {"train_verl"} and all(row["files"] == [VERL_LAUNCHER]
                                                                           for row in rows)
