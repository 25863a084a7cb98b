"""Countdown: the answer expression must use exactly the given numbers and hit the target.

The expression is parsed with :mod:`ast` and evaluated exactly with
:class:`fractions.Fraction` by a walker that accepts only integer literals, the
four operators, unary minus (and plus) and parentheses. Nothing is ever ``eval``-ed. Length, nesting
depth and intermediate magnitudes are bounded before and during evaluation. A ground truth that is not
``{"numbers": [ints], "target": int}`` (within ``MAX_MAGNITUDE``) scores 0 with ``unscorable`` 1, never an error.

Unary minus and leading zeros are read, not refused (issue 60). The task is "use each given number once to reach
the target": ``03`` is the number 3 written oddly (Python alone refuses the literal), and ``= 03`` states the
target 3. ``-3 + 10`` uses 3 and 10 and equals ``10 - 3``: with positive numbers and a positive target, a unary
minus reaches nothing the four operators cannot (push each minus up through ``+ - * /``: ``a + -b = a - b``,
``-a * b = -(a * b)``, and a negative sub-result ``-v`` is reachable as ``v`` written the other way round), so
reading it takes no solution away and adds no new one; the reference verifier (TinyZero's Countdown reward, which
finds the numbers as ``\\d+``) reads it the same way. A minus directly before a literal also writes a negative
given number: ``-3`` uses a given -3 or negates a given 3, whichever the numbers hold (the value is the same).
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from pipeline_lib.core.rewards.extract import extract_answer

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "MAX_MAGNITUDE", "countdown_score", "evaluate_expression"]

MAX_LENGTH = 256  # characters of the expression
MAX_DEPTH = 32  # AST nesting
MAX_MAGNITUDE = 10**12  # bound on |numerator| and denominator of every intermediate
_ALLOWED_CHARS = re.compile(r"^[0-9+\-*/(). ]*$")
_LEADING_ZEROS = re.compile(r"(?<![0-9.])0+(?=[0-9])")  # 03 -> 3 (not the 0 of 1.05: floats are refused anyway)
_INTEGER = re.compile(r"[+-]?[0-9]+")
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_LATEX = {"\\times": "*", "\\cdot": "*", "\\div": "/", "\\left": "", "\\right": "", "×": "*", "÷": "/",
          "−": "-", "[": "(", "]": ")", "\\{": "(", "\\}": ")", "{": "(", "}": ")"}


class _RejectedError(ValueError):
    pass


def _walk(node: ast.AST, depth: int, numbers: list[int], negated: list[int]) -> Fraction:
    """The exact value of ``node``; each literal goes to ``numbers``, or to ``negated`` when a unary minus applies
    to it directly (``-3``: a given -3, or a given 3 negated)."""
    if depth > MAX_DEPTH:
        raise _RejectedError("too deeply nested")
    if isinstance(node, ast.Constant) and type(node.value) is int:
        numbers.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        literal = isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
        value = _walk(node.operand, depth + 1, negated if literal else numbers, negated)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left = _walk(node.left, depth + 1, numbers, negated)
        right = _walk(node.right, depth + 1, numbers, negated)
        if isinstance(node.op, ast.Div) and right == 0:
            raise _RejectedError("division by zero")
        value = _OPERATORS[type(node.op)](left, right)
        if abs(value.numerator) > MAX_MAGNITUDE or value.denominator > MAX_MAGNITUDE:
            raise _RejectedError("intermediate value too large")
        return value
    raise _RejectedError(f"{type(node).__name__} is not allowed")


def evaluate_expression(expression: str) -> tuple[Fraction, list[int]]:
    """Exact value and the integer literals used (a literal under a unary minus as written, ``3`` of ``-3``);
    raises ValueError for anything not allowed."""
    value, numbers, negated = _evaluate(expression)
    return value, numbers + negated


def _evaluate(expression: str) -> tuple[Fraction, list[int], list[int]]:
    """Exact value, the literals used as written and the literals a unary minus applies to directly."""
    if len(expression) > MAX_LENGTH:
        raise _RejectedError(f"expression longer than {MAX_LENGTH} characters")
    if not expression.strip() or not _ALLOWED_CHARS.match(expression):
        raise _RejectedError("only ASCII digits, + - * / ( ) and spaces are allowed")
    try:
        tree = ast.parse(_LEADING_ZEROS.sub("", expression.strip()), mode="eval")
    except (SyntaxError, RecursionError, MemoryError) as exc:
        raise _RejectedError(f"unparseable: {type(exc).__name__}") from exc
    numbers: list[int] = []
    negated: list[int] = []
    return _walk(tree.body, 0, numbers, negated), numbers, negated


def _uses_exactly(numbers: list[int], negated: list[int], given: list[int]) -> bool:
    """Whether the literals use each given number exactly once: a plain literal ``v`` is the given ``v``; a negated
    one is the given ``v`` or ``-v`` (plain literals are matched first, as they have no choice)."""
    left = Counter(given)
    left.subtract(numbers)
    if any(count < 0 for count in left.values()):
        return False
    by_size = Counter(abs(value) for value, count in left.items() for _ in range(count))
    return by_size == Counter(negated)


def _ground_truth(ground_truth: Any) -> tuple[list[int], int]:
    """The numbers and target, or ValueError saying what is wrong with them."""
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except (ValueError, RecursionError) as exc:  # malformed, >4,300-digit integers, deep nesting
            raise ValueError(f"countdown ground truth is not JSON ({type(exc).__name__})") from None
    if not isinstance(ground_truth, Mapping) or "numbers" not in ground_truth or "target" not in ground_truth:
        raise ValueError(f"countdown ground truth must be {{'numbers': [...], 'target': int}}, got {ground_truth!r}")
    numbers, target = ground_truth["numbers"], ground_truth["target"]
    values = [*numbers, target] if isinstance(numbers, Sequence | np.ndarray) and not isinstance(numbers, str) \
        else [None]
    if not all(isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_) for v in values):
        # never int(): a 6.5 target would silently become 6
        raise ValueError(f"countdown ground truth needs integer numbers and target, got {ground_truth!r:.300}")
    if any(abs(int(v)) > MAX_MAGNITUDE for v in values):  # also keeps str(target) below Python's digit limit
        raise ValueError(f"countdown ground truth has a number beyond {MAX_MAGNITUDE:.0e}")
    return [int(n) for n in numbers], int(target)


def _candidate(solution: str) -> str | None:
    answer = extract_answer(solution)
    if answer is None or len(answer) > 4 * MAX_LENGTH:
        return None
    for latex, plain in _LATEX.items():
        answer = answer.replace(latex, plain)
    return answer.strip().strip("$").strip()


def countdown_score(solution: str | None, ground_truth: Any) -> dict[str, float]:
    """1 if the answer expression uses exactly the given numbers (as a multiset) and equals the target."""
    result = {"score": 0.0, "acc": 0.0, "valid_expression": 0.0, "uses_numbers": 0.0, "unscorable": 0.0}
    try:
        numbers, target = _ground_truth(ground_truth)
    except ValueError:
        return result | {"unscorable": 1.0}
    if not isinstance(solution, str):
        return result
    candidate = _candidate(solution)
    if candidate is None:
        return result
    if "=" in candidate:  # "expr = target" (the right side must be the target itself; 03 is 3)
        left, _, right = candidate.rpartition("=")
        if not _INTEGER.fullmatch(right.strip()) or int(right) != target:  # <= 1,024 digits: int() is safe
            return result
        candidate = left.strip()
    try:
        value, used, negated = _evaluate(candidate)
    except ValueError:
        return result
    result["valid_expression"] = 1.0
    result["uses_numbers"] = float(_uses_exactly(used, negated, numbers))
    correct = result["uses_numbers"] == 1.0 and value == target
    result["score"] = result["acc"] = float(correct)
    return result
