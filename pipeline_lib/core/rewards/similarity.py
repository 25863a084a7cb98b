"""Weak similarity reward r_sim = 0.6 * F1 + 0.4 * ROUGE-L (paper App. B), computed as the authors compute it.

The choice and its source: the authors' ``softmaxgrpo/rewards.py`` (``similarity``, ``normalized_tokens``,
``final_text``), read as the record of what the paper ran. Three things follow from it:

* **Final text on both sides.** The reply *and* the reference are cut to their final text
  (:func:`~pipeline_lib.core.rewards.extract.final_text`: ``<|im_end|>``/``<|endoftext|>`` removed, the text after
  the last ``</think>``, then the last ``<answer>...</answer>`` span if any). A reference that is a full
  demonstration with a thinking trace (Countdown-GOLD, DeepMath's r1 solutions, OpenThoughts) is compared by its
  answer, never by its trace.
* **One tokenisation for both metrics**: SQuAD v1.1's ``normalize_answer`` (lowercase, drop ASCII punctuation
  ``string.punctuation``, drop the articles a/an/the, split on whitespace). Non-ASCII letters stay inside tokens.
  (rouge-score's own tokeniser, which maps everything outside ``[a-z0-9]`` to spaces, is not used.)
* **F1 and ROUGE-L on those tokens**: F1 = 2 * |pred ∩ gold| / (|pred| + |gold|) on token multisets (SQuAD's F1),
  ROUGE-L = 2 * LCS(pred, gold) / (|pred| + |gold|) (the F-measure with beta 1); both 0 when either side has no
  token. OpenThoughts adds a format term: 0.35 * format + 0.65 * r_sim (:mod:`pipeline_lib.core.rewards` composes it).

Bounded cost (verl calls this for every rollout, and a rollout may be hostile), ours and not the authors': each final
text is tokenised up to its first ``SIM_MAX_CHARS`` characters (linear), F1 counts all those tokens, and the LCS
(quadratic) compares the first ``SIM_MAX_TOKENS`` of them. The denominators always count each text's *whole* tokens:
exact up to ``SIM_MAX_CHARS``, beyond it the prefix's count scaled by the text's length in characters (an estimate;
such a text is far longer than any configured response). Within both caps a pair scores exactly as the authors' code
does; beyond them the overlap is that of the prefixes, a lower bound, so text past a cap can only lower the score.
``SIM_MAX_TOKENS`` sits above the longest configured response (``max_response_tokens`` 6,144, OpenThoughts;
``tests/core/rewards`` checks the configs), and one call costs milliseconds whatever the lengths.
"""

from __future__ import annotations

import re
import string
from collections import Counter

from rapidfuzz.distance import LCSseq

from pipeline_lib.core.rewards.extract import final_text

__all__ = ["SIM_MAX_CHARS", "SIM_MAX_TOKENS", "SIM_WEIGHTS", "rouge_l_f", "sim_tokens", "similarity_score",
           "squad_f1", "squad_normalize"]

SIM_WEIGHTS = (0.6, 0.4)  # (F1, ROUGE-L)
SIM_MAX_CHARS = 65_536  # characters of each final text tokenised
SIM_MAX_TOKENS = 8_192  # tokens of each final text compared by ROUGE-L's LCS
_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def squad_normalize(text: str) -> str:
    """The official SQuAD v1.1 ``normalize_answer``."""
    text = text.lower()
    text = text.translate(_DROP_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def sim_tokens(text: str) -> tuple[list[str], int]:
    """The SQuAD-normalised tokens of the text's first ``SIM_MAX_CHARS`` characters, and the whole text's token
    count: exact within the cap, else the prefix's count scaled by the text's length (rounded up; at least one
    more than the prefix's)."""
    tokens = squad_normalize(text[:SIM_MAX_CHARS]).split()
    if len(text) <= SIM_MAX_CHARS:
        return tokens, len(tokens)
    return tokens, max(len(tokens) + 1, -(-len(tokens) * len(text) // SIM_MAX_CHARS))


def squad_f1(prediction: str, reference: str) -> float:
    """Token F1 on SQuAD-normalised multisets (the official SQuAD v1.1 F1 within ``SIM_MAX_CHARS``); 0 when nothing
    overlaps, including empty texts."""
    (pred, pred_count), (gold, gold_count) = sim_tokens(prediction), sim_tokens(reference)
    common = sum((Counter(pred) & Counter(gold)).values())
    return 2.0 * common / (pred_count + gold_count) if common else 0.0


def rouge_l_f(prediction: str, reference: str) -> float:
    """ROUGE-L F (beta 1) on the same SQuAD-normalised tokens: 2 * LCS / (|pred| + |gold|), the LCS over the first
    ``SIM_MAX_TOKENS`` tokens of each; 0 when either text has no token."""
    (pred, pred_count), (gold, gold_count) = sim_tokens(prediction), sim_tokens(reference)
    if not pred or not gold:
        return 0.0
    return 2.0 * LCSseq.similarity(pred[:SIM_MAX_TOKENS], gold[:SIM_MAX_TOKENS]) / (pred_count + gold_count)


def similarity_score(solution: str | None, reference: str) -> dict[str, float]:
    """r_sim of the reply's final text against the reference's final text; a reference that is not text cannot be
    scored (``unscorable``)."""
    if not isinstance(reference, str):
        return {"score": 0.0, "squad_f1": 0.0, "rouge_l": 0.0, "unscorable": 1.0}
    if not isinstance(solution, str):
        return {"score": 0.0, "squad_f1": 0.0, "rouge_l": 0.0, "unscorable": 0.0}
    prediction, gold = final_text(solution), final_text(reference)
    f1, rouge = squad_f1(prediction, gold), rouge_l_f(prediction, gold)
    return {"score": SIM_WEIGHTS[0] * f1 + SIM_WEIGHTS[1] * rouge, "squad_f1": f1, "rouge_l": rouge,
            "unscorable": 0.0}
