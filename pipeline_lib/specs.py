"""Config -> the spec (JSON settings) of one job, for the local engine, evaluation and the generation backends.

Plain functions of the config with no engine import, so the planning layer (:mod:`pipeline_lib.plan`) and the
engines can both import them at module level without a cycle. Which runs exist is decided in
:mod:`pipeline_lib.plan`; this module only says how one run of a kind is configured.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = [
    "IMAGENET_SWEEP_KEYS",
    "PROMPTS_WITHOUT_REFERENCE",
    "ablation_method",
    "ablation_run_spec",
    "ablation_tau",
    "baseline_spec",
    "baseline_train_data",
    "eval_spec",
    "generation_spec",
    "imagenet_run_spec",
    "opd_teacher_spec",
    "reference_prompts",
    "rl_run_spec",
    "rl_train_data",
    "scale_config",
    "sft_run_spec",
    "tiny_task_spec",
]

#: Keys of the ``imagenet`` section that choose *which* runs exist, not how one run trains;
#: they stay out of a run's parameters so adding a seed or an M does not rerun the others.
IMAGENET_SWEEP_KEYS = ("enabled", "label", "objectives", "rollouts", "seeds", "one_job_per_seed")

#: Datasets whose RL prompts carry no expert answer; their prompts with one are ``rl_sim_train`` (Countdown: the
#: GOLD prompts, which have reference solutions).
PROMPTS_WITHOUT_REFERENCE = ("countdown",)


def imagenet_run_spec(section: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in section.items() if key not in IMAGENET_SWEEP_KEYS}


def tiny_task_spec(config: Mapping[str, Any]) -> dict[str, Any]:
    """What generates one tiny task: the ``data.tiny`` section minus the task list and reward weights."""
    return {k: v for k, v in config["data"]["tiny"].items() if k not in ("tasks", "reward_weights")}


def sft_run_spec(config: Mapping[str, Any]) -> dict[str, Any]:
    return {**config["train"]["sft"], "model": config["train"]["model"]}


def rl_run_spec(config: Mapping[str, Any], method: str) -> dict[str, Any]:
    """The shared RL settings plus one method's advantage and reward: paired methods differ in nothing else."""
    if method not in config["train"]["methods"]:
        raise ValueError(f"unknown method {method!r}; configured: {sorted(config['train']['methods'])}")
    spec = config["train"]["methods"][method]
    return {**config["train"]["rl"], "advantage": spec["advantage"],
            "advantage_params": {k: v for k, v in spec.items() if k not in ("advantage", "reward")},
            "reward_weights": {"similarity": 1.0} if spec["reward"] == "similarity" else None}


def reference_prompts(task: str) -> str:
    """RL prompts that carry an expert answer (``extra_info.reference``)."""
    kind = "rl_sim_train" if task in PROMPTS_WITHOUT_REFERENCE else "rl_train"
    return f"results/data/{task}/{kind}.parquet"


def rl_train_data(config: Mapping[str, Any], task: str, method: str) -> str:
    """Similarity-reward runs need the expert answer of every prompt; verifier runs train on all prompts."""
    if config["train"]["methods"][method]["reward"] == "similarity":
        return reference_prompts(task)
    return f"results/data/{task}/rl_train.parquet"


def baseline_train_data(task: str, method: str) -> str:
    """RL-Logit, RARO and Iterative DPO use the expert answer of every prompt, so they train on prompts that have
    one (on Countdown the GOLD prompts: its other RL prompts have no demonstration to prefer or score)."""
    return (reference_prompts(task) if method in ("rl_logit", "raro", "iterative_dpo")
            else f"results/data/{task}/rl_train.parquet")


def eval_spec(config: Mapping[str, Any]) -> dict[str, Any]:
    """How a checkpoint is evaluated, without the transfer-benchmark keys (changing those reruns no evaluation)."""
    return {key: value for key, value in config["eval"].items() if key != "transfer"}


def generation_spec(config: Mapping[str, Any], method: str, batch_key: str = "batch_size") -> dict[str, Any]:
    """How a baseline generates on its GPU path: the evaluation backend and engine settings (:func:`eval_spec`)
    with the method's own length, temperature, batch (``batch_key``) and, where set, backend."""
    own = config["train"]["baselines"][method]
    return {**eval_spec(config), "backend": own.get("backend") or config["eval"]["backend"],
            "max_new_tokens": own["max_new_tokens"], "temperature": own["temperature"], "batch_size": own[batch_key]}


def _group_rl_spec(config: Mapping[str, Any], advantage: str) -> dict[str, Any]:
    """``train.rl`` with a method's advantage and the task's verifier reward, as ``rl_run_spec`` builds it."""
    return {**config["train"]["rl"], "advantage": advantage, "advantage_params": {}, "reward_weights": None}


def baseline_spec(config: Mapping[str, Any], method: str) -> dict[str, Any]:
    """The local-engine run spec of one baseline: its own section plus the shared SFT / RL settings it builds on."""
    section = config["train"]["baselines"]
    own = {key: value for key, value in (section.get(method) or {}).items() if key != "tasks"}
    if method == "base":
        return {"model": config["train"]["model"]}
    if method == "rationalization":
        return {"annotate": {k: v for k, v in own.items() if k != "annotator"}, "sft": sft_run_spec(config)}
    if method == "iterative_dpo":
        return own
    if method == "rl_logit":
        return {**_group_rl_spec(config, own["advantage"]), "variant": own["variant"]}
    if method == "raro":
        return {**_group_rl_spec(config, own["advantage"]), "raro": {k: v for k, v in own.items() if k != "advantage"}}
    if method == "opd":
        return _group_rl_spec(config, "grpo")  # the advantage is only logged, the loss is the reverse KL
    raise ValueError(f"unknown baseline {method!r}; baselines: base, rationalization, iterative_dpo, rl_logit, raro, "
                     f"opd")


def opd_teacher_spec(config: Mapping[str, Any]) -> dict[str, Any]:
    """SFT settings with the teacher's steps and lr; a ``scratch`` teacher may also be larger (``model``)."""
    teacher = config["train"]["baselines"]["opd"]["teacher"]
    if teacher["init"] == "sft" and teacher.get("model"):
        raise ValueError("train.baselines.opd.teacher.model overrides need init: scratch (an SFT-initialised teacher "
                         "has the SFT model's shape)")
    spec = sft_run_spec(config)
    return {**spec, "steps": teacher["steps"], "lr": teacher["lr"],
            "warmup_steps": min(spec["warmup_steps"], teacher["steps"] - 1),
            "model": {**spec["model"], **teacher.get("model", {})}}


def ablation_method(tau: float, group_size: int) -> str:
    """Run name of one ablation cell, e.g. ``softmax_tau0p1_m4`` (tau 0.1, M 4)."""
    return f"softmax_tau{tau:g}_m{group_size}".replace(".", "p")


def ablation_tau(text: str) -> float:
    return float(text.replace("p", "."))


def ablation_run_spec(config: Mapping[str, Any], tau: float, group_size: int) -> dict[str, Any]:
    """SoftmaxGRPO-Exact's spec with one (tau, M): every other setting is the main runs'."""
    steps = config["train"]["ablation"]["steps"] or config["train"]["rl"]["steps"]
    return {**_group_rl_spec(config, "softmax"), "advantage_params": {"tau": tau}, "group_size": group_size,
            "steps": steps}


def scale_config(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The config with one scale's base model: ``train.model`` overridden (local), ``train.verl.model`` (verl)."""
    models = config["train"]["scale"]["models"]
    if name not in models:
        raise ValueError(f"unknown scale {name!r}; train.scale.models: {sorted(models)}")
    changed = copy.deepcopy(dict(config))
    changed["train"]["model"] = {**changed["train"]["model"], **models[name].get("model", {})}
    if "verl" in changed["train"] and models[name].get("hub"):
        changed["train"]["verl"]["model"] = models[name]["hub"]
    return changed
