"""Adding an estimator is the function in advantages.py + one registry entry + one config entry: a toy estimator,
registered here the way a new one would be, is planned, trained on the local engine and translated for verl."""

import copy

import pytest
import torch

from pipeline_lib import advantages
from pipeline_lib.data.build import build_tiny, build_tokenizer
from pipeline_lib.engines.local.rl import main as rl_main
from pipeline_lib.model import build_model, save_model_atomic
from pipeline_lib.plan import Estimator, EstimatorEntry, group_rl, plan_runs, register, unregister
from pipeline_lib.plan.table import load_config
from tests.conftest import REPO

TOY = "toy_scaled"  # the estimator's name in pipeline_lib.advantages
METHOD = "toy_exact"  # the method that trains with it


def _toy_advantage(rewards: torch.Tensor, index: advantages.GroupIndex, scale: float) -> torch.Tensor:
    """GRPO's centred rewards times ``scale``: a parameter only this estimator takes."""
    return float(scale) * (rewards - index.expand(index.mean(rewards)))


@pytest.fixture
def toy_method():
    """The three steps of adding an estimator, undone afterwards (the registries are process-wide)."""
    advantages.register_advantage(TOY)(_toy_advantage)  # 1. the function in advantages.py
    entry = EstimatorEntry(TOY, TOY, ours=True, params=("scale",))
    register(group_rl(METHOD, "Toy-Exact", entry, "verifier"), estimator=entry)  # 2. one registry entry
    try:
        yield {"advantage": TOY, "scale": 2.0, "reward": "verifier"}  # 3. one config entry
    finally:
        unregister(METHOD, estimator=TOY)
        advantages._REGISTRY.pop(TOY, None)


def _with_method(config_file: str, entry: dict) -> dict:
    config = copy.deepcopy(load_config([REPO / "config" / config_file]))
    config["train"]["methods"][METHOD] = entry
    return config


def test_a_toy_estimator_is_planned_and_trains_on_the_local_engine(toy_method, tmp_path):
    plan = plan_runs(_with_method("config.yaml", toy_method))
    run = plan.get("train_local", f"countdown_tiny/{METHOD}/seed0")
    assert run.spec.estimator == Estimator(TOY, {"scale": 2.0})
    assert run.entry_module == "pipeline_lib.engines.local.rl"

    build_tiny("countdown_tiny", {"n_train": 12, "n_test": 4, "imperfect_fraction": 0.3, "numbers_per_task": [3],
                                  "max_number": 9, "max_target": 100}, 0, None, tmp_path / "data")
    build_tokenizer([tmp_path / "data/sft_train.parquet", tmp_path / "data/rl_train.parquet"], 400, tmp_path / "tok")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    save_model_atomic(build_model(tokenizer, {"hidden_size": 32, "intermediate_size": 64, "layers": 2, "heads": 2,
                                              "kv_heads": 1, "max_positions": 256}, 0), tokenizer, tmp_path / "init")
    spec = run.spec.__class__(**{**run.spec.__dict__, "settings": {
        **run.spec.settings, "steps": 2, "prompts_per_step": 2, "group_size": 2, "minibatches": 1,
        "max_new_tokens": 8, "checkpoint_every": 1}})
    assert rl_main(["--spec", spec.to_json(), "--data", str(tmp_path / "data/rl_train.parquet"),
                    "--init", str(tmp_path / "init"), "--run-dir", str(tmp_path / "run"), "--seed", "0"]) == 0
    assert (tmp_path / "run/DONE.json").is_file()
    rollouts = (tmp_path / "run/rollouts.jsonl").read_text()
    assert rollouts and '"advantage"' in rollouts


def test_a_toy_estimator_becomes_verl_overrides_that_verl_accepts(toy_method, tmp_path):
    from pipeline_lib.engines.verl.translate import plan_overrides
    from pipeline_lib.engines.verl.validate import check_override_keys

    config = _with_method("paper.yaml", toy_method)
    runs = [r for r in plan_overrides(plan_runs(config)) if r[0] == f"gsm8k/{METHOD}/seed0"]
    assert len(runs) == 1
    overrides = runs[0][2]
    assert f"algorithm.adv_estimator={TOY}" in overrides and "+algorithm.scale=2.0" in overrides
    assert not any("algorithm.tau" in o for o in overrides)  # gsm8k's row tau is not this estimator's parameter
    assert check_override_keys(runs, cache_dir=tmp_path)["composed"] == 1
