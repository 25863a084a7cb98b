"""Snakemake reruns exactly the jobs whose code or rubric prompt changed: on a workflow whose every output Snakemake
recorded as made (``--touch`` over placeholder outputs, no real run), an edit to the judge, the RL trainer or a rubric
prompt (``config/prompts/*.txt``) plans the jobs that read it and nothing upstream. The cases are rows of
docs/hostile_cases.md."""

from __future__ import annotations

import pytest

from tests.conftest import _planned


def _planned_outputs(result) -> list[str]:
    """Output paths of every job of a dry run (one training rule runs every method, so rules alone say too little)."""
    return [path for line in result.stdout.splitlines() if line.strip().startswith("output:")
            for path in line.split(":", 1)[1].replace(",", " ").split()]


@pytest.mark.slow
def test_snakemake_reruns_exactly_the_jobs_whose_code_changed(tmp_path):
    """A results tree whose metadata Snakemake recorded (``--touch`` over placeholder outputs, no real run), then
    dry runs with the default rerun triggers after an edit to the judge and to the RL trainer."""
    from tests.conftest import touched_workflow

    snakemake = touched_workflow(tmp_path, full_console=True)
    assert _planned(snakemake("-n")) == set()

    judge = tmp_path / "pipeline_lib/jobs/judge/parse.py"
    original = judge.read_text()
    judge.write_text(original + "\n# a comment only: no code changed\n")
    assert _planned(snakemake("-n")) == set()  # the digest is the code's syntax tree: wording reruns nothing
    judge.write_text(original + "\n_A_CHANGE_TO_THE_JUDGE = 1\n")
    jobs = _planned(snakemake("-n"))
    assert "judge_score" in jobs and not any(job.startswith(("train_", "data_", "eval_")) for job in jobs), jobs
    judge.write_text(original)
    assert _planned(snakemake("-n")) == set()

    trainer = tmp_path / "pipeline_lib/jobs/engines/local/rl.py"
    trainer.write_text(trainer.read_text() + "\n_A_CHANGE_TO_THE_RL_TRAINER = 1\n")
    result = snakemake("-n")
    jobs, outputs = _planned(result), _planned_outputs(result)
    assert {"train_local", "train_local_group", "eval_checkpoints_countdown_tiny_seed0", "judge_score",
            "paper_table1"} <= jobs, jobs
    assert not jobs & {"data_tiny", "data_tokenizer", "paper_theory"}, jobs
    trained = {path.split("/")[3] for path in outputs if path.startswith("results/train/")}
    assert {"grpo_exact", "softmax_exact", "softmax_tau0p1_m4"} <= trained, trained
    assert not trained & {"sft", "base", "opd_teacher"}, trained


@pytest.mark.slow
def test_editing_a_rubric_prompt_plans_the_judge_again_and_nothing_upstream(tmp_path):
    """As the code-change test above: placeholder outputs whose metadata Snakemake recorded
    (``--touch``), then a dry run after an edit to the judge's rubric prompt."""
    from tests.conftest import _planned, touched_workflow

    snakemake = touched_workflow(tmp_path)
    assert _planned(snakemake("-n")) == set()

    prompt = tmp_path / "config/prompts/meetingbank.txt"
    prompt.write_text(prompt.read_text() + "\nBe lenient.\n")
    jobs = _planned(snakemake("-n"))
    assert "judge_score" in jobs and not any(job.startswith(("train_", "data_", "eval_")) for job in jobs), jobs


@pytest.mark.slow
def test_on_the_paper_plan_an_edit_of_the_cpu_trainer_plans_no_job_and_one_of_the_verl_runner_every_verl_job(tmp_path):
    """The paper plan's outputs recorded as made (``--touch``): Snakemake itself plans what ``python -m pipeline_lib
    reruns`` says (issue 58): nothing for a code edit of the CPU trainer or a comment in the advantage estimators,
    every ``train_verl`` job for an edit of the steps every verl run shares (``verl/runner.py``; the launcher is RL's
    only)."""
    import json

    from pipeline_lib.plan.hub import hub_repos, lock_key
    from pipeline_lib.plan.runs import plan_runs
    from pipeline_lib.plan.table import load_config
    from tests.conftest import REPO, touched_workflow

    paper = ("--configfile", "config/paper.yaml")
    config = load_config([REPO / "config" / "paper.yaml"])
    lock = {"repos": {lock_key(repo): "0" * 40 for repo in hub_repos(config, plan_runs(config))}}  # a run needs pins
    snakemake = touched_workflow(tmp_path, full_console=True, args=paper,
                                 files={"config/hub.lock.json": json.dumps(lock)})
    assert _planned(snakemake("-n", *paper)) == set()
    trainer = tmp_path / "pipeline_lib/jobs/engines/local/rl.py"
    trainer.write_text(trainer.read_text() + "\n_A_CHANGE_TO_THE_CPU_TRAINER = 1\n")
    advantages = tmp_path / "pipeline_lib/core/rl/advantages.py"
    advantages.write_text("# a comment only\n" + advantages.read_text())
    assert _planned(snakemake("-n", *paper)) == set()
    runner = tmp_path / "pipeline_lib/jobs/engines/verl/runner.py"
    runner.write_text(runner.read_text() + "\n_A_CHANGE_TO_THE_SHARED_VERL_STEPS = 1\n")
    result = snakemake("-n", *paper)
    outputs = [path for path in _planned_outputs(result) if path.endswith("DONE.json")]
    jobs = _planned(result)  # the verl runs, and what reads them (Iterative DPO starts from verl's SFT)
    assert "train_verl" in jobs and not jobs & {"train_imagenet", "data_build", "data_imagenet", "paper_theory"}, jobs
    assert len({path for path in outputs if not path.startswith("results/train/imagenet")}) >= 70, outputs
