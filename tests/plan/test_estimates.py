"""The plan's cost estimates on known shapes, hand-computed (pipeline_lib/plan/estimates.py)."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from pipeline_lib.core.config import ConfigError
from pipeline_lib.plan import plan_runs, validate_planned_config
from pipeline_lib.plan.estimates import (
    ARCHITECTURES,
    Lengths,
    _memory_gb,
    disk_needs,
    end_hours,
    estimate_run,
    estimates,
    expected_lengths,
    opd_teacher,
    packed_row,
    run_cost,
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
    # GSM8K GRPO: 64 prompts x M 8 x (1024 prompt cap + 100 expected response) tokens x 1000 steps; weight passes
    # 2 + 2 + 2 (beta > 0) + 8 x 1 epoch; attention: the rollout's causal 2 x L x H x (1124) per token, then the
    # packed forwards (old log-prob, reference, update x 4) at the packed row (4 micro-batch x 1124 tokens)
    run = _run(paper_plan, "gsm8k/grpo_exact/seed0")
    rl = run.spec.rl
    assert (rl.prompts_per_step, rl.group_size, rl.knobs.max_prompt_tokens, rl.max_response_tokens, rl.steps,
            rl.ppo_epochs, rl.knobs.micro_batch_per_gpu) == (64, 8, 1024, 256, 1000, 1, 4)
    assert rl.beta > 0
    tokens = 64 * 8 * 1124 * 1000
    weights = 14 * 1.54e9 * tokens
    attention = tokens * (2 * 28 * 1536 * 1124 + 6 * 4 * 28 * 1536 * (4 * 1124))
    est = estimate_run(run, site_defaults())
    assert est.gpus == 8 and est.wall_hours == pytest.approx((weights + attention) / 8 / 100e12 / 3600)
    assert est.gpu_hours == pytest.approx(est.wall_hours * 8)
    assert "paper" in est.lengths and "~100 tokens" in est.lengths
    # one attempt of 48 h; a save every floor(1 h / step hours) steps, rounded down to a divisor of probe_every (200)
    # so that verl's save interval, gcd(checkpoint_every, probe_every), is the planned one
    assert est.attempts == 1 and rl.probe_every == 200
    lost = int(1.0 / (est.wall_hours / 1000))
    assert est.checkpoint_every == max(d for d in range(1, lost + 1) if 200 % d == 0)


def test_attention_at_the_packed_row_is_about_twice_the_weights_on_meetingbank(paper_plan) -> None:
    """MeetingBank's packed rows (the token bound per GPU) make attention outweigh the weight FLOPs (translate.py)."""
    run = _run(paper_plan, "meetingbank/grpo_sim/seed0")
    arch = ARCHITECTURES[run.spec.model]
    est = estimate_run(run, site_defaults())
    lengths = expected_lengths(run.spec)
    assert (lengths.prompt, lengths.response) == (8192, 4096) and "caps" in lengths.source
    cost = run_cost(run.spec, arch, lengths, est.tokens_per_gpu)
    row = est.tokens_per_gpu  # 4 micro-batch x 12,288 tokens exceed the bound: the row is the bound
    assert row < 4 * 12_288 and packed_row(run.spec, lengths, row) == row
    per_token_forward = 4 * 28 * 1536 * row  # hand-computed: 4 x layers x hidden x row
    assert per_token_forward > 1.5 * 2 * 1.54e9  # about 2x the weights' 2 x params per forward at the packed row
    assert cost.attention > cost.weights


def test_opd_prices_the_teachers_pass_on_its_share_of_the_gpus(paper_plan) -> None:
    run = _run(paper_plan, "gsm8k/opd/seed0")
    teacher, teacher_per_node = opd_teacher(run.spec)
    assert teacher == ARCHITECTURES["Qwen/Qwen3-8B"] and teacher_per_node == 4
    lengths = expected_lengths(run.spec)
    rl = run.spec.rl
    tokens = rl.prompts_per_step * rl.group_size * (lengths.prompt + lengths.response) * rl.steps
    cost = run_cost(run.spec, ARCHITECTURES[run.spec.model], lengths, None, teacher)
    assert cost.teacher == pytest.approx(tokens * (2 * 8.19e9 + 2 * 36 * 4096 * (1024 + 100)))
    est = estimate_run(run, site_defaults())
    wall = (cost.weights + cost.attention) / (4 * 100e12 * 3600) + cost.teacher / (4 * 100e12 * 3600)
    assert est.wall_hours == pytest.approx(wall) and est.gpu_hours == pytest.approx(wall * 8)
    plain = estimate_run(_run(paper_plan, "gsm8k/grpo_exact/seed0"), site_defaults())
    assert est.gpu_hours > 2 * plain.gpu_hours  # not priced as GRPO


def test_the_end_is_budgeted_in_the_attempts(paper: dict, paper_plan) -> None:
    run = _run(paper_plan, "gsm8k/sft/seed0")
    lengths = expected_lengths(run.spec)
    assert end_hours(run.spec, ARCHITECTURES[run.spec.model], lengths, 10) == pytest.approx(
        10 * 1.54e9 / 0.5e9 / 3600)  # fp32 read, bf16 write, two hashes of final/ at 0.5 GB/s
    site = {**site_defaults(), "max_runtime_min": 60 * 2, "max_lost_hours": 0.5}
    est = estimate_run(run, site)
    usable = 2 - 0.25 - 0.5
    assert est.attempts == math.ceil((est.wall_hours + end_hours(run.spec, ARCHITECTURES[run.spec.model], lengths,
                                                                   site["rollout_dump_every"])) / usable)


def test_measured_lengths_replace_the_stated_ones_and_stop_at_the_caps(paper_plan) -> None:
    run = _run(paper_plan, "deepmath/grpo_exact/seed0")
    measured = {"deepmath": Lengths(300.0, 5000.0, "measured")}
    lengths = expected_lengths(run.spec, measured)
    assert (lengths.prompt, lengths.response, lengths.source) == (300.0, 1024, "measured")  # response cap 1,024
    slow, fast = estimate_run(run, site_defaults()), estimate_run(run, site_defaults(), measured)
    assert fast.gpu_hours < slow.gpu_hours


def test_calibrate_reads_verls_step_times_and_corrects_the_estimate(paper: dict, paper_plan, tmp_path) -> None:
    """Two runs logged steps (verl's file-logger records); the corrected estimate uses their median step time, and
    a run of the same task and kind not started yet is scaled by their ratio."""
    import json

    from pipeline_lib.plan.calibrate import calibrate

    site = site_defaults()
    measured = _run(paper_plan, "gsm8k/grpo_exact/seed0")
    planned = estimate_run(measured, site)
    step_s = planned.wall_hours / 1000 * 3600 * 3  # three times slower than estimated
    run_dir = tmp_path / "train" / measured.key
    run_dir.mkdir(parents=True)
    lines = [{"step": k, "data": {"timing_s/step": (500.0 if k <= 2 else step_s), "response_length/mean": 180.0}}
             for k in range(1, 8)]
    (run_dir / "verl_metrics.0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines[:4]) + "{torn")
    (run_dir / "verl_metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines[3:]))
    rows = {row["run"]: row for row in calibrate(paper, paper_plan, tmp_path, skip=2)}
    row = rows[measured.key]
    assert row["measured_step_s"] == pytest.approx(step_s, rel=1e-3) and row["logged_steps"] == 5
    assert row["corrected_gpu_hours"] == pytest.approx(planned.gpu_hours * 3, rel=1e-2)
    assert row["measured_response_tokens"] == 180.0 and row["basis"] == "measured"
    twin = rows["gsm8k/softmax_exact/seed0"]
    assert twin["basis"].startswith("scaled") and twin["corrected_gpu_hours"] == pytest.approx(
        twin["gpu_hours"] * 3, rel=1e-2)


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
    entries = {"pipeline_lib.jobs.engines.verl.train", "pipeline_lib.jobs.engines.verl.sft"}  # RL and SFT
    verl = [r for r in paper_plan.runs if r.entry_module in entries]
    assert {r.entry_module for r in verl} == entries
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
