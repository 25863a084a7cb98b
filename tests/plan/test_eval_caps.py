"""Evaluation at each task's training cap (issue 56 item 4): the authors validate at the length a task trains for
(App. B), so by default a task's evaluations, and with them the ablation's lengths (Table 5 "Len"), use its
``max_response_tokens``; one source, the task's RL settings, with a per-task override and a global number over it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline_lib.core.config import load_config_file, validate_config
from pipeline_lib.core.run_spec import PlanError
from pipeline_lib.paper.steps import eval_params
from pipeline_lib.plan.settings import engine_of, engine_settings, eval_max_new_tokens, eval_spec

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
APP_B = {"gsm8k": 256, "countdown": 256, "deepmath": 1024, "poetry": 1024, "meetingbank": 4096, "openthoughts": 6144}


def _config(name: str) -> dict:
    return validate_config(load_config_file(REPO / "config" / name), SCHEMA, base_dir=REPO)


def test_the_paper_plan_evaluates_each_task_at_its_training_cap():
    config = _config("paper.yaml")
    assert config["eval"]["max_new_tokens"] is None
    for task, cap in APP_B.items():
        trained = engine_settings(config, task, "rl", engine_of(config, task))["max_response_tokens"]
        assert eval_max_new_tokens(config, task) == trained == cap
        assert eval_spec(config, task)["max_new_tokens"] == cap
    # the rule's spec follows the wildcard's task
    spec = eval_params(config, "checkpoint")["spec"]
    assert json.loads(spec(SimpleNamespace(task="gsm8k")))["max_new_tokens"] == 256
    assert json.loads(spec(SimpleNamespace(task="openthoughts")))["max_new_tokens"] == 6144
    assert "task_max_new_tokens" not in eval_spec(config, "gsm8k")


def test_a_task_row_that_changes_the_training_cap_changes_the_evaluation_cap():
    config = copy.deepcopy(_config("paper.yaml"))
    config["train"]["task_settings"]["gsm8k"]["rl"]["max_response_tokens"] = 512
    assert eval_max_new_tokens(config, "gsm8k") == 512


def test_overrides_per_task_then_global():
    config = copy.deepcopy(_config("paper.yaml"))
    config["eval"]["max_new_tokens"] = 4096
    assert eval_max_new_tokens(config, "gsm8k") == 4096
    config["eval"]["task_max_new_tokens"] = {"gsm8k": 300}
    assert eval_max_new_tokens(config, "gsm8k") == 300 and eval_max_new_tokens(config, "deepmath") == 4096


def test_a_task_without_a_training_cap_is_named():
    config = copy.deepcopy(_config("paper.yaml"))
    config["train"]["rl"].pop("max_response_tokens")
    config["train"]["task_settings"]["gsm8k"]["rl"].pop("max_response_tokens")
    with pytest.raises(PlanError, match="task 'gsm8k' has no max_response_tokens"):
        eval_max_new_tokens(config, "gsm8k")


def test_the_tiny_default_keeps_its_cap_of_40():
    """The tiny default evaluated at 40 tokens, which is its training cap: the derived cap is the same 40."""
    config = _config("config.yaml")
    assert config["eval"]["max_new_tokens"] is None and config["train"]["rl"]["max_response_tokens"] == 40
    for task in ("countdown_tiny", "arith_tiny", "meeting_tiny"):
        assert eval_spec(config, task)["max_new_tokens"] == 40
    # the key keeps its place in the spec, so the JSON Snakemake compares is the one a configured 40 gave
    assert list(eval_spec(config, "countdown_tiny")) == [k for k in config["eval"]
                                                         if k not in ("transfer", "task_max_new_tokens", "probe")]
