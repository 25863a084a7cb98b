"""Hostile cases, round three (issue 35, classes 4, 5, 9, 10): scores that were not accuracies, runs that diverged
and exited 0, configs the schema accepted that made no sense, and data files whose duplicates the last one won. Each
gets a correct number or a sentence naming the key, file, line or step. The table is docs/hostile_cases.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, repo_env, rl_spec, sft_spec

# --- class 5: a diverged run stops non-zero naming the step ---------------------------------------------------------

def test_an_rl_run_whose_loss_turns_nan_stops_naming_the_step_and_writes_no_final_model(tiny, tmp_path):
    """tau 1e-300 is 0 in float32: R / tau is NaN, so every weight would be NaN after step 1 (was: DONE.json)."""
    from pipeline_lib.jobs.engines.local import rl as rl_module
    from pipeline_lib.jobs.engines.local.common import DivergedError

    spec = rl_spec(params={"tau": 1e-300}, steps=2)
    with pytest.raises(DivergedError, match=r"step 1 diverged: loss nan"):
        rl_module.train_rl(spec, tiny / "data/rl_train.parquet", tiny / "init", tmp_path, 0, progress=False)
    assert not (tmp_path / "DONE.json").exists() and not (tmp_path / "final").exists()


def test_an_sft_run_whose_weights_overflow_stops_naming_the_step(tiny, tmp_path):
    from pipeline_lib.jobs.engines.local import sft as sft_module
    from pipeline_lib.jobs.engines.local.common import DivergedError

    with pytest.raises(DivergedError, match=r"SFT .*: step \d+ diverged"):
        sft_module.train_sft(sft_spec(lr=1e30, warmup_steps=0), tiny / "data/sft_train.parquet", tiny / "tok",
                             tmp_path, 0, progress=False)
    assert not (tmp_path / "DONE.json").exists() and not (tmp_path / "final").exists()


# --- class 10: data files whose duplicates used to be resolved silently -----------------------------------------------

@pytest.mark.parametrize("name, text, says", [
    ("train.csv", "question,final_answer,final_answer\nWhat?,1,2\n",
     r"train\.csv, line 1: the header names column\(s\) \['final_answer'\] more than once"),
    ("train.jsonl", '{"question": "What?", "final_answer": "1"}\n{"question": "Why?", "final_answer": "1", '
                    '"final_answer": "2"}\n', r"train\.jsonl, line 2: key 'final_answer' appears twice"),
    ("train.json", '[{"question": "What?", "final_answer": "1", "question": "Why?"}]',
     r"train\.json: key 'question' appears twice"),
    ("train.csv", "question,final_answer\n", r"train\.csv: split 'train' has no rows"),
    ("train.jsonl", "", r"train\.jsonl: split 'train' has no rows"),
    ("train.jsonl", "\n\n", r"train\.jsonl: split 'train' has no rows"),
], ids=["csv_duplicate_header", "jsonl_duplicate_key", "json_duplicate_key", "csv_header_only", "empty_jsonl",
        "blank_jsonl"])
def test_duplicate_columns_and_empty_files_are_errors_naming_file_and_line(tmp_path, name, text, says):
    from pipeline_lib.core.data.schema import DataError
    from pipeline_lib.core.data.sources import SourceSpec, load_split

    (tmp_path / name).write_text(text)
    with pytest.raises(DataError, match=says) as excinfo:
        load_split("deepmath", SourceSpec(hub="x", local=str(tmp_path / name)), "train", ("question", "final_answer"))
    assert "_line" not in str(excinfo.value)


# --- class 9: every semantic constraint of the config checked at parse time, naming the key -------------------------

def _tiny(**sections):
    """The tiny default with ``sections`` merged in (``train={"seeds": [0, 0]}``)."""
    from pipeline_lib.core.config import merge_config
    from tests.conftest import _tiny_config

    return merge_config(_tiny_config(), sections)


SEMANTIC_MISTAKES = {  # name: (config, key the error names, what it says)
    "duplicate_seeds": (_tiny(train={"seeds": [0, 0, 1]}), "train.seeds", "has non-unique elements"),
    "duplicate_ablation_taus": (_tiny(train={"ablation": {"taus": [0.1, 0.1, 1.0]}}), "train.ablation.taus",
                                "has non-unique elements"),
    "duplicate_judge_methods": (_tiny(judge={"methods": ["sft", "sft"]}), "judge.methods", "non-unique"),
    "duplicate_tasks": (_tiny(train={"tasks": ["arith_tiny", "arith_tiny"]}), "train.tasks", "non-unique"),
    "unknown_train_task": (_tiny(train={"tasks": ["countdown_tiny", "arith_tny"]}), "train.tasks",
                           "unknown task(s) ['arith_tny']"),
    "unknown_ablation_task": (_tiny(train={"ablation": {"tasks": ["cntdown"]}}), "train.ablation.tasks",
                              "unknown task(s) ['cntdown']"),
    "unknown_transfer_task": (_tiny(eval={"transfer": {"task": "openthought"}}), "eval.transfer.task",
                              "unknown task(s) ['openthought']"),
    "unknown_judge_task": (_tiny(judge={"tasks": ["meeting_tny"]}), "judge.tasks", "unknown task(s) ['meeting_tny']"),
    "unknown_baseline_task": (_tiny(train={"baselines": {"raro": {"tasks": ["gsm8"]}}}),
                              "train.baselines.raro.tasks", "unknown task(s) ['gsm8']"),
    "unknown_judge_method": (_tiny(judge={"methods": ["sft", "grpo_simm"]}), "judge.methods",
                             "unknown method(s) ['grpo_simm']"),
    "unknown_scale_method": (_tiny(train={"scale": {"methods": ["softmax_exct"]}}), "train.scale.methods",
                             "unknown method(s) ['softmax_exct']"),
    "judge_seed_not_trained": (_tiny(judge={"seeds": [7]}), "judge.seeds", "[7] are not train.seeds"),
    "max_prompts_negative": (_tiny(eval={"max_prompts": -5}), "eval.max_prompts", "less than the minimum of 1"),
    "max_prompts_zero": (_tiny(eval={"max_prompts": 0}), "eval.max_prompts", "less than the minimum of 1"),
    "pass_k_beyond_samples": (_tiny(eval={"pass_k": [16]}), "eval.pass_k", "[16] exceed eval.samples = 4"),
    "alpaca_limit_zero": (_tiny(eval={"transfer": {"alpaca_eval": {"limit": 0}}}), "eval.transfer.alpaca_eval.limit",
                          "less than the minimum of 1"),
    "kv_heads_not_dividing": (_tiny(train={"model": {"heads": 4, "kv_heads": 3}}), "train.model.kv_heads",
                              "3 does not divide train.model.heads = 4"),
    "odd_head_width": (_tiny(train={"model": {"hidden_size": 132, "heads": 4, "kv_heads": 2}}), "train.model.heads",
                       "must be a whole, even head width"),
    "scale_model_heads": (_tiny(train={"scale": {"tasks": ["countdown_tiny"],
                                                 "models": {"big": {"label": "Big", "model": {"kv_heads": 3}}}}}),
                          "train.scale.models.big.model.kv_heads", "does not divide"),
    "tau_zero_in_float32": (_tiny(train={"methods": {"softmax_exact": {"tau": 1e-300}}}),
                            "train.methods.softmax_exact.tau", "below float32's smallest normal number"),
    "ablation_tau_zero_in_float32": (_tiny(train={"ablation": {"taus": [1e-39, 1.0]}}), "train.ablation.taus.0",
                                     "below float32's smallest normal number"),
    "imagenet_tau_inf_in_float32": (_tiny(imagenet={"tau": 1e39}), "imagenet.tau", "beyond float32's range"),
    "sampling_temperature_zero_in_float32": (_tiny(eval={"temperature": 1e-300}), "eval.temperature",
                                             "below float32's smallest normal number"),
}


@pytest.mark.parametrize("name", sorted(SEMANTIC_MISTAKES))
def test_configs_the_schema_accepted_that_make_no_sense_fail_at_parse_time_naming_the_key(name):
    from pipeline_lib.core.config import ConfigError, validate_config

    config, key, says = SEMANTIC_MISTAKES[name]
    with pytest.raises(ConfigError) as excinfo:
        validate_config(json.loads(json.dumps(config)), REPO / "workflow/schemas/config.schema.yaml", base_dir=REPO)
    line = next((line for line in str(excinfo.value).splitlines() if f"'{key}'" in line), "")
    assert says in line, str(excinfo.value)


def test_the_methods_a_study_may_name_besides_trained_ones_come_from_the_caller():
    """core cannot read the registry: the plan passes its start and model before training (``untrained``), and a
    study naming a method outside them, ``train.methods`` and the baselines is refused, naming what it may be."""
    from pipeline_lib.core.config import ConfigError, validate_config

    schema = REPO / "workflow/schemas/config.schema.yaml"
    validate_config(_tiny(judge={"methods": ["sft"]}), schema, base_dir=REPO)  # the default: base and sft
    with pytest.raises(ConfigError, match=r"'judge.methods': unknown method\(s\) \['sft'\]; each is base, a train"):
        validate_config(_tiny(judge={"methods": ["sft"]}), schema, base_dir=REPO, untrained=("base",))


def test_a_plan_error_is_found_when_the_config_is_parsed():
    """A method the registry does not know passed the schema and failed in the first rule that planned."""
    from pipeline_lib.core.config import ConfigError
    from pipeline_lib.plan import validate_planned_config

    config = _tiny(train={"methods": {"softmax_exact": {"advantage": "grpo"}}})
    with pytest.raises(ConfigError, match=r"train\.methods\.softmax_exact\.advantage is 'grpo' but the registry"):
        validate_planned_config(config, REPO / "workflow/schemas/config.schema.yaml", base_dir=REPO)


@pytest.mark.parametrize("overlay, says", [
    ("train: {tasks: [countdown_tiny, arith_tny]}\n", "key 'train.tasks': unknown task(s) ['arith_tny']"),
    ("train: {model: {heads: 4, kv_heads: 3}}\n", "key 'train.model.kv_heads'"),
    ("train: {methods: {my_method: {advantage: grpo, reward: verifier}}}\n", "method 'my_method' is not registered"),
], ids=["unknown_task", "kv_heads", "plan_error"])
def test_plan_on_a_config_that_makes_no_sense_prints_a_sentence_and_exits_2(tmp_path, overlay, says):
    (tmp_path / "overlay.yaml").write_text(overlay)
    result = subprocess.run([sys.executable, "-m", "pipeline_lib", "plan", "--configfile", "config/config.yaml",
                             str(tmp_path / "overlay.yaml")], cwd=REPO, capture_output=True, text=True, timeout=120,
                            env=repo_env())
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("python -m pipeline_lib plan: ") and says in result.stderr, result.stderr


def test_the_plan_commands_error_path_catches_plan_errors_too(monkeypatch, capsys):
    """An estimator check (import-time torch, so only where the workflow plans) raises PlanError after the parse."""
    from pipeline_lib.core.run_spec import PlanError
    from pipeline_lib.plan import table

    def refuse(config, *args, **kwargs):
        raise PlanError("softmax_exact: the estimator refused tau")

    monkeypatch.setattr(table, "plan_runs", refuse)
    assert table.main(["--configfile", str(REPO / "config/config.yaml")]) == 2
    assert capsys.readouterr().err == "python -m pipeline_lib plan: softmax_exact: the estimator refused tau\n"


def test_snakemake_refuses_an_unknown_task_naming_the_key(workflow_copy):
    (workflow_copy / "typo.yaml").write_text("train: {tasks: [countdown_tiny, arith_tny]}\n")
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", "config/config.yaml",
                             "typo.yaml"], cwd=workflow_copy, capture_output=True, text=True, timeout=300,
                            env=repo_env())
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "key 'train.tasks': unknown task(s) ['arith_tny']" in output, output[-3000:]
    assert "MissingInputException" not in output


# --- class 4: accuracy and pass@k are the verifier's, whatever reward training used ---------------------------------

class _AlwaysRight:
    """A model whose every answer is right: it answers each prompt with the task's own worked solution (the
    generation backend is the only thing replaced; the data, the scorers and the metrics are the real ones)."""

    def __init__(self, frame):
        self.answers = {p[0]["content"]: info["reference"] for p, info in zip(frame["prompt"], frame["extra_info"],
                                                                               strict=True)}

    def generate(self, prompts, *, samples, greedy):
        from pipeline_lib.jobs.eval.backends import Generation

        return [[Generation(self.answers[p[0]["content"]], 9)] * samples for p in prompts]


@pytest.mark.parametrize("weights", [None, {"math": 1.0}, {"math": 0.5}, {"math": 3.0}, {"math": 1.0, "format": 1.0}],
                         ids=["default", "default_spelled_out", "half", "triple", "plus_format"])
def test_an_always_right_model_scores_accuracy_one_whatever_the_reward_weights(tmp_path, monkeypatch, weights):
    import contextlib

    import pandas as pd

    from pipeline_lib.core.data.build import build_tiny
    from pipeline_lib.core.rewards import score
    from pipeline_lib.jobs.eval import evaluate as evaluate_module

    spec = {"n_train": 8, "n_test": 6, "n_val": 0, "imperfect_fraction": 0.0, "numbers_per_task": [3],
            "max_number": 9, "max_target": 100}
    build_tiny("arith_tiny", spec, 0, weights, tmp_path / "data")
    frame = pd.read_parquet(tmp_path / "data/rl_test.parquet")
    monkeypatch.setattr(evaluate_module, "open_backend",
                        lambda *args, **kwargs: contextlib.nullcontext(_AlwaysRight(frame)))
    metrics, generations = evaluate_module.evaluate(
        tmp_path, tmp_path / "data/rl_test.parquet", {"samples": 4, "pass_k": [1, 4], "max_new_tokens": 8}, 0)
    assert metrics["pass@1_greedy"] == metrics["pass@1_sampled"] == metrics["pass@1"] == metrics["pass@4"] == 1.0
    assert metrics["score_kind"] == "verifier" and all(g["score"] == 1.0 for g in generations)
    if weights in (None, {"math": 1.0}):  # training's reward is the verifier: nothing else reported, as before
        assert "reward_mean_greedy" not in metrics and all("reward" not in g for g in generations)
    else:  # the weighted training reward, under its own name
        expected = [sum(w * score(name, info["reference"], truth["ground_truth"])["score"]
                        for name, w in weights.items()) for info, truth in zip(frame["extra_info"],
                                                                               frame["reward_model"], strict=True)]
        assert metrics["reward_mean_greedy"] == pytest.approx(sum(expected) / len(expected))
        assert metrics["reward_mean_sampled"] == pytest.approx(sum(expected) / len(expected))
        assert "extra_info reward_weights" in metrics["reward_kind"]


def test_an_evaluation_asked_for_pass_at_k_beyond_its_samples_says_so(tmp_path, monkeypatch):
    import contextlib

    import pandas as pd

    from pipeline_lib.core.data.build import build_tiny
    from pipeline_lib.jobs.eval import evaluate as evaluate_module

    build_tiny("arith_tiny", {"n_train": 8, "n_test": 3, "n_val": 0, "imperfect_fraction": 0.0,
                              "numbers_per_task": [3], "max_number": 9, "max_target": 100}, 0, None, tmp_path / "data")
    frame = pd.read_parquet(tmp_path / "data/rl_test.parquet")
    monkeypatch.setattr(evaluate_module, "open_backend",
                        lambda *args, **kwargs: contextlib.nullcontext(_AlwaysRight(frame)))
    for spec, says in (({"samples": 4, "pass_k": [16]}, "pass@16 needs at least 16 samples"),
                       ({"samples": 4, "pass_k": [4], "max_prompts": 0}, "max_prompts 0: a number of prompts >= 1"),
                       ({"samples": 4, "pass_k": [4], "max_prompts": -5}, "max_prompts -5")):
        with pytest.raises(ValueError, match=says):
            evaluate_module.evaluate(tmp_path, tmp_path / "data/rl_test.parquet", spec | {"max_new_tokens": 8}, 0)


@pytest.mark.parametrize("weights", [{"math": 0.5}, {"math": 1.0, "format": 1.0}], ids=["half", "plus_format"])
def test_training_logs_a_right_answer_as_correct_whatever_the_reward_weights(tmp_path, weights):
    """The local trainers' pass rate (and iterative DPO's validation accuracy) is the verifier's correctness too."""
    import pandas as pd

    from pipeline_lib.core.data.build import build_tiny
    from pipeline_lib.core.rewards import score
    from pipeline_lib.jobs.engines.local.rl import rollout_rewards

    build_tiny("arith_tiny", {"n_train": 8, "n_test": 4, "n_val": 0, "imperfect_fraction": 0.0,
                              "numbers_per_task": [3], "max_number": 9, "max_target": 100}, 0, weights,
               tmp_path / "data")
    frame = pd.read_parquet(tmp_path / "data/rl_test.parquet")
    rows, right = list(range(len(frame))), [info["reference"] for info in frame["extra_info"]]
    rewards, correct = rollout_rewards(frame, rows, right, None)
    trained = [sum(w * score(name, text, truth["ground_truth"])["score"] for name, w in weights.items())
               for text, truth in zip(right, frame["reward_model"], strict=True)]
    assert correct.tolist() == [1.0] * len(rows) and rewards.tolist() == pytest.approx(trained)  # trained on weights
    verifier_rewards, verifier_correct = rollout_rewards(frame, rows, right, None, verifier=True)
    assert verifier_rewards.tolist() == verifier_correct.tolist() == [1.0] * len(rows)
    wrong = rollout_rewards(frame, rows, ["The answer is \\boxed{-1}."] * len(rows), None)[1]
    assert wrong.tolist() == [0.0] * len(rows)
