"""Rewards: agreement with the reference libraries and the authors' definitions, hostile inputs, and verl's calling
convention."""

import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_lib.core.rewards import available_rewards, compute_score, score, score_batch
from pipeline_lib.core.rewards.countdown import evaluate_expression
from pipeline_lib.core.rewards.extract import extract_answer, last_boxed
from pipeline_lib.core.rewards.mathverify import TIMEOUT_SECONDS, gold_answer
from pipeline_lib.core.rewards.pool import TimeoutPool
from pipeline_lib.core.rewards.similarity import rouge_l_f, sim_tokens, squad_f1, squad_normalize
from tests.conftest import lcs_length, official_squad_f1

math_verify = pytest.importorskip("math_verify")


# --- r_sim: the authors' quantity (softmaxgrpo/rewards.py), checked against oracles and by hand ----------------------


WORDS = ["the", "a", "an", "cat", "Cat", "sat", "on", "mat", "mat.", "dog's", "run", "ran", "12", "3.5", "x",
         "café", "naïve", "東京", "İstanbul", "well-known", "(yes)", "NO!", "and", "or", "of", "42", "#", "", "\n"]


def random_text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 40)))


def _oracle(prediction: str, reference: str) -> tuple[float, float]:
    """SQuAD's official F1, and ROUGE-L F (beta 1) from a textbook LCS, both on SQuAD-normalised tokens."""
    pred, gold = squad_normalize(prediction).split(), squad_normalize(reference).split()
    rouge = 2 * lcs_length(pred, gold) / (len(pred) + len(gold)) if pred and gold else 0.0
    return official_squad_f1(prediction, reference), rouge


def test_similarity_metrics_equal_the_oracles():
    """F1 equals SQuAD's (to rounding: 2c/(|p|+|g|) is its 2PR/(P+R)); ROUGE-L equals the textbook LCS bit for bit."""
    rng = random.Random(0)
    pairs = [(random_text(rng), random_text(rng)) for _ in range(1500)]
    pairs += [("", ""), ("the a an", "the"), ("...", "!!!"), ("東京", "東京")]
    for prediction, reference in pairs:
        f1, rouge = _oracle(prediction, reference)
        assert squad_f1(prediction, reference) == pytest.approx(f1, abs=1e-12)
        assert rouge_l_f(prediction, reference) == rouge
        assert score("similarity", prediction, reference)["score"] == pytest.approx(0.6 * f1 + 0.4 * rouge, abs=1e-12)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80), st.text(max_size=80))
def test_similarity_metrics_match_on_arbitrary_unicode(prediction, reference):
    f1, rouge = _oracle(prediction, reference)
    assert squad_f1(prediction, reference) == pytest.approx(f1, abs=1e-12)
    assert rouge_l_f(prediction, reference) == rouge


def test_squad_normalisation():
    assert squad_normalize("The  Cat's (big) hat!") == "cats big hat"
    assert sim_tokens("Don't stop: the U.S. team won 3-2.") == (["dont", "stop", "us", "team", "won", "32"], 6)


# (reply, reference, F1, ROUGE-L): every value worked out by hand below; r_sim = 0.6 F1 + 0.4 ROUGE-L.
HAND_CASES = [
    # Think trace and answer tags on both sides (and Qwen's end marker): only the last answer spans are compared.
    # reply "The cat sat on the mat." -> [cat, sat, on, mat]; reference "On a mat, a cat sat" -> [on, mat, cat, sat].
    # common 4 -> F1 = 2*4/(4+4) = 1; LCS 2 ("cat sat" or "on mat") -> ROUGE-L = 2*2/8 = 0.5; r_sim = 0.6 + 0.2 = 0.8.
    ("<think>The sum is easy.</think>\n<answer>The cat sat on the mat.</answer><|im_end|>",
     "<think>let me think about cats</think> <answer>On a mat, a cat sat</answer>", 1.0, 0.5),
    # Several answer spans in the reply, a plain reference: the last span "Paris is the capital of France."
    # -> [paris, is, capital, of, france]; reference -> [capital, of, france, is, paris]; common 5 -> F1 = 10/10 = 1;
    # LCS 3 ("capital of france") -> ROUGE-L = 2*3/10 = 0.6; r_sim = 0.6 + 0.24 = 0.84.
    ("I guess <answer>Lyon</answer>, no: <answer>Paris is the capital of France.</answer> done",
     "The capital of France is Paris.", 1.0, 0.6),
    # No tags, punctuation and articles: ASCII punctuation is deleted (not split on), so "U.S." -> "us", "3-2" -> "32".
    # reply -> [dont, stop, us, team, won, 32]; reference -> [us, team, won, 32, dont, stop]; common 6 -> F1 = 1;
    # LCS 4 ("us team won 32") -> ROUGE-L = 8/12 = 2/3; r_sim = 0.6 + 0.4 * 2/3 = 13/15.
    ("Don't stop: the U.S. team won 3-2.", "U.S. team won, 3-2; don't stop", 1.0, 2 / 3),
    # Token multisets: reply [dog, cat, cat], reference [cat, dog, dog]; common min(1,2) + min(2,1) = 2 ->
    # F1 = 2*2/6 = 2/3; LCS 1 (no "cat" follows a "dog" in the reference, no "dog" follows a "cat" in the reply)
    # -> ROUGE-L = 2*1/6 = 1/3; r_sim = 0.4 + 0.4/3 = 8/15.
    ("dog cat cat", "cat dog dog", 2 / 3, 1 / 3),
    # Non-ASCII letters stay in tokens (rouge-score's tokeniser dropped them): [東京, tower] vs [東京]; common 1 ->
    # F1 = 2/3; LCS 1 -> ROUGE-L = 2/3; r_sim = 2/3.
    ("東京 tower", "<answer>東京</answer>", 2 / 3, 2 / 3),
    # The reference's trace is cut too: its final text "42" equals the reply's -> F1 = ROUGE-L = 2*1/2 = 1.
    ("42", "<think>6 times 7 is 42</think>\n<answer>42</answer>", 1.0, 1.0),
    # Empty sides: a reply that is all trace has final text "" (0 tokens); a reference of articles has 0 tokens.
    ("<think>the answer is 42</think>", "42", 0.0, 0.0),
    ("42", "", 0.0, 0.0),
    ("the a an", "The", 0.0, 0.0),
]


@pytest.mark.parametrize(("reply", "reference", "f1", "rouge"), HAND_CASES)
def test_r_sim_values_worked_out_by_hand(reply, reference, f1, rouge):
    result = score("similarity", reply, reference)
    assert result["squad_f1"] == pytest.approx(f1, abs=1e-12)
    assert result["rouge_l"] == pytest.approx(rouge, abs=1e-12)
    assert result["score"] == pytest.approx(0.6 * f1 + 0.4 * rouge, abs=1e-12)


def test_openthoughts_reward_is_035_format_plus_065_r_sim_by_hand():
    """OpenThoughts: 0.35 format + 0.65 r_sim. Reply final text "So 42 is the answer." -> [so, 42, is, answer];
    reference final text "The answer is **42**." -> [answer, is, 42]; common 3 -> F1 = 2*3/7 = 6/7; LCS 1 ->
    ROUGE-L = 2/7; r_sim = 0.6*6/7 + 0.4*2/7 = 22/35. Format 1 -> 0.35 + 0.65 * 22/35; no think block ->
    0.65 * 22/35."""
    source = "open-thoughts/OpenThoughts3-1.2M"
    extra = {"reference": "<think>a long trace</think>\n\nThe answer is **42**."}
    with_format = compute_score(source, "<think>hmm</think>\nSo 42 is the answer.", None, extra)
    assert with_format["score"] == pytest.approx(0.35 + 0.65 * 22 / 35, abs=1e-12)
    assert with_format["format/score"] == 1.0 and with_format["similarity/score"] == pytest.approx(22 / 35, abs=1e-12)
    without = compute_score(source, "So 42 is the answer.", None, extra)
    assert without["score"] == pytest.approx(0.65 * 22 / 35, abs=1e-12) and without["format/score"] == 0.0


GSM8K_CASES = [
    ("The total is \\boxed{18}.", "18", 1.0),
    ("so \\boxed{\\$18}", "18", 1.0),
    ("<answer>1,234</answer>", "1234", 1.0),
    ("\\boxed{18 \\text{ dollars}}", "18", 1.0),
    ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{19}", "18", 0.0),
    ("<think>maybe \\boxed{3}</think>\\boxed{4}", "4", 1.0),
    ("<think>\\boxed{4}</think> I think it is \\boxed{3}", "4", 0.0),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
    ("no answer here", "7", 0.0),
]


@pytest.mark.parametrize("solution, gold, expected", GSM8K_CASES)
def test_math_known_cases(solution, gold, expected):
    assert score("math", solution, gold)["score"] == expected


def test_math_agrees_with_direct_math_verify():
    from math_verify import parse, verify

    from pipeline_lib.core.rewards.mathverify import prediction_text

    rng = random.Random(1)
    solutions, golds = [], []
    for _ in range(60):
        value = rng.randint(0, 5000)
        shown = rng.choice([str(value), f"{value:,}", f"\\${value}", f"{value} \\text{{ dollars}}",
                            f"\\frac{{{2 * value}}}{{2}}", str(value + rng.choice([0, 1]))])
        wrapper = rng.choice(["\\boxed{%s}", "<answer>%s</answer>", "The answer is \\boxed{%s}."])
        solutions.append("Step 1 ... " + wrapper % shown)
        golds.append(f"reasoning #### {value:,}")
    ours = [r["score"] for r in score_batch("math", solutions, golds)]
    direct = [float(verify(parse(f"\\boxed{{{gold_answer(g)}}}"), parse(prediction_text(s))))
              for s, g in zip(solutions, golds, strict=True)]
    assert ours == direct
    assert 0 < sum(ours) < len(ours)


def test_gsm8k_gold_extraction():
    assert gold_answer("Natalia sold 48/2 = 24 clips.\n#### 1,072") == "1072"
    assert gold_answer("\\frac{3}{4}") == "\\frac{3}{4}"


def test_math_timeout_is_counted_not_silent():
    pool = TimeoutPool("time:sleep", processes=1, timeout=0.5)
    try:
        start = time.monotonic()
        results = pool.map([(5.0,), (0.01,)])
        assert time.monotonic() - start < 0.5 + 0.5 + 3.0  # includes starting the replacement worker
        assert results[0].timed_out and not results[1].timed_out
        assert pool.timeouts == 1
    finally:
        pool.close()


def test_math_batch_scores_each_item_in_its_own_bound():
    hostile = "\\boxed{" + "(" * 3000 + "1" + ")" * 3000 + "}"
    start = time.monotonic()
    results = score_batch("math", [hostile, "\\boxed{2}", "9^{9^{9^{9}}}"], ["1", "2", "3"])
    assert time.monotonic() - start < 3 * (TIMEOUT_SECONDS + 0.5) + 5
    assert [r["score"] for r in results][1] == 1.0
    assert all(r["score"] in (0.0, 1.0) and r["timeouts"] in (0.0, 1.0) for r in results)


COUNTDOWN = {"numbers": [3, 5, 3, 1], "target": 24}


@pytest.mark.parametrize("solution, expected", [
    ("<answer>(3 + 5) * 3 * 1</answer>", 1.0),
    ("<answer>(3+5)*3*1 = 24</answer>", 1.0),
    ("\\boxed{(3 + 5) \\times 3 \\div 1}", 1.0),
    ("<think>try (3+5)*3</think><answer>(5 - 1) * 3 + 3 * 4</answer>", 0.0),  # 4 is not given
    ("<answer>(3 + 5) * 3</answer>", 0.0),  # 1 unused
    ("<answer>(3+5)*3*1 = 25</answer>", 0.0),
    ("<answer>3 * 5 + 3 * 1</answer>", 0.0),  # 18
    ("(3 + 5) * 3 * 1", 0.0),  # no answer tags
])
def test_countdown_cases(solution, expected):
    assert score("countdown", solution, COUNTDOWN)["score"] == expected


def test_countdown_is_exact_with_fractions():
    gt = {"numbers": [1, 3, 4, 6], "target": 24}
    assert score("countdown", "<answer>6 / (1 - 3 / 4)</answer>", gt)["score"] == 1.0


HOSTILE = [
    "__import__('os').system('touch {sentinel}')",
    "open('{sentinel}', 'w')",
    "(lambda: __import__('os').system('touch {sentinel}'))()",
    "().__class__.__bases__[0].__subclasses__()",
    "x + 1", "9**9**9**9", "2^10000", "10**100", "1" * 1_000_000, "(" * 10_000 + "1" + ")" * 10_000,
    "١٢ + ٣", "３ + ５", "", "   ", "1 +", "1/0", "99999999999 * 99999999999 * 99999999999",
    "True + 1", "3.0 + 5", "-3 + 27",
]


@pytest.mark.parametrize("expression", HOSTILE, ids=range(len(HOSTILE)))
def test_countdown_hostile_inputs_score_zero_and_execute_nothing(expression, tmp_path):
    sentinel = tmp_path / "pwned"
    text = expression.replace("{sentinel}", str(sentinel))
    for solution in (f"<answer>{text}</answer>", f"\\boxed{{{text}}}", text):
        start = time.monotonic()
        result = score("countdown", solution, {"numbers": [3, 5, 3, 1], "target": 24})
        # a guard against a computation bomb (9**9**9**9 would never end), not a speed claim: generous for a loaded
        # machine, where the million-digit literal once took over 1 s to refuse
        assert time.monotonic() - start < 10.0
        assert result["score"] == 0.0
    assert not sentinel.exists()


def test_countdown_rejects_non_int_literals_and_deep_nesting():
    for bad in ("3.0 + 5", "True + 1", "~3", "3 ** 2"):  # unary minus is read since issue 60 (countdown.py)
        with pytest.raises(ValueError):
            evaluate_expression(bad)
    assert evaluate_expression("((1))")[0] == 1


@pytest.mark.parametrize("name", ["math", "countdown", "similarity", "format", "exact"])
def test_none_and_empty_solutions_score_zero(name):
    truth = COUNTDOWN if name == "countdown" else "42"
    for solution in (None, "", "   "):
        assert score(name, solution, truth)["score"] == 0.0


@pytest.mark.parametrize("truth", [{"nums": [1]}, "{not json", "[" * 100_000, {"numbers": [1], "target": 10**5000},
                                   {"numbers": [1.5], "target": 2}, None, 7],
                         ids=["wrong-key", "not-json", "deep-nesting", "huge-target", "float", "none", "int"])
def test_countdown_bad_ground_truth_scores_zero_and_is_counted_unscorable(truth):
    """One malformed row's ground truth must not raise out of a training step's reward batch."""
    from pipeline_lib.core.rewards import health_counts

    results = score_batch("countdown", ["<answer>1</answer>", "<answer>3 + 4</answer>"],
                          [truth, {"numbers": [3, 4], "target": 7}])
    assert [r["score"] for r in results] == [0.0, 1.0]
    assert health_counts(results)["unscorable"] == 1


# --- hostile answers and golds: every item gets a score, the fast path agrees with Math-Verify ----------------------
def math_verify_says(prediction: str, gold: str) -> bool:
    """Math-Verify's own verdict, as the pool's worker asks it (the oracle of the integer fast path)."""
    from pipeline_lib.core.rewards.mathverify import prediction_text, verify_pair

    return verify_pair(prediction_text(prediction), gold_answer(gold)) is True


@pytest.mark.parametrize(("solution", "gold"), [("\\boxed{١٢٣}", "123"), ("\\boxed{１２３}", "123"),
                                                ("\\boxed{123}", "١٢٣"), ("\\boxed{\u0661\u0662}", "#### 12")])
def test_other_digit_scripts_score_as_math_verify_says_not_as_integers(solution, gold):
    assert math_verify_says(solution, gold) is False
    assert score("math", solution, gold)["score"] == 0.0


@pytest.mark.parametrize("side", ["answer", "gold", "both"])
def test_a_5000_digit_integer_is_scored_not_raised(side):
    """Python refuses int() over 4,300 digits: one hostile rollout must not kill the reward batch."""
    huge = "7" * 5000
    solution = f"\\boxed{{{huge}}}" if side != "gold" else "\\boxed{7}"
    gold = huge if side != "answer" else "7"
    for result in (score("math", solution, gold), compute_score("openai/gsm8k", solution, f"#### {gold}")):
        assert result["score"] == float(math_verify_says(solution, gold))
        assert result["failures"] == result["unscorable"] == 0.0


@pytest.mark.parametrize("gold", ["nan", "NaN", "#### nan", "inf", "-inf", "Infinity", "1e400", "#### -1E999"])
def test_non_finite_golds_never_score_one(gold):
    """Math-Verify matches \\boxed{nan} to nan (as the symbol product a*n*n): such a gold is unscorable, 0."""
    literal = gold.split("####")[-1].strip()
    for answer in (f"\\boxed{{{literal}}}", "\\boxed{nan}", "\\boxed{\\infty}", "\\boxed{1e400}"):
        result = score("math", answer, gold)
        assert result["score"] == 0.0 and result["unscorable"] == 1.0, (answer, gold)


def test_infinity_in_latex_stays_a_legitimate_answer():
    assert score("math", "the limit is \\boxed{\\infty}", "\\infty")["score"] == 1.0
    assert score("math", "\\boxed{" + "9" * 400 + "}", "9" * 400)["score"] == 1.0  # big, but finite


@pytest.mark.parametrize("gold", [None, "", "####", "   "])
def test_missing_gold_is_unscorable_not_wrong(gold):
    result = score("math", "\\boxed{1}", gold)
    assert (result["score"], result["unscorable"]) == (0.0, 1.0)


@st.composite
def _integer_texts(draw, value: int) -> str:
    """One way of writing ``value`` that the integer shortcut may take: sign, leading zeros, spaces."""
    sign = "-" if value < 0 else draw(st.sampled_from(["", "+"]))
    zeros = draw(st.sampled_from(["", "0", "000"]))
    return draw(st.sampled_from(["", " ", "  "])) + sign + zeros + str(abs(value)) + draw(st.sampled_from(["", " "]))


@st.composite
def _integer_pairs(draw) -> tuple[str, str]:
    """Answer and gold integers, equal about half the time (zero and -0 included), up to 40 digits."""
    gold = draw(st.one_of(st.integers(-1000, 1000), st.integers(-10**40, 10**40)))
    answer = draw(st.sampled_from([gold, -gold, gold + 1, draw(st.integers(-10**40, 10**40))]))
    return draw(_integer_texts(answer)), draw(_integer_texts(gold))


@settings(max_examples=300, deadline=None)
@given(_integer_pairs())
def test_integer_fast_path_agrees_with_math_verify(pair):
    """Wherever the math reward decides without Math-Verify (both sides plain ASCII integers), it decides as
    Math-Verify does."""
    from pipeline_lib.core.rewards.mathverify import _fast_integer

    answer, gold = pair
    fast = _fast_integer(f"\\boxed{{{answer}}}"), _fast_integer(f"\\boxed{{{gold}}}")
    assert None not in fast, pair  # every generated pair takes the shortcut
    assert (fast[0] == fast[1]) == math_verify_says(f"\\boxed{{{answer}}}", gold), pair


@pytest.mark.parametrize("text", ["١٢٣", "１２３", "\t123", "\u2003123", "--5", "+-5", "1 2", "1,000", "7" * 1001])
def test_the_integer_fast_path_leaves_everything_else_to_math_verify(text):
    from pipeline_lib.core.rewards.mathverify import _fast_integer

    assert _fast_integer(f"\\boxed{{{text}}}") is None


@pytest.mark.parametrize("name", ["math", "countdown", "similarity", "format", "exact"])
def test_no_reward_raises_for_a_hostile_item(name):
    """Every scorer returns a finite score in [0, 1] for every input a rollout or a row can carry."""
    import math

    hostile_solutions = [None, 7, b"\\boxed{1}", "", "\\boxed{", "\\boxed{" + "9" * 5000 + "}", "\\ud800",
                         "<answer>" * 2000, "{" * 5000, "\\boxed{١٢٣}", "\x00" * 100, "<think>" + "x" * 100_000]
    hostile_truths = [None, "", "nan", float("nan"), 10**5000, {"numbers": None}, ["a"], "#### " + "1" * 5000, "{"]
    for solution in hostile_solutions:
        for truth in hostile_truths:
            result = score(name, solution, truth)
            assert math.isfinite(result["score"]) and 0.0 <= result["score"] <= 1.0, (solution, truth)


def test_format_reward():
    assert score("format", "<think>reason</think>\n<answer>42</answer>", None)["score"] == 1.0
    assert score("format", "<think>reason</think> 42", None)["score"] == 1.0
    # the authors' format term asks only for non-empty text after </think> (softmaxgrpo/rewards.py format_score)
    assert score("format", " <think>a</think><answer> </answer>", None)["score"] == 1.0
    for bad in ("42", "<think></think> 42", "<think>a</think>", "<think>a</think><think>b</think> 4",
                "<think>a</think> \n ", "pre <think>a</think> 42 </think>", "pre <think>a</think> 42"):
        assert score("format", bad, None)["score"] == 0.0, bad


def test_exact_reward():
    assert score("exact", "<answer> 42. </answer>", "#### 42")["score"] == 1.0
    assert score("exact", "<answer>43</answer>", "42")["score"] == 0.0


def test_extraction():
    assert last_boxed("a \\boxed{\\frac{1}{2}} b \\boxed{x^{2}}") == "x^{2}"
    assert last_boxed("\\boxed{unclosed") is None
    assert extract_answer("<think><answer>1</answer></think><answer>2</answer>") == "2"
    assert extract_answer("<think>\\boxed{1}</think> nothing") is None


def test_compute_score_as_verls_naive_reward_manager_calls_it():
    extra_info = {"index": 0, "num_turns": None, "rollout_reward_scores": {}}
    result = compute_score(data_source="openai/gsm8k", solution_str="\\boxed{72}",
                           ground_truth="48 + 24 = 72\n#### 72", extra_info=extra_info)
    assert result["score"] == 1.0 and isinstance(result["timeouts"], float)
    combined = compute_score(data_source="open-thoughts/OpenThoughts3-1.2M",
                             solution_str="<think>ok</think> the cat sat", ground_truth="the cat sat",
                             extra_info={"index": 1})
    assert combined["score"] == pytest.approx(0.35 * 1.0 + 0.65 * 1.0)
    weighted = compute_score(data_source="custom", solution_str="the cat", ground_truth="the dog",
                             extra_info={"reward_weights": {"similarity": 1.0}})
    assert weighted["score"] == score("similarity", "the cat", "the dog")["score"]
    assert all(isinstance(v, float) for v in combined.values())
    # the method's weights win over the task's; similarity uses the row's reference demonstration
    sim = compute_score(data_source="openai/gsm8k", solution_str="add 2 and 3 to get \\boxed{5}", ground_truth="5",
                        extra_info={"reference": "add 2 and 3 to get \\boxed{5}"},
                        reward_weights={"similarity": 1.0})
    assert sim["score"] == 1.0
    with pytest.raises(ValueError, match="no reward composition for data_source 'mystery'"):
        compute_score(data_source="mystery", solution_str="x", ground_truth="y")


def test_batch_scoring_equals_row_by_row():
    from pipeline_lib.core.rewards import compute_scores

    rows = [("openai/gsm8k", "\\boxed{72}", "#### 72", {"reference": "add to get \\boxed{72}"}),
            ("openai/gsm8k", "\\boxed{71}", "#### 72", {}),
            ("tiny/countdown", "<answer>(3 + 5) * 3 * 1</answer>", {"numbers": [3, 5, 3, 1], "target": 24}, {}),
            ("open-thoughts/OpenThoughts3-1.2M", "<think>ok</think> the cat", "the cat sat", {})]
    batch = compute_scores(*zip(*rows, strict=True))
    assert batch == [compute_score(d, s, g, extra_info=e) for d, s, g, e in rows]
    assert [r["score"] for r in batch][:3] == [1.0, 0.0, 1.0]


def test_registry():
    assert {"math", "countdown", "similarity", "format", "exact"} <= set(available_rewards())
    with pytest.raises(ValueError, match="unknown reward"):
        score("bleu", "a", "b")


@pytest.mark.parametrize(("variable", "value"), [("PIPELINE_MATH_TIMEOUT", "nan"), ("PIPELINE_MATH_TIMEOUT", "inf"),
                                                 ("PIPELINE_MATH_TIMEOUT", "-1"), ("PIPELINE_MATH_TIMEOUT", "abc"),
                                                 ("PIPELINE_MATH_TIMEOUT", "0"), ("PIPELINE_MATH_PROCESSES", "0"),
                                                 ("PIPELINE_MATH_PROCESSES", "2.5")])
def test_math_environment_variables_are_checked_and_named(variable, value):
    """nan or inf would remove the verifier's time limit (a power tower then hangs a training step)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root), variable: value}
    done = subprocess.run([sys.executable, "-c", "import pipeline_lib.core.rewards"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode != 0
    assert "EnvironmentVariableError" in done.stderr and f"{variable}={value!r}" in done.stderr, done.stderr[-500:]


# --- issue 35, class 8: float golds, r_sim's caps, reward weights read back from a mixed parquet -----------------

@pytest.mark.parametrize(("gold", "right", "wrong"), [
    (1e-05, "\\boxed{0.00001}", "\\boxed{e-5}"),  # str(1e-05) is "1e-05", which Math-Verify reads as e - 5
    (-2.5e-07, "\\boxed{-0.00000025}", "\\boxed{2.5e-7}"),
    (12.0, "\\boxed{12}", "\\boxed{12.5}"),
    (-3.0, "<answer>-3</answer>", "<answer>3</answer>"),
    (1e20, "\\boxed{100000000000000000000}", "\\boxed{e+20}"),
    (0.1, "\\boxed{0.1}", "\\boxed{0.11}"),
])
def test_a_float_gold_is_written_out_exactly(gold, right, wrong):
    assert score("math", right, gold)["score"] == 1.0
    assert score("math", wrong, gold)["score"] == 0.0


@pytest.mark.parametrize(("gold", "right", "wrong"), [
    ("1e-05", "\\boxed{0.00001}", "\\boxed{e-5}"),  # a CSV column's text: a number, never the expression e - 5
    ("3.0E+2", "\\boxed{300}", "\\boxed{30}"),
    ("-2.5e-3", "\\boxed{-0.0025}", "\\boxed{-0.025}"),
    ("#### 1e-05", "\\boxed{0.00001}", "\\boxed{e-5}"),
    (" 4E2 ", "\\boxed{400}", "\\boxed{40}"),
])
def test_a_text_gold_in_exponent_form_is_a_number(gold, right, wrong):
    """Issue 45 item 6: golds are numbers when they read as numbers, text or not."""
    from pipeline_lib.core.rewards.mathverify import gold_text

    assert "e" not in gold_text(gold).lower()
    assert score("math", right, gold)["score"] == 1.0
    assert score("math", wrong, gold)["score"] == 0.0
    assert score("math", "\\boxed{e-5}", "1e-05")["score"] == 0.0


def test_a_text_gold_beyond_float_range_stays_unscorable():
    assert score("math", "\\boxed{1e400}", "1e400")["unscorable"] == 1.0


def test_gold_normalisation_leaves_integer_and_text_golds_byte_identical():
    import numpy as np

    from pipeline_lib.core.rewards.mathverify import gold_text

    for gold in (12, -7, 0, 10**300, np.int64(42), "#### 1,234", "12.0", "\\frac{1}{2}", " 5 ", "e-5", "1e400"):
        expected = str(gold).rsplit("####", 1)[-1].replace(",", "").strip() if isinstance(gold, str) else str(gold)
        assert gold_text(gold) == expected
    assert [gold_text(g) for g in (1e-05, 12.0, -0.0, 1e20, np.float32(1e-05), np.float64(-2.5))] == [
        "0.00001", "12", "0", "100000000000000000000", "0.00001", "-2.5"]
    assert score("math", "\\boxed{nan}", float("nan"))["unscorable"] == 1.0  # non-finite golds stay unscorable


def test_the_tiny_tasks_golds_are_unchanged_by_normalisation():
    """The default run's rewards must not move: every tiny gold is text (the number path never runs) and reaches
    the verifier exactly as before (text after the last ``####``, thousands commas dropped, stripped)."""
    from pipeline_lib.core.data.tiny import TASKS, generate_task
    from pipeline_lib.core.rewards.mathverify import gold_text

    spec = {"n_train": 60, "n_test": 20, "imperfect_fraction": 0.3, "numbers_per_task": [3, 4], "max_number": 9,
            "max_target": 100}
    for task in TASKS:
        for row in generate_task(task, spec, 0)["rl_test"]:
            gold = row["reward_model"]["ground_truth"]
            before = gold.rsplit("####", 1)[1].replace(",", "") if "####" in gold else gold
            assert isinstance(gold, str) and gold_text(gold) == (before.strip() or None)


def _words(rng: random.Random, count: int, vocabulary: list[str]) -> str:
    return " ".join(rng.choice(vocabulary) for _ in range(count))


def test_garbage_appended_beyond_the_old_cap_lowers_r_sim():
    """The reference's first 4,096 words followed by 1,900 garbage words scored 1.0 (only 4,096 tokens compared)."""
    rng = random.Random(3)
    vocabulary = [f"w{i}" for i in range(500)]
    reference = _words(rng, 6_000, vocabulary)
    garbage = _words(rng, 1_900, [f"junk{i}" for i in range(50)])
    response = " ".join(reference.split()[:4_096]) + " " + garbage
    sim = score("similarity", response, reference)
    assert sim["score"] < 0.8 and sim["squad_f1"] < 0.8 and sim["rouge_l"] < 0.8
    assert score("similarity", reference, reference)["score"] == 1.0  # a whole 6,000-word match still scores 1
    # text past the character cap counts too: a perfect answer drowned in 1 MB of garbage scores near 0
    drowned = score("similarity", reference + " " + "junk " * 200_000, reference)
    assert drowned["score"] < 0.1


def test_r_sim_is_exact_up_to_the_longest_configured_response():
    """The LCS cap sits above every configured ``max_response_tokens`` (the schema's defaults and config files)."""
    from pathlib import Path

    import yaml

    from pipeline_lib.core.rewards.similarity import SIM_MAX_TOKENS

    def values(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "max_response_tokens" and isinstance(value, int):
                    yield value
                yield from values(value)
        elif isinstance(node, list):
            for value in node:
                yield from values(value)

    root = Path(__file__).resolve().parents[3]
    lengths = [v for path in [root / "workflow/schemas/config.schema.yaml", *sorted((root / "config").glob("*.yaml"))]
               for v in values(yaml.safe_load(path.read_text()))]
    assert 6_144 in lengths and max(lengths) <= SIM_MAX_TOKENS


def test_reward_weights_read_back_from_a_mixed_parquet(tmp_path):
    """A parquet mixing tasks stores extra_info.reward_weights as one struct: a row's absent keys read back None."""
    import pandas as pd

    from pipeline_lib.core.rewards import compute_scores, reward_health

    rows = [{"data_source": "openai/gsm8k", "solution": "\\boxed{5}", "gold": "5",
             "extra_info": {"reward_weights": {"math": 1.0}}},
            {"data_source": "tiny/meeting", "solution": "the cat sat", "gold": "the cat sat",
             "extra_info": {"reward_weights": {"similarity": 1.0}}}]
    pd.DataFrame(rows).to_parquet(tmp_path / "mixed.parquet")
    back = pd.read_parquet(tmp_path / "mixed.parquet").to_dict("records")
    assert back[0]["extra_info"]["reward_weights"]["similarity"] is None  # what verl hands the reward function
    results = compute_scores(*zip(*[(r["data_source"], r["solution"], r["gold"], r["extra_info"]) for r in back],
                                  strict=True))
    assert [r["score"] for r in results] == [1.0, 1.0]
    assert compute_score("openai/gsm8k", "\\boxed{5}", "5",
                         extra_info={"reward_weights": {"math": None, "similarity": None}})["score"] == 1.0
    # a malformed row fails that row (0, counted unscorable), not the batch
    before = reward_health()["unscorable"]
    bad = [{"reward_weights": {"math": "heavy"}}, {"reward_weights": {"maths": 1.0}},
           {"reward_weights": {"math": float("inf")}}, {"reward_weights": [1.0]}, {}]
    results = compute_scores(["openai/gsm8k"] * 5, ["\\boxed{5}"] * 5, ["5"] * 5, bad)
    assert [r["score"] for r in results] == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert [r["unscorable"] for r in results] == [1.0, 1.0, 1.0, 1.0, 0.0]
    assert reward_health()["unscorable"] - before == 4
    with pytest.raises(ValueError, match="unknown reward"):  # the method's own weights are one setting: loud
        compute_score("openai/gsm8k", "\\boxed{5}", "5", reward_weights={"maths": 1.0})
