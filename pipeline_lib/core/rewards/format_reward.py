"""Think-then-answer format reward and the exact-match reward of the tiny synthetic tasks."""

from __future__ import annotations

import re

from pipeline_lib.core.rewards.extract import after_think, extract_answer
from pipeline_lib.core.rewards.mathverify import gold_text
from pipeline_lib.core.rewards.numbers import reader_numbers

__all__ = ["exact_score", "format_score"]

_THINK = re.compile(r"^\s*<think>(.*?)</think>(.*)$", re.DOTALL)
_WHITESPACE = re.compile(r"\s+")


def format_score(solution: str | None, ground_truth: object = None) -> dict[str, float]:
    """1 for exactly one ``<think>`` and one ``</think>``, the reply opening (after whitespace) with a non-empty think
    block and going on with non-empty text, else 0: the authors' OpenThoughts format term (``softmaxgrpo/rewards.py``
    ``format_score``). The text after ``</think>`` need only be non-empty (``<answer> </answer>`` counts; its r_sim
    is 0)."""
    ok = False
    if isinstance(solution, str) and solution.count("<think>") == 1 and solution.count("</think>") == 1:
        match = _THINK.match(solution)
        ok = bool(match and match.group(1).strip() and match.group(2).strip())
    return {"score": float(ok)}


def _normalise(text: str) -> str:
    """Whitespace runs as one space, no final period, case folded; numbers as a reader reads them (``1\\,000``,
    ``½``: :func:`~pipeline_lib.core.rewards.numbers.reader_numbers`) on both sides."""
    return _WHITESPACE.sub(" ", reader_numbers(text)).strip().rstrip(".").strip().casefold()


def exact_score(solution: str | None, ground_truth: object) -> dict[str, float]:
    """Binary exact match of the extracted answer (whitespace, case, a final period and digit grouping ignored).

    GSM8K-style gold (``... #### 42``) is reduced to the text after the last ``####``; no gold is ``unscorable``.
    """
    gold = gold_text(ground_truth)
    if gold is None:
        return {"score": 0.0, "acc": 0.0, "unscorable": 1.0}
    if not isinstance(solution, str):
        return {"score": 0.0, "acc": 0.0, "unscorable": 0.0}
    answer = extract_answer(solution)
    if answer is None:
        answer = after_think(solution)
    correct = float(_normalise(answer) == _normalise(gold))
    return {"score": correct, "acc": correct, "unscorable": 0.0}
