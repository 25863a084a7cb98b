"""Reward registry: one scorer per name, shared by the local engine, verl and evaluation.

Two entry points:

* :func:`score` (and :func:`score_batch`): ``score(name, solution_str, ground_truth)``
  with ``name`` in :func:`available_rewards`. Ground truth is the gold answer string
  for ``math``/``exact``, ``{"numbers": [...], "target": int}`` for ``countdown``,
  the reference text for ``similarity``; ``format`` ignores it.
* :func:`compute_score`: verl's custom reward signature. The reward composition comes from
  the ``reward_weights`` keyword (the method's choice, e.g. ``{"similarity": 1.0}`` for the
  -Sim runs; verl passes it through ``custom_reward_function.reward_kwargs``), else from
  ``extra_info["reward_weights"]`` (the task's default written by the data stage), else from
  the data source's default. ``similarity`` compares with ``extra_info["reference"]`` (the
  expert demonstration) when the row has one, since the verifier's ground truth of a
  verifiable task is not a text to imitate.

Every result is a dict with ``score`` plus numeric components (verl logs extra keys). No scorer raises for one
item: a verifier item that timed out or failed (its worker died or raised) scores 0 and says so in its
``timeouts``/``failures`` keys, and an item a scorer cannot score (no gold, a ``nan`` gold, a malformed Countdown
ground truth, a reference that is not text) scores 0 with ``unscorable`` 1; :func:`reward_health` counts all three
per process, so the trainers log them per step and eval in ``metrics.json``.

Every scorer is safe to call from many threads and processes at once (verl's reward loop does;
``tests/core/rewards/test_reward_concurrency.py``): the math pool takes submissions from any thread, the others are
pure.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pipeline_lib.core.rewards.countdown import countdown_score
from pipeline_lib.core.rewards.format_reward import exact_score, format_score
from pipeline_lib.core.rewards.mathverify import math_scores
from pipeline_lib.core.rewards.similarity import similarity_score

__all__ = ["DATA_SOURCE_REWARDS", "HEALTH_KINDS", "available_rewards", "compute_score", "compute_scores",
           "health_counts", "register_reward", "reward_health", "score", "score_batch"]

log = logging.getLogger("pipeline_lib.core.rewards")
BatchScorer = Callable[[Sequence[Any], Sequence[Any]], list[dict[str, float]]]
_REGISTRY: dict[str, BatchScorer] = {}

#: Default composition per verl ``data_source``; App. B: verifiers for the verifiable tasks,
#: r_sim for Poetry/MeetingBank, 0.35 format + 0.65 r_sim for OpenThoughts.
DATA_SOURCE_REWARDS: dict[str, dict[str, float]] = {
    "openai/gsm8k": {"math": 1.0},
    "zwhe99/DeepMath-103K": {"math": 1.0},
    "Jiayi-Pan/Countdown-Tasks-3to4": {"countdown": 1.0},
    "HuggingFaceTB/Countdown-Task-GOLD": {"countdown": 1.0},
    "jnb666/poems": {"similarity": 1.0},
    "microsoft/MeetingBank-LLMCompressed": {"similarity": 1.0},
    "open-thoughts/OpenThoughts3-1.2M": {"format": 0.35, "similarity": 0.65},
    "tiny/countdown": {"countdown": 1.0},
    "tiny/arith": {"math": 1.0},
    "tiny/meeting": {"similarity": 1.0},
}


def register_reward(name: str, batch: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a scorer; per-item scorers ``f(solution, truth) -> dict`` are lifted to batches."""

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in _REGISTRY:
            raise ValueError(f"reward {name!r} is already registered")
        if batch:
            _REGISTRY[name] = fn
        else:
            _REGISTRY[name] = lambda solutions, truths: [fn(s, t) for s, t in zip(solutions, truths, strict=True)]
        return fn

    return decorator


register_reward("math", batch=True)(math_scores)
register_reward("countdown")(countdown_score)
register_reward("similarity")(similarity_score)
register_reward("format")(format_score)
register_reward("exact")(exact_score)


def available_rewards() -> list[str]:
    return sorted(_REGISTRY)


def _scorer(name: str) -> BatchScorer:
    if name not in _REGISTRY:
        raise ValueError(f"unknown reward {name!r}; registered: {available_rewards()}")
    return _REGISTRY[name]


#: What an item that scored 0 without being judged wrong is counted as (a result key, 0 or 1).
HEALTH_KINDS = ("timeouts", "failures", "unscorable")
_health_lock = threading.Lock()
_health = dict.fromkeys(HEALTH_KINDS, 0)


def health_counts(results: Sequence[Mapping[str, float]]) -> dict[str, int]:
    """Timed-out, failed and unscorable items among scored results (a composite's ``math/timeouts`` included)."""
    counts = dict.fromkeys(HEALTH_KINDS, 0)
    for result in results:
        for key, value in result.items():
            kind = key.rsplit("/", 1)[-1]
            if kind in counts:
                counts[kind] += int(value)
    return counts


def reward_health() -> dict[str, int]:
    """Items this process's scorers timed out on, failed or could not score, since it started: a trainer logs the
    change per step."""
    with _health_lock:
        return dict(_health)


def score_batch(name: str, solutions: Sequence[Any], ground_truths: Sequence[Any]) -> list[dict[str, float]]:
    if len(solutions) != len(ground_truths):
        raise ValueError(f"{len(solutions)} solutions but {len(ground_truths)} ground truths")
    results = _scorer(name)(solutions, ground_truths)
    counts = health_counts(results)
    if any(counts.values()):
        with _health_lock:
            for kind, count in counts.items():
                _health[kind] += count
    return results


def score(name: str, solution_str: Any, ground_truth: Any) -> dict[str, float]:
    return score_batch(name, [solution_str], [ground_truth])[0]


def _clean_weights(weights: Any, where: str) -> dict[str, float] | None:
    """A composition with its absent entries dropped (None, or NaN, which is how a mixed parquet's struct column
    reads back the keys a row does not have); None when nothing is left. Raises ValueError naming ``where`` for a
    composition that is not a mapping of registered reward names to finite numbers."""
    if weights is None:
        return None
    if not isinstance(weights, Mapping):
        raise ValueError(f"{where}: reward weights must be a mapping of reward name to weight, got {weights!r}")
    clean: dict[str, float] = {}
    for name, value in weights.items():
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if str(name) not in _REGISTRY:
            raise ValueError(f"{where}: unknown reward {name!r} in {dict(weights)}; registered: {available_rewards()}")
        try:
            weight = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: weight of {name!r} is not a number: {value!r}") from None
        if not math.isfinite(weight):
            raise ValueError(f"{where}: weight of {name!r} is not finite: {value!r}")
        clean[str(name)] = weight
    return clean or None


def _weights(data_source: str, extra_info: Mapping[str, Any] | None, override: Any) -> dict[str, float]:
    """The method's weights, else the row's ``extra_info["reward_weights"]``, else the data source's default.

    A bad method composition or a data source with no composition raises (every row would fail alike); a bad row
    composition raises :class:`_RowError`, which fails that row only."""
    weights = _clean_weights(override, "reward_weights")
    if weights is None:
        row_weights = extra_info.get("reward_weights") if isinstance(extra_info, Mapping) else None
        try:
            weights = _clean_weights(row_weights, f"data_source {data_source!r}: extra_info['reward_weights']")
        except ValueError as exc:
            raise _RowError(str(exc)) from None
    if weights is None:
        weights = _clean_weights(DATA_SOURCE_REWARDS.get(data_source), f"data_source {data_source!r}")
    if not weights:
        raise ValueError(f"no reward composition for data_source {data_source!r}: set extra_info['reward_weights'] "
                         f"or use one of {sorted(DATA_SOURCE_REWARDS)}")
    return weights


class _RowError(ValueError):
    """One row's own data cannot be scored (its ``extra_info`` composition is malformed)."""


def compute_scores(
    data_sources: Sequence[str],
    solutions: Sequence[Any],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None],
    reward_weights: Mapping[str, float] | None = None,
) -> list[dict[str, float]]:
    """Score many rollouts: each reward component scores all its rows in one batch (the math pool runs them in
    parallel); ``score`` = sum of weight x component score per row."""
    weights: list[dict[str, float]] = []
    failed: dict[int, str] = {}
    for row, (data_source, extra_info) in enumerate(zip(data_sources, extra_infos, strict=True)):
        try:
            weights.append(_weights(data_source, extra_info, reward_weights))
        except _RowError as exc:  # this row fails (scores 0, counted unscorable), not the batch
            weights.append({})
            failed[row] = str(exc)
    if failed:
        log.warning("%d of %d rows unscorable: their reward composition is malformed; first: row %d: %s",
                    len(failed), len(weights), next(iter(failed)), next(iter(failed.values())))
        with _health_lock:
            _health["unscorable"] += len(failed)
    components: dict[str, list[int]] = {}
    for row, row_weights in enumerate(weights):
        for name in row_weights:
            components.setdefault(name, []).append(row)
    scored: dict[str, dict[int, dict[str, float]]] = {}
    for name, rows in components.items():
        truths = []
        for row in rows:  # similarity compares with the row's expert demonstration when it has one
            reference = (extra_infos[row] or {}).get("reference")
            truths.append(reference if name == "similarity" and reference is not None else ground_truths[row])
        scored[name] = dict(zip(rows, score_batch(name, [solutions[r] for r in rows], truths), strict=True))
    results = []
    for row, row_weights in enumerate(weights):
        if row in failed:
            results.append({"score": 0.0, "unscorable": 1.0})
            continue
        result: dict[str, float] = {}
        for name in row_weights:
            component = scored[name][row]
            result.update(component if len(row_weights) == 1 else {f"{name}/{k}": v for k, v in component.items()})
        result["score"] = sum(weight * scored[name][row]["score"] for name, weight in row_weights.items())
        results.append(result)
    return results


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    reward_weights: Mapping[str, float] | None = None,
    **_: Any,
) -> dict[str, float]:
    """verl custom reward entry point: ``score`` = sum of weight x component score."""
    return compute_scores([data_source], [solution_str], [ground_truth], [extra_info], reward_weights)[0]
