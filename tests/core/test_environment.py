"""Environment variables: every one the pipeline reads goes through ``pipeline_lib.core.env`` and a bad value is an
error naming it (issue "Nothing silent, round two": ``PIPELINE_MATH_TIMEOUT=nan`` removed the verifier's limit)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline_lib.core.env import VARIABLES, EnvironmentVariableError, env, env_number

PACKAGE = Path(__file__).resolve().parents[2] / "pipeline_lib"
READ = re.compile(r"os\.environ\.get\(|os\.getenv\(|os\.environ\[|environ\.get\(")

GOOD = {"HF_HOME": "/shared/hf", "HF_ENDPOINT": "http://127.0.0.1:9000",
        "OPENAI_BASE_URL": "http://127.0.0.1:8000/v1", "SLURM_JOB_ID": "123456", "SLURM_JOB_PARTITION": "gpu,debug",
        "SLURM_JOB_NODELIST": "node[01-04],gpu-7", "SLURMD_NODENAME": "node01", "CUDA_VISIBLE_DEVICES": "0,1",
        "RAY_ADDRESS": "10.0.0.1:6379", "PIPELINE_CONFIG_SHA256": "a" * 64,
        "PIPELINE_REWARD_HEALTH_DIR": "/scratch/run/reward_health", "PIPELINE_HUB_LOCK": "/repo/config/hub.lock.json",
        "SLURM_PROCID": "0", "SLURM_NTASKS": "16",
        "SLURM_LOCALID": "7", "SOFTMAXGRPO_ATTEMPT": "2", "USER": "jdoe", "WANDB_ENTITY": "my-team",
        "MLFLOW_TRACKING_URI": "sqlite:////tmp/mlruns.db", "SWANLAB_LOG_DIR": "swanlog", "SWANLAB_MODE": "offline",
        "PIPELINE_VERL_CPU": "1", "DIST_INIT_METHOD": "tcp://127.0.0.1:29500",
        "PIPELINE_VERL_CPU_SYNC_LOG": "/tmp/grpo_weight_syncs.jsonl", "PIPELINE_VERL_CPU_SKIP_SYNC": "1",
        "PIPELINE_CONFIG_FILE": ".snakemake/pipeline/config-0a1b.json", "PIPELINE_CONSOLE": "full"}
BAD = {"HF_HOME": "\n/shared/hf", "HF_ENDPOINT": "127.0.0.1:9000",
       "OPENAI_BASE_URL": "127.0.0.1:8000/v1", "SLURM_JOB_ID": "12 34", "SLURM_JOB_PARTITION": "gpu\n",
       "SLURM_JOB_NODELIST": "node01; rm -rf /", "SLURMD_NODENAME": "../etc", "CUDA_VISIBLE_DEVICES": "0;1",
       "RAY_ADDRESS": "10.0.0.1", "PIPELINE_CONFIG_SHA256": "not-a-digest", "PIPELINE_REWARD_HEALTH_DIR": "\n/tmp",
       "PIPELINE_HUB_LOCK": "\n/repo/hub.lock.json", "SLURM_PROCID": "-1", "SLURM_NTASKS": "16 ",
       "SLURM_LOCALID": "x", "SOFTMAXGRPO_ATTEMPT": "0", "USER": "j doe",
       "WANDB_ENTITY": "my team", "MLFLOW_TRACKING_URI": "two words", "SWANLAB_LOG_DIR": "\tlogs",
       "SWANLAB_MODE": "online!", "PIPELINE_VERL_CPU": "yes", "DIST_INIT_METHOD": "tcp:// host",
       "PIPELINE_VERL_CPU_SYNC_LOG": " /tmp/leading-space", "PIPELINE_VERL_CPU_SKIP_SYNC": "yes",
       "PIPELINE_CONFIG_FILE": "\n/tmp/config.json", "PIPELINE_CONSOLE": "verbose"}


def test_no_module_reads_an_environment_variable_around_the_checks():
    readers = [f"{path.relative_to(PACKAGE.parent)}:{number}" for path in PACKAGE.rglob("*.py")
               if path.name != "env.py"
               for number, line in enumerate(path.read_text().splitlines(), 1) if READ.search(line)]
    assert readers == [], "read these through pipeline_lib.core.env (env, env_number, env_text)"


@pytest.mark.parametrize("name", sorted(VARIABLES))
def test_each_variable_is_checked_and_named(monkeypatch, name):
    assert set(GOOD) == set(BAD) == set(VARIABLES)
    monkeypatch.setenv(name, GOOD[name])
    assert env(name) == GOOD[name]
    monkeypatch.setenv(name, BAD[name])
    with pytest.raises(EnvironmentVariableError, match=name):
        env(name)
    monkeypatch.setenv(name, "")
    assert env(name) is None


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "abc", "1e400"])
def test_numbers_must_be_finite_and_positive(monkeypatch, value):
    monkeypatch.setenv("PIPELINE_TEST_NUMBER", value)
    with pytest.raises(EnvironmentVariableError, match="PIPELINE_TEST_NUMBER"):
        env_number("PIPELINE_TEST_NUMBER", 5.0)
    monkeypatch.setenv("PIPELINE_TEST_NUMBER", "2.5")
    assert env_number("PIPELINE_TEST_NUMBER", 5.0) == 2.5
    with pytest.raises(EnvironmentVariableError, match="not an integer"):
        env_number("PIPELINE_TEST_NUMBER", 5, integer=True)


def test_a_bad_slurm_job_id_is_named_where_the_launcher_reads_it(monkeypatch):
    from pipeline_lib.jobs.engines.verl.launch import allocation_per_node

    monkeypatch.setenv("SLURM_JOB_ID", "$(reboot)")
    with pytest.raises(EnvironmentVariableError, match="SLURM_JOB_ID"):
        allocation_per_node()
