"""Rewards on huge or hostile inputs (issue "Nothing silent"; issue 35): r_sim equals the reference SQuAD-F1 and
ROUGE-L bit for bit up to its caps, text past a cap only lowers it, and a 1 MB pair scores in milliseconds; a
malformed Countdown ground truth is unscorable (0), never truncated to an integer. The cases are rows of
docs/hostile_cases.md."""

from __future__ import annotations

import pytest


def _reference_metrics(prediction: str, reference: str) -> tuple[float, float]:
    from rouge_score.rouge_scorer import RougeScorer

    from tests.conftest import official_squad_f1

    return official_squad_f1(prediction, reference), RougeScorer(["rougeL"]).score(reference, prediction)[
        "rougeL"].fmeasure


def test_similarity_is_bit_exact_with_the_references_up_to_the_cap():
    import random

    from pipeline_lib.core.rewards.similarity import SIM_MAX_CHARS, SIM_MAX_TOKENS, rouge_l_f, squad_f1

    rng = random.Random(1)
    words = ["The", "cat", "sat", "on", "a", "mat.", "dogs", "café", "42", "(yes)", "x", "NO!", "東京"]  # <= 1 token
    long = " ".join(rng.choice(words) for _ in range(SIM_MAX_TOKENS))  # at most SIM_MAX_TOKENS tokens per metric
    assert len(long) <= SIM_MAX_CHARS
    for prediction, reference in [(long, " ".join(rng.choice(words) for _ in range(200))),
                                  (" ".join(rng.choice(words) for _ in range(150)), long)]:
        f1, rouge = _reference_metrics(prediction, reference)
        assert squad_f1(prediction, reference) == f1 and rouge_l_f(prediction, reference) == rouge


def test_similarity_beyond_the_cap_counts_the_whole_text():
    """Text past a cap only lowers the score (issue 35: it was invisible; tests/core/rewards has the garbage cases)."""
    from pipeline_lib.core.rewards.similarity import SIM_MAX_TOKENS, rouge_l_f, squad_f1

    head = " ".join(["cat", "dog"] * (SIM_MAX_TOKENS // 2))
    reference = "cat dog bird " * 50
    for tail in ("bird " * 10_000, "bird" * 100_000):  # more tokens, or more characters, than the caps
        f1, rouge = _reference_metrics(head, reference)
        assert squad_f1(head + " " + tail, reference) < f1 and rouge_l_f(head + " " + tail, reference) < rouge


@pytest.mark.parametrize("kind", ["words", "one_token_run", "answer_tags", "closed_tags", "think"])
def test_similarity_of_a_1mb_pair_takes_milliseconds(kind):
    import random

    from pipeline_lib.core.rewards import score

    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "mat", "Hello,", "world.", "x1", "alpha"]
    text = {"words": " ".join(rng.choice(words) for _ in range(250_000)), "one_token_run": "a." * 500_000,
            "answer_tags": "<answer>" * 125_000, "closed_tags": "<answer>x</answer>" * 55_000,
            "think": "<think>" + "a b " * 250_000}[kind][:1_000_000]
    other = " ".join(rng.choice(words) for _ in range(250_000))[:1_000_000]
    best = min(_timed(lambda: score("similarity", text, other)) for _ in range(3))
    # a guard against the uncapped quadratic path (about 10 s before the cap), not a speed claim: about 3-15 ms idle,
    # up to 0.3 s seen on a loaded 2-core machine (benchmarks/rewards.py measures the speed)
    assert best < 2.0, f"{kind}: {best * 1e3:.1f} ms"


def _timed(call) -> float:
    import time

    start = time.perf_counter()
    call()
    return time.perf_counter() - start


@pytest.mark.parametrize("truth", ['{"numbers": [1, 2, 3], "target": 6.5}', '{"numbers": [1, 2.0, 3], "target": 6}',
                                   '{"numbers": "123", "target": 6}', {"numbers": [1, 2, 3], "target": True}])
def test_countdown_ground_truth_is_never_truncated_at_scoring(truth):
    """Not scored as if 6.5 were 6: unscorable, 0 (a reward never raises for one item; the data stage rejects it)."""
    from pipeline_lib.core.rewards import score

    result = score("countdown", "<answer>1 + 2 + 3</answer>", truth)
    assert (result["score"], result["unscorable"]) == (0.0, 1.0)
