"""The verl engine against verl 0.9.1's own code, on CPU: estimators, plugin registration in Ray workers,
the reward hook through verl's naive reward manager, and the override translation of every paper run."""

import json
import sys
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

from pipeline_lib.core.rewards import compute_score
from pipeline_lib.core.rl.advantages import broadcast_to_tokens, group_advantages
from pipeline_lib.jobs.engines.verl import REQUIRED_VERL, check_verl_version
from pipeline_lib.jobs.engines.verl.estimators import group_index
from pipeline_lib.jobs.engines.verl.translate import ESTIMATOR_MODULE, TrainPaths, rl_overrides
from pipeline_lib.jobs.engines.verl.validate import (
    VerlOverrideError,
    compose,
    planned_runs,
    validate_planned_runs,
    validate_rl,
)
from pipeline_lib.plan import ADVANTAGE_ESTIMATORS, Estimator, RunSpec, plan_runs
from pipeline_lib.plan.registry import variant_runs
from pipeline_lib.plan.settings import group_rl_spec
from pipeline_lib.plan.targets import runs_of
from tests.conftest import REPO, rollout_batch, snakemake
from tests.jobs.engines.conftest import paper_config


def test_the_installed_verl_is_the_pinned_one(monkeypatch):
    import pipeline_lib.jobs.engines.verl as engine

    assert check_verl_version() == REQUIRED_VERL == "0.9.1"
    monkeypatch.setattr(engine, "installed_verl_version", lambda: "0.8.0")
    with pytest.raises(engine.VerlVersionError, match=r"pinned to verl==0.9.1 .* verl==0.8.0 is installed"):
        engine.check_verl_version()
    monkeypatch.setattr(engine, "installed_verl_version", lambda: None)
    with pytest.raises(engine.VerlVersionError, match=r"needs verl==0.9.1, which is not installed"):
        engine.check_verl_version()


@pytest.mark.parametrize("method,params", [("softmax", {"tau": 0.1}), ("softmax", {"tau": 0.3}), ("maxrl", {}),
                                           ("reinforce", {}), ("grpo", {}), ("dr_grpo", {}), ("rloo", {})])
@pytest.mark.parametrize("binary", [True, False])
def test_estimator_through_verls_compute_advantage_equals_group_advantages(method, params, binary):
    estimator, extra = ADVANTAGE_ESTIMATORS[method].verl, ADVANTAGE_ESTIMATORS[method].verl_overrides
    overrides = [f"algorithm.adv_estimator={estimator}", *(f"{k}={v}" for k, v in extra.items()),
                 *(f"+algorithm.{k}={v}" for k, v in params.items())]
    algorithm = compose("ppo_trainer", overrides).algorithm
    data, scores, uids, mask = rollout_batch(seed=len(method) + 10 * binary, binary=binary)
    out = compute_advantage(data, adv_estimator=algorithm.adv_estimator, gamma=algorithm.gamma, lam=algorithm.lam,
                            num_repeat=6, norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo,
                            config=algorithm)
    expected = broadcast_to_tokens(group_advantages(method, scores, group_index(uids), **params), mask)
    if estimator in ("softmax", "maxrl", "reinforce"):  # ours: the very same function, so bit-identical
        assert torch.equal(out.batch["advantages"], expected)
    else:  # verl's own GRPO / Dr.GRPO / RLOO: the same formula, evaluated in another order
        torch.testing.assert_close(out.batch["advantages"], expected, rtol=1e-5, atol=1e-5)


def test_softmax_estimator_reads_tau_from_the_algorithm_config_it_receives():
    data = rollout_batch(seed=3, binary=False)[0]
    outs = {}
    for tau in (0.1, 1.0):
        algorithm = compose("ppo_trainer", ["algorithm.adv_estimator=softmax", f"+algorithm.tau={tau}"]).algorithm
        outs[tau] = compute_advantage(data, adv_estimator="softmax", config=algorithm).batch["advantages"].clone()
    assert not torch.allclose(outs[0.1], outs[1.0])
    without = compose("ppo_trainer", ["algorithm.adv_estimator=softmax"]).algorithm
    with pytest.raises(ValueError, match=r"needs algorithm.tau.*\+algorithm.tau="):
        compute_advantage(data, adv_estimator="softmax", config=without)


def test_estimators_resolve_inside_ray_workers_by_entry_point_and_by_env_fallback():
    """Fresh Ray worker processes: `import verl` alone must register ours (the verl.plugins entry point); with
    entry points switched off, VERL_USE_EXTERNAL_MODULES (what the translator puts in the Ray runtime env) must.
    The same plugin replaces verl's per-row log-prob fallback there (:mod:`pipeline_lib.jobs.engines.verl.logprobs`)."""
    import ray

    def probe() -> dict:
        import sys
        from importlib.metadata import entry_points

        before = "pipeline_lib.jobs.engines.verl.estimators" in sys.modules
        plugins = [ep.value for ep in entry_points(group="verl.plugins")]
        import torch as worker_torch
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn
        from verl.utils import torch_functional

        rewards = worker_torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
        advantages, _ = get_adv_estimator_fn("softmax")(
            token_level_rewards=rewards, response_mask=worker_torch.ones(4, 2),
            index=["a", "a", "b", "b"], config={"tau": 0.5})
        return {"imported_before_verl": before, "plugins": plugins, "advantages": advantages[:, 0].tolist(),
                "maxrl": callable(get_adv_estimator_fn("maxrl")),
                "reinforce": callable(get_adv_estimator_fn("reinforce")),
                "logprobs": torch_functional.logprobs_from_logits_v2.__module__}

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        results = {}
        for name, env in {"entry_point": {"VERL_USE_EXTERNAL_PLUGINS": "auto", "VERL_USE_EXTERNAL_MODULES": ""},
                          "env_fallback": {"VERL_USE_EXTERNAL_PLUGINS": "none",
                                           "VERL_USE_EXTERNAL_MODULES": ESTIMATOR_MODULE}}.items():
            actor = ray.remote(num_cpus=0)(type("Probe", (), {"run": lambda self: probe()})).options(
                runtime_env={"env_vars": env}).remote()
            results[name] = ray.get(actor.run.remote(), timeout=120)
            ray.kill(actor)
    finally:
        ray.shutdown()
    expected = group_advantages("softmax", torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([0, 0, 1, 1]), tau=0.5)
    assert ESTIMATOR_MODULE in results["entry_point"]["plugins"], (
        "the verl.plugins entry point is not visible in the worker: reinstall (`pip install -e .`) and check that no "
        f"stale pipeline_lib.egg-info shadows it; seen: {results['entry_point']['plugins']}")
    assert results["env_fallback"]["plugins"] == results["entry_point"]["plugins"]  # visible, but switched off
    for name, result in results.items():
        assert result["imported_before_verl"] is False, name
        assert result["maxrl"] and result["reinforce"], name
        assert result["logprobs"] == "pipeline_lib.jobs.engines.verl.logprobs", name  # verl's per-row loop replaced
        torch.testing.assert_close(torch.tensor(result["advantages"]), expected, msg=name)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from pipeline_lib.core.data.build import build_tiny, build_tokenizer

    root = tmp_path_factory.mktemp("verl_tok")
    tiny = {"n_train": 30, "n_test": 6, "imperfect_fraction": 0.3, "numbers_per_task": [3], "max_number": 9,
            "max_target": 100}
    build_tiny("countdown_tiny", tiny, 0, None, root / "data")
    build_tokenizer([root / "data/sft_train.parquet", root / "data/rl_train.parquet"], 400, root / "tok")
    return root


def test_compute_score_through_verls_naive_reward_manager(tokenizer_dir):
    from transformers import AutoTokenizer
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir / "tok")
    rows = pd.read_parquet(tokenizer_dir / "data/rl_test.parquet").head(3).to_dict("records")
    gold = [json.loads(r["reward_model"]["ground_truth"]) for r in rows]
    expression = "".join(f"{n}+" for n in gold[0]["numbers"])[:-1]
    responses = [f"<think>try</think><answer>{expression}</answer>", "<think>no</think><answer>1+1</answer>",
                 "<think>x</think>"]
    for reward_weights in (None, {"similarity": 1.0}):
        spec = {"custom_reward_function": {"path": "pkg://pipeline_lib.core.rewards", "name": "compute_score"}}
        if reward_weights:
            spec["custom_reward_function"]["reward_kwargs"] = {"reward_weights": reward_weights}
        from omegaconf import OmegaConf

        config = OmegaConf.create({"reward": spec})
        manager = NaiveRewardManager(config, tokenizer, compute_score=get_custom_reward_fn(config))
        for row, response in zip(rows, responses, strict=True):
            prompt = tokenizer(row["prompt"][0]["content"], return_tensors="pt")["input_ids"][0][-8:]
            answer = tokenizer(response, return_tensors="pt", add_special_tokens=False)["input_ids"][0]
            ids = torch.cat([prompt, answer, torch.full((3,), tokenizer.pad_token_id)])
            attention = torch.cat([torch.ones(len(prompt) + len(answer)), torch.zeros(3)]).long()
            item = DataProto.from_dict(
                tensors={"prompts": prompt[None], "responses": ids[len(prompt):][None],
                         "attention_mask": attention[None]},
                non_tensors={"data_source": np.array([row["data_source"]], dtype=object),
                             "reward_model": np.array([dict(row["reward_model"])], dtype=object),
                             "extra_info": np.array([dict(row["extra_info"])], dtype=object)})
            result = manager.loop.run_until_complete(manager.run_single(item))
            decoded = tokenizer.decode(answer, skip_special_tokens=True)
            direct = compute_score(row["data_source"], decoded, row["reward_model"]["ground_truth"],
                                   dict(row["extra_info"]), reward_weights=reward_weights)
            assert result["reward_score"] == direct["score"]
            assert result["reward_extra_info"]["score"] == direct["score"]
    # the verifier path really verifies: the correct expression scores 1 only if it hits the target
    verifier = [compute_score(r["data_source"], s, r["reward_model"]["ground_truth"], dict(r["extra_info"]))["score"]
                for r, s in zip(rows, responses, strict=True)]
    assert verifier[1:] == [0.0, 0.0] and verifier[0] == float(sum(gold[0]["numbers"]) == gold[0]["target"])


def test_every_paper_run_translates_and_passes_verls_validation(tmp_path):
    config = paper_config()
    runs = planned_runs(config)
    labels = {label for label, _, _ in runs}
    for task in ("gsm8k", "countdown", "deepmath"):
        methods = ("sft", "grpo_exact", "softmax_exact", "grpo_sim", "softmax_sim")
        assert {f"{task}/{m}/seed0" for m in methods} <= labels
    for task in ("poetry", "meetingbank", "openthoughts"):
        assert {f"{task}/{m}/seed0" for m in ("sft", "grpo_sim", "softmax_sim")} <= labels
        assert f"{task}/grpo_exact/seed0" not in labels
    baselines = {"opd", "rl_logit", "raro", "rationalization"}  # the verl baselines and Rationalization's SFT
    variants = variant_runs(config)  # RL-Logit: one run per reward variant, rl_logit_<variant>

    def method_of(name: str) -> str:
        return variants.get(name, (name,))[0]

    main = [label for label in labels if "_tau" not in label and "_at_" not in label
            and method_of(label.split("/")[1]) not in baselines]
    # + softmax_ess on GSM8K and Countdown; the tau x M ablation and scale runs (train.ablation/scale) come on top
    assert len(main) == 3 * 5 + 3 * 3 + 2
    planned = sorted(f"results/train/{label}/DONE.json" for label in labels
                     if method_of(label.split("/")[1]) in baselines)
    assert planned == sorted(p for p in runs_of(plan_runs(config), "baseline")
                             if method_of(p.split("/")[3]) in baselines)
    rl_logit_runs = 3 * len(variant_runs(config, "rl_logit"))  # each variant on each verifiable task
    assert len(planned) == 6 + rl_logit_runs + 2 + 3  # OPD also on the non-verifiable tasks; RARO not on GSM8K
    summary = validate_planned_runs(config, cache_dir=tmp_path)
    assert summary == summary | {"runs": len(runs), "validated": len(runs), "cached": 0}
    # each RL run was validated on the trainer path its own overrides select (verl's default: v1), read back from
    # the cache marker on a cached pass; RARO and RL-Logit are pinned to the legacy trainer, the rest stay on v1
    for label, kind, overrides in runs:
        if kind != "rl":
            assert label not in summary["trainer_paths"]
            continue
        use_v1 = [o.split("=", 1)[1].lower() for o in overrides if o.split("=", 1)[0].lstrip("+") == "trainer.use_v1"]
        expected = "legacy" if use_v1 == ["false"] else "v1"
        assert use_v1 in ([], ["true"], ["false"]), (label, use_v1)
        assert summary["trainer_paths"][label] == expected, label
        assert expected == ("legacy" if method_of(label.split("/")[1]) in ("raro", "rl_logit") else "v1"), label
    cached = validate_planned_runs(config, cache_dir=tmp_path)
    assert cached["cached"] == len(runs) and cached["trainer_paths"] == summary["trainer_paths"]


@pytest.mark.parametrize("task,method,expected", [
    ("gsm8k", "softmax_exact", {"algorithm.adv_estimator": "softmax", "algorithm.tau": 0.1,
                                "actor_rollout_ref.rollout.n": 8, "data.train_batch_size": 64,
                                # one update per step, App. B's per-device mini-batch as the micro-batch (authors')
                                "actor_rollout_ref.actor.ppo_mini_batch_size": 64,
                                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
                                "actor_rollout_ref.actor.clip_ratio_c": 1.0e9, "trainer.total_training_steps": 1000,
                                "data.max_response_length": 256, "trainer.nnodes": 1}),
    ("deepmath", "softmax_exact", {"algorithm.tau": 0.3, "actor_rollout_ref.rollout.n": 16, "trainer.nnodes": 2,
                                   "data.train_batch_size": 512, "actor_rollout_ref.actor.ppo_mini_batch_size": 512,
                                   "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 8,
                                   "trainer.total_training_steps": 3220, "data.max_response_length": 1024}),
    ("countdown", "grpo_sim", {"algorithm.adv_estimator": "grpo", "trainer.total_training_steps": 2000,
                               "reward.custom_reward_function.reward_kwargs.reward_weights.similarity": 1.0}),
    ("openthoughts", "softmax_sim", {"algorithm.tau": 0.3, "data.max_response_length": 6144,
                                     "reward.custom_reward_function.reward_kwargs.reward_weights.format": 0.35,
                                     "reward.custom_reward_function.reward_kwargs.reward_weights.similarity": 0.65}),
])
def test_paper_settings_reach_verls_config(task, method, expected):
    from omegaconf import OmegaConf

    config = paper_config()
    paths = TrainPaths(f"/r/{task}/{method}", "/d/train.parquet", "/d/test.parquet", "/r/sft/final")
    spec = group_rl_spec(config, task, method, "verl")
    verl_config = validate_rl(rl_overrides(spec, paths, seed=0))
    shared = {"actor_rollout_ref.actor.clip_ratio_low": 0.2, "actor_rollout_ref.actor.clip_ratio_high": 0.28,
              "actor_rollout_ref.actor.use_kl_loss": True, "actor_rollout_ref.actor.kl_loss_coef": 0.001,
              "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
              "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
              "actor_rollout_ref.rollout.temperature": 1.0, "actor_rollout_ref.actor.optim.lr": 1e-6,
              "trainer.resume_mode": "auto", "trainer.rollout_data_dir": f"/r/{task}/{method}/rollout_dump",
              "reward.custom_reward_function.path": "pkg://pipeline_lib.jobs.engines.verl.reward",
              "ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES": ESTIMATOR_MODULE}
    for key, value in (shared | expected).items():
        assert OmegaConf.select(verl_config, key) == value, key
    nodes = expected.get("trainer.nnodes")
    if nodes:
        assert spec.resources == {"nodes": nodes, "gres": "gpu:8"}


def test_a_typo_in_an_override_fails_with_the_run_and_key_named(tmp_path):
    config = paper_config()
    config["train"]["tasks"] = ["gsm8k"]
    config["train"]["verl"]["extra_overrides"]["rl"] = ["actor_rollout_ref.actor.clip_ratio_hgih=0.3"]
    with pytest.raises(VerlOverrideError, match=r"train run gsm8k/grpo_exact/seed0.*clip_ratio_hgih"):
        validate_planned_runs(config, cache_dir=tmp_path)
    config["train"]["verl"]["extra_overrides"]["rl"] = ["actor_rollout_ref.actor.ppo_mini_batch_size=1024"]
    with pytest.raises(VerlOverrideError, match=r"validate_config.*must be >= actor.ppo_mini_batch_size \(1024\)"):
        validate_planned_runs(config, cache_dir=tmp_path)


def test_snakemake_dry_run_fails_on_a_typo_before_submitting_anything(workflow_copy):
    (workflow_copy / "typo.yaml").write_text(yaml.safe_dump({
        "train": {"tasks": ["gsm8k"],
                  "verl": {"extra_overrides": {"rl": ["actor_rollout_ref.rollout.temperture=1.0"]}}},
        "imagenet": {"enabled": False}}))
    result = snakemake(workflow_copy, "-n", "--configfile", "config/paper.yaml", "typo.yaml")
    assert result.returncode != 0
    assert "temperture" in result.stdout + result.stderr and "VerlOverrideError" in result.stdout + result.stderr


def test_rollout_dumps_written_by_verl_become_the_local_engines_rollouts(tokenizer_dir, tmp_path):
    """verl's own JSONL writer -> rollouts.jsonl that the gradient-allocation table reads.

    The writer is the legacy trainer's; the v1 trainer's (which needs TransferQueue, a GPU-extra dependency)
    writes the same fields and differs only in how it JSON-encodes numpy scalars.
    """
    from transformers import AutoTokenizer
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from pipeline_lib.jobs.engines.verl.train import collect_rollouts, unmatched_prompt_rows
    from pipeline_lib.paper.results import allocation_data
    from pipeline_lib.plan import RunId

    run_dir = tmp_path / "countdown_tiny/softmax_exact/seed0"
    train_files = tokenizer_dir / "data/rl_test.parquet"
    rows = pd.read_parquet(train_files).to_dict("records")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir / "tok")

    def decoded(row: int) -> str:  # as verl's dump decodes a prompt: template + generation prompt, special tokens off
        ids = tokenizer.apply_chat_template([dict(m) for m in rows[row]["prompt"]], add_generation_prompt=True,
                                            tokenize=True, return_dict=False)
        return tokenizer.decode(ids, skip_special_tokens=True)

    for step in (1, 2):
        keys = [f"uid{p}_{s}_0" for p in range(2) for s in range(4)]
        outputs = ["<think>a</think><answer>1+2</answer>" if (step + i) % 3 else "<answer>9</answer>" for i in range(8)]
        gts = [rows[int(k[3]) + 3]["reward_model"]["ground_truth"] for k in keys]
        scores = [compute_score("tiny/countdown", o, g)["score"] for o, g in zip(outputs, gts, strict=True)]
        # the decoded prompt, the same on each visit of a prompt: rows 3 and 4, or (step 2, prompt 1) no row's
        inputs = [decoded(int(k[3]) + 3) if step == 1 or k[3] == "0" else f"question {k[3]}" for k in keys]
        RayPPOTrainer._write_generations(inputs, outputs, gts, scores, {"uid": keys},
                                          str(run_dir / "rollout_dump"), step)
    spec = RunSpec(method="softmax_exact", task="countdown_tiny", engine="verl",
                   estimator=Estimator("softmax", {"tau": 0.1}))
    overrides = ["data.max_prompt_length=64"]  # left padding to it: pad tokens vanish from the decoded prompt
    path = collect_rollouts(run_dir, spec, tokenizer_dir / "tok", "tiny/countdown", total_steps=2,
                            train_files=train_files, overrides=overrides)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["prompt_row"] for r in records] == [[3] * 4 + [4] * 4, [3] * 4 + [-1] * 4]
    assert unmatched_prompt_rows(path) == 4
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert record["group"] == [0] * 4 + [1] * 4 and len(record["length"]) == 8 and min(record["length"]) > 0
        expected = group_advantages("softmax", torch.tensor(record["reward"], dtype=torch.float64),
                                    torch.tensor(record["group"]), tau=0.1)
        assert record["advantage"] == expected.tolist()
        assert record["correct"] == record["reward"]  # exact runs: the training reward is the verifier
    # the prompt, stable across visits (verl's uid is drawn anew per visit): the allocation table's other visits
    keys = [r["prompt_key"] for r in records]
    assert keys[0][:4] == keys[1][:4] and len(set(keys[0][:4])) == 1 and keys[0][0] != keys[0][4]
    run = RunId("main", "countdown_tiny", "softmax_exact", 0, str(run_dir / "DONE.json"))
    frame = allocation_data({str(path): run})
    # row 3 is visited twice (binned by its other visit); row 4 and the unmatched prompt once each (unbinned)
    assert len(frame) == 1 and frame.loc[0, "groups"] == 4 and frame.loc[0, "groups_unbinned"] == 2
    with pytest.raises(Exception, match="missing for steps"):
        collect_rollouts(run_dir, spec, tokenizer_dir / "tok", "tiny/countdown", total_steps=3,
                         train_files=train_files)


def test_done_requires_verls_tracker_to_reach_the_last_step(tmp_path):
    from pipeline_lib.jobs.engines.verl.train import TRACKER, VerlRunError, finished_step

    assert finished_step(tmp_path) is None
    (tmp_path / TRACKER).write_text("40")
    assert finished_step(tmp_path) == 40
    (tmp_path / TRACKER).write_text("forty")
    with pytest.raises(VerlRunError, match="expected a step number"):
        finished_step(tmp_path)


def test_the_in_process_merge_passes_what_verls_merger_cli_parses(monkeypatch, tmp_path):
    """The final actor is exported by verl's merger in the launcher's process: with the arguments verl's own CLI
    parses from the command the engine used to run (``python -m verl.model_merger merge ...``), option for option."""
    from verl.model_merger.base_model_merger import parse_args

    from pipeline_lib.jobs.engines.verl.train import merger_arguments

    step, target = tmp_path / "global_step_2" / "actor", tmp_path / "final.tmp"
    monkeypatch.setattr(sys, "argv", ["verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(step),
                                      "--target_dir", str(target)])
    assert vars(merger_arguments(step, target)) == vars(parse_args())


def test_the_train_entry_point_validates_and_prints_the_launch_command(tmp_path, capsys):
    from pipeline_lib.jobs.engines.verl.train import main

    config = paper_config()
    spec = group_rl_spec(config, "deepmath", "softmax_exact", "verl").to_json()
    main(["rl", "--spec", spec, "--data", str(tmp_path / "rl_train.parquet"), "--val-data", str(tmp_path / "t.pq"),
          "--init", str(tmp_path / "sft/final"), "--run-dir", str(tmp_path / "run"), "--seed", "0", "--dry-run"])
    out = capsys.readouterr().out
    printed = json.loads(out[out.index("{\n"):])
    command = printed["command"]
    assert command[1:6] == ["-m", "pipeline_lib.jobs.engines.verl.launch", "--gpus-per-node", "8", "--"]
    assert command[7:9] == ["-m", "verl.trainer.main_ppo"] and "trainer.nnodes=2" in command
    assert f"trainer.default_local_dir={tmp_path / 'run' / 'checkpoints'}" in command
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


def test_the_sft_entry_point_validates_and_prints_the_torchrun_command(tmp_path, capsys):
    """verl SFT runs through its own entry point (not the RL one, which refuses ``sft`` and names it)."""
    from pipeline_lib.jobs.engines.verl import sft, train
    from pipeline_lib.plan.settings import sft_spec

    spec = sft_spec(paper_config(), "gsm8k", "sft", "verl").to_json()
    sft.main(["--spec", spec, "--data", str(tmp_path / "sft_train.parquet"), "--run-dir", str(tmp_path / "run"),
              "--seed", "0", "--dry-run"])
    out = capsys.readouterr().out
    command = json.loads(out[out.index("{\n"):])["command"]
    assert command[1:3] == ["-m", "torch.distributed.run"] and "verl.trainer.sft_trainer" in command
    assert f"trainer.default_local_dir={tmp_path / 'run' / 'checkpoints'}" in command
    assert not (tmp_path / "run").exists()  # a dry run writes nothing
    with pytest.raises(SystemExit):
        train.main(["sft", "--spec", spec, "--data", "x", "--run-dir", str(tmp_path / "run"), "--seed", "0"])
    assert "python -m pipeline_lib.jobs.engines.verl.sft" in capsys.readouterr().err


def test_rollouts_of_the_legacy_trainer_dump_group_by_prompt(tokenizer_dir, tmp_path):
    """RARO and RL-Logit train on verl's legacy trainer, whose dump has no uid: its own `_log_rollout_data` writes the
    dump here, from a batch reordered as `_balance_batch` leaves it, and the groups come out as verl's uids."""
    from transformers import AutoTokenizer
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from pipeline_lib.jobs.engines.verl.train import collect_rollouts, unmatched_prompt_rows

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir / "tok")
    rows = pd.read_parquet(tokenizer_dir / "data/rl_test.parquet").head(3).to_dict("records")
    group_size = 4
    train_files = tokenizer_dir / "data/rl_test.parquet"
    # the prompts as verl's rollout renders them (chat template, generation prompt), left-padded in the batch
    rendered = [tokenizer.apply_chat_template([dict(m) for m in row["prompt"]], add_generation_prompt=True,
                                              tokenize=True, return_dict=False) for row in rows]
    length = max(len(ids) for ids in rendered)
    trainer = RayPPOTrainer.__new__(RayPPOTrainer)  # only the dump's state: tokenizer, step, writer thread
    trainer.tokenizer = tokenizer
    trainer._init_dump_executor()
    run_dir = tmp_path / "countdown_tiny/raro/seed0"
    gen = torch.Generator().manual_seed(0)
    expected_groups = {}
    for step in (1, 2):
        trainer.global_steps = step
        prompts, responses, truth, uids = [], [], [], []
        for p, row in enumerate(rows):
            prompt = list(rendered[p])
            for s in range(group_size):
                answer = "<answer>1+2</answer>" if (p + s + step) % 2 else "<answer>9</answer>"
                response = tokenizer(answer, add_special_tokens=False)["input_ids"][:length]
                prompts.append([tokenizer.pad_token_id] * (length - len(prompt)) + prompt)
                responses.append(response + [tokenizer.pad_token_id] * (length - len(response)))
                truth.append(row["reward_model"])
                uids.append(f"{p}-{step}-uuid")
        # RARO's reward is the critic's verdict, not the verifier's: any per-rollout score.
        scores = (torch.rand(len(responses), generator=gen) < 0.5).float()
        token_scores = torch.zeros(len(scores), length)
        token_scores[:, 0] = scores
        batch = DataProto.from_dict(
            tensors={"prompts": torch.tensor(prompts), "responses": torch.tensor(responses),
                     "token_level_scores": token_scores},
            non_tensors={"uid": np.array(uids, dtype=object), "reward_model": np.array(truth, dtype=object)})
        batch.reorder(torch.randperm(len(batch), generator=gen))  # as _balance_batch reorders before the dump
        trainer._log_rollout_data(batch, {}, {}, str(run_dir / "rollout_dump"))
        expected_groups[step] = group_index(batch.non_tensor_batch["uid"])
    trainer._shutdown_dump_executor()
    assert "uid" not in json.loads((run_dir / "rollout_dump/1.jsonl").read_text().splitlines()[0])

    paper = group_rl_spec(paper_config(), "gsm8k", "grpo_exact", "verl")
    spec = replace(paper, task="countdown_tiny", rl=replace(paper.rl, group_size=group_size))
    path = collect_rollouts(run_dir, spec, tokenizer_dir / "tok", "tiny/countdown", total_steps=2,
                            train_files=train_files, overrides=[f"data.max_prompt_length={length}"])
    records = [json.loads(line) for line in path.read_text().splitlines()]
    # verl's own decode of its left-padded prompts names each rollout's row (the batch reordered: rows by uid)
    for record in records:
        assert unmatched_prompt_rows(path) == 0 and sorted(set(record["prompt_row"])) == [0, 1, 2]
        assert len(set(zip(record["group"], record["prompt_row"], strict=True))) == 3  # one row per group
    for record in records:
        groups, truth_groups = torch.tensor(record["group"]), expected_groups[record["step"]]
        assert torch.equal(groups[:, None] == groups[None, :], truth_groups[:, None] == truth_groups[None, :])
        expected = group_advantages("grpo", torch.tensor(record["reward"], dtype=torch.float64),
                                    torch.tensor(record["group"]))
        assert record["advantage"] == expected.tolist() and any(a != 0 for a in record["advantage"])


def test_verls_model_patch_imports_the_value_head_from_the_pinned_trl():
    """verl's `apply_monkey_patch` (every FSDP actor/reference/SFT model build) imports trl's value-head model whenever
    trl is importable; trl 1.16 has none (ImportError at actor init). The pinned trl is installed and verl's patch runs
    on a tiny Qwen2 (in a child: the patch changes transformers process-wide)."""
    import re
    import subprocess
    import sys
    from importlib.metadata import version

    from pipeline_lib.jobs.engines.trl.dpo import REQUIRED_TRL

    assert version("trl") == REQUIRED_TRL
    pins = {"pyproject.toml": (REPO / "pyproject.toml").read_text(),
            "envs/train-verl.yaml": (REPO / "envs/train-verl.yaml").read_text()}
    for name, text in pins.items():
        assert set(re.findall(r"trl==([0-9.]+)", text)) == {REQUIRED_TRL}, name
    script = (
        "from transformers import Qwen2Config, Qwen2ForCausalLM\n"
        "from verl.models.transformers.monkey_patch import apply_monkey_patch\n"
        "model = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,"
        " num_attention_heads=2, num_key_value_heads=1))\n"
        "apply_monkey_patch(model, ulysses_sp_size=1, use_remove_padding=True)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Monkey patch state_dict in AutoModelForCausalLMWithValueHead" in result.stdout


def _finished_verl_run(run_dir, step: int, tag: str) -> None:
    """A run directory as a finished verl RL run leaves it (checkpoint tracker, sharded step, dumps, metrics, DONE)."""
    ckpt = run_dir / "checkpoints"
    (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True)
    (ckpt / f"global_step_{step}" / "actor" / "model_world_size_1_rank_0.pt").write_text(tag)
    (ckpt / "latest_checkpointed_iteration.txt").write_text(str(step))
    (run_dir / "rollout_dump").mkdir()
    (run_dir / "rollout_dump" / "1.jsonl").write_text(json.dumps({"input": "q", "output": tag, "score": 1.0}) + "\n")
    for name in ("verl_metrics.jsonl", "verl_metrics.0.jsonl"):
        (run_dir / name).write_text(json.dumps({"step": 1, "data": {"critic/score/mean": 0.5, "tag": tag}}) + "\n")
    (run_dir / "raro_replay").mkdir()
    (run_dir / "DONE.json").write_text(json.dumps({"final_step": step, "config_sha256": tag}))


def _verl_identity(config: str, code: str = "code") -> dict:
    return {"config_sha256": config * 64, "code_sha256": code, "inputs": {}}


def test_a_changed_config_sets_the_old_runs_state_aside_and_a_same_config_rerun_resumes(tmp_path, caplog):
    """verl resumes whatever checkpoints/ holds and skips a finished run: under the resume rule every engine shares
    (pipeline_lib.core.checkpoint.claim_run_dir, as verl's train.run calls it), another run's checkpoints, dumps,
    metrics
    and DONE.json are moved to stale/<run digest>/ (logged), not resumed."""
    import logging

    from pipeline_lib.core.checkpoint import claim_run_dir
    from pipeline_lib.core.provenance import config_digest
    from pipeline_lib.jobs.engines.verl.train import collect_metrics, finished_step
    from pipeline_lib.jobs.engines.verl.translate import checkpoint_dir

    run_a, run_b = _verl_identity("a"), _verl_identity("b")
    digest_a, digest_b = config_digest(run_a), config_digest(run_b)
    run_dir = tmp_path / "countdown_tiny/softmax_exact/seed0"
    assert claim_run_dir(run_dir, run_a, "verl", state=None) == []  # a new run directory
    _finished_verl_run(run_dir, 2, "config-a")
    assert claim_run_dir(run_dir, run_a, "verl", state=None) == []  # the same run again: verl resumes / finds it done
    assert finished_step(checkpoint_dir(run_dir)) == 2

    with caplog.at_level(logging.WARNING, logger="pipeline_lib.core.checkpoint"):
        moved = claim_run_dir(run_dir, run_b, "verl", state=None)
    stale = run_dir / "stale" / digest_a
    assert sorted(p.name for p in moved) == sorted(["DONE.json", "checkpoints", "raro_replay", "rollout_dump",
                                                    "verl_metrics.0.jsonl", "verl_metrics.jsonl"])
    assert all(p.parent == stale and p.exists() for p in moved)
    assert (stale / "checkpoints/global_step_2/actor/model_world_size_1_rank_0.pt").read_text() == "config-a"
    assert sorted(p.name for p in run_dir.iterdir()) == ["run.json", "stale"]
    assert finished_step(checkpoint_dir(run_dir)) is None  # verl starts clean instead of resuming run a
    assert json.loads((run_dir / "run.json").read_text())["run_sha256"] == digest_b
    assert str(stale) in caplog.text and "checkpoints" in caplog.text and digest_a in caplog.text
    assert "changed: config" in caplog.text
    assert (collect_metrics(run_dir, 2)).read_text() == ""  # run a's metrics are not merged into b's

    # back to run a, then b again: each set-aside state is kept, none overwritten
    _finished_verl_run(run_dir, 1, "config-b")
    claim_run_dir(run_dir, run_a, "verl", state=None)
    _finished_verl_run(run_dir, 1, "config-a2")
    claim_run_dir(run_dir, run_b, "verl", state=None)
    assert (run_dir / "stale" / digest_b / "DONE.json").exists()
    assert (run_dir / "stale" / f"{digest_a}.1" / "rollout_dump/1.jsonl").read_text().count("config-a2") == 1

    # the same settings and inputs under edited code are another run too
    _finished_verl_run(run_dir, 1, "config-b2")
    assert claim_run_dir(run_dir, _verl_identity("b", code="edited"), "verl", state=None)


def test_a_redone_initial_model_or_new_data_is_another_run(tmp_path):
    """The RL run's config is unchanged when its SFT model is redone with another result; its identity is not."""
    from pipeline_lib.jobs.engines.verl import sft, train
    from pipeline_lib.jobs.engines.verl.train import verl_run_identity

    (tmp_path / "sft/final").mkdir(parents=True)
    (tmp_path / "sft/final/model.safetensors").write_bytes(b"weights-1")
    for name in ("train.parquet", "test.parquet"):
        (tmp_path / name).write_bytes(b"rows")
    paths = TrainPaths(tmp_path / "run", tmp_path / "train.parquet", tmp_path / "test.parquet", tmp_path / "sft/final")
    spec = RunSpec(method="grpo_exact", task="countdown_tiny", engine="verl", estimator=Estimator("grpo"))
    first = verl_run_identity("rl", spec, paths, 0, entry=train.ENTRY)
    assert set(first) == {"config_sha256", "code_sha256", "inputs"} and len(first["inputs"]) == 3
    assert verl_run_identity("rl", spec, paths, 0, entry=train.ENTRY) == first
    assert verl_run_identity("rl", spec, paths, 1, entry=train.ENTRY)["config_sha256"] != first["config_sha256"]
    (tmp_path / "sft/final/model.safetensors").write_bytes(b"weights-2")
    second = verl_run_identity("rl", spec, paths, 0, entry=train.ENTRY)
    assert second["inputs"] != first["inputs"] and second["config_sha256"] == first["config_sha256"]
    (tmp_path / "train.parquet").write_bytes(b"other rows")
    assert verl_run_identity("rl", spec, paths, 0, entry=train.ENTRY)["inputs"] != second["inputs"]
    # each kind's identity follows its own entry point's code (the SFT one imports no RL code)
    assert verl_run_identity("rl", spec, paths, 0, entry=sft.ENTRY)["code_sha256"] != first["code_sha256"]


def test_a_run_directory_from_before_the_digest_is_not_resumed(tmp_path):
    from pipeline_lib.core.checkpoint import claim_run_dir

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _finished_verl_run(run_dir, 3, "old")
    moved = claim_run_dir(run_dir, _verl_identity("c"), "verl", state=None)
    assert moved and all(p.parent == run_dir / "stale/unrecorded" for p in moved)


def agreeing_verifier(*_args) -> bool:
    return True


def hanging_verifier(*_args) -> bool:
    import time

    time.sleep(30)
    return True


def test_verifier_timeouts_and_failures_are_counted_from_the_reward_calls_of_a_v1_run(tokenizer_dir, tmp_path,
                                                                                    monkeypatch):
    """v1's rollout dump has no reward extras, so the counts were logged 0 whatever happened. verl's own reward manager
    calls the hook (a dying, a hanging and an agreeing verifier), verl's v1 writer dumps the rollouts, and each step's
    metrics count what really happened; a run without the hook's records logs null, never 0."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from pipeline_lib.core.rewards import mathverify
    from pipeline_lib.core.rewards.pool import TimeoutPool
    from pipeline_lib.jobs.engines.verl.train import collect_metrics
    from pipeline_lib.jobs.engines.verl.translate import REWARD_FUNCTION, REWARD_HEALTH_ENV, reward_health_dir

    run_dir = tmp_path / "gsm8k/grpo/seed0"
    monkeypatch.setenv(REWARD_HEALTH_ENV, str(reward_health_dir(run_dir)))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir / "tok")
    config = OmegaConf.create({"reward": {"custom_reward_function": {"path": REWARD_FUNCTION[0],
                                                                     "name": REWARD_FUNCTION[1]}}})
    manager = NaiveRewardManager(config, tokenizer, compute_score=get_custom_reward_fn(config))
    truth = {"ground_truth": "3"}
    # step 1: two rollouts whose verifier worker dies, two whose verifier hangs; step 2: all verified
    verifiers = {1: ["tests.core.rewards.test_reward_concurrency:die_with"] * 2
                    + ["tests.jobs.engines.verl.test_verl_engine:hanging_verifier"] * 2,
                 2: ["tests.jobs.engines.verl.test_verl_engine:agreeing_verifier"] * 4}
    saved = mathverify._pool
    try:
        for step, targets in verifiers.items():
            outputs, scores = [], []
            for index, target in enumerate(targets):
                mathverify._pool = TimeoutPool(target, processes=1, timeout=1.0)
                try:
                    response = tokenizer(f"<answer>{step}.{index}5</answer>", return_tensors="pt",  # not an integer
                                         add_special_tokens=False)["input_ids"][0]
                    padded = torch.cat([response, torch.full((4,), tokenizer.pad_token_id)])
                    prompt = torch.tensor([tokenizer.pad_token_id, 5, 6])
                    item = DataProto.from_dict(
                        tensors={"prompts": prompt[None], "responses": padded[None],
                                 "attention_mask": torch.cat([torch.tensor([0, 1, 1]), torch.ones(len(response)),
                                                              torch.zeros(4)]).long()[None]},
                        non_tensors={"data_source": np.array(["openai/gsm8k"], dtype=object),
                                     "reward_model": np.array([truth], dtype=object),
                                     "extra_info": np.array([{"index": 0, "split": "train"}], dtype=object)})
                    result = manager.loop.run_until_complete(manager.run_single(item))
                finally:
                    mathverify._pool.close()
                scores.append(result["reward_score"])
                outputs.append(tokenizer.decode(padded, skip_special_tokens=True))  # as v1's _log_rollout_data
            keys = [f"prompt0_{session}_0" for session in range(4)]
            PPOTrainer._write_generations(["q"] * 4, outputs, [truth["ground_truth"]] * 4, scores, {"uid": keys},
                                          str(run_dir / "rollout_dump"), step)
    finally:
        mathverify._pool = saved
    (run_dir / "verl_metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "data": {"critic/score/mean": 0.0}}) + "\n" for step in (1, 2)))
    dumped = json.loads((run_dir / "rollout_dump/1.jsonl").read_text().splitlines()[0])
    assert sorted(dumped) == ["gts", "input", "output", "score", "step", "uid"]  # what v1 hands over

    metrics = [json.loads(line) for line in collect_metrics(run_dir, 2).read_text().splitlines()]
    assert [(m["softmaxgrpo/reward_failures"], m["softmaxgrpo/reward_timeouts"]) for m in metrics] == [(2, 2), (0, 0)]

    records = reward_health_dir(run_dir)
    for path in records.iterdir():
        path.unlink()
    records.rmdir()  # a run from before the hook kept records: unknown, not 0
    metrics = [json.loads(line) for line in collect_metrics(run_dir, 2).read_text().splitlines()]
    assert [(m["softmaxgrpo/reward_failures"], m["softmaxgrpo/reward_timeouts"]) for m in metrics] == [(None, None)] * 2


def test_every_preflight_kind_builds_its_spec_with_the_real_runs_builder_and_translates(tmp_path, monkeypatch):
    """The preflight's runs are the paper runs' specs (the registry's builders) on the tiny model: each kind's spec
    keeps the paper row's estimator and tau and becomes overrides whose every key verl knows."""
    from pipeline_lib.core.config import load_config_file
    from pipeline_lib.jobs.engines.verl.preflight import KINDS, kind_spec, load_preflight_config
    from pipeline_lib.jobs.engines.verl.translate import sft_overrides
    from pipeline_lib.jobs.engines.verl.validate import check_override_keys

    monkeypatch.chdir(REPO)
    section, base = load_preflight_config(load_config_file(REPO / "config/preflight.yaml")["preflight"])
    runs = []
    for kind, (trainer, _) in KINDS.items():
        spec = kind_spec(kind, section, base, "/m/tiny")
        assert spec.task == section["task"] and spec.model == "/m/tiny" and spec.extra_overrides, kind
        if kind == "softmax":
            assert spec.tau == base["train"]["task_settings"][section["paper_task"]]["tau"]
        paths = TrainPaths(tmp_path / kind, tmp_path / "train.parquet", tmp_path / "val.parquet", tmp_path / "init")
        runs.append((kind, trainer, (sft_overrides if trainer == "sft" else rl_overrides)(spec, paths, 0)))
    assert check_override_keys(runs, cache_dir=tmp_path)["composed"] == 2
