"""Names that become paths or commands, ranges and lists that may not be empty (issue 45): scale models,
methods, tasks, rubrics, hub ids, lm-eval tasks and tracking projects that are not safe names, ``clip_low`` or
``holdout_fraction`` out of range and empty method or task lists are refused at parse time naming the key, and
``snakemake -n`` plans nothing; the shipped configs stay valid. The cases are rows of docs/hostile_cases.md."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from pipeline_lib.core.config import ConfigError, validate_config
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
    config["eval"]["transfer"]["lm_eval"]["num_fewshot"] = {"gpqa_main_zeroshot": 0}  # no count for a task not run
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
