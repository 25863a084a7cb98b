"""The plan's cost estimates on known shapes, hand-computed (pipeline_lib/plan/estimates.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from pipeline_lib.core.config import ConfigError
from pipeline_lib.plan import plan_runs, validate_planned_config
from pipeline_lib.plan.estimates import (
    ARCHITECTURES,
    _memory_gb,
    disk_needs,
    estimate_run,
    estimates,
    site_defaults,
)
from pipeline_lib.plan.table import load_config

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture(scope="module")
def paper() -> dict:
    return load_config([REPO / "config" / "paper.yaml"], SCHEMA)


@pytest.fixture(scope="module")
def paper_plan(paper: dict):
    return plan_runs(paper)


def _run(plan, key: str):
    return next(r for r in plan.runs if r.job == "train_verl" and r.key == key)


def test_gsm8k_rl_hours_by_hand(paper_plan) -> None:
    # GSM8K GRPO: 64 prompts x M 8 x (1024 + 256) tokens x 1000 steps; passes 2 + 2 + 2 (beta > 0) + 8 x 1 epoch
    run = _run(paper_plan, "gsm8k/grpo_exact/seed0")
    rl = run.spec.rl
    assert (rl.prompts_per_step, rl.group_size, rl.knobs.max_prompt_tokens, rl.max_response_tokens, rl.steps,
            rl.ppo_epochs) == (64, 8, 1024, 256, 1000, 1)
    passes = 14 if rl.beta > 0 else 12
    flops = passes * 1.54e9 * 64 * 8 * 1280 * 1000
    est = estimate_run(run, site_defaults())
    assert est.gpu_hours == pytest.approx(flops / 100e12 / 3600)
    assert est.gpus == 8 and est.wall_hours == pytest.approx(est.gpu_hours / 8)
    # one attempt of 48 h; a save every floor(1 h / step hours) steps
    assert est.attempts == 1
    assert est.checkpoint_every == int(1.0 / (est.wall_hours / 1000))


def test_memory_by_hand() -> None:
    arch = ARCHITECTURES["Qwen/Qwen2.5-1.5B"]
    tokens = 4 * 12_288
    states = 16 * 1.54e9 / 16 + 2 * 1.54e9 / 16
    acts = tokens * 28 * 1536 * 2 + tokens * (10 * 1536 + 3 * 8960) * 2
    logits = 12 * tokens * 151_936
    assert _memory_gb(arch, 16, tokens, True, 0.5, 80) == pytest.approx((states + acts + logits) / 1e9)
    # a short micro-batch: vLLM's share (0.5 x 80 GB) and the sharded states dominate
    assert _memory_gb(arch, 16, 1024, True, 0.5, 80) == pytest.approx(40 + 16 * 1.54e9 / 16 / 1e9)


def test_long_context_runs_bounded_by_tokens(paper: dict, paper_plan) -> None:
    found = estimates(paper, paper_plan)
    bounded = sorted(key for (job, key), e in found.items() if e.tokens_per_gpu is not None)
    assert bounded and all(key.startswith("meetingbank/") for key in bounded)
    run = _run(paper_plan, "meetingbank/grpo_sim/seed0")
    cap = found["train_verl", run.key].tokens_per_gpu
    assert 12_288 <= cap < 4 * 12_288
    assert f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={cap}" in run.spec.extra_overrides
    assert run.spec.to_json() in run.args  # the command carries the fitted spec
    assert all(e.memory_gb is None or e.memory_gb <= 80 for e in found.values())
    assert not _run(paper_plan, "gsm8k/grpo_exact/seed0").spec.extra_overrides or not any(
        "dynamic_bsz" in o for o in _run(paper_plan, "gsm8k/grpo_exact/seed0").spec.extra_overrides)


def test_refuses_a_job_over_gpu_memory(paper: dict) -> None:
    config = copy.deepcopy(paper)
    config["site"]["gpu_memory_gb"] = 24  # MeetingBank: 12,288-token sequences, whose logits alone take ~22 GB
    with pytest.raises(ConfigError, match=r"site.gpu_memory_gb \(24 GB.*meetingbank/sft/seed0 \d+\.\d GB"):
        validate_planned_config(config, SCHEMA)


def test_disk_needs(paper: dict, paper_plan) -> None:
    needs = disk_needs(paper, paper_plan)
    assert set(needs) == {"results", "scratch"} and needs["scratch"] > needs["results"] > 0
    one = estimate_run(_run(paper_plan, "gsm8k/sft/seed0"), site_defaults())
    assert one.scratch_gb == pytest.approx(2 * 12 * 1.54) and one.results_gb == pytest.approx(2 * 1.54)


def test_tiny_default_unchanged() -> None:
    config = load_config([REPO / "config" / "config.yaml"], SCHEMA)
    plan = plan_runs(config)
    assert estimates(config, plan) == {} and disk_needs(config, plan) == {"results": 0, "scratch": 0}


def test_verl_jobs_get_the_site_scratch(paper: dict, paper_plan) -> None:
    """Every verl training job's command carries site.scratch_root/<run> and site.rollout_dump_every; no other job's."""
    verl = [r for r in paper_plan.runs if r.entry_module == "pipeline_lib.jobs.engines.verl.train"]
    assert verl
    for run in verl:
        args = list(run.args)
        assert args[args.index("--scratch-dir") + 1] == f"results/scratch/{run.key}"
        assert args[args.index("--dump-every") + 1] == str(site_defaults()["rollout_dump_every"])
    assert not any("--scratch-dir" in r.args for r in paper_plan.runs if r not in verl)
    site = copy.deepcopy(paper)
    site["site"] = {**paper.get("site", {}), "scratch_root": "/scratch/me/", "rollout_dump_every": 3}
    run = next(r for r in plan_runs(site).runs if r.key == verl[0].key and r.job == verl[0].job)
    assert run.args[-4:] == ("--scratch-dir", f"/scratch/me/{run.key}", "--dump-every", "3")
    assert run.spec == verl[0].spec  # the spec (and so verl's overrides) does not name the scratch


def test_tiny_default_commands_unchanged() -> None:
    plan = plan_runs(load_config([REPO / "config" / "config.yaml"], SCHEMA))
    assert not any("--scratch-dir" in r.args or "--dump-every" in r.args for r in plan.runs)
