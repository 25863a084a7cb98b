"""Math answers checked by Math-Verify (GSM8K, DeepMath), with a hard per-item time limit.

Verification runs in :class:`~pipeline_lib.core.rewards.pool.TimeoutPool` workers with
Math-Verify's own signal timeouts switched off; an item over the limit is killed,
scores 0 and is counted in ``timeouts``; an item whose worker died or raised scores 0
and is counted in ``failures``. Both are logged per step by the trainers and in eval's
``metrics.json``, so a pass@1 that counts them as wrong says so. An item it cannot score at all (no gold, a
non-finite gold such as ``nan``/``inf``/``1e400`` that Math-Verify would match symbolically, a gold Math-Verify
cannot parse) scores 0 and is counted in ``unscorable``. No item raises.

One pool per process, shared by all its threads, and made afresh in a forked child (the parent's pool threads and
fork server are not the child's); it also works from a daemonic worker of another pool (see ``pool.py``).

Plain integers on both sides skip the pool: ASCII digits only, at most ``FAST_PATH_DIGITS`` of them, compared as
digit strings (never ``int()``: Python refuses over 4,300 digits). That is Math-Verify's verdict on those inputs
(``tests/core/rewards/test_rewards.py`` checks it on generated cases); every other answer, including other digit scripts
(``١٢٣``, full-width ``１２３``, which Math-Verify does not equate with 123), goes to Math-Verify.

Both sides are read as a reader reads numbers first (:func:`~pipeline_lib.core.rewards.numbers.reader_numbers`:
``1\\,000`` is 1000, ``½`` is 1/2). A gold in plain decimal digits is finite however long it is, and one with more
significant digits than a float holds (``LONG_DECIMAL_DIGITS``) is compared exactly with a plain decimal answer:
Math-Verify compares through floats and calls two 400-digit decimals that differ in the last digit equal.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import re
import threading
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

from pipeline_lib.core.env import env_number
from pipeline_lib.core.rewards.extract import after_think, last_answer_tag, last_boxed
from pipeline_lib.core.rewards.numbers import decimal_equal, is_plain_decimal, reader_numbers
from pipeline_lib.core.rewards.pool import TimeoutPool

__all__ = ["FAST_PATH_DIGITS", "gold_answer", "gold_text", "is_non_finite_gold", "math_scores", "number_text",
           "prediction_text", "verify_pair"]

TIMEOUT_SECONDS = env_number("PIPELINE_MATH_TIMEOUT", 5.0)
PROCESSES = int(env_number("PIPELINE_MATH_PROCESSES", min(2, os.cpu_count() or 1), integer=True))
FAST_PATH_DIGITS = 1000  # Math-Verify compares integers as integers up to Python's 4,300-digit limit
LONG_DECIMAL_DIGITS = 15  # a float keeps 15-17 significant digits: a longer decimal gold is compared exactly
_BOXED = re.compile(r"\\boxed\{(.*)\}", re.DOTALL)
_INTEGER = re.compile(rf"\\boxed\{{[ ]*([+-]?)([0-9]{{1,{FAST_PATH_DIGITS}}})[ ]*\}}")
_NON_FINITE = re.compile(r"[+-]?(nan|inf|infinity)", re.IGNORECASE)
_pool: TimeoutPool | None = None
_pool_lock = threading.Lock()


def _forget_pool_in_child() -> None:
    """A forked child inherits the pool object but not its threads or its fork server: start its own on demand."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)


def number_text(value: numbers.Real) -> str:
    """A numeric gold written out exactly, without an exponent: ``1e-05`` -> ``0.00001``, ``12.0`` -> ``12``,
    ``1e+20`` -> ``100000000000000000000``, ``-2.5`` -> ``-2.5``. ``str()`` gives Python's float literal, which
    Math-Verify reads as the expression ``e - 5`` (``\\boxed{e-5}`` scored 1, ``\\boxed{0.00001}`` 0). A float is
    written from its shortest repr (``0.1`` stays ``0.1``); an int is ``str(int)`` unchanged; nan/inf are left as
    ``str()`` writes them, so they stay unscorable."""
    if isinstance(value, numbers.Integral):
        return str(int(value))
    text = str(value)  # numpy's float32 writes its own shortest form here (its repr() is "np.float32(...)")
    try:
        number = Decimal(text)
    except InvalidOperation:
        return text
    if not number.is_finite():
        return text
    return _plain_decimal(number)


def _plain_decimal(number: Decimal) -> str:
    """A finite decimal written out without an exponent (``1E-5`` -> ``0.00001``, ``3.0E+2`` -> ``300``)."""
    if number == number.to_integral_value():
        return str(int(number))
    return format(number, "f")


#: A number written in exponent form (``1e-05``, ``3.0E+2``, ``-2.5e-3``): a gold that reads as a number whether it
#: came as a float or as text (a CSV column, a JSON string), never the expression ``e - 5``.
_EXPONENT_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][+-]?[0-9]+")


def numeric_text(text: str) -> str:
    """``text`` written out exactly when it is a number in exponent form with a finite float value, else unchanged:
    the one rule for golds that read as numbers, text or not (:func:`number_text` is its float side). ``1e400`` stays
    as written, so :func:`is_non_finite_gold` still calls it unscorable."""
    stripped = text.strip()
    if not _EXPONENT_NUMBER.fullmatch(stripped) or not math.isfinite(float(stripped)):
        return text
    return _plain_decimal(Decimal(stripped))


def gold_answer(ground_truth: str | numbers.Real) -> str:
    """GSM8K gold is the text after the last ``####`` with thousands commas removed; a number, or text that is a number
    in exponent form, is written out exactly (:func:`number_text`, :func:`numeric_text`); other text passes through."""
    if isinstance(ground_truth, numbers.Real) and not isinstance(ground_truth, bool):
        return number_text(ground_truth)
    text = str(ground_truth)
    if "####" in text:
        text = text.rsplit("####", 1)[1].replace(",", "")
    return numeric_text(text.strip())


def prediction_text(solution: str) -> str:
    """What Math-Verify parses: the tagged or boxed answer as ``\\boxed{..}``, else the post-think text."""
    tail = after_think(solution)
    answer = last_answer_tag(tail)
    if answer is None:
        answer = last_boxed(tail)
    return f"\\boxed{{{answer}}}" if answer is not None else tail


def gold_text(ground_truth: object) -> str | None:
    """The gold answer of a string or number ground truth; None (unscorable) for anything else, for an empty gold,
    and for a number Python cannot write out (an int over 4,300 digits)."""
    if isinstance(ground_truth, bool) or not isinstance(ground_truth, str | numbers.Real):
        return None
    try:
        gold = gold_answer(ground_truth)
    except ValueError:
        return None
    return gold or None


def is_non_finite_gold(gold: str) -> bool:
    """``nan``, ``inf``, ``-Infinity``, ``1e400``: float literals with no finite value (Math-Verify would match
    ``\\boxed{nan}`` to ``nan`` as the symbol product a*n*n). A long plain integer is finite whatever its size; the
    LaTeX ``\\infty`` of a limit is a legitimate answer and is left to Math-Verify."""
    if _NON_FINITE.fullmatch(gold.strip()):
        return True
    if is_plain_decimal(gold):  # 400 digits before the point overflow a float, yet the number is finite
        return False
    try:
        return not math.isfinite(float(gold))
    except ValueError:
        return False


def _fast_integer(text: str) -> str | None:
    """A plain ASCII integer's canonical digits (sign kept unless zero), or None when the fast path does not apply."""
    match = _INTEGER.fullmatch(text)
    if match is None:
        return None
    digits = match.group(2).lstrip("0") or "0"
    return digits if digits == "0" or match.group(1) != "-" else "-" + digits


def _long_decimal(prediction: str, gold: str) -> bool | None:
    """Exact equality when the gold is a plain decimal longer than a float holds and the answer a plain decimal;
    None when this does not apply (Math-Verify decides)."""
    digits = gold.strip().lstrip("+-").replace(".", "").lstrip("0")
    boxed = _BOXED.fullmatch(prediction)
    if len(digits) <= LONG_DECIMAL_DIGITS or not is_plain_decimal(gold) or boxed is None:
        return None
    return decimal_equal(boxed.group(1), gold) if is_plain_decimal(boxed.group(1)) else None


def verify_pair(prediction: str, gold: str) -> bool | None:
    """Runs inside a pool worker: Math-Verify with its own signal timeouts disabled; None when the gold does not
    parse (the item cannot be scored)."""
    from math_verify import parse, verify

    # Our pool enforces the time limit, so Math-Verify's "timeout disabled" warnings are noise.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
    predicted = parse(prediction, parsing_timeout=None)
    if not gold_parsed:
        return None
    if not predicted:
        return False
    return bool(verify(gold_parsed, predicted, timeout_seconds=None))


def _get_pool() -> TimeoutPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = TimeoutPool("pipeline_lib.core.rewards.mathverify:verify_pair", PROCESSES, TIMEOUT_SECONDS,
                                preload=("math_verify",))
        return _pool


def _result(score: float = 0.0, timeouts: float = 0.0, failures: float = 0.0, unscorable: float = 0.0
            ) -> dict[str, float]:
    return {"score": score, "acc": score, "timeouts": timeouts, "failures": failures, "unscorable": unscorable}


def math_scores(solutions: Sequence[str | None], ground_truths: Sequence[str]) -> list[dict[str, float]]:
    """Score a batch in parallel; each dict has ``score``, ``acc``, ``timeouts``, ``failures`` and ``unscorable``
    (each 0 or 1). Never raises for an item."""
    if len(solutions) != len(ground_truths):
        raise ValueError(f"{len(solutions)} solutions but {len(ground_truths)} ground truths")
    items, positions = [], []
    out = [_result() for _ in solutions]
    for position, (solution, truth) in enumerate(zip(solutions, ground_truths, strict=True)):
        gold = gold_text(truth)
        gold = reader_numbers(gold) if gold is not None else None
        if gold is None or is_non_finite_gold(gold):
            out[position] = _result(unscorable=1.0)
            continue
        if not isinstance(solution, str) or not solution.strip():
            continue  # no answer: wrong, and scorable
        prediction = reader_numbers(prediction_text(solution))
        plain = _fast_integer(prediction), _fast_integer(f"\\boxed{{{gold}}}")
        if plain[0] is not None and plain[1] is not None:  # Math-Verify's verdict here is integer equality
            out[position] = _result(float(plain[0] == plain[1]))
            continue
        if (exact := _long_decimal(prediction, gold)) is not None:
            out[position] = _result(float(exact))
            continue
        items.append((prediction, gold))
        positions.append(position)
    if items:
        for position, result in zip(positions, _get_pool().map(items), strict=True):
            if result.timed_out or result.failed:
                out[position] = _result(timeouts=float(result.timed_out), failures=float(result.failed))
            elif result.value is None:
                out[position] = _result(unscorable=1.0)
            else:
                out[position] = _result(float(result.value is True))
    return out
