"""Config -> settings: the :class:`~pipeline_lib.core.run_spec.RunSpec` of every training run, and the JSON settings
of the other jobs. The engines read these specs, never the config.

Each method family owns one builder, ``(config, task, method, engine) -> RunSpec``, for every engine it trains on. A
run's trainer settings are the shared block (``train.rl`` / ``train.sft`` and the engine's knobs) with the task's row
over it (:func:`engine_settings`); the estimator's parameters have one precedence (:func:`estimator_params`); a study
replaces what it varies on the built spec (:func:`ablation_cell`, :func:`at_scale`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, fields, replace
from typing import Any

from pipeline_lib.core.baselines import BaselineSettings, OPDSettings, OPDTeacher, SettingsError, declared
from pipeline_lib.core.rl.estimators import check_params, params_from, schema_properties, takes
from pipeline_lib.core.rl.estimators import estimator as estimator_entry
from pipeline_lib.core.run_spec import (
    ENGINES,
    Estimator,
    ImageNetSettings,
    PlanError,
    RLSettings,
    RunSpec,
    SFTSettings,
)

__all__ = ["IMAGENET_SWEEP_KEYS", "ML_OBJECTIVE", "PROMPTS_WITHOUT_REFERENCE", "ablation_cell", "ablation_method",
           "annotation_spec", "at_scale", "base_spec", "baseline_settings", "check_estimator", "dpo_spec", "engine_of",
           "engine_settings", "estimator_params", "eval_max_new_tokens", "eval_spec", "generation_spec",
           "group_rl_spec", "holdout_prompts", "imagenet_run_spec", "imagenet_spec", "opd_teacher", "opd_teacher_spec",
           "rationalization_spec", "reference_prompts", "rl_baseline_spec", "sft_spec", "task_row", "tiny_task_spec",
           "verl_tasks", "with_variant"]

#: Keys of the ``imagenet`` section that choose *which* runs exist, not how one run trains;
#: they stay out of a run's parameters so adding a seed or an M does not rerun the others.
IMAGENET_SWEEP_KEYS = ("enabled", "label", "objectives", "group_sizes", "seeds", "one_job_per_seed")

#: Datasets whose RL prompts carry no expert answer; their prompts with one are ``rl_sim_train`` (Countdown: the
#: GOLD prompts, which have reference solutions).
PROMPTS_WITHOUT_REFERENCE = ("countdown",)


def imagenet_run_spec(section: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in section.items() if key not in IMAGENET_SWEEP_KEYS}


#: The ImageNet study's maximum-likelihood objective (cross-entropy: no rollouts, no estimator); its other objectives
#: are advantage estimators, with their parameters from ``imagenet``.
ML_OBJECTIVE = "ml"


def imagenet_spec(config: Mapping[str, Any], objective: str, group_size: int) -> RunSpec:
    """An ImageNet objective-study run: the ``imagenet`` keys one run reads, its objective and M; an estimator's
    parameters (``imagenet.tau``) go to the estimator of the objectives that take them, nowhere else."""
    section = config["imagenet"]
    estimator = None
    if objective != ML_OBJECTIVE:
        try:
            estimator = Estimator(objective, params_from(objective, section))
        except (TypeError, ValueError) as exc:
            raise PlanError(f"imagenet objective {objective!r}: {exc}") from None
    settings = {k: v for k, v in imagenet_run_spec(section).items() if k not in schema_properties()}
    return RunSpec(method=objective, task="imagenet", engine="classify", estimator=estimator,
                   imagenet=ImageNetSettings.from_dict({**settings, "objective": objective, "group_size": group_size},
                                                       "imagenet"))


def tiny_task_spec(config: Mapping[str, Any]) -> dict[str, Any]:
    """What generates one tiny task: the ``data.tiny`` section minus the task list and reward weights."""
    return {k: v for k, v in config["data"]["tiny"].items() if k not in ("tasks", "reward_weights")}


def reference_prompts(task: str) -> str:
    """RL prompts that carry an expert answer (``extra_info.reference``)."""
    kind = "rl_sim_train" if task in PROMPTS_WITHOUT_REFERENCE else "rl_train"
    return f"results/data/{task}/{kind}.parquet"


#: Keys of the ``eval`` section that are not one evaluation's settings: the transfer benchmarks (changing them reruns
#: no evaluation) and the per-task length caps (resolved into ``max_new_tokens`` by :func:`eval_spec`).
_NOT_EVAL_SPEC = ("transfer", "task_max_new_tokens", "probe")


def eval_max_new_tokens(config: Mapping[str, Any], task: str) -> int:
    """The response length cap of ``task``'s evaluations: ``eval.task_max_new_tokens.<task>``, else a number in
    ``eval.max_new_tokens``, else (null, the default) the task's training cap, ``max_response_tokens`` of its RL
    settings (:func:`engine_settings`: the task row over ``train.rl``), so evaluation runs where the authors
    validate (App. B: 256 GSM8K and Countdown, 1,024 DeepMath and Poetry, 4,096 MeetingBank, 6,144 OpenThoughts)."""
    section = config["eval"]
    own = (section.get("task_max_new_tokens") or {}).get(task)
    if own is not None:
        return int(own)
    if section.get("max_new_tokens") is not None:
        return int(section["max_new_tokens"])
    cap = engine_settings(config, task, "rl", engine_of(config, task)).get("max_response_tokens")
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        raise PlanError(f"eval.max_new_tokens is null (each task's training cap), but task {task!r} has no "
                        f"max_response_tokens in train.rl or train.task_settings.{task}.rl (got {cap!r})")
    return cap


def eval_spec(config: Mapping[str, Any], task: str | None = None) -> dict[str, Any]:
    """How a checkpoint of ``task`` is evaluated, ``max_new_tokens`` resolved (:func:`eval_max_new_tokens`); without a
    task, the keys as configured (a caller that sets its own length: baselines' generation, the preflight)."""
    spec = {key: value for key, value in config["eval"].items() if key not in _NOT_EVAL_SPEC}
    if task is not None:
        spec["max_new_tokens"] = eval_max_new_tokens(config, task)
    return spec


def probe_spec(config: Mapping[str, Any], spec: RunSpec) -> dict[str, Any]:
    """The pass-rate probe of one RL run (``eval.probe``; :mod:`pipeline_lib.jobs.eval.probe`): its kept steps, K and
    the groups per window, and generation as the run sampled its rollouts (its temperature and response cap, top-p 1)
    on the task's evaluation backend."""
    if spec.rl is None or spec.rl.probe_every is None:
        raise PlanError(f"{spec.task}/{spec.method}: no train.rl.probe_every, so the run keeps no policy to probe")
    probe = config["eval"]["probe"]
    generation = {**eval_spec(config, spec.task), "max_new_tokens": spec.rl.max_response_tokens,
                  "temperature": spec.rl.temperature, "top_p": 1.0}
    return {"probe_every": spec.rl.probe_every, "steps": spec.rl.steps, "samples": probe["samples"],
            "groups": probe["groups"], "generation": generation}


#: Where a task's reference prompts are split for a method that selects among its variants on validation (RL-Logit):
#: ``rl_train`` (every variant trains on it) and ``rl_val`` (the last N prompts, read only to select).
HOLDOUT_DIR = "holdout"


def holdout_prompts(task: str) -> dict[str, str]:
    """The reference prompts (:func:`reference_prompts`) of ``task`` split into ``train`` and held-out ``val``
    (rule ``data_holdout``): the paper's datasets have no validation split, and verl's in-training validation reads
    the test split, so selection holds out the last training prompts, as Iterative DPO does for its rounds."""
    return {split: f"results/data/{task}/{HOLDOUT_DIR}/rl_{split}.parquet" for split in ("train", "val")}


def with_variant(spec: RunSpec, variant: str) -> RunSpec:
    """``spec`` (a baseline's, whose settings have a ``variant`` field) for one of its variants."""
    if spec.baseline is None or not hasattr(spec.baseline, "variant"):
        raise PlanError(f"run spec of {spec.method!r} has no baseline settings with a variant")
    return replace(spec, baseline=replace(spec.baseline, variant=variant))


def generation_spec(config: Mapping[str, Any], method: str, batch_key: str = "batch_size") -> dict[str, Any]:
    """How a baseline generates on GPU: :func:`eval_spec` with the method's own length, temperature, batch
    (``batch_key``) and backend."""
    own = config["train"]["baselines"][method]
    return {**eval_spec(config), "backend": own.get("backend") or config["eval"]["backend"],
            "max_new_tokens": own["max_new_tokens"], "temperature": own["temperature"], "batch_size": own[batch_key]}


def ablation_method(tau: float, group_size: int) -> str:
    """Run name of one ablation cell, e.g. ``softmax_tau0p1_m4`` (tau 0.1, M 4)."""
    return f"softmax_tau{tau:g}_m{group_size}".replace(".", "p")


def ablation_cell(spec: RunSpec, config: Mapping[str, Any], tau: float, group_size: int) -> RunSpec:
    """One tau x M cell: ``spec`` (the task's SoftmaxGRPO-Exact run) with the cell's M and tau and, where
    ``train.ablation.steps`` sets one, its step count; every other setting as the method's run."""
    if spec.rl is None or spec.estimator is None:
        raise PlanError(f"an ablation cell needs a group-RL run, got {spec.method!r} of {spec.task!r}")
    steps = config["train"]["ablation"]["steps"]
    rl = replace(spec.rl, group_size=group_size, **({"steps": steps} if steps else {}))
    params = estimator_params(config, spec.task, spec.method, tau)
    return replace(spec, rl=rl, estimator=Estimator(spec.estimator.name, params))


def at_scale(spec: RunSpec, config: Mapping[str, Any], name: str) -> RunSpec:
    """``spec`` at model scale ``name``: a local run's architecture with the scale's overrides, a verl run's hub model
    the scale's ``hub``; a run without a ``model`` of its own is unchanged (its start is the scaled run's)."""
    models = config["train"]["scale"]["models"]
    if name not in models:
        raise ValueError(f"unknown scale {name!r}; train.scale.models: {sorted(models)}")
    if spec.model is None:
        return spec
    if spec.engine == "verl":
        return replace(spec, model=models[name]["hub"]) if models[name].get("hub") else spec
    return replace(spec, model={**spec.model, **models[name].get("model", {})})


# --- which task trains where --------------------------------------------------------------------------------------

def engine_of(config: Mapping[str, Any], task: str) -> str:
    """Where ``task`` trains: ``verl`` for a :func:`verl_tasks` task, else ``local``."""
    engine = config["train"].get("engine", "local")
    if engine not in ENGINES:
        raise PlanError(f"train.engine {engine!r}: one of {ENGINES}")
    return "verl" if task in verl_tasks(config) else "local"


def task_row(config: Mapping[str, Any], task: str) -> Mapping[str, Any]:
    """The task's row ``train.task_settings.<task>`` (empty where it has none), read by both engines."""
    return (config["train"].get("task_settings") or {}).get(task) or {}


def verl_tasks(config: Mapping[str, Any]) -> list[str]:
    """Tasks trained on verl: under ``train.engine: verl`` those with a ``train.task_settings`` row (App. B) not stating
    ``engine: local``; every other task trains on the local engine."""
    train = config["train"]
    if train.get("engine") != "verl":
        return []
    return [task for task, row in (train.get("task_settings") or {}).items() if (row or {}).get("engine", "verl")
            == "verl"]


def _verl_row(config: Mapping[str, Any], task: str) -> Mapping[str, Any]:
    if task not in verl_tasks(config):
        raise PlanError(f"train.tasks has {task!r} on verl but train.task_settings has no verl row for it (App. B "
                        f"settings: group_size, prompts_per_step, steps, lengths, GPUs); verl tasks: "
                        f"{sorted(verl_tasks(config))}")
    return task_row(config, task)


def engine_settings(config: Mapping[str, Any], task: str, concern: str, engine: str) -> dict[str, Any]:
    """The flat ``rl`` or ``sft`` settings of ``task`` on ``engine``: ``train.<concern>`` with its ``<engine>`` knobs,
    then the task row's ``<concern>`` and its knobs over them."""
    flat: dict[str, Any] = {}
    for section in (config["train"][concern], task_row(config, task).get(concern) or {}):
        flat |= {key: value for key, value in section.items() if key not in ENGINES}
        flat |= section.get(engine) or {}
    return flat


# --- estimators: the parameters each takes, and which tau wins ------------------------------------------------------

def check_estimator(estimator: Estimator) -> None:
    """The estimator is declared and takes exactly these parameters, each within its bounds (no torch)."""
    try:
        check_params(estimator.name, estimator.params)
    except (TypeError, ValueError) as exc:
        raise PlanError(f"advantage {estimator.name!r} with parameters {json.dumps(estimator.params)}: {exc}") from None


def estimator_params(config: Mapping[str, Any], task: str, method: str, tau: float | None = None) -> dict[str, Any]:
    """The parameters of ``method``'s estimator on ``task``: the method entry's keys besides ``advantage`` and
    ``reward``. Tau's precedence: an ablation cell's > the task row's > the method entry's > the estimator's default
    (SoftmaxGRPO has none, so a tau from nowhere is a :class:`PlanError`)."""
    entry = config["train"]["methods"][method]
    params = {k: v for k, v in entry.items() if k not in ("advantage", "reward")}
    if not takes(entry["advantage"], "tau"):
        if tau is not None:
            raise PlanError(f"a tau ({tau}) for {task}/{method}, whose {entry['advantage']!r} estimator takes none")
        return params
    row = task_row(config, task)
    for value in (tau, row.get("tau")):  # higher precedence first; the method entry's is already in params
        if value is not None:
            params["tau"] = value
            break
    if "tau" not in params and not _has_default(entry["advantage"], "tau"):
        where = f"train.methods.{method}.tau" + (f" nor train.task_settings.{task}.tau" if row else "")
        raise PlanError(f"method {method!r} on task {task!r} uses the {entry['advantage']!r} estimator, which takes "
                        f"tau, but neither {where} is set")
    return params


def _has_default(name: str, key: str) -> bool:
    """Whether estimator ``name``'s parameter ``key`` has a default in its parameter dataclass."""
    found = [f for f in fields(estimator_entry(name).params) if f.name == key]
    return bool(found) and (found[0].default is not MISSING or found[0].default_factory is not MISSING)


def _similarity_weights(config: Mapping[str, Any], task: str, reward: str) -> dict[str, float] | None:
    """A similarity run's reward weights: the task row's ``similarity_weights``, else similarity alone."""
    if reward != "similarity":
        return None
    return dict(task_row(config, task).get("similarity_weights") or {"similarity": 1.0})


def baseline_settings(config: Mapping[str, Any], method: str) -> BaselineSettings | None:
    """A baseline's section ``train.baselines.<method>`` as its registry entry's settings class (None for Base),
    without the keys that only plan (``tasks``, Rationalization's ``annotator``)."""
    cls = declared(method)
    if cls is None:
        return None
    where = f"train.baselines.{method}"
    try:
        return cls.from_section((config["train"].get("baselines") or {}).get(method) or {}, where)
    except SettingsError as error:
        raise PlanError(str(error)) from None


def _rl(config: Mapping[str, Any], task: str, engine: str) -> RLSettings:
    return RLSettings.from_flat(engine_settings(config, task, "rl", engine), engine,
                                f"train.rl with train.task_settings.{task}.rl ({engine})")


def _sft(config: Mapping[str, Any], task: str, engine: str) -> SFTSettings:
    return SFTSettings.from_flat(engine_settings(config, task, "sft", engine), engine,
                                 f"train.sft with train.task_settings.{task}.sft ({engine})")


# --- the builders: one per method family, each for every engine it trains on ----------------------------------------

def _engine_fields(config: Mapping[str, Any], task: str, engine: str,
                   settings: RLSettings | SFTSettings) -> dict[str, Any]:
    """What a run takes from its engine: locally an SFT run's architecture (an RL run starts from ``--init``); on verl
    the hub model, App. B's nodes and GPUs (read off the knobs) and ``train.verl.extra_overrides.<trainer>``."""
    trainer = "sft" if isinstance(settings, SFTSettings) else "rl"
    if engine == "local":
        return {"model": dict(config["train"]["model"])} if trainer == "sft" else {}
    _verl_row(config, task)
    verl, knobs = config["train"]["verl"], settings.knobs
    return {"model": verl["model"], "extra_overrides": tuple(verl["extra_overrides"][trainer]),
            "resources": {"nodes": int(getattr(knobs, "nodes", 1)), "gres": f"gpu:{knobs.gpus_per_node}"}}


def sft_spec(config: Mapping[str, Any], task: str, method: str, engine: str) -> RunSpec:
    """SFT, and on verl Rationalization's SFT step: ``train.sft`` with the engine's knobs and the task's row."""
    sft = _sft(config, task, engine)
    return RunSpec(method=method, task=task, engine=engine, sft=sft, **_engine_fields(config, task, engine, sft))


def group_rl_spec(config: Mapping[str, Any], task: str, method: str, engine: str) -> RunSpec:
    """A group-RL run: ``train.rl`` with the engine's knobs and the task's row, the method's estimator and reward;
    paired methods (GRPO vs SoftmaxGRPO) differ only in the estimator."""
    if method not in config["train"]["methods"]:
        raise PlanError(f"unknown method {method!r}; configured: {sorted(config['train']['methods'])}")
    rl, entry = _rl(config, task, engine), config["train"]["methods"][method]
    return RunSpec(method=method, task=task, engine=engine, rl=rl,
                   estimator=Estimator(entry["advantage"], estimator_params(config, task, method)),
                   reward=entry["reward"], reward_weights=_similarity_weights(config, task, entry["reward"]),
                   **_engine_fields(config, task, engine, rl))


def rl_baseline_spec(config: Mapping[str, Any], task: str, method: str, engine: str) -> RunSpec:
    """An RL-style baseline (RL-Logit, RARO, OPD): the task's group-RL settings, so only the method differs from
    GRPO, with its section's tau-free estimator (default GRPO) and its own section."""
    own = baseline_settings(config, method)
    advantage = getattr(own, "advantage", "grpo")
    if takes(advantage, "tau"):
        raise PlanError(f"train.baselines.{method}.advantage {advantage!r}: a baseline uses a tau-free estimator")
    rl = _rl(config, task, engine)
    return RunSpec(method=method, task=task, engine=engine, rl=rl, estimator=Estimator(advantage), baseline=own,
                   **_engine_fields(config, task, engine, rl))


def base_spec(config: Mapping[str, Any], task: str, method: str, engine: str) -> RunSpec:
    """Base, the model before post-training, made by the local engine (on verl a copy of the hub model)."""
    return RunSpec(method=method, task=task, engine="local", model=dict(config["train"]["model"]))


def rationalization_spec(config: Mapping[str, Any], task: str, method: str, engine: str) -> RunSpec:
    """Rationalization (STaR): locally its section and the SFT settings it trains with; on verl its SFT step (after
    the annotation job of :func:`annotation_spec`)."""
    if engine == "verl":
        return sft_spec(config, task, method, engine)
    return RunSpec(method=method, task=task, engine="local", model=dict(config["train"]["model"]),
                   sft=_sft(config, task, "local"), baseline=baseline_settings(config, method))


def dpo_spec(config: Mapping[str, Any], task: str, method: str, engine: str) -> RunSpec:
    """Iterative DPO: its own section; on GPU (TRL) also the generation settings of its sampling."""
    own = baseline_settings(config, method)
    if engine == "local":
        return RunSpec(method=method, task=task, engine="local", baseline=own)
    return RunSpec(method=method, task=task, engine="trl", baseline=own,
                   generation=generation_spec(config, method, "batch_size_generate"),
                   resources={"gpu": own.num_processes})


def opd_teacher(config: Mapping[str, Any]) -> OPDTeacher:
    """OPD's teacher as its typed settings (``train.baselines.opd.teacher``), read by its spec and by the plan (which
    run it starts from)."""
    settings = baseline_settings(config, "opd")
    if not isinstance(settings, OPDSettings):
        raise PlanError(f"train.baselines.opd reads as {type(settings).__name__}, not OPD's settings")
    return settings.teacher


def opd_teacher_spec(config: Mapping[str, Any], task: str, method: str = "opd_teacher",
                     engine: str = "local") -> RunSpec:
    """The OPD teacher (local engine only): SFT settings with the teacher's steps and lr (a ``scratch`` teacher may
    be larger)."""
    teacher = opd_teacher(config)
    if teacher.init == "sft" and teacher.model:
        raise PlanError("train.baselines.opd.teacher.model overrides need init: scratch (an SFT-initialised teacher "
                        "has the SFT model's shape)")
    sft = engine_settings(config, task, "sft", "local")
    return RunSpec(method="opd_teacher", task=task, engine="local", model={**config["train"]["model"], **teacher.model},
                   sft=SFTSettings.from_flat({**sft, "steps": teacher.steps, "lr": teacher.lr,
                                              "warmup_steps": min(sft["warmup_steps"], teacher.steps - 1)},
                                             "local", f"train.sft with train.task_settings.{task}.sft and "
                                             "train.baselines.opd.teacher"))


def annotation_spec(config: Mapping[str, Any], task: str) -> RunSpec:
    """Rationalization's annotation on GPU: the base model writing rationales with the STaR hint through the
    evaluation backend."""
    return RunSpec(method="rationalization", task=task, engine="verl", model=config["train"]["verl"]["model"],
                   baseline=baseline_settings(config, "rationalization"),
                   generation=generation_spec(config, "rationalization"),
                   resources={"gpu": config["eval"]["vllm"]["tensor_parallel_size"]})
