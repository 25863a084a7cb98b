"""Table 3's pass-rate probe in the plan: which runs keep policies and are probed, with what, and what Table 3's data
step reads. The paper plan probes GSM8K and Countdown (Table 3's tasks; Countdown's prompts are never revisited), the
paired runs only (GRPO-Exact and SoftmaxGRPO-Exact), sampling as the run sampled its rollouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline_lib.core.config import load_config_file, validate_config
from pipeline_lib.core.run_spec import PlanError
from pipeline_lib.paper.steps import paper_steps
from pipeline_lib.plan import plan_runs
from pipeline_lib.plan.settings import probe_spec
from pipeline_lib.plan.targets import (
    paired_requests,
    probe_inputs,
    probe_output,
    probe_start_model,
    probed_runs,
    stage_targets,
)

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def _config(name: str) -> dict:
    return validate_config(load_config_file(REPO / "config" / name), SCHEMA, base_dir=REPO)


def test_the_paper_plan_probes_the_paired_runs_of_gsm8k_and_countdown():
    config = _config("paper.yaml")
    plan = plan_runs(config)
    probed = probed_runs(plan)
    assert sorted(run.key for run in probed) == sorted(
        f"{task}/{method}/seed{seed}" for task in ("gsm8k", "countdown") for method in ("grpo_exact", "softmax_exact")
        for seed in config["train"]["seeds"])
    paired = {r.path for r in paired_requests(plan)}
    assert all(f"results/train/{run.key}/DONE.json" in paired for run in probed)
    for run in probed:
        spec = probe_spec(config, run.spec)
        every = {"gsm8k": 200, "countdown": 500}[run.task]
        assert spec["probe_every"] == every and run.spec.rl.probe_steps() == list(range(every, run.spec.rl.steps,
                                                                                          every))
        assert spec["samples"] == 16 and spec["groups"] == 512
        generation = spec["generation"]
        assert generation["backend"] == "vllm"
        assert generation["max_new_tokens"] == 256 == run.spec.rl.max_response_tokens
        assert generation["temperature"] == run.spec.rl.temperature == 1.0 and generation["top_p"] == 1.0
        # RL from the base model (train.rl_start: base): the first window is the hub model, read after fetch
        inputs = probe_inputs(plan, run.key)
        assert inputs["data"] == run.inputs["data"]
        assert probe_start_model(plan, run.key) == (str(Path(inputs["init"][0]).parent / "final") if inputs["init"]
                                                    else run.spec.model)
    # every other RL run of those tasks keeps policies too (a task's rl row), but only the pair is probed
    kept = [run for run in plan.runs if run.task == "countdown" and run.spec.rl is not None
            and run.spec.rl.probe_every is not None]
    assert len(kept) > len([run for run in probed if run.task == "countdown"])
    assert not [run for run in plan.runs if run.task == "deepmath" and run.spec.rl is not None
                and run.spec.rl.probe_every is not None]


def test_table_3_reads_each_probe_beside_its_run():
    config = _config("paper.yaml")
    plan = plan_runs(config)
    steps = paper_steps(config, plan, stage_targets(config, plan)["paper"])
    step = next(s for s in steps if s.name == "paper_gradient_allocation_data")
    probes = json.loads(step.params["probes"])
    assert probes == {f"results/train/{run.key}/rollouts.jsonl": probe_output(run) for run in probed_runs(plan)}
    assert sorted(step.inputs["probes"]) == sorted(probes.values())
    assert set(probes) <= set(json.loads(step.params["runs"]))


def test_a_run_that_keeps_no_policy_has_no_probe():
    config = _config("paper.yaml")
    plan = plan_runs(config)
    deepmath = next(run for run in plan.runs if run.task == "deepmath" and run.name == "softmax_exact")
    with pytest.raises(PlanError, match=r"no train\.rl\.probe_every"):
        probe_spec(config, deepmath.spec)
    with pytest.raises(PlanError, match="not a paired RL run that keeps policies"):
        probe_inputs(plan, deepmath.key)


def test_the_tiny_default_probes_its_paired_runs_every_group():
    config = _config("config.yaml")
    plan = plan_runs(config)
    probed = probed_runs(plan)
    assert len(probed) == len(config["train"]["tasks"]) * 2 * len(config["train"]["seeds"])
    spec = probe_spec(config, probed[0].spec)
    assert spec["groups"] is None and spec["samples"] == 16 and spec["probe_every"] == 10
    assert spec["generation"]["backend"] == "hf"
