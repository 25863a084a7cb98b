"""The run spec: one typed, frozen description of a training run, made by the plan and read unchanged by every engine.

The plan (:mod:`pipeline_lib.plan.settings`) builds a :class:`RunSpec` once; it crosses the process boundary as JSON
(``--spec``) and each engine translates it at its own edge (verl: :mod:`pipeline_lib.jobs.engines.verl.translate`).
Each typed setting is the config key of the same name, which the schema describes once, with its default and bounds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from pipeline_lib.core.baselines import (
    BaselineSettings,
    SettingsError,
    exact_fields,
    from_json_value,
    to_json_value,
)

__all__ = ["AGGREGATIONS", "ENGINES", "IMAGENET_RUN_FIELDS", "KL_ESTIMATORS", "SPEC_ENGINES", "Estimator",
           "ImageNetDataset", "ImageNetModel", "ImageNetSettings", "LocalRLKnobs", "LocalSFTKnobs", "PlanError",
           "RLSettings", "RunSpec", "SFTSettings", "VerlRLKnobs", "VerlSFTKnobs"]

#: Values of ``train.engine``.
ENGINES = ("local", "verl")
#: What trains a run: the local PyTorch engine, verl, TRL (Iterative DPO on GPU) or the ImageNet classifier.
SPEC_ENGINES = ("local", "verl", "trl", "classify")
#: Rewards a group-RL run trains on: the task's verifier or the similarity to the expert answer.
REWARDS = ("verifier", "similarity")
#: Per-token KL estimators, one vocabulary on both engines (Schulman's k1 = log-ratio, k2 = half its square, k3 = the
#: low-variance one, verl's ``low_var_kl``; abs = |log-ratio|). Each engine's knobs say which it computes.
KL_ESTIMATORS = ("k1", "k2", "k3", "abs")
#: Loss normalisers, one vocabulary on both engines (``group-token-mean``: the paper's, each group's token sum over its
#: tokens; the rest verl's ``loss_agg_mode`` names). Each engine's knobs say which it computes.
AGGREGATIONS = ("group-token-mean", "token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                "seq-mean-token-sum-norm")


class PlanError(ValueError):
    """The config asks for a run the registry cannot build, or sets one parameter twice with different values."""


def _json_value(where: str, value: Any) -> None:
    """A spec holds JSON values only (it is passed as JSON): finite numbers, strings, lists and string-keyed maps."""
    if isinstance(value, float) and not math.isfinite(value):
        raise PlanError(f"{where}: non-finite number {value!r}")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise PlanError(f"{where}: key {key!r} is not a string")
            _json_value(f"{where}.{key}", item)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _json_value(f"{where}[{index}]", item)
    elif value is not None and not isinstance(value, (str, int, float, bool)):
        raise PlanError(f"{where}: {type(value).__name__} {value!r} is not a JSON value")


@dataclass(frozen=True)
class Estimator:
    """A group advantage estimator of :mod:`pipeline_lib.core.rl.advantages` and its parameters."""

    name: str
    """The estimator's name in :mod:`pipeline_lib.core.rl.advantages` (``grpo``, ``softmax``, ...)."""
    params: dict[str, Any] = field(default_factory=dict)
    """Its keyword parameters, exactly as ``group_advantages`` takes them (SoftmaxGRPO: ``{"tau": 0.1}``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise PlanError(f"estimator name {self.name!r}: a non-empty string")
        if not isinstance(self.params, dict):
            raise PlanError(f"estimator {self.name!r}: params must be a mapping, got {type(self.params).__name__}")
        _json_value(f"estimator {self.name!r} params", self.params)


@dataclass(frozen=True)
class LocalRLKnobs:
    """Local-engine-only group-RL knobs (no App. B row)."""

    #: The KL estimators and aggregations the local engine computes (:mod:`pipeline_lib.core.rl.losses`).
    computes: ClassVar[dict[str, tuple[str, ...]]] = {
        "kl_estimator": ("k1", "k2", "k3"),
        "aggregation": ("group-token-mean", "token-mean", "seq-mean-token-mean", "seq-mean-token-sum")}

    minibatches: int


@dataclass(frozen=True)
class VerlRLKnobs:
    """verl-only group-RL knobs: how App. B's run is laid out on GPUs, and verl's own switches."""

    #: The KL estimators and aggregations verl 0.9.1 computes (its ``kl_penalty`` has no ``full``; no per-group
    #: normaliser).
    computes: ClassVar[dict[str, tuple[str, ...]]] = {
        "kl_estimator": ("k1", "k2", "k3", "abs"),
        "aggregation": ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")}

    mini_batch_per_device: int
    micro_batch_per_gpu: int
    max_prompt_tokens: int
    gpus_per_node: int
    nodes: int
    rollout_engine: str
    rollout_tp: int
    gpu_memory_utilization: float
    test_freq: int


#: The engine-only knobs of each engine's group-RL settings.
RL_KNOBS: dict[str, type] = {"local": LocalRLKnobs, "verl": VerlRLKnobs}


T = TypeVar("T", bound="_TrainerSettings")


class _TrainerSettings:
    """What :class:`RLSettings` and :class:`SFTSettings` share: one name per setting on both engines, the engine's own
    knobs in ``knobs``."""

    KNOBS: ClassVar[dict[str, type]]
    KIND: ClassVar[str]

    @classmethod
    def from_flat(cls: type[T], settings: Mapping[str, Any], engine: str, where: str = "run spec") -> T:
        """Read an engine's flat settings; a key missing or unknown is an error naming it."""
        if engine not in cls.KNOBS:
            raise PlanError(f"{where}: no {cls.KIND} settings for engine {engine!r}; engines: {sorted(cls.KNOBS)}")
        if not isinstance(settings, Mapping):
            raise PlanError(f"{where}: {cls.KIND} settings must be a mapping, got {type(settings).__name__}")
        knobs = cls.KNOBS[engine]
        shared = [f.name for f in fields(cls) if f.name != "knobs"]
        own = [f.name for f in fields(knobs)]
        missing = [k for k in (*shared, *own) if k not in settings]
        unknown = sorted(set(settings) - {*shared, *own})
        if missing or unknown:
            raise PlanError(f"{where}: {engine} {cls.KIND} settings lack {missing} / have unknown {unknown}")
        try:
            return cls(**{k: settings[k] for k in shared}, knobs=knobs(**{k: settings[k] for k in own}))
        except PlanError as error:
            raise PlanError(f"{where}: {error}") from None

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any], engine: str, where: str = "run spec") -> T:
        """Read the JSON form (:meth:`RunSpec.to_dict`: the shared fields and a ``knobs`` mapping)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("knobs"), Mapping):
            raise PlanError(f"{where}: {cls.KIND} settings must be a mapping with a 'knobs' mapping")
        if set(data["knobs"]) & (set(data) - {"knobs"}):
            raise PlanError(f"{where}: {cls.KIND} knobs {sorted(set(data['knobs']) & set(data))} repeat a shared "
                            "setting")
        return cls.from_flat({**{k: v for k, v in data.items() if k != "knobs"}, **data["knobs"]}, engine, where)

    def flat(self) -> dict[str, Any]:
        """The settings as one flat mapping, as the config states them."""
        data = asdict(self)
        return {**{k: v for k, v in data.items() if k != "knobs"}, **data["knobs"]}


@dataclass(frozen=True)
class RLSettings(_TrainerSettings):
    """A group-RL run's settings (``train.rl``, a task row's ``rl`` over it), App. B's terms; each engine's own in
    :attr:`knobs`."""

    KNOBS: ClassVar[dict[str, type]] = RL_KNOBS
    KIND: ClassVar[str] = "group-RL"

    steps: int
    lr: float
    weight_decay: float
    clip_low: float
    clip_high: float
    beta: float
    kl_estimator: str
    aggregation: str
    group_size: int
    prompts_per_step: int
    max_response_tokens: int
    temperature: float
    ppo_epochs: int
    grad_clip: float
    checkpoint_every: int
    #: Distinct training prompts the run draws from (None: all); a smaller pool makes the run revisit its prompts.
    prompt_pool: int | None
    #: Every this many steps the run keeps its policy for the pass-rate probe (None: none; :meth:`probe_steps`).
    probe_every: int | None
    knobs: LocalRLKnobs | VerlRLKnobs

    def probe_steps(self) -> list[int]:
        """The steps whose policy the run keeps for the pass-rate probe (``probe/step_<s>/``): every
        ``probe_every``-th step before the last (the last is ``final/``; step 0 is the run's ``--init``)."""
        if self.probe_every is None:
            return []
        return list(range(self.probe_every, self.steps, self.probe_every))

    def __post_init__(self) -> None:
        """A value the engine cannot compute is an error naming the key (on verl at parse time, before a GPU)."""
        if self.prompt_pool is not None and self.prompt_pool < self.prompts_per_step:
            raise PlanError(f"prompt_pool {self.prompt_pool} is smaller than prompts_per_step {self.prompts_per_step}: "
                            "a step would draw one prompt twice")
        if self.probe_every is not None and self.probe_every < 1:
            raise PlanError(f"probe_every {self.probe_every}: at least 1 (or null: no probe)")
        engine = next((name for name, knobs in RL_KNOBS.items() if isinstance(self.knobs, knobs)), None)
        if engine is None:
            raise PlanError(f"group-RL knobs must be one of {[k.__name__ for k in RL_KNOBS.values()]}")
        for key, vocabulary in (("kl_estimator", KL_ESTIMATORS), ("aggregation", AGGREGATIONS)):
            value, computed = getattr(self, key), type(self.knobs).computes[key]
            if value not in vocabulary:
                raise PlanError(f"{key} {value!r} is not one of {list(vocabulary)}")
            if value not in computed:
                raise PlanError(f"{key} {value!r}: the {engine} engine computes only {list(computed)}")


@dataclass(frozen=True)
class LocalSFTKnobs:
    """Local-engine-only SFT knobs."""

    warmup_steps: int
    max_response_tokens: int
    grad_clip: float


@dataclass(frozen=True)
class VerlSFTKnobs:
    """verl-only SFT knobs (verl.trainer.sft_trainer)."""

    warmup_ratio: float
    micro_batch_per_gpu: int
    max_length: int
    truncation: str
    gpus_per_node: int


#: The engine-only knobs of each engine's SFT settings.
SFT_KNOBS: dict[str, type] = {"local": LocalSFTKnobs, "verl": VerlSFTKnobs}


@dataclass(frozen=True)
class SFTSettings(_TrainerSettings):
    """A supervised fine-tuning run's settings (``train.sft``, a task row's ``sft`` over it; the paper gives none);
    each engine's own in :attr:`knobs`."""

    KNOBS: ClassVar[dict[str, type]] = SFT_KNOBS
    KIND: ClassVar[str] = "SFT"

    steps: int
    lr: float
    weight_decay: float
    batch_size: int
    checkpoint_every: int
    knobs: LocalSFTKnobs | VerlSFTKnobs


@dataclass(frozen=True)
class ImageNetDataset:
    """Where an ImageNet-study run's images come from (the ``imagenet.dataset`` section, field for field)."""

    kind: str
    root: str | None
    expected_classes: int | None
    n_classes: int
    dim: int
    n_train: int
    n_val: int
    noise: float
    seed: int


@dataclass(frozen=True)
class ImageNetModel:
    """The ImageNet study's classifier (the ``imagenet.model`` section, field for field)."""

    kind: str
    hidden: int


#: The :class:`ImageNetSettings` fields that name the run, not a key of the ``imagenet`` section's run settings.
IMAGENET_RUN_FIELDS = ("objective", "group_size")


@dataclass(frozen=True)
class ImageNetSettings:
    """An ImageNet objective-study run's settings: the ``imagenet`` keys one run reads (not those choosing which runs
    exist, nor tau, which is the spec's estimator's), plus its ``objective`` and ``group_size`` (M)."""

    dataset: ImageNetDataset
    model: ImageNetModel
    epochs: int
    batch_size: int
    eval_batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    warmup_epochs: float
    eval_every: int
    checkpoint_every: int
    pass_k: tuple[int, ...]
    num_workers: int
    objective: str  # ml (cross-entropy) or an advantage estimator (reinforce, grpo, softmax)
    group_size: int  # M, labels sampled per image (0 for ml)

    def __post_init__(self) -> None:
        if not isinstance(self.pass_k, tuple):
            object.__setattr__(self, "pass_k", tuple(self.pass_k))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "run spec imagenet") -> ImageNetSettings:
        """Read the flat mapping (also the JSON form); a key missing or unknown is an error naming it."""
        nested = {"dataset": ImageNetDataset, "model": ImageNetModel}
        values = exact_fields(cls, data, where, error=PlanError)
        for name, typed in nested.items():
            values[name] = typed(**exact_fields(typed, values[name], f"{where}.{name}", error=PlanError))
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the flat mapping :meth:`from_dict` reads (``pass_k`` a list)."""
        data = asdict(self)
        data["pass_k"] = list(self.pass_k)
        return data

    def run_settings(self) -> dict[str, Any]:
        """The run keys without ``objective`` and ``group_size``, as the trainer's resume digest hashes them."""
        return {k: v for k, v in self.to_dict().items() if k not in IMAGENET_RUN_FIELDS}


@dataclass(frozen=True)
class RunSpec:
    """Everything one training run computes with; equal specs (and seeds and inputs) train the same model."""

    method: str  # the registry method it trains (an ablation cell: softmax_exact; ImageNet: its objective)
    task: str
    engine: str  # what trains it: one of SPEC_ENGINES
    model: Any = None  # local: the architecture, or None (starts from --init); verl / TRL: the hub model id
    rl: RLSettings | None = None  # group-RL runs and the RL baselines
    sft: SFTSettings | None = None  # SFT, Rationalization's SFT, the OPD teacher
    imagenet: ImageNetSettings | None = None  # an ImageNet objective-study run
    estimator: Estimator | None = None  # the advantage estimator and its parameters (tau: params["tau"])
    reward: str | None = None  # verifier or similarity (group-RL runs)
    reward_weights: dict[str, float] | None = None  # similarity runs' reward components; None: the verifier's
    baseline: BaselineSettings | None = None  # a baseline's own section, typed (pipeline_lib.core.baselines)
    generation: dict[str, Any] | None = None  # how a GPU baseline generates (backend and sampling)
    resources: dict[str, Any] = field(default_factory=dict)  # Slurm nodes / GPUs: part of the experiment (App. B)
    extra_overrides: tuple[str, ...] = ()  # verl only: train.verl.extra_overrides, appended verbatim

    def __post_init__(self) -> None:
        for name in ("method", "task"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise PlanError(f"run spec: {name} {getattr(self, name)!r} must be a non-empty string")
        if self.engine not in SPEC_ENGINES:
            raise PlanError(f"run spec {self.task}/{self.method}: engine {self.engine!r} is not one of {SPEC_ENGINES}")
        if self.reward is not None and self.reward not in REWARDS:
            raise PlanError(f"run spec {self.task}/{self.method}: reward {self.reward!r} is not one of {REWARDS}")
        where = f"run spec {self.task}/{self.method}"
        for name, cls in (("estimator", Estimator), ("rl", RLSettings), ("sft", SFTSettings),
                          ("baseline", BaselineSettings), ("imagenet", ImageNetSettings)):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), cls):
                raise PlanError(f"{where}: {name} must be {cls.__name__} or None")
        if self.rl is not None and self.sft is not None:
            raise PlanError(f"{where}: a run has group-RL or SFT settings, not both")
        if not isinstance(self.resources, dict):
            raise PlanError(f"{where}: resources must be a mapping")
        if not isinstance(self.extra_overrides, tuple):
            object.__setattr__(self, "extra_overrides", tuple(self.extra_overrides))
        checked = {name: getattr(self, name) for name in ("model", "reward_weights", "generation", "resources")}
        for name in ("rl", "sft", "imagenet", "baseline"):
            typed = getattr(self, name)
            if typed is not None:
                checked[name] = typed.flat() if name in ("rl", "sft") else typed.to_dict()
        for name, value in checked.items():
            _json_value(f"{where} {name}", value)

    @property
    def settings(self) -> dict[str, Any]:
        """The trainer's settings as one flat mapping, for what shows or compares them by name (captions)."""
        typed = self.rl or self.sft
        if typed is not None:
            return typed.flat()
        return self.imagenet.to_dict() if self.imagenet is not None else {}

    @property
    def tau(self) -> float | None:
        """SoftmaxGRPO's temperature, where the estimator takes one."""
        return None if self.estimator is None else self.estimator.params.get("tau")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, :attr:`baseline` recording its class (``{}`` where none, so an unchanged spec reruns
        nothing)."""
        data = asdict(self)
        data["baseline"] = {} if self.baseline is None else to_json_value(self.baseline)
        data["imagenet"] = None if self.imagenet is None else self.imagenet.to_dict()
        return data

    def to_json(self) -> str:
        """The spec as one JSON argument (``--spec``); :meth:`from_json` reads it back equal."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise PlanError(f"run spec has unknown field(s) {unknown}; fields: {sorted(cls.__dataclass_fields__)}")
        data = dict(data)
        where = f"run spec {data.get('task')}/{data.get('method')}"
        if data.get("estimator") is not None:
            data["estimator"] = Estimator(**data["estimator"])
        for name, typed in (("rl", RLSettings), ("sft", SFTSettings)):
            if data.get(name) is not None:
                data[name] = typed.from_dict(data[name], data.get("engine"), f"{where} {name}")
        if data.get("imagenet") is not None:
            data["imagenet"] = ImageNetSettings.from_dict(data["imagenet"], f"{where} imagenet")
        try:
            data["baseline"] = from_json_value(data["baseline"], f"{where} baseline") if data.get("baseline") else None
        except SettingsError as error:
            raise PlanError(str(error)) from None
        data["extra_overrides"] = tuple(data.get("extra_overrides", ()))
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        """Read ``--spec``; anything but a run spec's JSON is an error naming what is wrong."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise PlanError(f"--spec is not JSON: {error}") from None
        if not isinstance(data, dict):
            raise PlanError(f"--spec must be a JSON object (a RunSpec), got {type(data).__name__}")
        return cls.from_dict(data)
