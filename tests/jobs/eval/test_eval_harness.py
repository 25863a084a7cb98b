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


def test_lm_eval_runs_the_harness_on_our_checkpoint_with_per_task_fewshot(checkpoint, tmp_path, monkeypatch):
    """Two tasks with different few-shot counts run as two harness calls (the authors' MMLU 5-shot and GPQA 0-shot
    commands); the harness's own record of each task's shots is what was asked."""
    import importlib.metadata

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    questions = [{"question": f"{a} + {b} =", "choices": [str(a + b), str(a + b + 1), str(a * b), "0"], "answer": 0}
                 for a, b in [(1, 2), (3, 4), (2, 2), (5, 1), (7, 2)]]
    data = tmp_path / "mc.jsonl"
    data.write_text("".join(json.dumps(q) + "\n" for q in questions))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "tiny_mc.yaml").write_text(TASK_YAML.format(data=data))
    shots = TASK_YAML.format(data=data).replace("task: tiny_mc", "task: tiny_mc_shots") + "fewshot_split: test\n"
    (tasks / "tiny_mc_shots.yaml").write_text(shots)
    spec = {"model": "hf", "model_args": {"dtype": "float32", "device": "cpu"}, "tasks": ["tiny_mc", "tiny_mc_shots"],
            "include_path": str(tasks), "batch_size": 4, "num_fewshot": {"tiny_mc": 0, "tiny_mc_shots": 2}}
    out = tmp_path / "lm_eval.json"
    assert harness.main(["lm-eval", "--model", str(checkpoint / "final"), "--spec", json.dumps(spec),
                         "--seed", "3", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["harness"] == "lm-evaluation-harness" and result["version"] == importlib.metadata.version("lm_eval")
    assert result["num_fewshot"] == {"tiny_mc": 0, "tiny_mc_shots": 2} == result["n_shot"]
    assert result["n_samples"]["tiny_mc"]["effective"] == 5 and result["seed"] == 3
    for task in ("tiny_mc", "tiny_mc_shots"):
        accuracy = result["results"][task]["acc,none"]
        assert accuracy * 5 == pytest.approx(round(accuracy * 5))  # a fraction of the 5 questions
    assert os.path.exists(str(out) + ".prov.json")


def test_fewshot_groups_follow_the_per_task_counts():
    assert harness.fewshot_groups(["mmlu", "gpqa_main_zeroshot", "arc"], {"mmlu": 5, "gpqa_main_zeroshot": 0}) == [
        (5, ["mmlu"]), (0, ["gpqa_main_zeroshot"]), (None, ["arc"])]
    assert harness.fewshot_groups(["a", "b"], {"a": 5, "b": 5}) == [(5, ["a", "b"])]
    with pytest.raises(ValueError, match=r"num_fewshot names task\(s\) \['gpqa_main'\]"):
        harness.fewshot_groups(["mmlu"], {"mmlu": 5, "gpqa_main": 0})


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


def test_alpaca_eval_generates_as_the_authors_and_judges_the_final_text(tmp_path, monkeypatch):
    """Their system prompt, 6,144 new tokens in a 16,384-token context, greedy; the annotator sees each answer cut to
    its final text (the thinking trace never reaches it); the length-controlled win rate is read back."""
    import contextlib
    import importlib.metadata

    import pandas as pd

    from pipeline_lib.jobs.eval.backends import Generation

    version = importlib.metadata.version  # alpaca_eval is installed in the eval env only
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.6.6" if name == "alpaca_eval" else version(name))

    seen: dict = {}

    class Backend:
        def generate(self, prompts, *, samples, greedy):
            seen.update(prompts=prompts, samples=samples, greedy=greedy)
            return [[Generation("<think>let me see</think>\n\nParis.<|im_end|>", 9)],
                    [Generation("<think>a</think><answer>Blue</answer>", 7)], [Generation("No tags at all.", 4)]]

    @contextlib.contextmanager
    def fake_open(model_dir, spec, seed, work_dir):
        seen["spec"] = spec
        yield Backend()

    def fake_alpaca(command, check):
        seen["command"] = command
        folder = tmp_path / "weighted_alpaca_eval_gpt4_turbo"
        folder.mkdir()
        pd.DataFrame({"length_controlled_winrate": [12.5], "win_rate": [10.0], "avg_length": [8.0]},
                     index=pd.Index(["softmax_sim"], name="name")).to_csv(folder / "leaderboard.csv")

    monkeypatch.setattr(harness, "open_backend", fake_open)
    monkeypatch.setattr(harness.subprocess, "run", fake_alpaca)
    instructions = tmp_path / "alpaca.json"
    instructions.write_text(json.dumps([{"instruction": q, "dataset": "helpful_base"}
                                        for q in ("Capital of France?", "Sky colour?", "Say hi.")]))
    spec = {"instructions": str(instructions), "annotators_config": "weighted_alpaca_eval_gpt4_turbo",
            "system_prompt": "You are a helpful assistant. Put your reasoning in <think> </think> tags, followed by "
                             "your final answer.", "max_new_tokens": 6144, "max_model_len": 16384, "limit": None,
            "generator_name": None}
    eval_spec = {"backend": "vllm", "max_new_tokens": None, "temperature": 1.0,
                 "vllm": {"max_model_len": 4096, "dtype": "bfloat16"}}
    result = harness.alpaca_eval(tmp_path / "final", spec, eval_spec, 0, tmp_path, "softmax_sim")
    assert seen["prompts"][0] == [{"role": "system", "content": spec["system_prompt"]},
                                  {"role": "user", "content": "Capital of France?"}]
    assert seen["samples"] == 1 and seen["greedy"] is True
    assert seen["spec"]["max_new_tokens"] == 6144 and seen["spec"]["vllm"] == {"max_model_len": 16384,
                                                                                "dtype": "bfloat16"}
    judged = json.loads((tmp_path / "model_outputs.json").read_text())
    assert [row["output"] for row in judged] == ["Paris.", "Blue", "No tags at all."]
    assert {row["generator"] for row in judged} == {"softmax_sim"}
    assert "--annotators_config=weighted_alpaca_eval_gpt4_turbo" in seen["command"]
    assert result["results"]["length_controlled_winrate"] == 12.5
    assert json.loads((tmp_path / "raw_outputs.json").read_text())[1] == "<think>a</think><answer>Blue</answer>"
