"""A baseline's own settings: one frozen dataclass per prior-work method, one field per key of its config section
``train.baselines.<name>`` with the schema's name, carried by :attr:`pipeline_lib.core.run_spec.RunSpec.baseline`.

The plan builds them (:func:`pipeline_lib.plan.settings.baseline_settings`) from the section with
:meth:`BaselineSettings.from_section`, which leaves out the keys that only choose which runs exist
(:attr:`BaselineSettings.planned`: ``tasks``; Rationalization's ``annotator`` too); the trainers and verl's
``translate`` read the fields. Which class a method takes is a field of its registry entry
(``pipeline_lib.plan.registry.baseline(..., settings=...)``), which declares it here (:func:`declare`), so the plan
finds it by the method's name without a table kept by hand. The classes live here, not beside their trainers, because
the plan (a lower layer than the engines) constructs them. In a run spec's JSON a settings object records its class
(``{"type": "<module>:<class>", "settings": {...}}``, :func:`to_json_value` / :func:`from_json_value`), so it reads
back as the same type.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, is_dataclass
from typing import Any, ClassVar, TypeVar

__all__ = ["BaselineSettings", "IterativeDPOSettings", "OPDSettings", "OPDTeacher", "OPDVerl", "RLLogitSettings",
           "RaroSettings", "RationalizationSettings", "SettingsError", "declare", "declared", "exact_fields",
           "from_json_value", "to_json_value", "undeclare"]

S = TypeVar("S", bound="BaselineSettings")


class SettingsError(ValueError):
    """A baseline section or its JSON form lacks a key, has an unknown one, or names a class that is no settings."""


def exact_fields(cls: type, data: Any, where: str, skip: tuple[str, ...] = (), error: type[Exception] = SettingsError,
                 hint: str = "") -> dict[str, Any]:
    """``data``'s values for exactly the fields of dataclass ``cls`` (keys in ``skip`` are let through and dropped);
    a key missing or unknown is an ``error`` naming it (``where``), with ``hint`` appended."""
    if not isinstance(data, Mapping):
        raise error(f"{where}: must be a mapping, got {type(data).__name__}")
    names = [f.name for f in fields(cls)]
    missing = [name for name in names if name not in data]
    unknown = sorted(set(data) - set(names) - set(skip))
    if missing or unknown:
        raise error(f"{where}: lacks {missing} / has unknown {unknown}{hint}")
    return {name: data[name] for name in names}


def _build(cls: type, data: Any, where: str, skip: tuple[str, ...] = ()) -> Any:
    """``cls`` from a mapping with exactly its fields (besides ``skip``); a field of ``cls.nested`` from its mapping."""
    values = exact_fields(cls, data, where, skip,
                          hint=" (the schema's defaults fill every key: is the config validated?)")
    for name, nested in getattr(cls, "nested", {}).items():
        values[name] = _build(nested, values[name], f"{where}.{name}")
    return cls(**values)


@dataclass(frozen=True)
class BaselineSettings:
    """The base of every baseline's settings: a section ``train.baselines.<name>`` as typed fields."""

    #: Keys of the section that choose *which* runs exist, not how one run trains; they stay out of the run's
    #: settings, so adding a task reruns no other run.
    planned: ClassVar[tuple[str, ...]] = ("tasks",)

    @classmethod
    def from_section(cls: type[S], section: Mapping[str, Any], where: str) -> S:
        """Read a validated config section (``where`` names it in errors); a key missing or unknown is an error."""
        return _build(cls, section, where, cls.planned)

    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, Any], where: str = "baseline settings") -> S:
        """Read the JSON form (:meth:`to_dict`)."""
        return _build(cls, data, where)

    def to_dict(self) -> dict[str, Any]:
        """The settings as the section states them (nested sections as mappings), without the planned keys."""
        return asdict(self)


@dataclass(frozen=True)
class RationalizationSettings(BaselineSettings):
    """STaR rationalization (``train.baselines.rationalization``): how the annotator writes the rationales."""

    planned: ClassVar[tuple[str, ...]] = ("tasks", "annotator")  # the annotator is the job's input, not a setting

    hint: str
    """The STaR hint appended to the question for the annotator; ``{answer}`` is the expert answer."""
    max_new_tokens: int
    """Rationale length cap in tokens."""
    temperature: float
    """Annotator sampling temperature."""
    batch_size: int
    """Questions annotated at once."""
    backend: str | None
    """GPU path only: the annotator's generation backend (None: ``eval.backend``)."""


@dataclass(frozen=True)
class IterativeDPOSettings(BaselineSettings):
    """Iterative DPO (``train.baselines.iterative_dpo``): the expert answer preferred over one on-policy sample."""

    rounds: int
    """DPO rounds (the paper: 3); the best on validation is reported."""
    pairs_per_round: int
    """Questions sampled (one response each) per round."""
    steps_per_round: int
    """Optimizer steps per round."""
    batch_size: int
    """Preference pairs per step."""
    batch_size_generate: int
    """Questions sampled at once."""
    lr: float
    """AdamW learning rate."""
    weight_decay: float
    """AdamW weight decay."""
    beta: float
    """DPO inverse temperature on the log-ratio margin."""
    grad_clip: float
    """Gradient-norm clip."""
    validation_prompts: int
    """The last N training prompts, held out of every pair; greedy accuracy on them picks the best round."""
    max_new_tokens: int
    """On-policy sample length cap."""
    max_response_tokens: int
    """Expert demonstrations are cut to this many tokens (as in SFT)."""
    temperature: float
    """On-policy sampling temperature."""
    backend: str | None
    """GPU path only: generation backend of the samples and validation answers (None: ``eval.backend``)."""
    per_device_batch_size: int
    """GPU path only: pairs per device per forward."""
    num_processes: int
    """GPU path only: training processes (GPUs, one node)."""
    accelerate_config: str | None
    """GPU path only: ``accelerate launch --config_file`` of the training step (None: plain data parallel)."""
    bf16: bool
    """GPU path only: bf16 mixed precision."""
    gradient_checkpointing: bool
    """GPU path only: activation checkpointing in the policy."""
    loss_type: list[str]
    """GPU path only: ``trl.DPOConfig`` loss_type (``[sigmoid]``: the local engine's DPO loss)."""
    max_length: int | None
    """GPU path only: prompt + response tokens per sequence (None: no limit)."""


@dataclass(frozen=True)
class RLLogitSettings(BaselineSettings):
    """RL-Logit (``train.baselines.rl_logit``): group RL with the policy's log-probability of the expert answer."""

    variant: str
    """``logprob`` = log pi(a* | q, z); ``neg_perplexity`` = -exp(-log pi(a* | q, z) / |a*|)."""
    advantage: str
    """The group advantage estimator (a tau-free one; default GRPO)."""


@dataclass(frozen=True)
class OPDTeacher:
    """OPD's teacher (``train.baselines.opd.teacher``)."""

    init: str
    """``sft``: continue the seed's SFT model; ``scratch``: a new model sized by ``train.model`` + :attr:`model`."""
    steps: int
    """Extra SFT steps of the trained tiny teacher."""
    lr: float
    """The trained teacher's peak learning rate."""
    model: dict[str, Any]
    """Overrides of ``train.model`` for a larger teacher (``init: scratch`` only)."""
    hub: str | None
    """A ready teacher (HF name or path; the paper's Qwen/Qwen3-8B) used instead of training one."""


@dataclass(frozen=True)
class OPDVerl:
    """verl only: where OPD's teacher runs (``train.baselines.opd.verl``)."""

    gpus_per_node: int
    """GPUs of each task node for the teacher (``distillation.n_gpus_per_node``); the student gets the rest."""
    tensor_parallel_size: int
    """Tensor parallelism of each teacher replica."""
    gpu_memory_utilization: float
    """vLLM GPU memory share of each teacher replica."""


@dataclass(frozen=True)
class OPDSettings(BaselineSettings):
    """On-policy distillation (``train.baselines.opd``): per-token reverse KL to a teacher along student rollouts."""

    #: The fields that hold a nested section, with the dataclass each reads as.
    nested: ClassVar[dict[str, type]] = {"teacher": OPDTeacher, "verl": OPDVerl}

    teacher: OPDTeacher
    """The teacher: trained here (local engine) or a ready one (``hub``)."""
    verl: OPDVerl
    """verl only: the teacher's GPUs."""


@dataclass(frozen=True)
class RaroSettings(BaselineSettings):
    """RARO (``train.baselines.raro``): a shared-weights policy and relativistic critic, both trained with GRPO."""

    advantage: str
    """The group advantage estimator of policy and critic groups (a tau-free one; default GRPO)."""
    critic_system_prompt: str
    """The system prompt that switches the model into the critic role (policy prompts have none)."""
    critic_max_new_tokens: int
    """Critic reply length cap."""
    critic_decoding: str
    """``free``: the critic writes its reply; ``choice``: sampled among the valid verdicts (local engine only)."""
    critic_prompts_per_step: int
    """Critic groups (M replies each) per step."""
    replay_fraction: float
    """Share of critic prompts drawn from the replay buffer once it holds enough pairs."""
    replay_size: int
    """Past (prompt, policy answer) pairs the replay buffer keeps (FIFO)."""
    rewards: dict[str, dict[str, float]]
    """The outcome tables, verdict -> reward, of the ``policy`` and of the ``critic``."""


#: Settings class of each baseline with one, by its config section; filled from the registry entries (:func:`declare`).
_DECLARED: dict[str, type[BaselineSettings]] = {}


def declare(section: str, cls: type[BaselineSettings]) -> None:
    """Record that section ``train.baselines.<section>`` reads as ``cls`` (the registry does, for each entry)."""
    if not (isinstance(cls, type) and issubclass(cls, BaselineSettings) and is_dataclass(cls)):
        raise SettingsError(f"train.baselines.{section}: {cls!r} is not a BaselineSettings dataclass")
    if _DECLARED.get(section, cls) is not cls:
        raise SettingsError(f"train.baselines.{section} already reads as {_DECLARED[section].__name__}")
    _DECLARED[section] = cls


def undeclare(section: str) -> None:
    """Forget a section's class (a test's method, unregistered)."""
    _DECLARED.pop(section, None)


def declared(section: str) -> type[BaselineSettings] | None:
    """The settings class of section ``train.baselines.<section>``; None where the baseline has none (Base)."""
    return _DECLARED.get(section)


def _type_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def to_json_value(settings: BaselineSettings) -> dict[str, Any]:
    """The JSON form: the class and the fields, so :func:`from_json_value` reads back the same type."""
    return {"type": _type_name(type(settings)), "settings": settings.to_dict()}


def from_json_value(data: Any, where: str) -> BaselineSettings:
    """Read :func:`to_json_value`'s form; a class that is not a :class:`BaselineSettings` is an error naming it."""
    if not isinstance(data, Mapping) or set(data) != {"type", "settings"} or not isinstance(data["type"], str):
        raise SettingsError(f"{where}: baseline settings must be {{'type': '<module>:<class>', 'settings': {{...}}}}")
    module, _, name = data["type"].partition(":")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        raise SettingsError(f"{where}: baseline settings class {data['type']!r} not found") from None
    if not (isinstance(cls, type) and issubclass(cls, BaselineSettings)):
        raise SettingsError(f"{where}: {data['type']!r} is not a BaselineSettings class")
    return cls.from_dict(data["settings"], f"{where} ({cls.__name__})")
