"""A programmatic rubric judge for the synthetic ``meeting_tiny`` task (the CPU stand-in for an LLM judge).

It scores the MeetingBank rubric's five dimensions (1-10, same JSON keys) from the
structured facts each transcript was generated from, so every point is checkable:

* informativeness: share of the key facts (resolution id, topic, department, amount,
  mover, seconder, vote, outcome) the summary states;
* factuality: penalties for contradictions (a wrong or swapped vote, the wrong outcome,
  an amount or resolution id that is not the transcript's);
* fluency: sentence-shaped text (ends with a period, mostly alphabetic tokens, no
  immediate word repetition);
* coherence: stays on the one agenda item (the resolution id appears, no other ids);
* redundancy (conciseness): repeated word trigrams and length relative to the reference.

Two weightings exist (``strict`` and ``lenient``). A differently built second judge,
:func:`judge_meeting_by_overlap`, ignores the facts and scores the same five dimensions
from the transcript and the reference summary alone (token overlap, support of names and
numbers in the transcript), so the tiny cross-judge row compares two judges that can
disagree. All are labelled as programmatic wherever they appear.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

__all__ = ["PROGRAMMATIC_JUDGES", "judge_meeting_by_overlap", "judge_meeting_summary"]

KEYS = ("informativeness", "factuality", "fluency", "coherence", "redundancy")
PROGRAMMATIC_JUDGES = {"strict": {"contradiction_penalty": 4.0, "length_tolerance": 1.5},
                       "lenient": {"contradiction_penalty": 2.0, "length_tolerance": 2.5}}
_WORD = re.compile(r"[A-Za-z]+")
_RESOLUTION = re.compile(r"Resolution \d{4}-\d{2}")
_VOTE = re.compile(r"\b(\d)\s*-\s*(\d)\b")
_MONEY = re.compile(r"\$[\d,]+")


def _clip(value: float) -> int:
    return int(min(10, max(1, round(value))))


def judge_meeting_summary(summary: str, facts: dict[str, Any], reference: str, judge: str = "strict"
                          ) -> dict[str, int]:
    weights = PROGRAMMATIC_JUDGES[judge]
    text = summary.strip()
    lowered = text.lower()
    vote = f"{facts['votes_for']}-{facts['votes_against']}"
    outcome = "passed" if facts["passed"] else "failed"
    checks = [facts["motion"].lower() in lowered, facts["topic"].lower() in lowered,
              facts["department"].lower() in lowered, f"${facts['amount']:,}" in text,
              facts["mover"].lower() in lowered, facts["seconder"].lower() in lowered,
              vote in text.replace(" ", ""), outcome in lowered or ("pass" in lowered) == facts["passed"]]
    informativeness = 1 + 9 * sum(checks) / len(checks)

    contradictions = 0
    contradictions += sum(1 for a, b in _VOTE.findall(text) if f"{a}-{b}" != vote)
    contradictions += ("failed" in lowered) == facts["passed"] and ("failed" in lowered or "passed" in lowered)
    contradictions += sum(1 for m in _MONEY.findall(text) if m != f"${facts['amount']:,}")
    contradictions += sum(1 for r in _RESOLUTION.findall(text) if r != facts["motion"])
    factuality = 10 - weights["contradiction_penalty"] * contradictions - (0 if text else 9)

    tokens = text.split()
    alphabetic = sum(bool(_WORD.fullmatch(t.strip(".,;:()$"))) for t in tokens) / max(1, len(tokens))
    repeats = sum(a == b for a, b in itertools.pairwise(tokens)) / max(1, len(tokens) - 1)
    fluency = 1 + 9 * alphabetic * (1 - min(1.0, 5 * repeats)) * (1.0 if text.endswith(".") else 0.7)

    ids = set(_RESOLUTION.findall(text))
    coherence = 10 if ids == {facts["motion"]} else 6 if not ids else 3

    words = [w.lower() for w in _WORD.findall(text)]
    trigrams = list(zip(words, words[1:], words[2:], strict=False))
    repeated = 1 - len(set(trigrams)) / max(1, len(trigrams))
    ratio = len(tokens) / max(1, len(reference.split()))
    length_penalty = max(0.0, ratio - weights["length_tolerance"]) * 3
    redundancy = 10 - 9 * repeated - length_penalty - (9 if not text else 0)

    return dict(zip(KEYS, (_clip(informativeness), _clip(factuality), _clip(fluency), _clip(coherence),
                           _clip(redundancy)), strict=True))


_TOKEN = re.compile(r"[A-Za-z]+|\d[\d,]*")


def judge_meeting_by_overlap(summary: str, transcript: str, reference: str) -> dict[str, int]:
    """The MeetingBank rubric from text alone: reference coverage, transcript support, repetition, length."""
    from rapidfuzz.distance import LCSseq

    text = summary.strip()
    tokens = [t.lower() for t in _TOKEN.findall(text)]
    reference_tokens = [t.lower() for t in _TOKEN.findall(reference)]
    source = {t.lower() for t in _TOKEN.findall(transcript)} | {"the", "council", "considered", "to", "fund", "and",
                                                                 "moved", "seconded", "motion", "passed", "failed"}
    if not tokens:
        return dict.fromkeys(KEYS, 1)
    informativeness = 1 + 9 * LCSseq.similarity(reference_tokens, tokens) / max(1, len(reference_tokens))
    checkable = [t for t in _TOKEN.findall(text) if t[0].isdigit() or t[0].isupper()]
    supported = sum(t.lower() in source for t in checkable) / max(1, len(checkable))
    factuality = 1 + 9 * supported
    unknown = sum(t not in source and t not in reference_tokens for t in tokens) / len(tokens)
    fluency = 1 + 9 * (1 - unknown) * (1.0 if text.endswith(".") else 0.8)
    first_reference_sentence = reference.split(".")[0].lower().split()
    coherence = 1 + 9 * LCSseq.normalized_similarity(first_reference_sentence, text.split(".")[0].lower().split())
    trigrams = list(zip(tokens, tokens[1:], tokens[2:], strict=False))
    repeated = 1 - len(set(trigrams)) / max(1, len(trigrams))
    ratio = len(tokens) / max(1, len(reference_tokens))
    redundancy = 10 - 9 * repeated - 4 * max(0.0, ratio - 1.3) - 4 * max(0.0, 0.5 - ratio)
    return dict(zip(KEYS, (_clip(informativeness), _clip(factuality), _clip(fluency), _clip(coherence),
                           _clip(redundancy)), strict=True))
