"""Configs the schema accepted that make no sense (issue 35, class 9): duplicated or unknown tasks, methods and seeds,
ranges no run can use, heads that do not divide, a tau or temperature that is 0 or infinite in float32, and plan
errors (a method the registry does not know) fail when the config is parsed, naming the key; ``python -m pipeline_lib
plan`` says so in one sentence (exit 2) and ``snakemake -n`` too. The cases are rows of docs/hostile_cases.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, repo_env


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
    "fewshot_task_not_run": (_tiny(eval={"transfer": {"lm_eval": {"num_fewshot": {"gpqa_main": 0}}}}),
                             "eval.transfer.lm_eval.num_fewshot", "task(s) ['gpqa_main'] are not in"),
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


def test_a_train_methods_entry_no_task_trains_is_checked_against_the_registry_too():
    """Each ``train.methods`` entry is checked once, before any run is built: one that contradicts its registry entry
    is refused even where the task rows leave it untrained (it was only checked when a run of it was built)."""
    from pipeline_lib.core.config import ConfigError
    from pipeline_lib.plan import validate_planned_config

    rows = {task: {"methods": ["grpo_exact", "softmax_exact"]} for task in ("countdown_tiny", "arith_tiny")}
    schema = REPO / "workflow/schemas/config.schema.yaml"
    validate_planned_config(_tiny(train={"task_settings": rows}), schema, base_dir=REPO)
    config = _tiny(train={"task_settings": rows, "methods": {"softmax_ess": {"reward": "similarity"}}})
    with pytest.raises(ConfigError, match=r"train\.methods\.softmax_ess\.reward is 'similarity' but the registry"):
        validate_planned_config(config, schema, base_dir=REPO)


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
