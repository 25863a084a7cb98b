"""The transfer-benchmark wrappers run the real libraries: lm-evaluation-harness on a tiny checkpoint and a
local multiple-choice task (no network), and the AlpacaEval output parsing."""

from __future__ import annotations

import json
import os

import pytest

from pipeline_lib.core.data.build import build_tiny, build_tokenizer
from pipeline_lib.core.model import build_model, save_model_atomic
from pipeline_lib.jobs.eval import harness

MODEL = {"hidden_size": 32, "intermediate_size": 64, "layers": 2, "heads": 2, "kv_heads": 1, "max_positions": 256}
TASK_YAML = """task: tiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("harness")
    tiny = {"n_train": 20, "n_test": 4, "imperfect_fraction": 0.0, "numbers_per_task": [3], "max_number": 9,
            "max_target": 100}
    build_tiny("arith_tiny", tiny, 0, None, root / "data")
    build_tokenizer([root / "data/sft_train.parquet"], 300, root / "tok")
    tokenizer = AutoTokenizer.from_pretrained(root / "tok")
    save_model_atomic(build_model(tokenizer, MODEL, 0), tokenizer, root / "final")
    return root


def test_lm_eval_runs_the_harness_on_our_checkpoint(checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    questions = [{"question": f"{a} + {b} =", "choices": [str(a + b), str(a + b + 1), str(a * b), "0"], "answer": 0}
                 for a, b in [(1, 2), (3, 4), (2, 2), (5, 1), (7, 2)]]
    data = tmp_path / "mc.jsonl"
    data.write_text("".join(json.dumps(q) + "\n" for q in questions))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "tiny_mc.yaml").write_text(TASK_YAML.format(data=data))
    spec = {"model": "hf", "model_args": {"dtype": "float32", "device": "cpu"}, "tasks": ["tiny_mc"],
            "include_path": str(tasks), "batch_size": 4, "num_fewshot": 0}
    out = tmp_path / "lm_eval.json"
    assert harness.main(["lm-eval", "--model", str(checkpoint / "final"), "--spec", json.dumps(spec),
                         "--seed", "3", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["harness"] == "lm-evaluation-harness" and result["version"] == "0.4.13"
    assert result["n_samples"]["tiny_mc"]["effective"] == 5 and result["seed"] == 3
    accuracy = result["results"]["tiny_mc"]["acc,none"]
    assert accuracy * 5 == pytest.approx(round(accuracy * 5))  # a fraction of the 5 questions
    assert os.path.exists(str(out) + ".prov.json")


def test_lm_eval_results_name_missing_tasks():
    raw = {"results": {"mmlu_stem": {"acc,none": 0.5, "alias": "stem"}}, "groups": {"mmlu": {"acc,none": 0.6}}}
    assert harness.lm_eval_results(raw, ["mmlu"]) == {"mmlu": {"acc,none": 0.6}}
    with pytest.raises(KeyError, match="gpqa_main_zeroshot"):
        harness.lm_eval_results(raw, ["mmlu", "gpqa_main_zeroshot"])


def test_alpaca_eval_needs_the_runs_method_when_no_generator_name_is_set(tmp_path, capsys):
    """The leaderboard's name is the run's method handed over by the rule (``--method``), never read off the model
    directory: without it and without ``generator_name`` the entry point stops before generating anything."""
    spec = json.dumps({"instructions": str(tmp_path / "missing.jsonl"), "generator_name": None})
    with pytest.raises(SystemExit) as stop:
        harness.main(["alpaca-eval", "--model", str(tmp_path / "final"), "--spec", spec,
                      "--out", str(tmp_path / "alpaca_eval.json")])
    assert stop.value.code == 2 and "--method is required" in capsys.readouterr().err
    assert not (tmp_path / "alpaca_eval.json").exists()
