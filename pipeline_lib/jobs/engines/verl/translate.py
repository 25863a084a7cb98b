"""Pipeline run spec -> Hydra overrides for ``verl.trainer.main_ppo`` (RL); ``verl.trainer.sft_trainer`` (SFT) takes
:func:`.overrides.sft_overrides`, re-exported here with the grammar they share.

The verl engine's edge: a :class:`~pipeline_lib.core.run_spec.RunSpec` made by the plan (every hyperparameter from the
config, ``train.rl`` / ``train.sft`` and the rows of ``train.task_settings``, the schema's defaults: the App. B tables,
none from a shell script) becomes verl's Hydra overrides here, and nowhere else. Plain Python, no verl import: the
workflow translates every verl run of the plan at parse time
(:func:`pipeline_lib.jobs.engines.verl.validate.plan_overrides`) and :mod:`.checks` checks the overrides against
verl's own config tree. A running job reads only its spec: nothing here imports the plan (the job's code digest then
covers the engine, not the planner).

Two App. B rows need a reading, recorded here and in ``config/README.md``; both follow the authors' own
configs (``softmaxgrpo/configs/base.yaml`` of jeffhernandez1995/softmaxgrpo): "rollout batch size" is verl's
``data.train_batch_size`` (prompts per step; each gets M rollouts), and "mini-batch size (per device)" is
``ppo_micro_batch_size_per_gpu``, with ``ppo_mini_batch_size`` the whole rollout batch: one on-policy
policy update per step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from pipeline_lib.core.baselines import BaselineSettings, OPDSettings, RaroSettings, RLLogitSettings
from pipeline_lib.core.rl.estimators import ADVANTAGE_ESTIMATORS
from pipeline_lib.core.run_spec import RLSettings, RunSpec, VerlRLKnobs
from pipeline_lib.jobs.engines.verl.overrides import (
    ATTENTION,
    done_kind,
    experiment_name,
    hydra_value,
    sft_overrides,
    to_overrides,
    tracking_env,
    tracking_overrides,
)
from pipeline_lib.jobs.engines.verl.paths import (
    TrainPaths,
    checkpoint_dir,
    metrics_log_path,
    reward_health_dir,
    rollout_dump_dir,
)

__all__ = [
    "ATTENTION",
    "ESTIMATOR_MODULE",
    "REWARD_FUNCTION",
    "REWARD_HEALTH_ENV",
    "RL_LOGIT_AGENT_LOOPS",
    "RL_LOGIT_VARIANTS",
    "VERL_BASELINES",
    "TrainPaths",
    "VerlBaseline",
    "baseline_overrides",
    "checkpoint_dir",
    "done_kind",
    "experiment_name",
    "hydra_value",
    "metrics_log_path",
    "needs_references",
    "opd_overrides",
    "opd_teacher_settings",
    "raro_overrides",
    "reward_health_dir",
    "rl_logit_agent_loop",
    "rl_logit_overrides",
    "rl_overrides",
    "rollout_dump_dir",
    "save_freq",
    "sft_overrides",
    "tracking_env",
    "verl_baseline",
]

#: Module that registers our estimators; Ray workers import it through VERL_USE_EXTERNAL_MODULES too.
ESTIMATOR_MODULE = "pipeline_lib.jobs.engines.verl.estimators"
#: Where the reward hook records verifier timeouts/failures (:func:`reward_health_dir`), set in the Ray runtime env.
REWARD_HEALTH_ENV = "PIPELINE_REWARD_HEALTH_DIR"
#: verl's custom reward hook: the pipeline's one reward registry, recording verifier timeouts/failures (reward.py).
REWARD_FUNCTION = ("pkg://pipeline_lib.jobs.engines.verl.reward", "compute_score")

# --- the baselines' own overrides --------------------------------------------------------------------------------

def baseline_overrides(spec: RunSpec, paths: TrainPaths) -> dict[str, Any]:
    """The overrides a verl baseline adds to (or replaces in) its RL run's: its entry of :data:`VERL_BASELINES`,
    found by the settings its spec carries (``spec.baseline``), so a running job needs nothing but its spec."""
    entry = VERL_BASELINES.get(type(spec.baseline))
    if entry is None:
        raise ValueError(f"{spec.task}/{spec.method}: its spec's baseline settings "
                         f"{type(spec.baseline).__name__} belong to no verl RL baseline; verl RL baselines: "
                         f"{sorted(cls.__name__ for cls in VERL_BASELINES)} (VERL_BASELINES in {__name__})")
    return entry.overrides(spec, paths)


S = TypeVar("S", bound=BaselineSettings)


def _own(spec: RunSpec, cls: type[S]) -> S:
    """The baseline's own settings (``spec.baseline``), which must be ``cls``: an error names the method and class."""
    if not isinstance(spec.baseline, cls):
        raise ValueError(f"{spec.task}/{spec.method}: the run spec's baseline must be {cls.__name__}, got "
                         f"{type(spec.baseline).__name__}")
    return spec.baseline


def verl_baseline(method: Any) -> bool:
    """Whether a registry method (:class:`pipeline_lib.plan.registry.Method`) runs as a verl RL job with overrides of
    its own (OPD, RL-Logit, RARO): its verl entry names them (read by duck typing: this module imports no plan)."""
    entry = method.engines.get("verl")
    return entry is not None and bool(entry.overrides)


def opd_teacher_settings(spec: RunSpec) -> dict[str, Any]:
    """The OPD teacher: its model (``teacher.hub``) and its GPUs (``train.baselines.opd.verl``; the schema's defaults,
    4 of each node's 8, leave the student 4, which still splits every App. B rollout batch evenly: 7 or 6 would not
    split 64 x 8 rollouts).

    The teacher's vLLM replicas take ``gpus_per_node`` GPUs of each of the task's nodes (verl's ``teacher_pool``);
    the student trains on the rest, so the job keeps the App. B GPUs (one node for an 8-GPU task), not a second
    node for the teacher.
    """
    settings = _own(spec, OPDSettings)
    hub = settings.teacher.hub
    if not hub:
        raise ValueError(f"train.baselines.opd.teacher.hub must name the teacher (the paper's: Qwen/Qwen3-8B) for the "
                         f"verl OPD run on task {spec.task!r}; the trained tiny teacher exists on the local engine "
                         f"only")
    teacher = asdict(settings.verl)
    gpus, student = int(teacher["gpus_per_node"]), spec.rl.knobs.gpus_per_node - int(teacher["gpus_per_node"])
    if student < 1:
        raise ValueError(f"train.baselines.opd.verl.gpus_per_node ({gpus}) leaves no GPU of the task's "
                         f"{spec.rl.knobs.gpus_per_node} per node to the student (task {spec.task!r})")
    if gpus % teacher["tensor_parallel_size"]:
        raise ValueError(f"train.baselines.opd.verl.tensor_parallel_size ({teacher['tensor_parallel_size']}) must "
                         f"divide train.baselines.opd.verl.gpus_per_node ({gpus}) (task {spec.task!r})")
    rollouts = spec.rl.prompts_per_step * spec.rl.group_size
    per_gpu, rest = divmod(rollouts, student * spec.rl.knobs.nodes)
    if rest or per_gpu % spec.rl.knobs.mini_batch_per_device:
        raise ValueError(f"OPD on task {spec.task!r}: train.baselines.opd.verl.gpus_per_node = {gpus} leaves the "
                         f"student {student} GPUs per node x {spec.rl.knobs.nodes} nodes, which do not split the "
                         f"{rollouts} rollouts per step into whole micro-batches of "
                         f"{spec.rl.knobs.mini_batch_per_device}; "
                         f"choose a teacher share that does (4 of 8 does for every App. B task)")
    return {"model": hub, **teacher, "student_gpus_per_node": student}


def opd_overrides(spec: RunSpec, paths: TrainPaths) -> dict[str, Any]:
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
        "distillation.distillation_loss.clip_ratio_low": float(spec.rl.clip_low),
        "distillation.distillation_loss.clip_ratio_high": float(spec.rl.clip_high),
        "distillation.n_gpus_per_node": teacher["gpus_per_node"],
        "distillation.nnodes": spec.rl.knobs.nodes,
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
#: legacy manager with a ``DataProto`` batch (``tests/jobs/engines/verl/test_verl_raro.py``,
#: ``tests/jobs/engines/verl/test_verl_trainer_path.py``).
#: GRPO/SoftmaxGRPO and OPD use verl's default (v1, with verl's own manager and single-turn loop).
LEGACY_TRAINER = {"trainer.use_v1": False}


#: verl agent loop registry for RL-Logit (``rl_logit_loop.RLLogitAgentLoop``, one entry per variant).
RL_LOGIT_AGENT_LOOPS = Path(__file__).resolve().with_name("rl_logit_agent_loops.yaml")
RL_LOGIT_VARIANTS = ("logprob", "neg_perplexity")


def rl_logit_agent_loop(variant: str) -> str:
    """The registered agent loop name of an RL-Logit variant (an entry of :data:`RL_LOGIT_AGENT_LOOPS`)."""
    return f"rl_logit_{variant}"


def rl_logit_overrides(spec: RunSpec, paths: TrainPaths) -> dict[str, Any]:
    """RL-Logit: every rollout runs the pipeline's agent loop, which scores log pi(a* | q, z) on the rollout server
    (current weights, no gradient) and hands it to verl as the rollout's reward (``rm_scores``)."""
    variant = _own(spec, RLLogitSettings).variant
    if variant not in RL_LOGIT_VARIANTS:
        raise ValueError(f"train.baselines.rl_logit.variant {variant!r} not in {RL_LOGIT_VARIANTS}")
    return {
        **LEGACY_TRAINER,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(RL_LOGIT_AGENT_LOOPS),
        "actor_rollout_ref.rollout.agent.default_agent_loop": rl_logit_agent_loop(variant),
    }


#: RARO's agent loops (``raro_loop.RaroPolicyLoop`` / ``RaroCriticLoop``), its dataset and agent loop manager.
RARO_AGENT_LOOPS = Path(__file__).resolve().with_name("raro_agent_loops.yaml")
RARO_MODULE = "pipeline_lib.jobs.engines.verl.raro_loop"
#: Rollout prompt tokens beyond question + two answers that a critic prompt may use (system prompt, chat template,
#: "Answer 1/2" framing and instructions); should a critic prompt still not fit, the loop shortens the expert answer.
RARO_CRITIC_PROMPT_OVERHEAD = 256


def raro_replay_dir(run_dir: str | Path) -> Path:
    """Where the RARO replay buffer is saved after every step (a resumed run reloads it from here)."""
    return Path(run_dir) / "raro_replay"


def raro_overrides(spec: RunSpec, paths: TrainPaths) -> dict[str, Any]:
    """RARO: per step ``prompts_per_step`` policy rows plus ``critic_prompts_per_step`` critic rows (each M rollouts,
    one GRPO update over both), laid out by ``raro_loop.RaroDataset`` and read in order; the pipeline's agent loops
    reward both roles by the critic's verdicts; the replay buffer lives beside the run.

    The PPO update is one mini-batch over both roles, as the GRPO run's is one over its batch, and the rollout
    prompt length grows so a critic prompt (question, expert answer, policy answer) fits; the task prompts are
    filtered at the task's own ``max_prompt_tokens`` as in the GRPO runs.
    """
    settings = _own(spec, RaroSettings)
    policy, critic = int(spec.rl.prompts_per_step), int(settings.critic_prompts_per_step)
    n_gpus = spec.rl.knobs.gpus_per_node * spec.rl.knobs.nodes
    total = policy + critic
    if total % n_gpus:
        raise ValueError(f"RARO on task {spec.task!r}: prompts_per_step + "
                         f"train.baselines.raro.critic_prompts_per_step = {total} prompts must split evenly over the "
                         f"{n_gpus} GPUs; choose critic_prompts_per_step accordingly")
    if settings.critic_decoding != "free":
        raise ValueError(f"train.baselines.raro.critic_decoding {settings.critic_decoding!r}: the verl engine's "
                         f"critic writes its reply (`free`); constrained `choice` decoding exists on the local engine "
                         f"only")
    if settings.critic_max_new_tokens > spec.rl.max_response_tokens:
        raise ValueError(f"train.baselines.raro.critic_max_new_tokens ({settings.critic_max_new_tokens}) exceeds "
                         f"the task's max_response_tokens ({spec.rl.max_response_tokens})")
    return {
        **LEGACY_TRAINER,
        "data.train_batch_size": total,
        "data.shuffle": False,
        "data.custom_cls.path": f"pkg://{RARO_MODULE}",
        "data.custom_cls.name": "RaroDataset",
        "+data.raro": {"policy_per_step": policy, "critic_per_step": critic,
                       "replay_slots": round(float(settings.replay_fraction) * critic),
                       "steps": spec.rl.steps},
        "actor_rollout_ref.actor.ppo_mini_batch_size": total,  # one update per step, as the GRPO runs
        "actor_rollout_ref.rollout.prompt_length": spec.rl.knobs.max_prompt_tokens
        + 2 * spec.rl.max_response_tokens + RARO_CRITIC_PROMPT_OVERHEAD,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(RARO_AGENT_LOOPS),
        "actor_rollout_ref.rollout.agent.default_agent_loop": "single_turn_agent",  # validation rows: the verifier
        "+actor_rollout_ref.rollout.agent.agent_loop_manager_class": f"{RARO_MODULE}.RaroAgentLoopManager",
        "+raro": {"critic_system_prompt": settings.critic_system_prompt,
                  "critic_max_new_tokens": int(settings.critic_max_new_tokens),
                  "replay_size": int(settings.replay_size),
                  "rewards": {role: {v: float(r) for v, r in settings.rewards[role].items()}
                              for role in ("policy", "critic")},
                  "state_dir": str(raro_replay_dir(paths.run_dir))},
    }


@dataclass(frozen=True)
class VerlBaseline:
    """How the verl engine trains one RL baseline: the overrides it adds to the RL run's, and whether every training
    prompt must carry its expert answer (checked before Ray starts: RARO's critic compares with it)."""

    overrides: Callable[[RunSpec, TrainPaths], dict[str, Any]]
    needs_references: bool = False


#: The verl RL baselines by the settings class their spec carries: the engine's own table (the registry's verl entries
#: name the same functions, ``tests/plan/test_registry.py`` holds them equal), read by a running job from its spec.
VERL_BASELINES: dict[type[BaselineSettings], VerlBaseline] = {
    OPDSettings: VerlBaseline(opd_overrides),
    RLLogitSettings: VerlBaseline(rl_logit_overrides),
    RaroSettings: VerlBaseline(raro_overrides, needs_references=True),
}


def needs_references(spec: RunSpec) -> bool:
    """Whether the run's every training prompt must carry its expert answer (:attr:`VerlBaseline.needs_references`)."""
    entry = VERL_BASELINES.get(type(spec.baseline))
    return entry is not None and entry.needs_references


# --- overrides ---------------------------------------------------------------------------------------------------

#: The KL estimators of the one vocabulary (:data:`pipeline_lib.core.run_spec.KL_ESTIMATORS`) in verl's
#: ``kl_loss_type`` names (verl 0.9.1 also takes k1/k2/k3; its own names keep the paper runs' overrides as they were).
VERL_KL_NAMES = {"k1": "kl", "k2": "mse", "k3": "low_var_kl", "abs": "abs"}


def _verl_kl_name(estimator: str) -> str:
    if estimator not in VERL_KL_NAMES:
        raise ValueError(f"kl_estimator {estimator!r}: verl computes only {sorted(VERL_KL_NAMES)}")
    return VERL_KL_NAMES[estimator]


def save_freq(rl: RLSettings) -> int:
    """verl's ``trainer.save_freq`` of an RL run: ``checkpoint_every``, or where the run keeps probe policies
    (``probe_every``) the gcd of both, so verl saves at every probe step too (:mod:`.probe_keep` keeps those)."""
    if rl.probe_every is None:
        return int(rl.checkpoint_every)
    return math.gcd(int(rl.checkpoint_every), int(rl.probe_every))


def rl_overrides(spec: RunSpec, paths: TrainPaths, seed: int) -> list[str]:
    """Overrides for ``python -m verl.trainer.main_ppo`` (verl's ``ppo_trainer`` config)."""
    if paths.val_files is None:
        raise ValueError("an RL run needs validation prompts")
    start = str(paths.init) if paths.init is not None else spec.model
    if not isinstance(start, str) or not start:
        raise ValueError(f"run spec {spec.task}/{spec.method}: an RL run needs a model to start from, an init "
                         f"directory or the spec's hub model (got {spec.model!r})")
    if spec.estimator is None or spec.estimator.name not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"run spec {spec.task}/{spec.method}: estimator "
                         f"{spec.estimator.name if spec.estimator else None!r} has no verl estimator; available: "
                         f"{sorted(ADVANTAGE_ESTIMATORS)}")
    estimator, rl = ADVANTAGE_ESTIMATORS[spec.estimator.name], spec.rl
    if rl is None or not isinstance(rl.knobs, VerlRLKnobs):
        raise ValueError(f"run spec {spec.task}/{spec.method}: no verl group-RL settings (engine {spec.engine!r})")
    pairs: dict[str, Any] = {
        "algorithm.adv_estimator": estimator.verl,
        **estimator.verl_overrides,
        "algorithm.use_kl_in_reward": False,
        "data.train_files": str(paths.train_files),
        "data.val_files": str(paths.val_files),
        "data.train_batch_size": rl.prompts_per_step,
        "data.max_prompt_length": rl.knobs.max_prompt_tokens,
        "data.max_response_length": rl.max_response_tokens,
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        "data.seed": seed,
        # the run's prompt pool (train.rl.prompt_pool; -1: every prompt): verl draws it with data.seed
        "data.train_max_samples": -1 if rl.prompt_pool is None else int(rl.prompt_pool),
        "actor_rollout_ref.model.path": start,
        "actor_rollout_ref.model.use_remove_padding": True,
        "+actor_rollout_ref.model.override_config.attn_implementation": ATTENTION,
        "actor_rollout_ref.model.enable_gradient_checkpointing": True,
        "actor_rollout_ref.actor.optim.lr": float(rl.lr),
        "actor_rollout_ref.actor.optim.weight_decay": float(rl.weight_decay),
        # One on-policy update per rollout batch, App. B's per-device mini-batch as the micro-batch (authors' runs).
        "actor_rollout_ref.actor.ppo_mini_batch_size": rl.prompts_per_step,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": rl.knobs.mini_batch_per_device,
        "actor_rollout_ref.actor.ppo_epochs": rl.ppo_epochs,
        "actor_rollout_ref.actor.clip_ratio_low": float(rl.clip_low),
        "actor_rollout_ref.actor.clip_ratio_high": float(rl.clip_high),
        "actor_rollout_ref.actor.use_kl_loss": rl.beta > 0,
        "actor_rollout_ref.actor.kl_loss_coef": float(rl.beta),
        "actor_rollout_ref.actor.kl_loss_type": _verl_kl_name(rl.kl_estimator),
        "actor_rollout_ref.actor.loss_agg_mode": rl.aggregation,
        "actor_rollout_ref.actor.entropy_coeff": 0.0,
        "actor_rollout_ref.actor.grad_clip": float(rl.grad_clip),
        "actor_rollout_ref.rollout.name": rl.knobs.rollout_engine,
        "actor_rollout_ref.rollout.n": rl.group_size,
        "actor_rollout_ref.rollout.temperature": float(rl.temperature),
        "actor_rollout_ref.rollout.tensor_model_parallel_size": rl.knobs.rollout_tp,
        "actor_rollout_ref.rollout.gpu_memory_utilization": float(rl.knobs.gpu_memory_utilization),
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": rl.knobs.micro_batch_per_gpu,
        "actor_rollout_ref.rollout.seed": seed,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": rl.knobs.micro_batch_per_gpu,
        "reward.custom_reward_function.path": REWARD_FUNCTION[0],
        "reward.custom_reward_function.name": REWARD_FUNCTION[1],
        "trainer.total_training_steps": rl.steps,
        # The step count bounds the run; epochs only need to be enough to reach it.
        "trainer.total_epochs": 1000,
        "trainer.n_gpus_per_node": rl.knobs.gpus_per_node,
        "trainer.nnodes": rl.knobs.nodes,
        "trainer.save_freq": save_freq(rl),
        "trainer.test_freq": rl.knobs.test_freq,
        "trainer.val_before_train": True,  # the authors' runs: a step-0 point on the validation curve
        "trainer.resume_mode": "auto",
        "trainer.default_local_dir": str(checkpoint_dir(paths.run_dir)),
        # Disk, not training: a 1.5B actor checkpoint with optimizer state is tens of GB; resuming needs the last.
        "trainer.max_actor_ckpt_to_keep": 2,
        "trainer.rollout_data_dir": str(rollout_dump_dir(paths.run_dir)),
        **tracking_overrides(spec, paths, seed),
    }
    # The estimator's parameters (tau among them) reach verl's algorithm config under their own names, as floats:
    # the estimator reads them from there (pipeline_lib.jobs.engines.verl.estimators).
    for key, value in spec.estimator.params.items():
        pairs[f"+algorithm.{key}"] = float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
            else value
    if spec.reward_weights:
        pairs["+reward.custom_reward_function.reward_kwargs"] = {"reward_weights": dict(spec.reward_weights)}
    # Fallbacks that reach every Ray worker even where the entry point is not seen, and the metrics file path
    # for verl's file logger (it runs in the TaskRunner actor, which does not inherit this process's env).
    env = {"VERL_USE_EXTERNAL_MODULES": ESTIMATOR_MODULE, "VERL_FILE_LOGGER_PATH": str(metrics_log_path(paths.run_dir)),
           REWARD_HEALTH_ENV: str(reward_health_dir(paths.run_dir)), **tracking_env(paths)}
    for name, value in env.items():
        pairs[f"+ray_kwargs.ray_init.runtime_env.env_vars.{name}"] = value
    if spec.baseline is not None:
        pairs.update(baseline_overrides(spec, paths))
    return to_overrides(pairs) + list(spec.extra_overrides)
