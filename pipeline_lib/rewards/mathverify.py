"""Math answers checked by Math-Verify (GSM8K, DeepMath), with a hard per-item time limit.

Verification runs in :class:`~pipeline_lib.rewards.pool.TimeoutPool` workers with
Math-Verify's own signal timeouts switched off; an item over the limit is killed,
scores 0 and is counted in ``timeouts``; an item whose worker died or raised scores 0
and is counted in ``failures``. Both are logged per step by the trainers and in eval's
``metrics.json``, so a pass@1 that counts them as wrong says so. One pool per process,
shared by all its threads.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Sequence

from pipeline_lib.rewards.extract import after_think, last_answer_tag, last_boxed
from pipeline_lib.rewards.pool import TimeoutPool

__all__ = ["gold_answer", "math_scores", "prediction_text", "verify_pair"]

TIMEOUT_SECONDS = float(os.environ.get("PIPELINE_MATH_TIMEOUT", "5"))
PROCESSES = int(os.environ.get("PIPELINE_MATH_PROCESSES", str(min(2, os.cpu_count() or 1))))
_pool: TimeoutPool | None = None
_INTEGER = re.compile(r"\\boxed\{\s*([+-]?\d+)\s*\}")
_pool_lock = threading.Lock()


def gold_answer(ground_truth: str) -> str:
    """GSM8K gold is the text after the last ``####`` with thousands commas removed; others pass through."""
    text = str(ground_truth)
    if "####" in text:
        text = text.rsplit("####", 1)[1].replace(",", "")
    return text.strip()


def prediction_text(solution: str) -> str:
    """What Math-Verify parses: the tagged or boxed answer as ``\\boxed{..}``, else the post-think text."""
    tail = after_think(solution)
    answer = last_answer_tag(tail)
    if answer is None:
        answer = last_boxed(tail)
    return f"\\boxed{{{answer}}}" if answer is not None else tail


def verify_pair(prediction: str, gold: str) -> bool:
    """Runs inside a pool worker: Math-Verify with its own signal timeouts disabled."""
    from math_verify import parse, verify

    # Our pool enforces the time limit, so Math-Verify's "timeout disabled" warnings are noise.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
    predicted = parse(prediction, parsing_timeout=None)
    if not gold_parsed or not predicted:
        return False
    return bool(verify(gold_parsed, predicted, timeout_seconds=None))


def _get_pool() -> TimeoutPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = TimeoutPool("pipeline_lib.rewards.mathverify:verify_pair", PROCESSES, TIMEOUT_SECONDS,
                                preload=("math_verify",))
        return _pool


def math_scores(solutions: Sequence[str | None], ground_truths: Sequence[str]) -> list[dict[str, float]]:
    """Score a batch in parallel; each dict has ``score``, ``acc``, ``timeouts`` and ``failures`` (each 0 or 1)."""
    if len(solutions) != len(ground_truths):
        raise ValueError(f"{len(solutions)} solutions but {len(ground_truths)} ground truths")
    items, positions = [], []
    out = [{"score": 0.0, "acc": 0.0, "timeouts": 0.0, "failures": 0.0} for _ in solutions]
    for position, (solution, truth) in enumerate(zip(solutions, ground_truths, strict=True)):
        if isinstance(solution, str) and solution.strip() and truth is not None:
            prediction, gold = prediction_text(solution), gold_answer(truth)
            plain = _INTEGER.fullmatch(prediction), _INTEGER.fullmatch(f"\\boxed{{{gold}}}")
            if all(plain):  # both plain integers: Math-Verify's verdict is integer equality; no worker needed
                correct = float(int(plain[0].group(1)) == int(plain[1].group(1)))
                out[position] = {"score": correct, "acc": correct, "timeouts": 0.0, "failures": 0.0}
                continue
            items.append((prediction, gold))
            positions.append(position)
    if items:
        for position, result in zip(positions, _get_pool().map(items), strict=True):
            correct = float(bool(result.value)) if not (result.timed_out or result.failed) else 0.0
            out[position] = {"score": correct, "acc": correct, "timeouts": float(result.timed_out),
                             "failures": float(result.failed)}
    return out
