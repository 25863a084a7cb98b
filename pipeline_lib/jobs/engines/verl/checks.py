"""Check a run's overrides against verl itself, without a GPU, before anything is submitted.

For each run: compose verl's own Hydra config (``ppo_trainer`` or ``sft_trainer_engine``) with the
overrides (an unknown or misspelt key fails here), resolve every interpolation, run verl's
``validate_config`` (batch-size divisibility, micro-batch settings...) and build the dataclass configs
verl builds at start-up; for RL, also run the configured advantage estimator through verl's
``compute_advantage`` on a small batch with the composed ``algorithm`` config (so the estimator name
resolves and its extra keys such as ``tau`` are present), load the custom reward function, and run the start-up of
the trainer the run will use (``trainer.use_v1``: verl's v1 TransferQueue trainer or the legacy one) up to where it
needs Ray workers and GPUs (:func:`trainer_path`, :func:`_check_v1_trainer`, :func:`_check_legacy_trainer`); the
cache marker and the summary record which path each run was validated on.

:func:`pipeline_lib.jobs.engines.verl.validate.validate_planned_runs` does this for every verl run of the plan, in
the local job ``validate_verl``
that every verl training job waits for (so nothing is submitted before every run passed), caching each
passed run by the hash of its overrides and of this engine's code under ``.snakemake/``. At parse time
(``snakemake -n``) :func:`check_override_keys` checks in about a second that every override of every run
parses and names a key of verl's config: one Hydra compose of all the keys per trainer config, not one
per run, and no verl import.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline_lib.core.rewards import available_rewards
from pipeline_lib.jobs.engines.verl import REQUIRED_VERL, check_verl_version
from pipeline_lib.jobs.engines.verl.compose import VerlOverrideError, compose, validate_sft

check_verl_version()  # the pin (REQUIRED_VERL), checked when the engine is imported

__all__ = [
    "VerlOverrideError",
    "check_override_keys",
    "compose",
    "engine_code_digest",
    "trainer_path",
    "validate_rl",
    "validate_sft",
]

CACHE_DIR = Path(".snakemake") / "verl_validated"
_ENGINE_DIR = Path(__file__).resolve().parent


def _check_estimator(config: Any) -> None:
    """Run the configured estimator through verl's compute_advantage on 2 groups x 3 rollouts."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    import pipeline_lib.jobs.engines.verl.estimators  # noqa: F401  (registration, in case the entry point is off)

    algorithm = config.algorithm
    rewards = torch.zeros(6, 4)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": torch.ones(6, 4)},
        non_tensors={"uid": np.array(["a", "a", "a", "b", "b", "b"], dtype=object)},
    )
    out = compute_advantage(data, adv_estimator=algorithm.adv_estimator, gamma=algorithm.gamma, lam=algorithm.lam,
                            num_repeat=3, norm_adv_by_std_in_grpo=algorithm.get("norm_adv_by_std_in_grpo", True),
                            config=algorithm)
    if not bool(torch.isfinite(out.batch["advantages"]).all()):
        raise ValueError(f"estimator {algorithm.adv_estimator!r} returned non-finite advantages")


def _check_reward(config: Any) -> None:
    from verl.utils.import_utils import load_extern_object


    section = config.reward.custom_reward_function
    fn = load_extern_object(module_path=section.path, object_name=section.name)
    kwargs = dict(section.get("reward_kwargs") or {})
    accepted = inspect.signature(fn).parameters
    unknown = sorted(k for k in kwargs if k not in accepted)
    if unknown:
        raise ValueError(f"reward.custom_reward_function.reward_kwargs has {unknown}, which {section.name} does not "
                         f"take (it takes {sorted(accepted)})")
    weights = kwargs.get("reward_weights") or {}
    bad = sorted(set(weights) - set(available_rewards()))
    if bad:
        raise ValueError(f"reward_weights names unknown reward(s) {bad}; registered: {available_rewards()}")


def _check_agent_loops(config: Any) -> None:
    """The pipeline's verl plug-ins load: every agent loop of ``agent_loop_config_path`` imports and is an
    ``AgentLoopBase``, the default agent loop is registered, and a custom agent loop manager / dataset class imports
    (so a typo in a class path fails at dry-run, not on the cluster)."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopManager
    from verl.utils.import_utils import load_class_from_fqn, load_extern_object, resolve_config_path

    agent = config.actor_rollout_ref.rollout.agent
    names = {"single_turn_agent", "tool_agent"}  # verl's own loops
    if agent.get("agent_loop_config_path"):
        path = resolve_config_path(agent.agent_loop_config_path)
        entries = OmegaConf.load(path)
        if not isinstance(entries, Sequence) or not entries:
            raise ValueError(f"{path}: an agent loop config is a non-empty list of {{name, _target_, ...}} entries")
        for entry in entries:
            if not entry.get("name") or not entry.get("_target_"):
                raise ValueError(f"{path}: entry {OmegaConf.to_container(entry)} lacks `name` or `_target_`")
            cls = load_class_from_fqn(entry._target_, f"agent loop {entry.name}")
            if not (isinstance(cls, type) and issubclass(cls, AgentLoopBase)):
                raise TypeError(f"{path}: {entry._target_} (agent loop {entry.name}) is not a verl AgentLoopBase")
            names.add(entry.name)
    if agent.default_agent_loop not in names:
        raise ValueError(f"actor_rollout_ref.rollout.agent.default_agent_loop {agent.default_agent_loop!r} is not "
                         f"registered (known: {sorted(names)})")
    if agent.get("agent_loop_manager_class"):
        cls = load_class_from_fqn(agent.agent_loop_manager_class, "AgentLoopManager")
        if not (isinstance(cls, type) and issubclass(cls, AgentLoopManager)):
            raise TypeError(f"agent_loop_manager_class {agent.agent_loop_manager_class} is not a verl AgentLoopManager")
    custom = config.data.get("custom_cls") or {}
    if custom.get("path"):
        from torch.utils.data import Dataset

        cls = load_extern_object(custom.path, custom.name)
        if not (isinstance(cls, type) and issubclass(cls, Dataset)):
            raise TypeError(f"data.custom_cls {custom.path}:{custom.name} is not a torch Dataset")


def _check_distillation(config: Any) -> None:
    """With ``distillation.enabled`` (OPD): build verl's DistillationConfig as the trainer does (loss mode and its
    policy-gradient pairing, teacher model path/key, replicas vs the teacher pool, vLLM top-k limits) and the
    teacher pool checks of verl's resource-pool setup."""
    from verl.trainer.distillation.losses import is_distillation_enabled
    from verl.utils.config import omega_conf_to_dataclass

    section = config.get("distillation")
    if not is_distillation_enabled(section):
        return
    if section.n_gpus_per_node <= 0 or section.nnodes <= 0:
        raise ValueError(f"distillation.n_gpus_per_node ({section.n_gpus_per_node}) and distillation.nnodes "
                         f"({section.nnodes}) must be > 0: the teacher needs its own resource pool")
    built = omega_conf_to_dataclass(section)
    engine = config.actor_rollout_ref.rollout.name

    engines = ("vllm", "sglang")
    for key, teacher in built.teacher_models.items():
        if teacher.inference.name not in engines:
            raise ValueError(f"distillation teacher {key!r}: inference engine {teacher.inference.name!r} (from "
                             f"actor_rollout_ref.rollout.name {engine!r}) cannot serve teacher log-probs")


def trainer_path(config: Any) -> str:
    """The trainer verl's ``main_ppo.main`` dispatches the run to: ``v1`` (``TaskRunnerV1``, TransferQueue) or
    ``legacy`` (``main_ppo_v0.TaskRunner``, ``RayPPOTrainer``)."""
    return "v1" if bool(config.trainer.use_v1) else "legacy"


def _manager_class(config: Any, default: type) -> type:
    """The agent loop manager class the trainer loads (``agent.agent_loop_manager_class`` or its default)."""
    from verl.utils.import_utils import load_class_from_fqn

    fqn = config.actor_rollout_ref.rollout.get("agent", {}).get("agent_loop_manager_class")
    return load_class_from_fqn(fqn, "AgentLoopManager") if fqn else default


def _check_v1_trainer(config: Any) -> None:
    """What ``main_ppo.TaskRunnerV1.run`` does before it needs Ray workers or GPUs, on a copy of the config.

    Runs: the trainer-mode lookup (``get_trainer_cls(trainer.v1.trainer_mode)``), ``transfer_queue.enable`` set and
    the config resolved as the task runner does, the trainer's constructor (checkpoint callback, KL controller,
    replay buffer with its group-filter checks), its resource-pool set-up (role -> worker mapping, reward and teacher
    pools), the checks ``transfer_queue.init`` makes before it starts its Ray actors (sampler name, storage backend),
    and the agent loop manager class: v1 calls ``cls.create(config=, llm_client=, teacher_client=,
    reward_loop_worker_handles=)`` and then ``generate_sequences(TensorDict)`` without reading a return value, so the
    manager must put its outputs into TransferQueue, i.e. be an ``AgentLoopManagerTQ``.
    Not run here (needs Ray workers, GPUs, the model and data): ``trainer.init()`` (tokenizer, dataloader, worker
    groups, vLLM servers, checkpoint engine), ``tq.init`` itself and the manager's ``create``.
    """
    import copy

    from omegaconf import OmegaConf

    try:
        from transfer_queue import interface as tq_interface
        from transfer_queue.sampler import BaseSampler
        from transfer_queue.storage.bootstrap import StorageBootstrapProvider
        from verl.trainer.ppo.v1 import AgentLoopManagerTQ, get_trainer_cls
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(f"{exc}: verl's v1 trainer (trainer.use_v1=true) needs TransferQueue; install "
                                  f"verl[verl-core] (the `gpu` and `test` extras of this project have it)") from exc

    config = copy.deepcopy(config)
    trainer_cls = get_trainer_cls(config.trainer.v1.trainer_mode)
    config.transfer_queue.enable = True
    OmegaConf.resolve(config)
    trainer = trainer_cls(config=config)
    trainer._init_resource_pool_mgr()
    # transfer_queue.init: its defaults merged with the run's section, then the sampler and the storage backend
    from importlib import resources

    tq_conf = OmegaConf.merge(OmegaConf.load(resources.files("transfer_queue") / "config.yaml"),
                              config.transfer_queue)
    sampler = getattr(tq_interface, str(tq_conf.controller.sampler), None)
    if not (isinstance(sampler, type) and issubclass(sampler, BaseSampler)):
        raise ValueError(f"transfer_queue.controller.sampler {tq_conf.controller.sampler!r} is not a TransferQueue "
                         f"sampler")
    if StorageBootstrapProvider.get_provider(tq_conf.backend.storage_backend) is None:
        raise ValueError(f"transfer_queue.backend.storage_backend {tq_conf.backend.storage_backend!r} is not "
                         f"registered with TransferQueue")
    manager = _manager_class(config, AgentLoopManagerTQ)
    if not (isinstance(manager, type) and issubclass(manager, AgentLoopManagerTQ)):
        raise TypeError(f"the v1 trainer (trainer.use_v1=true) passes a TensorDict to {manager.__module__}."
                        f"{manager.__qualname__}.generate_sequences and reads its outputs from TransferQueue, so the "
                        f"manager must be a verl AgentLoopManagerTQ; set trainer.use_v1=false for a legacy "
                        f"(DataProto) manager")


def _check_legacy_trainer(config: Any) -> None:
    """What ``main_ppo_v0.TaskRunner.run`` does before it needs Ray workers or GPUs, on a copy of the config.

    Runs: the config resolved, the actor/critic worker roles, the reward-model and teacher pools and the resource-pool
    manager of verl's ``BaseTaskRunner``, and the agent loop manager class: ``RayPPOTrainer`` calls
    ``generate_sequences(DataProto)`` and uses the ``DataProto`` it returns, so the manager must be a verl
    ``AgentLoopManager`` and not the v1 ``AgentLoopManagerTQ`` (which returns nothing).
    Not run here (needs the model, the data, Ray workers and GPUs): the tokenizer and datasets, ``RayPPOTrainer``'s
    constructor and ``init_workers`` (worker groups, vLLM servers, the manager's ``create``).
    """
    import copy

    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ

    config = copy.deepcopy(config)
    OmegaConf.resolve(config)
    runner = BaseTaskRunner()
    runner.add_actor_rollout_worker(config)
    runner.add_critic_worker(config)
    runner.add_reward_model_resource_pool(config)
    runner.add_teacher_model_resource_pool(config)
    runner.init_resource_pool_mgr(config)
    manager = _manager_class(config, AgentLoopManager)
    if not (isinstance(manager, type) and issubclass(manager, AgentLoopManager)) \
            or issubclass(manager, AgentLoopManagerTQ):
        raise TypeError(f"the legacy trainer (trainer.use_v1=false) uses the DataProto that "
                        f"{manager.__module__}.{manager.__qualname__}.generate_sequences returns, so the manager must "
                        f"be a verl AgentLoopManager, not a v1 AgentLoopManagerTQ; set trainer.use_v1=true for it")


def validate_rl(overrides: Sequence[str], label: str = "RL run") -> Any:
    """The composed, checked ``ppo_trainer`` config; raises :class:`VerlOverrideError` naming ``label``."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    step = "composing verl's ppo_trainer config"
    try:
        config = compose("ppo_trainer", overrides)
        step = "resolving interpolations"
        OmegaConf.to_container(config, resolve=True)
        step = "verl.utils.config.validate_config"
        validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
        step = "building verl's rollout dataclass config"
        omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
        step = f"running advantage estimator {config.algorithm.adv_estimator!r} through verl's compute_advantage"
        _check_estimator(config)
        step = "loading the custom reward function"
        _check_reward(config)
        step = "loading the agent loops, agent loop manager and dataset class"
        _check_agent_loops(config)
        step = "building verl's distillation (OPD teacher) config"
        _check_distillation(config)
        path = trainer_path(config)
        step = f"starting verl's {path} trainer (config, TransferQueue, resource pools, agent loop manager)" \
            if path == "v1" else "starting verl's legacy trainer (config, resource pools, agent loop manager)"
        (_check_v1_trainer if path == "v1" else _check_legacy_trainer)(config)
    except Exception as exc:
        raise VerlOverrideError(f"{label}: verl {REQUIRED_VERL} rejected the overrides while {step}: "
                                f"{type(exc).__name__}: {exc}") from exc
    return config


def engine_code_digest() -> str:
    """verl's pin and every module and agent-loop file of this engine: what a cached check's answer depends on."""
    digest = hashlib.sha256(REQUIRED_VERL.encode())
    # every module and agent loop registry of the engine: the checks import the agent loops and dataset class too
    for path in sorted([*_ENGINE_DIR.glob("*.py"), *_ENGINE_DIR.glob("*.yaml")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


_CONFIG_NAMES = {"sft": "sft_trainer_engine", "rl": "ppo_trainer"}


def _key(override: str) -> str:
    """What an override sets: its key (with a +/~ prefix); a config-group choice (``a/b=c``) is kept whole, since
    the group's value decides which keys exist."""
    key = override.split("=", 1)[0]
    return override if "/" in key else key


def check_override_keys(runs: Sequence[tuple[str, str, Sequence[str]]], cache_dir: str | Path = CACHE_DIR
                        ) -> dict[str, Any]:
    """Every override of every run parses (Hydra's grammar) and names a key of verl's config.

    One compose per trainer config with the union of all runs' keys; only if that fails is each distinct key set
    composed on its own, so the error names the run (keys two runs set differently, e.g. ``+x`` and ``x``, can
    clash in the union without either run being wrong). Cached by content, like the full checks.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    started = time.perf_counter()
    digest = hashlib.sha256(json.dumps([engine_code_digest(), [[k, list(o)] for _, k, o in runs]]).encode()).hexdigest()
    marker = Path(cache_dir) / f"keys-{digest}"
    if marker.exists():
        return {"runs": len(runs), "composed": 0, "cached": True, "seconds": round(time.perf_counter() - started, 2)}
    parser = OverridesParser.create()
    for label, _, overrides in runs:
        try:
            parser.parse_overrides(list(overrides))
        except Exception as exc:
            raise VerlOverrideError(f"train run {label}: an override is not valid Hydra syntax: "
                                    f"{type(exc).__name__}: {exc}") from exc
    composed = 0
    for kind, name in _CONFIG_NAMES.items():
        of_kind = [(label, list(overrides)) for label, k, overrides in runs if k == kind]
        union: dict[str, str] = {}
        for _, overrides in of_kind:
            for override in overrides:
                union.setdefault(_key(override), override)
        if not union:
            continue
        try:
            composed += 1
            compose(name, list(union.values()))
            continue
        except Exception:  # find the run that is wrong, if any
            pass
        seen: set[tuple[str, ...]] = set()
        for label, overrides in of_kind:
            shape = tuple(_key(o) for o in overrides)
            if shape in seen:
                continue
            seen.add(shape)
            try:
                composed += 1
                compose(name, overrides)
            except Exception as exc:
                raise VerlOverrideError(f"train run {label}: verl {REQUIRED_VERL} rejected the overrides while "
                                        f"composing verl's {name} config: {type(exc).__name__}: {exc}") from exc
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"runs": [label for label, _, _ in runs]}, indent=1))
    tmp.replace(marker)
    return {"runs": len(runs), "composed": composed, "cached": False,
            "seconds": round(time.perf_counter() - started, 2)}


