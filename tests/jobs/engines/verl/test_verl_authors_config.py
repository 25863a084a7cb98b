"""config/paper.yaml's verl runs against the authors' own configs (jeffhernandez1995/softmaxgrpo, commit 088c87c).

The authors' values below are transcribed from ``softmaxgrpo/configs/base.yaml`` merged with each task's file (the
record of what produced the paper's numbers). Every key they set is either what our translate generates (or, where
we set nothing, verl 0.9.1's default), or a difference listed in ``DIFFERENCES`` with its reason, which
``config/README.md`` also records. One run's generated overrides per task are pinned in
``tests/fixtures/verl_overrides/`` so that any drift shows; regenerate them with ``PIN_VERL_OVERRIDES=1``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from pipeline_lib.jobs.engines.verl.translate import TrainPaths, rl_overrides
from pipeline_lib.plan import trained_methods
from pipeline_lib.plan.settings import group_rl_spec
from tests.jobs.engines.conftest import paper_config

REPO = Path(__file__).resolve().parents[4]
PINNED = REPO / "tests/fixtures/verl_overrides"
VERL_DEFAULTS = Path(__import__("verl").__file__).parent / "trainer/config/_generated_ppo_trainer.yaml"

_BASE = {
    "algorithm.use_kl_in_reward": False,
    "data.filter_overlong_prompts": True, "data.truncation": "error", "data.seed": 42,
    "data.train_max_samples": -1,  # every training prompt (verl's default; ours: train.rl.prompt_pool null)
    "actor_rollout_ref.model.use_remove_padding": True, "actor_rollout_ref.model.enable_gradient_checkpointing": True,
    "actor_rollout_ref.actor.strategy": "fsdp", "actor_rollout_ref.actor.ppo_epochs": 1,
    "actor_rollout_ref.actor.clip_ratio_low": 0.2, "actor_rollout_ref.actor.clip_ratio_high": 0.28,
    "actor_rollout_ref.actor.clip_ratio_c": 1.0e9, "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
    "actor_rollout_ref.actor.entropy_coeff": 0.0, "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.actor.kl_loss_coef": 0.001, "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.actor.optim.lr": 1.0e-6, "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": 0.0,
    "actor_rollout_ref.actor.fsdp_config.param_offload": False,
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": False,
    "actor_rollout_ref.ref.fsdp_config.param_offload": True,
    "actor_rollout_ref.rollout.name": "vllm", "actor_rollout_ref.rollout.mode": "sync",
    "actor_rollout_ref.rollout.temperature": 1.0, "actor_rollout_ref.rollout.top_p": 0.999,
    "actor_rollout_ref.rollout.top_k": -1, "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
    "actor_rollout_ref.rollout.gpu_memory_utilization": 0.5, "actor_rollout_ref.rollout.val_kwargs.n": 1,
    "actor_rollout_ref.rollout.val_kwargs.do_sample": False, "actor_rollout_ref.rollout.val_kwargs.temperature": 0.0,
    "reward.reward_manager.name": "naive",
    "trainer.total_epochs": 10000, "trainer.n_gpus_per_node": 8, "trainer.save_freq": 100, "trainer.test_freq": 25,
    "trainer.val_before_train": True, "trainer.max_actor_ckpt_to_keep": 2,
}


def _task(tau: float, batch: int, prompt: int, response: int, micro: int, n: int, steps: int, nodes: int) -> dict:
    return {**_BASE, "algorithm.tau": tau, "data.train_batch_size": batch, "data.max_prompt_length": prompt,
            "data.max_response_length": response, "actor_rollout_ref.actor.ppo_mini_batch_size": batch,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro,
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro,
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro,
            "actor_rollout_ref.rollout.n": n, "trainer.total_training_steps": steps, "trainer.nnodes": nodes}


#: (task, the authors' config file) -> its settings; gsm8k_sim/deepmath_sim equal gsm8k/deepmath but the reward.
AUTHORS = {
    ("gsm8k", "gsm8k.yaml"): _task(0.1, 64, 1024, 256, 4, 8, 1000, 1),
    ("countdown", "countdown.yaml"): _task(0.1, 64, 1024, 256, 4, 8, 2000, 1),
    ("deepmath", "deepmath.yaml"): _task(0.3, 512, 1024, 1024, 8, 16, 3220, 2),
    ("openthoughts", "openthoughts.yaml"): _task(0.3, 512, 2048, 6144, 4, 8, 3220, 2),
}

#: Keys where we keep our own value, with the reason (config/README.md "verl vs the authors' configs").
DIFFERENCES = {
    "data.seed": "the pipeline's seed (train.verl seeds, 0 for the main runs) seeds data order and rollouts alike",
    "actor_rollout_ref.rollout.mode": "verl 0.9.1 has only the async (agent-loop) rollout; `sync` is gone",
    "trainer.total_epochs": "a bound only: total_training_steps ends every run first (ours 1000, theirs 10000)",
}


def _ours(task: str) -> tuple[str, list[str]]:
    config = paper_config()
    method = "softmax_exact" if "softmax_exact" in trained_methods(config, task) else "softmax_sim"
    paths = TrainPaths("RUN", "DATA/train.parquet", "DATA/val.parquet", "SFT_MODEL")
    return method, rl_overrides(group_rl_spec(config, task, method, "verl"), paths, 0)


def _as_dict(overrides: list[str]) -> dict:
    pairs = {}
    for item in overrides:
        key, value = item.split("=", 1)
        parsed = yaml.safe_load(value)
        if isinstance(parsed, str):  # YAML 1.1 reads 1e-06 as a string; Hydra reads it as a float
            with contextlib.suppress(ValueError):
                parsed = float(parsed)
        pairs[key.lstrip("+")] = parsed
    return pairs


@pytest.mark.parametrize("task, source", sorted(AUTHORS))
def test_generated_overrides_match_the_authors_config_key_by_key(task, source):
    ours = _as_dict(_ours(task)[1])
    defaults = OmegaConf.load(VERL_DEFAULTS)
    mismatched = {}
    for key, theirs in AUTHORS[(task, source)].items():
        value = ours[key] if key in ours else OmegaConf.select(defaults, key, default="<absent>")
        if key in DIFFERENCES:
            assert value != theirs, f"{key} now equals the authors' value: drop it from DIFFERENCES and the README"
        elif value != theirs:
            mismatched[key] = (value, theirs)
    assert not mismatched, f"{task} vs the authors' {source} (ours, theirs): {mismatched}"


def test_every_difference_is_documented_in_the_config_readme():
    readme = (REPO / "config/README.md").read_text()
    for key in DIFFERENCES:
        assert f"`{key}`" in readme, key


@pytest.mark.parametrize("task", ["gsm8k", "countdown", "deepmath", "poetry", "meetingbank", "openthoughts"])
def test_one_run_per_task_is_pinned(task):
    method, overrides = _ours(task)
    pinned = PINNED / f"{task}-{method}-seed0.txt"
    if os.environ.get("PIN_VERL_OVERRIDES"):
        pinned.write_text("\n".join(overrides) + "\n")
    assert pinned.read_text().splitlines() == overrides, f"{pinned.name} drifted (PIN_VERL_OVERRIDES=1 to re-pin)"


def test_a_prompt_pool_reaches_verl_as_its_train_max_samples():
    """train.rl.prompt_pool (null in the paper plan: every prompt) is verl's data.train_max_samples, which verl's
    config accepts; a pool smaller than one step's prompts is an error naming both keys."""
    from dataclasses import replace

    from pipeline_lib.jobs.engines.verl.validate import validate_rl
    from pipeline_lib.plan import PlanError
    from pipeline_lib.plan.settings import group_rl_spec

    spec = group_rl_spec(paper_config(), "gsm8k", "softmax_exact", "verl")
    assert spec.rl.prompt_pool is None
    pooled = replace(spec, rl=replace(spec.rl, prompt_pool=800))
    overrides = rl_overrides(pooled, TrainPaths("RUN", "DATA/train.parquet", "DATA/val.parquet", "SFT_MODEL"), 0)
    assert "data.train_max_samples=800" in overrides
    assert validate_rl(overrides).data.train_max_samples == 800
    with pytest.raises(PlanError, match="prompt_pool 32 is smaller than prompts_per_step 64"):
        replace(spec.rl, prompt_pool=32)
