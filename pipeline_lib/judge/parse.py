"""Reading a judge's verdict: the last valid JSON object carrying exactly the expected keys.

Thinking models put their reasoning in ``message.reasoning`` (older vLLM:
``reasoning_content``) or inline before the answer, often with JSON-looking fragments;
so the answer text is scanned from the end for balanced ``{...}`` objects and the
last one that parses and has every expected key wins. Values must be integers in the
rubric's range; anything else is a :class:`VerdictParseError` (retried, then recorded as
failed), never a 0 or a default.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

__all__ = ["VerdictParseError", "parse_verdict"]


class VerdictParseError(ValueError):
    pass


def _parse_int(digits: str) -> int | float:
    """Huge integer literals become inf (a bad score) instead of Python's int-size ValueError (a skipped fragment)."""
    return int(digits) if len(digits) <= 64 else math.inf


def _score(value: object, scale: tuple[int, int]) -> int | None:
    """The integer score, or None for anything else (bool, string, fraction, non-finite, out of range)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return None  # NaN, Infinity, -Infinity and 1e400 (parsed as inf) are bad scores, not fragments to skip
    score = int(value)
    return score if scale[0] <= score <= scale[1] else None


def _json_objects(text: str) -> list[str]:
    """Every balanced {...} span (outermost), in order of appearance."""
    spans, depth, start = [], 0, None
    in_string, escaped = False, False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"' and depth > 0:
            in_string = True
        elif char == "{":
            if depth == 0:
                start = index
            depth += 1
        elif char == "}" and depth > 0:
            depth -= 1
            if depth == 0 and start is not None:
                spans.append(text[start:index + 1])
    return spans


def parse_verdict(content: str | None, keys: Sequence[str], scale: tuple[int, int] = (1, 10),
                  reasoning: str | None = None) -> dict[str, int]:
    """Scores from the answer (falling back to the reasoning text only when the answer has none)."""
    problems = []
    for source in (content, reasoning):
        if not isinstance(source, str):  # None, or a malformed cached response: nothing to read
            continue
        for candidate in reversed(_json_objects(source)):
            try:
                data = json.loads(candidate, parse_int=_parse_int)
            except (ValueError, RecursionError) as exc:  # JSONDecodeError, >4300-digit ints, deep nesting
                problems.append(f"malformed JSON ({type(exc).__name__})")
                continue
            if not isinstance(data, dict) or not set(keys) <= set(data):
                problems.append(f"missing key(s) {sorted(set(keys) - set(data))}" if isinstance(data, dict)
                                else "not an object")
                continue
            scores = {k: _score(data[k], scale) for k in keys}
            bad = {k: data[k] for k, v in scores.items() if v is None}
            if bad:
                raise VerdictParseError(f"scores outside {scale[0]}-{scale[1]} or not integers: {bad}"[:500])
            return scores
    raise VerdictParseError("no JSON object with keys " + ", ".join(keys)
                            + (f" ({'; '.join(dict.fromkeys(problems))})" if problems else ""))
