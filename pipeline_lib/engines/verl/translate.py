"""Pipeline run spec -> Hydra overrides for ``verl.trainer.main_ppo`` (RL) and ``verl.trainer.sft_trainer`` (SFT).

Plain Python, no verl import: Snakemake builds the specs at parse time and :mod:`.validate` checks the
overrides against verl's own config tree. Every hyperparameter comes from the config
(``train.verl`` in ``config/paper.yaml``: the App. B tables), none from a shell script.

Two App. B rows need a reading, recorded here and in ``config/README.md``; both follow the authors' own
configs (``softmaxgrpo/configs/base.yaml`` of jeffhernandez1995/softmaxgrpo): "rollout batch size" is verl's
``data.train_batch_size`` (prompts per step; each gets M rollouts), and "mini-batch size (per device)" is
``ppo_micro_batch_size_per_gpu``, with ``ppo_mini_batch_size`` the whole rollout batch: one on-policy
policy update per step.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "ESTIMATOR_MODULE",
    "OPD_TEACHER_DEFAULTS",
    "REWARD_FUNCTION",
    "REWARD_HEALTH_ENV",
    "RL_LOGIT_AGENT_LOOPS",
    "RL_LOGIT_VARIANTS",
    "VERL_ADVANTAGES",
    "VERL_BASELINES",
    "TrainPaths",
    "baseline_overrides",
    "baseline_rl_spec",
    "checkpoint_dir",
    "experiment_name",
    "hydra_value",
    "metrics_log_path",
    "opd_teacher_settings",
    "reward_health_dir",
    "rl_logit_agent_loop",
    "rl_overrides",
    "rl_spec",
    "rollout_dump_dir",
    "sft_overrides",
    "sft_spec",
    "slurm_resources",
    "task_methods",
]

#: Module that registers our estimators; Ray workers import it through VERL_USE_EXTERNAL_MODULES too.
ESTIMATOR_MODULE = "pipeline_lib.engines.verl.estimators"
#: Where the reward hook records verifier timeouts/failures (:func:`reward_health_dir`), set in the Ray runtime env.
REWARD_HEALTH_ENV = "PIPELINE_REWARD_HEALTH_DIR"
#: verl's custom reward hook: the pipeline's one reward registry, recording verifier timeouts/failures (reward.py).
REWARD_FUNCTION = ("pkg://pipeline_lib.engines.verl.reward", "compute_score")

#: Our advantage registry's method -> (verl estimator name, extra algorithm overrides). GRPO, Dr.GRPO
#: and RLOO use verl's own estimators (tests check they equal ours); the rest are ours (estimators.py).
VERL_ADVANTAGES: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": ("grpo", {}),
    "dr_grpo": ("grpo", {"algorithm.norm_adv_by_std_in_grpo": False}),
    "rloo": ("rloo", {}),
    "softmax": ("softmax", {}),
    "sage": ("softmax", {}),
    "softmax_ess": ("softmax_ess", {}),
    "maxrl": ("maxrl", {}),
    "reinforce": ("reinforce", {}),
}

PROJECT = "softmaxgrpo"
_SAFE = re.compile(r"^[A-Za-z0-9_./~+@-]+$")


def hydra_value(value: Any) -> str:
    """A Python value in Hydra's override grammar (strings quoted unless plainly safe)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite value {value!r} cannot be a verl override")
        return repr(value)
    if isinstance(value, str):
        if _SAFE.match(value) and value.lower() not in ("true", "false", "null") and not _is_number(value):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    raise TypeError(f"cannot express {type(value).__name__} {value!r} as a Hydra override")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _overrides(pairs: Mapping[str, Any]) -> list[str]:
    return [f"{key}={hydra_value(value)}" for key, value in pairs.items()]


# --- run specs from the pipeline config -------------------------------------------------------------------------

def _verl_section(config: Mapping[str, Any]) -> Mapping[str, Any]:
    return config["train"]["verl"]


def _task_section(config: Mapping[str, Any], task: str) -> Mapping[str, Any]:
    tasks = _verl_section(config)["tasks"]
    if task not in tasks:
        raise ValueError(f"train.tasks has {task!r} but train.verl.tasks has no entry for it (App. B settings: "
                         f"group_size, batch_size, steps, lengths, GPUs); configured: {sorted(tasks)}")
    return tasks[task]


def task_methods(config: Mapping[str, Any], task: str) -> list[str]:
    """RL methods trained on ``task``: its ``train.verl.tasks.<task>.methods`` list, else every method."""
    methods = list(config["train"]["methods"])
    listed = _verl_section(config)["tasks"].get(task, {}).get("methods")
    if listed is None:
        return methods
    unknown = sorted(set(listed) - set(methods))
    if unknown:
        raise ValueError(f"train.verl.tasks.{task}.methods lists {unknown}, which are not in train.methods "
                         f"({methods})")
    return list(listed)


def slurm_resources(config: Mapping[str, Any], task: str, kind: str) -> dict[str, Any]:
    """Nodes and per-node GPUs of a verl job, from the same settings that become trainer.nnodes/n_gpus_per_node.

    The rules take these from here (the App. B compute setup is part of the experiment, and must match the
    overrides); the site-specific rest (CPUs, memory, runtime, partition) lives in profiles/slurm. ``kind`` is
    ``sft``, ``rl`` or a verl baseline's name (its RL row: OPD's teacher takes GPUs inside the same allocation).
    """
    verl = _verl_section(config)
    row = _task_section(config, task)
    if kind == "sft":
        return {"nodes": 1, "gres": f"gpu:{row.get('sft', {}).get('gpus_per_node', verl['sft']['gpus_per_node'])}"}
    merged = {**verl["rl"], **row}
    nodes = int(merged["nodes"])
    if kind != "rl" and kind not in VERL_BASELINES:
        raise ValueError(f"slurm_resources kind {kind!r}: one of sft, rl, {', '.join(VERL_BASELINES)}")
    return {"nodes": nodes, "gres": f"gpu:{merged['gpus_per_node']}"}


def rl_spec(config: Mapping[str, Any], task: str, method: str) -> dict[str, Any]:
    """One RL run's settings: shared ``train.verl.rl``, the task's App. B row, the method's advantage/reward.

    Paired methods (GRPO vs SoftmaxGRPO) differ only in ``advantage`` and ``tau``.
    """
    if method not in config["train"]["methods"]:
        raise ValueError(f"unknown method {method!r}; configured: {sorted(config['train']['methods'])}")
    verl = _verl_section(config)
    row = _task_section(config, task)
    entry = config["train"]["methods"][method]
    advantage = entry["advantage"]
    if advantage not in VERL_ADVANTAGES:
        raise ValueError(f"train.methods.{method}: advantage {advantage!r} has no verl estimator; "
                         f"available: {sorted(VERL_ADVANTAGES)}")
    spec = {**verl["rl"], **{k: v for k, v in row.items() if k not in ("methods", "similarity_weights", "sft")}}
    tau = row.get("tau", entry.get("tau")) if VERL_ADVANTAGES[advantage][0] == "softmax" else None
    if VERL_ADVANTAGES[advantage][0] == "softmax" and tau is None:
        raise ValueError(f"method {method!r} on task {task!r} is SoftmaxGRPO but neither train.methods.{method}.tau "
                         f"nor train.verl.tasks.{task}.tau is set")
    spec.pop("tau", None)
    reward_weights = dict(row.get("similarity_weights") or {"similarity": 1.0}) \
        if entry["reward"] == "similarity" else None
    spec.update({"task": task, "method": method, "model": verl["model"], "advantage": advantage, "tau": tau,
                 "reward_weights": reward_weights, "extra_overrides": list(verl["extra_overrides"]["rl"])})
    # Any other estimator parameter (softmax_ess's ess_fraction) reaches verl's algorithm config as it is.
    other = {k: v for k, v in entry.items() if k not in ("advantage", "reward", "tau")}
    if other:
        spec["estimator_params"] = other
    return spec


#: Baselines that run as verl RL jobs (paper App. B): OPD through verl's ``distillation.*`` config, RL-Logit and
#: RARO through the pipeline's agent loops. Each keeps the task's App. B RL row (model, M, batch, steps, lengths,
#: clip, KL, lr), so only the method differs from the GRPO runs it is compared with.
VERL_BASELINES = ("opd", "rl_logit", "raro")


def baseline_rl_spec(config: Mapping[str, Any], task: str, method: str) -> dict[str, Any]:
    """One verl baseline run: the task's App. B RL row, the baseline's estimator (default GRPO) and its section
    ``train.baselines.<method>`` (under ``baseline_settings``); the task's verifier reward (only logged by OPD)."""
    if method not in VERL_BASELINES:
        raise ValueError(f"{method!r} is not a verl baseline; verl baselines: {VERL_BASELINES}")
    verl = _verl_section(config)
    row = _task_section(config, task)
    settings = dict(config["train"].get("baselines", {}).get(method) or {})
    advantage = settings.get("advantage", "grpo")
    if advantage not in VERL_ADVANTAGES or VERL_ADVANTAGES[advantage][0] == "softmax":
        raise ValueError(f"train.baselines.{method}.advantage {advantage!r}: a baseline uses a tau-free estimator "
                         f"({sorted(a for a, (e, _) in VERL_ADVANTAGES.items() if e != 'softmax')})")
    spec = {**verl["rl"], **{k: v for k, v in row.items() if k not in ("methods", "similarity_weights", "sft", "tau")}}
    spec.update({"task": task, "method": method, "model": verl["model"], "advantage": advantage, "tau": None,
                 "reward_weights": None, "baseline": method, "baseline_settings": settings,
                 "extra_overrides": list(verl["extra_overrides"]["rl"])})
    return spec


def baseline_overrides(spec: Mapping[str, Any], paths: TrainPaths) -> dict[str, Any]:
    """The overrides a verl baseline adds to (or replaces in) its RL run's."""
    builders = {"opd": _opd_overrides, "rl_logit": _rl_logit_overrides, "raro": _raro_overrides}
    return builders[spec["baseline"]](spec, paths)


#: OPD's teacher placement when ``train.baselines.opd.verl`` leaves it out (see the schema for each key). The
#: teacher (Qwen3-8B, 16 GB in bf16) fits one GPU; 4 of each node's 8 leave the student 4, which still splits
#: every App. B rollout batch evenly (7 or 6 would not split 64 x 8 rollouts).
OPD_TEACHER_DEFAULTS = {"gpus_per_node": 4, "tensor_parallel_size": 1, "gpu_memory_utilization": 0.85}


def opd_teacher_settings(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The OPD teacher: its model (``teacher.hub``) and its GPUs (``train.baselines.opd.verl`` over the defaults).

    The teacher's vLLM replicas take ``gpus_per_node`` GPUs of each of the task's nodes (verl's ``teacher_pool``);
    the student trains on the rest, so the job keeps the App. B GPUs (one node for an 8-GPU task), not a second
    node for the teacher.
    """
    settings = spec["baseline_settings"]
    hub = (settings.get("teacher") or {}).get("hub")
    if not hub:
        raise ValueError(f"train.baselines.opd.teacher.hub must name the teacher (the paper's: Qwen/Qwen3-8B) for the "
                         f"verl OPD run on task {spec['task']!r}; the trained tiny teacher exists on the local engine "
                         f"only")
    teacher = {**OPD_TEACHER_DEFAULTS, **(settings.get("verl") or {})}
    unknown = sorted(set(teacher) - set(OPD_TEACHER_DEFAULTS))
    if unknown:
        raise ValueError(f"train.baselines.opd.verl has unknown key(s) {unknown}; known: "
                         f"{sorted(OPD_TEACHER_DEFAULTS)}")
    gpus, student = int(teacher["gpus_per_node"]), spec["gpus_per_node"] - int(teacher["gpus_per_node"])
    if student < 1:
        raise ValueError(f"train.baselines.opd.verl.gpus_per_node ({gpus}) leaves no GPU of the task's "
                         f"{spec['gpus_per_node']} per node to the student (task {spec['task']!r})")
    if gpus % teacher["tensor_parallel_size"]:
        raise ValueError(f"train.baselines.opd.verl.tensor_parallel_size ({teacher['tensor_parallel_size']}) must "
                         f"divide train.baselines.opd.verl.gpus_per_node ({gpus}) (task {spec['task']!r})")
    rollouts = spec["batch_size"] * spec["group_size"]
    per_gpu, rest = divmod(rollouts, student * spec["nodes"])
    if rest or per_gpu % spec["mini_batch_per_device"]:
        raise ValueError(f"OPD on task {spec['task']!r}: train.baselines.opd.verl.gpus_per_node = {gpus} leaves the "
                         f"student {student} GPUs per node x {spec['nodes']} nodes, which do not split the "
                         f"{rollouts} rollouts per step into whole micro-batches of {spec['mini_batch_per_device']}; "
                         f"choose a teacher share that does (4 of 8 does for every App. B task)")
    return {"model": hub, **teacher, "student_gpus_per_node": student}


def _opd_overrides(spec: Mapping[str, Any], paths: TrainPaths) -> dict[str, Any]:
    """On-policy distillation (lu2025) through verl's ``distillation.*``: student rollouts, per-token reverse KL to
    the teacher as the policy-gradient reward (``k1`` + ``use_policy_gradient``); the task reward is only logged.

    The teacher's vLLM replicas take ``train.baselines.opd.verl.gpus_per_node`` GPUs on each of the task's nodes
    and the student the rest (:func:`opd_teacher_settings`), inside the task's own allocation. The student's batch
    sizes are global, so the update is the GRPO run's on fewer GPUs. The student's PPO clip applies to the
    distillation update, and verl drops the policy loss (KL to the reference included) when task rewards are off,
    so the reference model is not loaded.
    """
    teacher = opd_teacher_settings(spec)
    base = "distillation.teacher_models.teacher_model"
    return {
        "trainer.n_gpus_per_node": teacher["student_gpus_per_node"],
        "distillation.enabled": True,
        "distillation.distillation_loss.loss_mode": "k1",
        "distillation.distillation_loss.use_policy_gradient": True,
        "distillation.distillation_loss.use_task_rewards": False,
        "distillation.distillation_loss.clip_ratio_low": float(spec["clip_low"]),
        "distillation.distillation_loss.clip_ratio_high": float(spec["clip_high"]),
        "distillation.n_gpus_per_node": teacher["gpus_per_node"],
        "distillation.nnodes": spec["nodes"],
        f"{base}.model_path": teacher["model"],
        f"{base}.inference.tensor_model_parallel_size": teacher["tensor_parallel_size"],
        f"{base}.inference.gpu_memory_utilization": float(teacher["gpu_memory_utilization"]),
        "actor_rollout_ref.actor.use_kl_loss": False,
        "actor_rollout_ref.actor.kl_loss_coef": 0.0,
    }


#: verl 0.9.1 trains with its v1 (TransferQueue) trainer unless ``trainer.use_v1=false``. The v1 trainer hands an
#: agent-loop manager a ``TensorDict`` and expects it to put the outputs into TransferQueue itself; RARO's manager
#: (``raro_loop.RaroAgentLoopManager``) subclasses the legacy ``AgentLoopManager`` and reads ``DataProto.meta_info``
#: (step boundaries), and RL-Logit's loop was validated under the legacy manager's ``DataProto`` contract only. Those
#: runs therefore use the legacy trainer, explicitly; validation runs each run's own trainer start-up and refuses a
#: legacy manager on v1 (``validate._check_v1_trainer``), and the tests drive RARO's and RL-Logit's loops through the
#: legacy manager with a ``DataProto`` batch (``tests/test_verl_raro.py``, ``tests/test_verl_trainer_path.py``).
#: GRPO/SoftmaxGRPO and OPD use verl's default (v1, with verl's own manager and single-turn loop).
LEGACY_TRAINER = {"trainer.use_v1": False}


#: verl agent loop registry for RL-Logit (``rl_logit_loop.RLLogitAgentLoop``, one entry per variant).
RL_LOGIT_AGENT_LOOPS = Path(__file__).resolve().with_name("rl_logit_agent_loops.yaml")
RL_LOGIT_VARIANTS = ("logprob", "neg_perplexity")


def rl_logit_agent_loop(variant: str) -> str:
    """The registered agent loop name of an RL-Logit variant (an entry of :data:`RL_LOGIT_AGENT_LOOPS`)."""
    return f"rl_logit_{variant}"


def _rl_logit_overrides(spec: Mapping[str, Any], paths: TrainPaths) -> dict[str, Any]:
    """RL-Logit: every rollout runs the pipeline's agent loop, which scores log pi(a* | q, z) on the rollout server
    (current weights, no gradient) and hands it to verl as the rollout's reward (``rm_scores``)."""
    variant = spec["baseline_settings"].get("variant", "logprob")
    if variant not in RL_LOGIT_VARIANTS:
        raise ValueError(f"train.baselines.rl_logit.variant {variant!r} not in {RL_LOGIT_VARIANTS}")
    return {
        **LEGACY_TRAINER,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(RL_LOGIT_AGENT_LOOPS),
        "actor_rollout_ref.rollout.agent.default_agent_loop": rl_logit_agent_loop(variant),
    }


#: RARO's agent loops (``raro_loop.RaroPolicyLoop`` / ``RaroCriticLoop``), its dataset and agent loop manager.
RARO_AGENT_LOOPS = Path(__file__).resolve().with_name("raro_agent_loops.yaml")
RARO_MODULE = "pipeline_lib.engines.verl.raro_loop"
#: Rollout prompt tokens beyond question + two answers that a critic prompt may use (system prompt, chat template,
#: "Answer 1/2" framing and instructions); should a critic prompt still not fit, the loop shortens the expert answer.
RARO_CRITIC_PROMPT_OVERHEAD = 256


def raro_replay_dir(run_dir: str | Path) -> Path:
    """Where the RARO replay buffer is saved after every step (a resumed run reloads it from here)."""
    return Path(run_dir) / "raro_replay"


def _raro_overrides(spec: Mapping[str, Any], paths: TrainPaths) -> dict[str, Any]:
    """RARO: per step ``batch_size`` policy rows plus ``critic_prompts_per_step`` critic rows (each M rollouts, one
    GRPO update over both), laid out by ``raro_loop.RaroDataset`` and read in order; the pipeline's agent loops
    reward both roles by the critic's verdicts; the replay buffer lives beside the run.

    The PPO update is one mini-batch over both roles, as the GRPO run's is one over its batch, and the rollout
    prompt length grows so a critic prompt (question, expert answer, policy answer) fits; the task prompts are
    filtered at the task's own ``max_prompt_tokens`` as in the GRPO runs.
    """
    settings = spec["baseline_settings"]
    keys = ("critic_system_prompt", "critic_max_new_tokens", "critic_prompts_per_step", "replay_fraction",
            "replay_size", "rewards")
    missing = [k for k in keys if k not in settings]
    if missing:
        raise ValueError(f"train.baselines.raro lacks {missing} (the schema's defaults fill them; is the config "
                         f"validated?)")
    policy, critic = int(spec["batch_size"]), int(settings["critic_prompts_per_step"])
    n_gpus = spec["gpus_per_node"] * spec["nodes"]
    total = policy + critic
    if total % n_gpus:
        raise ValueError(f"RARO on task {spec['task']!r}: batch_size + train.baselines.raro.critic_prompts_per_step = "
                         f"{total} prompts must split evenly over the {n_gpus} GPUs; choose critic_prompts_per_step "
                         f"accordingly")
    if settings.get("critic_decoding", "free") != "free":
        raise ValueError(f"train.baselines.raro.critic_decoding {settings['critic_decoding']!r}: the verl engine's "
                         f"critic writes its reply (`free`); constrained `choice` decoding exists on the local engine "
                         f"only")
    if settings["critic_max_new_tokens"] > spec["max_response_tokens"]:
        raise ValueError(f"train.baselines.raro.critic_max_new_tokens ({settings['critic_max_new_tokens']}) exceeds "
                         f"the task's max_response_tokens ({spec['max_response_tokens']})")
    return {
        **LEGACY_TRAINER,
        "data.train_batch_size": total,
        "data.shuffle": False,
        "data.custom_cls.path": f"pkg://{RARO_MODULE}",
        "data.custom_cls.name": "RaroDataset",
        "+data.raro": {"policy_per_step": policy, "critic_per_step": critic,
                       "replay_slots": round(float(settings["replay_fraction"]) * critic), "steps": spec["steps"]},
        "actor_rollout_ref.actor.ppo_mini_batch_size": total,  # one update per step, as the GRPO runs
        "actor_rollout_ref.rollout.prompt_length": spec["max_prompt_tokens"] + 2 * spec["max_response_tokens"]
        + RARO_CRITIC_PROMPT_OVERHEAD,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(RARO_AGENT_LOOPS),
        "actor_rollout_ref.rollout.agent.default_agent_loop": "single_turn_agent",  # validation rows: the verifier
        "+actor_rollout_ref.rollout.agent.agent_loop_manager_class": f"{RARO_MODULE}.RaroAgentLoopManager",
        "+raro": {"critic_system_prompt": settings["critic_system_prompt"],
                  "critic_max_new_tokens": int(settings["critic_max_new_tokens"]),
                  "replay_size": int(settings["replay_size"]),
                  "rewards": {role: {v: float(r) for v, r in settings["rewards"][role].items()}
                              for role in ("policy", "critic")},
                  "state_dir": str(raro_replay_dir(paths.run_dir))},
    }


def sft_spec(config: Mapping[str, Any], task: str) -> dict[str, Any]:
    """The SFT run of ``task`` (the start of its RL runs): shared ``train.verl.sft`` plus the task's ``sft``."""
    verl = _verl_section(config)
    row = _task_section(config, task)
    return {**verl["sft"], **row.get("sft", {}), "task": task, "model": verl["model"],
            "extra_overrides": list(verl["extra_overrides"]["sft"])}


# --- run directory layout ----------------------------------------------------------------------------------------

def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def rollout_dump_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "rollout_dump"


def reward_health_dir(run_dir: str | Path) -> Path:
    """Where the reward hook records verifier timeouts/failures (verl's v1 trainer hands them over nowhere)."""
    return Path(run_dir) / "reward_health"


def metrics_log_path(run_dir: str | Path) -> Path:
    """verl's file logger target; each attempt's file is rotated aside first (verl opens it with "wb")."""
    return Path(run_dir) / "verl_metrics.jsonl"


def experiment_name(spec: Mapping[str, Any], seed: int) -> str:
    return f"{spec['task']}-{spec.get('method', 'sft')}-seed{seed}"


class TrainPaths:
    """The files one run reads and writes; fixed at parse time so the overrides are validated exactly."""

    def __init__(self, run_dir: str | Path, train_files: str | Path, val_files: str | Path | None = None,
                 init: str | Path | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.train_files = Path(train_files)
        self.val_files = Path(val_files) if val_files is not None else None
        self.init = Path(init) if init is not None else None


# --- overrides ---------------------------------------------------------------------------------------------------

def rl_overrides(spec: Mapping[str, Any], paths: TrainPaths, seed: int) -> list[str]:
    """Overrides for ``python -m verl.trainer.main_ppo`` (verl's ``ppo_trainer`` config)."""
    if paths.init is None or paths.val_files is None:
        raise ValueError("an RL run needs the initial (SFT) model and validation prompts")
    estimator, algorithm_extra = VERL_ADVANTAGES[spec["advantage"]]
    pairs: dict[str, Any] = {
        "algorithm.adv_estimator": estimator,
        **algorithm_extra,
        "algorithm.use_kl_in_reward": False,
        "data.train_files": str(paths.train_files),
        "data.val_files": str(paths.val_files),
        "data.train_batch_size": spec["batch_size"],
        "data.max_prompt_length": spec["max_prompt_tokens"],
        "data.max_response_length": spec["max_response_tokens"],
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        "data.seed": seed,
        "actor_rollout_ref.model.path": str(paths.init),
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.model.enable_gradient_checkpointing": True,
        "actor_rollout_ref.actor.optim.lr": float(spec["lr"]),
        "actor_rollout_ref.actor.optim.weight_decay": float(spec["weight_decay"]),
        # One on-policy update per rollout batch, App. B's per-device mini-batch as the micro-batch (authors' runs).
        "actor_rollout_ref.actor.ppo_mini_batch_size": spec["batch_size"],
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": spec["mini_batch_per_device"],
        "actor_rollout_ref.actor.ppo_epochs": spec["ppo_epochs"],
        "actor_rollout_ref.actor.clip_ratio_low": float(spec["clip_low"]),
        "actor_rollout_ref.actor.clip_ratio_high": float(spec["clip_high"]),
        "actor_rollout_ref.actor.use_kl_loss": spec["kl_coef"] > 0,
        "actor_rollout_ref.actor.kl_loss_coef": float(spec["kl_coef"]),
        "actor_rollout_ref.actor.kl_loss_type": spec["kl_loss_type"],
        "actor_rollout_ref.actor.loss_agg_mode": spec["loss_agg_mode"],
        "actor_rollout_ref.actor.entropy_coeff": 0.0,
        "actor_rollout_ref.actor.grad_clip": float(spec["grad_clip"]),
        "actor_rollout_ref.rollout.name": spec["rollout_engine"],
        "actor_rollout_ref.rollout.n": spec["group_size"],
        "actor_rollout_ref.rollout.temperature": float(spec["temperature"]),
        "actor_rollout_ref.rollout.tensor_model_parallel_size": spec["rollout_tp"],
        "actor_rollout_ref.rollout.gpu_memory_utilization": float(spec["gpu_memory_utilization"]),
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": spec["micro_batch_per_gpu"],
        "actor_rollout_ref.rollout.seed": seed,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": spec["micro_batch_per_gpu"],
        "reward.custom_reward_function.path": REWARD_FUNCTION[0],
        "reward.custom_reward_function.name": REWARD_FUNCTION[1],
        "trainer.total_training_steps": spec["steps"],
        # The step count bounds the run; epochs only need to be enough to reach it.
        "trainer.total_epochs": 1000,
        "trainer.n_gpus_per_node": spec["gpus_per_node"],
        "trainer.nnodes": spec["nodes"],
        "trainer.save_freq": spec["save_freq"],
        "trainer.test_freq": spec["test_freq"],
        "trainer.val_before_train": True,  # the authors' runs: a step-0 point on the validation curve
        "trainer.resume_mode": "auto",
        "trainer.default_local_dir": str(checkpoint_dir(paths.run_dir)),
        # Disk, not training: a 1.5B actor checkpoint with optimizer state is tens of GB; resuming needs the last.
        "trainer.max_actor_ckpt_to_keep": 2,
        "trainer.rollout_data_dir": str(rollout_dump_dir(paths.run_dir)),
        "trainer.logger": ["console", "file"],
        "trainer.project_name": PROJECT,
        "trainer.experiment_name": experiment_name(spec, seed),
    }
    if estimator == "softmax":
        pairs["+algorithm.tau"] = float(spec["tau"])
    for key, value in (spec.get("estimator_params") or {}).items():
        pairs[f"+algorithm.{key}"] = value
    if spec.get("reward_weights"):
        pairs["+reward.custom_reward_function.reward_kwargs"] = {"reward_weights": dict(spec["reward_weights"])}
    # Fallbacks that reach every Ray worker even where the entry point is not seen, and the metrics file path
    # for verl's file logger (it runs in the TaskRunner actor, which does not inherit this process's env).
    env = {"VERL_USE_EXTERNAL_MODULES": ESTIMATOR_MODULE, "VERL_FILE_LOGGER_PATH": str(metrics_log_path(paths.run_dir)),
           REWARD_HEALTH_ENV: str(reward_health_dir(paths.run_dir))}
    for name, value in env.items():
        pairs[f"+ray_kwargs.ray_init.runtime_env.env_vars.{name}"] = value
    if spec.get("baseline"):
        pairs.update(baseline_overrides(spec, paths))
    return _overrides(pairs) + list(spec.get("extra_overrides", []))


def sft_overrides(spec: Mapping[str, Any], paths: TrainPaths, seed: int) -> list[str]:
    """Overrides for ``torchrun -m verl.trainer.sft_trainer`` (verl's ``sft_trainer_engine`` config)."""
    pairs: dict[str, Any] = {
        "data.train_files": str(paths.train_files),
        "data.val_files": None,
        "data.messages_key": "messages",
        "data.train_batch_size": spec["batch_size"],
        "data.micro_batch_size_per_gpu": spec["micro_batch_per_gpu"],
        "data.max_length": spec["max_length"],
        "data.truncation": spec["truncation"],
        "model.path": spec["model"],
        "model.enable_gradient_checkpointing": True,
        "model.use_remove_padding": True,
        "optim.lr": float(spec["lr"]),
        "optim.weight_decay": float(spec["weight_decay"]),
        "optim.lr_warmup_steps_ratio": float(spec["warmup_ratio"]),
        "trainer.total_training_steps": spec["steps"],
        "trainer.total_epochs": 1000,
        "trainer.n_gpus_per_node": spec["gpus_per_node"],
        "trainer.nnodes": 1,
        "trainer.save_freq": spec["save_freq"],
        "trainer.test_freq": -1,
        "trainer.resume_mode": "auto",
        "trainer.default_local_dir": str(checkpoint_dir(paths.run_dir)),
        "trainer.max_ckpt_to_keep": 2,
        "trainer.logger": ["console", "file"],
        "trainer.project_name": PROJECT,
        "trainer.experiment_name": experiment_name(spec, seed),
        "trainer.seed": seed,
    }
    return _overrides(pairs) + list(spec.get("extra_overrides", []))
