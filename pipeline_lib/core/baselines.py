"""A baseline's own settings: one frozen dataclass per prior-work method, one field per key of its section
``train.baselines.<name>`` (the schema describes each key, once), carried by
:attr:`pipeline_lib.core.run_spec.RunSpec.baseline`.

The classes live here, not beside their trainers, because the plan (a lower layer than the engines) builds them. A
method's registry entry names its class and declares it here (:func:`declare`). In a spec's JSON the settings record
their class (``{"type": "<module>:<class>", "settings": {...}}``), read back only as a class already loaded, never
by importing what the JSON names.
"""

from __future__ import annotations

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
    """``data``'s values for exactly the fields of dataclass ``cls`` (``skip`` keys dropped); a key missing or unknown
    is an ``error`` naming it."""
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
    #: Fields no section key holds: the plan sets them per run (RL-Logit's ``variant``); None as read from a section.
    per_run: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_section(cls: type[S], section: Mapping[str, Any], where: str) -> S:
        """Read a validated config section (``where`` names it in errors); a key missing or unknown is an error; a
        per-run field is None unless the mapping names it."""
        return _build(cls, {**dict.fromkeys(cls.per_run), **section}, where, cls.planned)

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
    max_new_tokens: int
    temperature: float
    batch_size: int
    backend: str | None


@dataclass(frozen=True)
class IterativeDPOSettings(BaselineSettings):
    """Iterative DPO (``train.baselines.iterative_dpo``): the expert answer preferred over one on-policy sample."""

    rounds: int
    pairs_per_round: int
    steps_per_round: int
    batch_size: int
    batch_size_generate: int
    lr: float
    weight_decay: float
    beta: float
    grad_clip: float
    validation_prompts: int
    max_new_tokens: int
    max_response_tokens: int
    temperature: float
    backend: str | None
    per_device_batch_size: int
    num_processes: int
    accelerate_config: str | None
    bf16: bool
    gradient_checkpointing: bool
    loss_type: list[str]
    max_length: int | None


@dataclass(frozen=True)
class RLLogitSettings(BaselineSettings):
    """RL-Logit (``train.baselines.rl_logit``): group RL with the policy's log-probability of the expert answer.

    The section lists ``variants``; each is its own run (``rl_logit_<variant>``), whose ``variant`` the plan sets
    (:func:`pipeline_lib.plan.settings.with_variant`). Read from the section, ``variant`` is None: no run trains
    without one."""

    planned: ClassVar[tuple[str, ...]] = ("tasks", "variants", "validation_prompts")
    per_run: ClassVar[tuple[str, ...]] = ("variant",)

    variant: str | None
    advantage: str


@dataclass(frozen=True)
class OPDTeacher:
    """OPD's teacher (``train.baselines.opd.teacher``)."""

    init: str
    steps: int
    lr: float
    model: dict[str, Any]
    hub: str | None


@dataclass(frozen=True)
class OPDVerl:
    """verl only: where OPD's teacher runs (``train.baselines.opd.verl``)."""

    gpus_per_node: int
    tensor_parallel_size: int
    gpu_memory_utilization: float


@dataclass(frozen=True)
class OPDSettings(BaselineSettings):
    """On-policy distillation (``train.baselines.opd``): per-token reverse KL to a teacher along student rollouts."""

    #: The fields that hold a nested section, with the dataclass each reads as.
    nested: ClassVar[dict[str, type]] = {"teacher": OPDTeacher, "verl": OPDVerl}

    teacher: OPDTeacher
    verl: OPDVerl


@dataclass(frozen=True)
class RaroSettings(BaselineSettings):
    """RARO (``train.baselines.raro``): a shared-weights policy and relativistic critic, both trained with GRPO."""

    advantage: str
    critic_system_prompt: str
    critic_max_new_tokens: int
    critic_decoding: str
    critic_prompts_per_step: int
    replay_fraction: float
    replay_size: int
    rewards: dict[str, dict[str, float]]


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


def _subclasses(cls: type) -> list[type]:
    return [cls, *(sub for child in cls.__subclasses__() for sub in _subclasses(child))]


def from_json_value(data: Any, where: str) -> BaselineSettings:
    """Read :func:`to_json_value`'s form; the class must be a loaded :class:`BaselineSettings` subclass (the JSON
    names it, it never chooses a module to import)."""
    if not isinstance(data, Mapping) or set(data) != {"type", "settings"} or not isinstance(data["type"], str):
        raise SettingsError(f"{where}: baseline settings must be {{'type': '<module>:<class>', 'settings': {{...}}}}")
    cls = next((sub for sub in _subclasses(BaselineSettings) if _type_name(sub) == data["type"]), None)
    if cls is None:
        raise SettingsError(f"{where}: {data['type']!r} is not a loaded BaselineSettings class")
    return cls.from_dict(data["settings"], f"{where} ({cls.__name__})")
