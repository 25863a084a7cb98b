"""Issue 45 items 7 and 9: names that become paths or commands, ranges, non-empty lists and split sizes are refused
at parse time (or at the data build, where the data size is first known) naming the key; CSV cells a spreadsheet
would run as formulas are neutralised and read back as written."""

from __future__ import annotations

import copy
import subprocess
import sys

import pandas as pd
import pytest

from pipeline_lib.core.config import ConfigError, validate_config
from pipeline_lib.core.io import from_spreadsheet_cell, read_csv_frame, spreadsheet_cell, write_csv_frame
from tests.conftest import REPO, _tiny_config, repo_env

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
NAME = r"^[a-z0-9][a-z0-9_]*$"


def _scale(models: dict) -> dict:
    return {"tasks": ["countdown_tiny"], "seeds": [0], "methods": ["softmax_exact"], "label": "main", "models": models}


@pytest.mark.parametrize("edit, key, says", [
    # names that become a path segment, a wildcard value or a command argument
    (lambda c: c["train"].update(scale=_scale({"m; touch x": {"label": "x"}})), "train.scale.models", "'m; touch x'"),
    (lambda c: c["train"].update(scale=_scale({"../../..": {"label": "x"}})), "train.scale.models", "'../../..'"),
    (lambda c: c["train"].update(scale=_scale({"big": {"label": "x", "hub": "../../etc"}})),
     "train.scale.models.big.hub", "'../../etc'"),
    (lambda c: c["train"].update(scale=_scale({"big": {"label": "x", "hub": "/abs/model"}})),
     "train.scale.models.big.hub", "'/abs/model'"),
    (lambda c: c["train"]["methods"].update({"a b": {"advantage": "grpo", "reward": "verifier"}}), "train.methods",
     "'a b'"),
    (lambda c: c["train"]["methods"].update({"$(id)": {"advantage": "grpo", "reward": "verifier"}}), "train.methods",
     "'$(id)'"),
    (lambda c: c["train"].update(tasks=["countdown_tiny", "../x"]), "train.tasks.1", "'../x'"),
    (lambda c: c["judge"].update(methods=["sft", "x/../y"]), "judge.methods.1", "'x/../y'"),
    (lambda c: c["judge"].update(tasks=["meeting tiny"]), "judge.tasks.0", "'meeting tiny'"),
    (lambda c: c["judge"].setdefault("rubrics", {}).update({"..": "poetry"}), "judge.rubrics", "'..'"),
    (lambda c: c["train"].setdefault("task_settings", {}).update({"a;b": {}}), "train.task_settings", "'a;b'"),
    (lambda c: c["train"]["ablation"].update(tasks=["x*"]), "train.ablation.tasks.0", "'x*'"),
    (lambda c: c["train"]["baselines"]["base"].update(tasks=["`x`"]), "train.baselines.base.tasks.0", "'`x`'"),
    (lambda c: c["eval"]["transfer"].update(task="../x"), "eval.transfer.task", "'../x'"),
    (lambda c: c["eval"]["transfer"]["lm_eval"].update(tasks=["mmlu --x"]), "eval.transfer.lm_eval.tasks.0",
     "'mmlu --x'"),
    (lambda c: c.setdefault("tracking", {}).update(project="p; rm"), "tracking.project", "'p; rm'"),
    (lambda c: c["data"].setdefault("datasets", {}).update(
        deepmath={"sources": {"main": {"hub": "a/../../b", "local": None}}}),
     "data.datasets.deepmath.sources.main.hub", "'a/../../b'"),
    # ranges
    (lambda c: c["train"].setdefault("rl", {}).update(clip_low=1.5), "train.rl.clip_low", "maximum of 1"),
    (lambda c: c["train"].setdefault("rl", {}).update(clip_low=1.0), "train.rl.clip_low", "maximum of 1"),
    (lambda c: c["train"].setdefault("task_settings", {}).setdefault("countdown_tiny", {}).update(rl={"clip_low": 2}),
     "train.task_settings.countdown_tiny.rl.clip_low", "maximum of 1"),
    (lambda c: c["data"].setdefault("datasets", {}).update(deepmath={"holdout_fraction": 1.0}), "data.datasets.deepmath"
     ".holdout_fraction", "maximum of 1"),
    # non-empty method and task lists
    (lambda c: c["train"].update(methods={}), "train.methods", "should be non-empty"),
    (lambda c: c["train"].update(tasks=[]), "train.tasks", "should be non-empty"),
    (lambda c: c["data"].setdefault("tiny", {}).update(tasks=[]), "data.tiny.tasks", "should be non-empty"),
    (lambda c: c["train"].setdefault("task_settings", {}).setdefault("countdown_tiny", {}).update(methods=[]),
     "train.task_settings.countdown_tiny.methods", "should be non-empty"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_unsafe_names_ranges_and_empty_lists_are_refused_naming_the_key(tmp_path, edit, key, says):
    config = _tiny_config()
    edit(config)
    with pytest.raises(ConfigError) as excinfo:
        validate_config(config, SCHEMA, base_dir=tmp_path)
    line = next((line for line in str(excinfo.value).splitlines() if f"key '{key}'" in line), "")
    assert says in line, str(excinfo.value)


def test_the_shipped_configs_stay_valid(tmp_path):
    import yaml

    for name in ("config", "paper", "preflight"):
        validated = validate_config(yaml.safe_load((REPO / f"config/{name}.yaml").read_text()) or {}, SCHEMA,
                                    base_dir=REPO)
        assert validated["train"]["methods"] and validated["train"]["tasks"], name
    config = _tiny_config()
    config["train"]["scale"] = _scale({"qwen25_3b": {"label": "Qwen2.5-3B", "hub": "Qwen/Qwen2.5-3B"}})
    config["eval"]["transfer"]["lm_eval"]["tasks"] = ["gpqa_main_zeroshot", "leaderboard-bbh.v2"]
    validated = validate_config(copy.deepcopy(config), SCHEMA, base_dir=tmp_path)
    assert validated["eval"]["transfer"]["lm_eval"]["tasks"] == ["gpqa_main_zeroshot", "leaderboard-bbh.v2"]
    assert "qwen25_3b" in str(validated["train"]["scale"])


def test_snakemake_dry_run_refuses_a_hostile_scale_model_name_before_planning(workflow_copy):
    (workflow_copy / "bad.yaml").write_text(
        "label: test\ntrain: {scale: {tasks: [countdown_tiny], seeds: [0], methods: [softmax_exact], label: main,"
        " models: {'m; touch x': {label: x}}}, rl: {clip_low: 1.5}}\n")
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", "bad.yaml"], cwd=workflow_copy,
                            capture_output=True, text=True, timeout=300, env=repo_env())
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "key 'train.scale.models': 'm; touch x' does not match" in output, output[-3000:]
    assert "key 'train.rl.clip_low'" in output
    assert "Job stats" not in result.stdout and not (workflow_copy / "x").exists()


@pytest.mark.parametrize("split, size", [("n_val", 5000), ("n_test", 5000), ("n_train", 5000)])
def test_split_sizes_beyond_the_tasks_distinct_prompts_are_an_error_naming_the_key(split, size):
    """countdown_tiny with 3 numbers up to 4 has a few hundred distinct prompts: asking for more once looped forever."""
    from pipeline_lib.core.data.tiny import generate_task

    spec = {"n_train": 10, "n_test": 10, "n_val": 0, "imperfect_fraction": 0.0, "numbers_per_task": [3],
            "max_number": 4, "max_target": 100, split: size}
    with pytest.raises(ValueError, match=rf"data\.tiny\.{split}: countdown_tiny has only about \d+ distinct prompts"):
        generate_task("countdown_tiny", spec, 0)
    ok = {**spec, split: 10}
    assert len(generate_task("countdown_tiny", ok, 0)["rl_test"]) == 10


FORMULAS = ["=1+1", "+1+1", "-2+3+cmd|' /C calc'!A0", "@SUM(A1)", "\tx", "\rx", "'=quoted already", "'plain quote"]


def test_spreadsheet_cells_are_neutralised_and_read_back_as_written(tmp_path):
    for text in FORMULAS:
        assert spreadsheet_cell(text) == "'" + text and from_spreadsheet_cell(spreadsheet_cell(text)) == text
    for text in ("-3", "+1.5e-2", "--", "plain", "", "a=b"):  # numbers and ordinary text are left alone
        assert spreadsheet_cell(text) == text == from_spreadsheet_cell(text)
    frame = pd.DataFrame({"label": [*FORMULAS, "GRPO"], "value": [-1.5] * 9, "=col": [True] * 9})
    write_csv_frame(frame, tmp_path / "t.csv")
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0] == "label,value,'=col" and lines[1] == "'=1+1,-1.5,True"
    plain = pd.DataFrame({"label": ["GRPO", "--", "-", "-3"], "value": [-1.5, 2.0, 3.0, 4.0]})  # no formula cell:
    write_csv_frame(plain, tmp_path / "plain.csv")  # byte for byte as pandas writes it
    assert (tmp_path / "plain.csv").read_text() == plain.to_csv(index=False)
    back = read_csv_frame(tmp_path / "t.csv")
    assert back["label"].tolist() == frame["label"].tolist() and back.columns.tolist() == frame.columns.tolist()
