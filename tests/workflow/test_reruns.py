"""Reruns as small as the docs say (issue 36): on a workflow whose every output Snakemake recorded as made (touched,
no real run), an edit replans only the rules that use what changed. Each rule's params carry only the config keys its
step reads, and its code digest only the modules its step imports (pipeline_lib.paper.steps;
pipeline_lib.core.provenance)."""

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import touched_workflow

Snakemake = Callable[..., subprocess.CompletedProcess]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Snakemake]:
    root = tmp_path_factory.mktemp("made")
    return root, touched_workflow(root)


def _planned(snakemake: Snakemake, *args: str) -> tuple[dict[str, int], str]:
    """The jobs a dry run plans, by rule (the ``all`` target left out), and its whole output."""
    result = snakemake("-n", *args)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    stats = out.split("Job stats:", 1)[1] if "Job stats:" in out else ""
    jobs = {}
    for line in stats.splitlines()[3:]:
        match = re.fullmatch(r"(\w+)\s+(\d+)", line.strip())
        if match is None or match[1] == "total":
            break
        jobs[match[1]] = int(match[2])
    jobs.pop("all", None)
    return jobs, out


def _overlay(root: Path, text: str) -> tuple[str, ...]:
    """``--configfile config/config.yaml my.yaml``: the tiny default plus the keys of ``my.yaml``."""
    (root / "my.yaml").write_text(text)
    return "--configfile", "config/config.yaml", "my.yaml"


def test_made_workflow_is_up_to_date(made: tuple[Path, Snakemake]) -> None:
    root, snakemake = made
    assert _planned(snakemake)[0] == {}
    assert _planned(snakemake, *_overlay(root, "{}\n"))[0] == {}  # an empty overlay is the tiny default itself


def test_a_label_reruns_only_the_rule_drawing_it_and_the_reason_names_it(made: tuple[Path, Snakemake]) -> None:
    root, snakemake = made
    overlay = _overlay(root, 'imagenet:\n  label: "relabelled ImageNet analogue"\n')
    jobs, out = _planned(snakemake, *overlay)
    assert jobs == {"paper_imagenet": 1}
    # the parameter is the readable value itself: the reason shows it (the console keeps its start; --quiet off)
    assert "Params have changed" in out


def test_a_judge_label_rescores_nothing(made: tuple[Path, Snakemake]) -> None:
    root, snakemake = made
    jobs, _ = _planned(snakemake, *_overlay(root, 'judge:\n  second: {label: "overlap judge"}\n'))
    assert "judge_score" not in jobs and "judge_cross" not in jobs
    # the judge-validation table draws both judges' labels (the nonverifiable table only the primary's); the report
    # quotes that table (an input), so it is redrawn too
    assert jobs == {"paper_judge_validation": 1, "paper_reproduction_report": 1}


def test_a_plot_setting_reruns_only_its_figure(made: tuple[Path, Snakemake]) -> None:
    root, snakemake = made
    module = root / "pipeline_lib/paper/curves.py"
    source = module.read_text()
    assert "CURVE_WINDOW = " in source
    module.write_text(re.sub(r"CURVE_WINDOW = \d+", "CURVE_WINDOW = 11", source, count=1))
    try:
        jobs, _ = _planned(snakemake)
    finally:
        module.write_text(source)
    assert jobs == {"paper_training_curves": 1}


@pytest.mark.parametrize(("step", "key"), [("paper_imagenet", "imagenet.label"),
                                           ("paper_judge_validation", "judge.second.label")])
def test_the_audit_names_the_label_a_drawing_step_used(step: str, key: str) -> None:
    """A drawing step's sidecar records the labels it draws, so ``python -m pipeline_lib audit OUTPUT --configfile
    ...`` names the key that changed since (what Snakemake's dry run shows only as before/now values)."""
    from pipeline_lib.core.provenance import config_settings, step_sections
    from pipeline_lib.plan.table import load_config
    from tests.conftest import REPO

    config = load_config([REPO / "config/config.yaml"])
    relabelled = json.loads(json.dumps(config))
    section, name = key.rsplit(".", 1)
    node = relabelled
    for part in section.split("."):
        node = node[part]
    node[name] = "relabelled"
    before = config_settings(config, step_sections(step, "out", {}, config))
    now = config_settings(relabelled, step_sections(step, "out", {}, config))
    assert {k for k in before if before[k] != now[k]} == {key}


def test_a_training_runs_record_names_its_task_row_and_the_shared_blocks() -> None:
    """A training step's sidecar records the shared blocks and its own task's row (``train.task_settings.<task>``),
    not another task's: the audit names ``train.task_settings.gsm8k.rl.steps`` when the GSM8K row changed since."""
    from pipeline_lib.core.provenance import config_settings, step_sections
    from pipeline_lib.plan.table import load_config
    from tests.conftest import REPO

    config = load_config([REPO / "config/paper.yaml"])
    changed = json.loads(json.dumps(config))
    changed["train"]["task_settings"]["gsm8k"]["rl"]["steps"] += 1
    changed["train"]["task_settings"]["countdown"]["rl"]["steps"] += 1
    output = "results/train/gsm8k/grpo_exact/seed0/DONE.json"
    sections = step_sections("train_verl", output, {}, config)
    assert {"train.rl", "train.task_settings.gsm8k", "train.methods.grpo_exact"} <= set(sections)
    before, now = config_settings(config, sections), config_settings(changed, sections)
    assert {k for k in before if before[k] != now[k]} == {"train.task_settings.gsm8k.rl.steps"}
