"""The advantage estimators' catalogue: each estimator's name, its parameters (a frozen dataclass) and how verl runs it.

An estimator's parameters are declared once, as the fields of a small frozen dataclass (verl's ``AlgoConfig``
pattern); each field's ``metadata`` holds its description and bounds in JSON-schema words (:func:`param`). Everything
else is derived from that dataclass: the schema properties of a ``train.methods`` entry (:func:`schema_properties`,
merged into the schema where :func:`pipeline_lib.core.config.validate_config` loads it), the plan's parameter check
(:func:`check_params`, no estimator is run), the verl overrides ``+algorithm.<field>`` and the keys our verl
estimators read back, and the check in :func:`pipeline_lib.core.rl.advantages.register_advantage` that the function
takes
exactly these fields. This module imports no torch: the plan reads it while the workflow parses.

Adding an estimator: its function in :mod:`pipeline_lib.core.rl.advantages` (or anywhere, with ``@register_advantage``),
its
parameter dataclass, one :class:`EstimatorEntry` (here, or passed to :func:`pipeline_lib.plan.registry.group_rl`),
and its method's ``train.methods`` entry in the config.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from typing import Any

__all__ = ["ADVANTAGE_ESTIMATORS", "EpsParams", "EssParams", "EstimatorEntry", "NoParams", "SoftmaxParams",
           "check_params", "declare", "estimator", "param", "param_names", "params_from", "schema_properties", "takes",
           "undeclare", "verl_estimators"]

#: JSON-schema bounds a field's metadata may state (checked by :func:`check_params` exactly as the schema does).
_BOUNDS = {"minimum": lambda v, b: v >= b, "exclusiveMinimum": lambda v, b: v > b,
           "maximum": lambda v, b: v <= b, "exclusiveMaximum": lambda v, b: v < b}
_JSON_TYPES = {"float": "number", "int": "integer", "bool": "boolean", "str": "string"}


def param(description: str, default: Any = MISSING, **bounds: float) -> Any:
    """A parameter field: its description and JSON-schema bounds (``exclusiveMinimum=0``...) in its metadata."""
    unknown = sorted(set(bounds) - set(_BOUNDS))
    if unknown:
        raise ValueError(f"param bounds {unknown} are not JSON-schema bounds {sorted(_BOUNDS)}")
    return field(default=default, metadata={"description": description, **bounds})


@dataclass(frozen=True)
class NoParams:
    """An estimator without parameters (Dr.GRPO, RLOO, REINFORCE)."""


@dataclass(frozen=True)
class SoftmaxParams:
    """SoftmaxGRPO / SAGE (paper Eq. sage_weights)."""

    tau: float = param("SoftmaxGRPO temperature.", exclusiveMinimum=0)


@dataclass(frozen=True)
class EssParams:
    """SoftmaxGRPO with each group's tau set by a target effective sample size (paper App. A)."""

    ess_fraction: float = param("softmax_ess: each group's target effective sample size as a fraction of M "
                                "(adaptive tau, paper App. A).", exclusiveMinimum=0, exclusiveMaximum=1)


@dataclass(frozen=True)
class EpsParams:
    """GRPO's z-score and MaxRL's ratio: the denominator's guard."""

    eps: float = param("Added to the denominator (GRPO: the group's std; MaxRL: its mean reward).", 1e-6, minimum=0)


@dataclass(frozen=True)
class EstimatorEntry:
    """One advantage estimator: its name in :mod:`pipeline_lib.core.rl.advantages` (and in a spec's ``Estimator``), its
    parameter dataclass, verl's ``algorithm.adv_estimator`` for it (default: its name) with further algorithm
    overrides (Dr.GRPO's), and whether it is ours on verl (registered by
    :mod:`pipeline_lib.jobs.engines.verl.estimators`
    under ``verl``, reading its parameters from verl's algorithm config) or verl's own (tests check it equals ours)."""

    name: str
    params: type = NoParams
    verl: str = ""
    verl_overrides: Mapping[str, Any] = field(default_factory=dict)
    ours: bool = True

    def __post_init__(self) -> None:
        if not (isinstance(self.params, type) and is_dataclass(self.params)):
            raise TypeError(f"estimator {self.name!r}: params must be a dataclass type, got {self.params!r}")
        if not self.verl:
            object.__setattr__(self, "verl", self.name)

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self.params))


#: Every estimator, by name. GRPO, Dr.GRPO and RLOO run as verl's own on verl; SAGE is SoftmaxGRPO's estimator under
#: its other name (verl runs it as our ``softmax``).
ADVANTAGE_ESTIMATORS: dict[str, EstimatorEntry] = {e.name: e for e in (
    EstimatorEntry("grpo", EpsParams, ours=False),
    EstimatorEntry("dr_grpo", NoParams, "grpo", {"algorithm.norm_adv_by_std_in_grpo": False}, ours=False),
    EstimatorEntry("rloo", NoParams, ours=False),
    EstimatorEntry("softmax", SoftmaxParams),
    EstimatorEntry("sage", SoftmaxParams, "softmax", ours=False),
    EstimatorEntry("softmax_ess", EssParams),
    EstimatorEntry("maxrl", EpsParams),
    EstimatorEntry("reinforce", NoParams),
)}


def declare(entry: EstimatorEntry) -> EstimatorEntry:
    """Add an estimator to :data:`ADVANTAGE_ESTIMATORS` (a new one's parameters join the ``train.methods`` schema)."""
    if entry.name in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"estimator {entry.name!r} is already declared")
    _check_shared_fields(entry)
    ADVANTAGE_ESTIMATORS[entry.name] = entry
    return entry


def undeclare(name: str) -> None:
    """Remove an estimator added with :func:`declare` (a test cleans up after itself)."""
    ADVANTAGE_ESTIMATORS.pop(name, None)


def verl_estimators() -> dict[str, tuple[str, tuple[str, ...]]]:
    """verl estimator name -> (our estimator, its parameter names), for our estimators; asked at each use, so one a
    test registers later is included (here, not in the plan: verl's processes read it and import no plan)."""
    return {entry.verl: (entry.name, entry.param_names) for entry in ADVANTAGE_ESTIMATORS.values() if entry.ours}


def estimator(name: str) -> EstimatorEntry:
    if name not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; declared: {sorted(ADVANTAGE_ESTIMATORS)} "
                         f"(pipeline_lib/core/rl/estimators.py)")
    return ADVANTAGE_ESTIMATORS[name]


def param_names(name: str) -> tuple[str, ...]:
    return estimator(name).param_names


def takes(name: str, key: str) -> bool:
    """Whether estimator ``name`` has parameter ``key`` (``tau``: a temperature a task row or a study may set)."""
    return name in ADVANTAGE_ESTIMATORS and key in ADVANTAGE_ESTIMATORS[name].param_names


def params_from(name: str, section: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of estimator ``name`` that a config section sets, read by the parameter dataclass's field names
    (the ImageNet study's ``imagenet.tau`` is SoftmaxGRPO's ``tau``; a field the section leaves out keeps its default,
    a required one it leaves out is an error); checked by :func:`check_params`."""
    params = {key: section[key] for key in param_names(name) if key in section}
    check_params(name, params)
    return params


def _required(f: Field) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def check_params(name: str, params: Mapping[str, Any]) -> None:
    """``params`` are exactly what estimator ``name`` takes, every required one is there and each value is within its
    field's bounds; raises TypeError (names) or ValueError (values) saying which."""
    entry = estimator(name)
    accepted = {f.name: f for f in fields(entry.params)}
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise TypeError(f"advantage estimator {name!r} got unknown parameter(s) {unknown}; it accepts "
                        f"{sorted(accepted)}")
    missing = sorted(key for key, f in accepted.items() if _required(f) and key not in params)
    if missing:
        raise TypeError(f"advantage estimator {name!r} needs parameter(s) {missing}")
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"advantage estimator {name!r}: {key} must be a finite number, got {value!r}")
        for bound, holds in _BOUNDS.items():
            if bound in accepted[key].metadata and not holds(value, accepted[key].metadata[bound]):
                raise ValueError(f"advantage estimator {name!r}: {key} = {value} breaks {bound} "
                                 f"{accepted[key].metadata[bound]}")


def _property(f: Field) -> dict[str, Any]:
    kind = _JSON_TYPES.get(f.type if isinstance(f.type, str) else f.type.__name__, "number")
    return {"type": kind, **f.metadata}


def _check_shared_fields(new: EstimatorEntry) -> None:
    """Two estimators may share a parameter name only with the same schema (the methods section has one per name)."""
    known = schema_properties()
    for f in fields(new.params):
        if f.name in known and known[f.name] != _property(f):
            raise ValueError(f"estimator {new.name!r}: parameter {f.name!r} is declared differently by another "
                             f"estimator ({known[f.name]} vs {_property(f)})")


def schema_properties() -> dict[str, dict[str, Any]]:
    """The JSON-schema properties of every declared estimator's parameters: the keys a ``train.methods`` entry may
    carry besides ``advantage`` and ``reward`` (which ones its estimator takes, :func:`check_params` says)."""
    properties: dict[str, dict[str, Any]] = {}
    for entry in ADVANTAGE_ESTIMATORS.values():
        for f in fields(entry.params):
            properties.setdefault(f.name, _property(f))
    return properties
