"""The run spec: one typed, frozen description of a training run, made by the plan and read unchanged by every engine.

The plan (:mod:`pipeline_lib.plan.settings`) resolves the config into a :class:`RunSpec` once; it crosses the process
boundary as JSON (``--spec``, :meth:`RunSpec.to_json` / :meth:`RunSpec.from_json`), and each engine translates it at
its own edge: the local trainers take their arguments from it (``pipeline_lib.engines.local.*``), the verl engine
turns it into Hydra overrides (:mod:`pipeline_lib.engines.verl.translate`). Nothing downstream re-reads the config.

The estimator's parameters live in one mapping (:attr:`Estimator.params`), tau among them under the name ``tau``:
config -> plan -> spec -> estimator, one name on both engines.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = ["ENGINES", "SPEC_ENGINES", "Estimator", "LocalRLKnobs", "PlanError", "RLSettings", "RunSpec",
           "VerlRLKnobs"]

#: Values of ``train.engine``.
ENGINES = ("local", "verl")
#: What trains a run: the local PyTorch engine, verl, TRL (Iterative DPO on GPU) or the ImageNet classifier.
SPEC_ENGINES = ("local", "verl", "trl", "classify")
#: Rewards a group-RL run trains on: the task's verifier or the similarity to the expert answer.
REWARDS = ("verifier", "similarity")


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
    """A group advantage estimator of :mod:`pipeline_lib.advantages` and its parameters."""

    name: str
    """The estimator's name in :mod:`pipeline_lib.advantages` (``grpo``, ``softmax``, ...)."""
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

    minibatches: int
    """Minibatches (whole groups) per pass; more than one makes later ones off-policy so clipping acts."""


@dataclass(frozen=True)
class VerlRLKnobs:
    """verl-only group-RL knobs: how App. B's run is laid out on GPUs, and verl's own switches."""

    mini_batch_per_device: int
    """App. B "mini-batch size (per device)" (verl ppo_micro_batch_size_per_gpu)."""
    micro_batch_per_gpu: int
    """Sequences per log-prob forward pass per GPU (memory only)."""
    max_prompt_tokens: int
    """Longest prompt kept (not stated in the paper)."""
    gpus_per_node: int
    """App. B "compute setup": GPUs per node."""
    nodes: int
    """App. B "compute setup": nodes."""
    rollout_engine: str
    """verl's rollout engine (vllm or sglang)."""
    rollout_tp: int
    """Tensor-parallel size of the rollout engine."""
    gpu_memory_utilization: float
    """Share of GPU memory the rollout engine may take."""
    test_freq: int
    """Steps between verl's own validation (-1 = never)."""


#: The engine-only knobs of each engine's group-RL settings.
RL_KNOBS: dict[str, type] = {"local": LocalRLKnobs, "verl": VerlRLKnobs}


@dataclass(frozen=True)
class RLSettings:
    """A group-RL run's settings, one name each on both engines (App. B's terms where the paper has a row); what only
    one engine has lives in :attr:`knobs`. Both engines' config sections (``train.rl``, ``train.verl.rl`` and a verl
    task's row) are these fields flat: :meth:`from_flat` reads them, :meth:`flat` writes them back."""

    steps: int
    """App. B "total training iterations"."""
    lr: float
    """App. B "learning rate" (AdamW)."""
    weight_decay: float
    """AdamW weight decay (not in App. B)."""
    clip_low: float
    """App. B "PPO clip epsilon", below: ratio >= 1 - clip_low."""
    clip_high: float
    """App. B "PPO clip epsilon", above: ratio <= 1 + clip_high."""
    beta: float
    """App. B "KL regularization beta": the reference-KL coefficient (0: no KL term)."""
    kl_estimator: str
    """The per-token KL estimator, in the engine's value names (local k1/k2/k3/low_var_kl; verl kl/abs/mse/
    low_var_kl/full)."""
    aggregation: str
    """The loss normaliser, in the engine's value names (local adds group-token-mean, the paper's)."""
    group_size: int
    """App. B "rollout group size M": rollouts per prompt."""
    prompts_per_step: int
    """App. B "rollout batch size": prompts per step (rollouts per step = this x M)."""
    max_response_tokens: int
    """App. B "max response tokens": the response length cap."""
    temperature: float
    """Rollout sampling temperature."""
    ppo_epochs: int
    """Passes over each rollout batch."""
    grad_clip: float
    """Gradient-norm clip."""
    checkpoint_every: int
    """Steps between resumable checkpoints."""
    knobs: LocalRLKnobs | VerlRLKnobs
    """The engine's own knobs."""

    @classmethod
    def from_flat(cls, settings: Mapping[str, Any], engine: str, where: str = "run spec") -> RLSettings:
        """Read an engine's flat settings (a config section, a spec's ``settings``); any key missing or unknown is
        an error naming it."""
        if engine not in RL_KNOBS:
            raise PlanError(f"{where}: no group-RL settings for engine {engine!r}; engines: {sorted(RL_KNOBS)}")
        knobs = RL_KNOBS[engine]
        shared = [f.name for f in fields(cls) if f.name != "knobs"]
        own = [f.name for f in fields(knobs)]
        missing = [k for k in (*shared, *own) if k not in settings]
        unknown = sorted(set(settings) - {*shared, *own})
        if missing or unknown:
            raise PlanError(f"{where}: {engine} group-RL settings lack {missing} / have unknown {unknown}")
        return cls(**{k: settings[k] for k in shared}, knobs=knobs(**{k: settings[k] for k in own}))

    def flat(self) -> dict[str, Any]:
        """The settings as one flat mapping, as the config and the spec's JSON state them."""
        data = asdict(self)
        return {**{k: v for k, v in data.items() if k != "knobs"}, **data["knobs"]}


@dataclass(frozen=True)
class RunSpec:
    """Everything one training run computes with; equal specs (and seeds and inputs) train the same model."""

    method: str
    """The registry method it trains (:data:`pipeline_lib.plan.registry.METHODS`; an ablation cell trains
    ``softmax_exact``; the OPD teacher ``opd_teacher``; an ImageNet run its objective)."""
    task: str
    """The task (dataset) it trains on."""
    engine: str
    """What trains it: one of :data:`SPEC_ENGINES`."""
    model: Any = None
    """The model: on the local engine the architecture (hidden size, layers, ...) or None (starts from ``--init``);
    on verl / TRL the Hugging Face model id the run (or its SFT start) loads."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The trainer's budget and optimisation settings (steps, lr, group size, batch, lengths, clip, KL...): the
    engine's shared section with the task's row on verl, as the config states them."""
    estimator: Estimator | None = None
    """The advantage estimator and its parameters (group-RL runs and the RL baselines); tau is ``params["tau"]``."""
    reward: str | None = None
    """``verifier`` or ``similarity`` (group-RL runs); None where the run has no task reward of its own choosing."""
    reward_weights: dict[str, float] | None = None
    """Reward component weights (similarity-reward runs); None: the task's verifier reward as it is."""
    baseline: dict[str, Any] = field(default_factory=dict)
    """A baseline's own settings (its ``train.baselines.<name>`` section, as the method reads them)."""
    generation: dict[str, Any] | None = None
    """How a GPU baseline generates (evaluation backend and sampling): Rationalization's annotator, Iterative DPO."""
    resources: dict[str, Any] = field(default_factory=dict)
    """The compute the run takes (Slurm nodes / GPUs): part of the experiment (App. B), not of the site."""
    extra_overrides: tuple[str, ...] = ()
    """verl only: extra Hydra overrides from the config (``train.verl.extra_overrides``), appended verbatim."""

    def __post_init__(self) -> None:
        for name in ("method", "task"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise PlanError(f"run spec: {name} {getattr(self, name)!r} must be a non-empty string")
        if self.engine not in SPEC_ENGINES:
            raise PlanError(f"run spec {self.task}/{self.method}: engine {self.engine!r} is not one of {SPEC_ENGINES}")
        if self.reward is not None and self.reward not in REWARDS:
            raise PlanError(f"run spec {self.task}/{self.method}: reward {self.reward!r} is not one of {REWARDS}")
        if self.estimator is not None and not isinstance(self.estimator, Estimator):
            raise PlanError(f"run spec {self.task}/{self.method}: estimator must be an Estimator")
        for name in ("settings", "baseline", "resources"):
            if not isinstance(getattr(self, name), dict):
                raise PlanError(f"run spec {self.task}/{self.method}: {name} must be a mapping")
        if not isinstance(self.extra_overrides, tuple):
            object.__setattr__(self, "extra_overrides", tuple(self.extra_overrides))
        for name in ("model", "settings", "reward_weights", "baseline", "generation", "resources"):
            _json_value(f"run spec {self.task}/{self.method} {name}", getattr(self, name))

    @property
    def rl(self) -> RLSettings:
        """The group-RL settings, typed (a run with an estimator: group RL and the RL baselines); an error naming the
        keys where :attr:`settings` is not exactly the engine's group-RL settings."""
        return RLSettings.from_flat(self.settings, self.engine, f"run spec {self.task}/{self.method}")

    @property
    def tau(self) -> float | None:
        """SoftmaxGRPO's temperature, where the estimator takes one."""
        return None if self.estimator is None else self.estimator.params.get("tau")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        """The spec as one JSON argument (``--spec``); :meth:`from_json` reads it back equal."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise PlanError(f"run spec has unknown field(s) {unknown}; fields: {sorted(cls.__dataclass_fields__)}")
        data = dict(data)
        if data.get("estimator") is not None:
            data["estimator"] = Estimator(**data["estimator"])
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
