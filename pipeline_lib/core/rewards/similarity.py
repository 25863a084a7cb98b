"""Weak similarity reward r_sim = 0.6 * SQuAD-F1 + 0.4 * ROUGE-L F (paper App. B).

Both parts equal the reference implementations bit for bit; only the LCS is
computed natively (``rapidfuzz.distance.LCSseq`` on token lists) instead of
rouge-score's pure-Python dynamic programme.

Tokenisation, inherited on purpose from the references:

* SQuAD-F1 (official v1.1 script): lowercase, drop ASCII punctuation
  (``string.punctuation``), drop the articles a/an/the, split on whitespace.
  Non-ASCII letters and punctuation are kept inside tokens.
* ROUGE-L (``rouge_score.rouge_scorer.RougeScorer(["rougeL"])``, no stemmer):
  ``str.lower()``, every character outside ``[a-z0-9]`` becomes a space. So
  accented and non-Latin text tokenises to (almost) nothing: "café" -> "caf",
  Chinese text -> no tokens and a ROUGE-L of 0.

Bounded cost (verl calls this for every rollout, and a rollout may be hostile), and no text hidden by it: r_sim
(paper App. B) scores the whole output, so its length always counts. Each metric tokenises at most the first
``SIM_MAX_CHARS`` characters of each text (linear); SQuAD-F1 counts all those tokens, and ROUGE-L's LCS (quadratic)
compares the first ``SIM_MAX_TOKENS`` of them. Precision and recall always divide by each text's *whole* token count:
exact up to ``SIM_MAX_CHARS``, and beyond it the prefix's count scaled by the text's length in characters (an
estimate; such a text is far longer than any configured response). Within both caps a pair scores exactly as the
references do; beyond them the overlap is that of the prefixes, a lower bound, so text past a cap can only lower
the score (a reference's 4,096 words followed by 1,900 garbage words no longer scores 1.0). ``SIM_MAX_TOKENS`` sits
above the longest configured response (``max_response_tokens`` 6,144, OpenThoughts; ``tests/core/rewards`` checks the
configs), and one call costs milliseconds whatever the lengths.
"""

from __future__ import annotations

import re
import string
from collections import Counter

from rapidfuzz.distance import LCSseq

from pipeline_lib.core.rewards.extract import after_think, last_answer_tag

__all__ = ["SIM_MAX_CHARS", "SIM_MAX_TOKENS", "SIM_WEIGHTS", "rouge_l_f", "rouge_tokens", "similarity_score",
           "similarity_text", "squad_f1",
           "squad_normalize"]

SIM_WEIGHTS = (0.6, 0.4)  # (SQuAD-F1, ROUGE-L)
SIM_MAX_CHARS = 65_536  # characters of each text tokenised by either metric
SIM_MAX_TOKENS = 8_192  # tokens of each text compared by ROUGE-L's LCS (after its own tokenisation)
_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ALPHANUM_RUN = re.compile(r"[a-z0-9]+")


def squad_normalize(text: str) -> str:
    """The official SQuAD v1.1 ``normalize_answer``."""
    text = text.lower()
    text = text.translate(_DROP_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _whole_count(prefix_count: int, text: str) -> int:
    """Tokens of the whole text: exact when the text is within ``SIM_MAX_CHARS``, else the prefix's count scaled
    by the text's length (rounded up; at least one token more than the prefix's)."""
    if len(text) <= SIM_MAX_CHARS:
        return prefix_count
    return max(prefix_count + 1, -(-prefix_count * len(text) // SIM_MAX_CHARS))


def squad_f1(prediction: str, reference: str) -> float:
    """The official SQuAD v1.1 token F1 (0 when nothing overlaps, including empty strings); exact within
    ``SIM_MAX_CHARS``, beyond it the prefixes' overlap over the whole texts' token counts."""
    prediction_tokens = squad_normalize(prediction[:SIM_MAX_CHARS]).split()
    reference_tokens = squad_normalize(reference[:SIM_MAX_CHARS]).split()
    common = Counter(prediction_tokens) & Counter(reference_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / _whole_count(len(prediction_tokens), prediction)
    recall = 1.0 * num_same / _whole_count(len(reference_tokens), reference)
    return (2 * precision * recall) / (precision + recall)


def rouge_tokens(text: str) -> list[str]:
    """rouge-score's default tokenizer without stemming: after it maps every character outside ``[a-z0-9]`` to
    a space and splits, the tokens are exactly the maximal ``[a-z0-9]`` runs of the lowercased text."""
    return _ALPHANUM_RUN.findall(text.lower())


def rouge_l_f(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure exactly as ``RougeScorer(["rougeL"]).score(reference, prediction)`` within the caps;
    beyond them the LCS of the first ``SIM_MAX_TOKENS`` tokens over the whole texts' token counts."""
    target_all = rouge_tokens(reference[:SIM_MAX_CHARS])
    prediction_all = rouge_tokens(prediction[:SIM_MAX_CHARS])
    if not target_all or not prediction_all:
        return 0
    lcs_length = LCSseq.similarity(target_all[:SIM_MAX_TOKENS], prediction_all[:SIM_MAX_TOKENS])
    precision = lcs_length / _whole_count(len(prediction_all), prediction)
    recall = lcs_length / _whole_count(len(target_all), reference)
    if precision + recall > 0:
        return 2 * precision * recall / (precision + recall)
    return 0.0


def similarity_text(solution: str) -> str:
    """What is compared with the reference: the last <answer> span if any, else all text after </think>.

    ``\\boxed{}`` is deliberately not extracted: the reference is a full demonstration.
    """
    tail = after_think(solution)
    tagged = last_answer_tag(tail)
    return tagged if tagged is not None else tail


def similarity_score(solution: str | None, reference: str) -> dict[str, float]:
    """r_sim of the response against the reference; a reference that is not text cannot be scored (``unscorable``)."""
    if not isinstance(reference, str):
        return {"score": 0.0, "squad_f1": 0.0, "rouge_l": 0.0, "unscorable": 1.0}
    if not isinstance(solution, str):
        return {"score": 0.0, "squad_f1": 0.0, "rouge_l": 0.0, "unscorable": 0.0}
    text = similarity_text(solution)
    f1, rouge = squad_f1(text, reference), rouge_l_f(text, reference)
    return {"score": SIM_WEIGHTS[0] * f1 + SIM_WEIGHTS[1] * rouge, "squad_f1": float(f1), "rouge_l": float(rouge),
            "unscorable": 0.0}
