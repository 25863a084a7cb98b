"""Reading a judge's verdict: the last valid JSON object carrying exactly the expected keys.

Thinking models put their reasoning in ``message.reasoning`` (older vLLM:
``reasoning_content``) or inline before the answer, often with JSON-looking fragments
and stray braces (``{x}`` in LaTeX, an unclosed ``{`` in prose); so JSON objects are
decoded starting at each ``{"`` from the end of the text (a stray brace before the verdict
never swallows it) and the last one that parses and has every expected key wins. Each candidate is decoded
from at most ``MAX_OBJECT_CHARS`` characters (a verdict is a few hundred), so parsing costs at most
``MAX_CANDIDATES x MAX_OBJECT_CHARS`` decoding plus one regex scan: linear in the text, where decoding every
``{"`` to the end of a 405 KB answer took 29 s. Values must be integers in the
rubric's range; anything else is a :class:`VerdictParseError` (retried, then recorded as
failed), never a 0 or a default.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence

__all__ = ["MAX_CANDIDATES", "MAX_OBJECT_CHARS", "VerdictParseError", "parse_verdict"]

MAX_CANDIDATES = 1000  # object starts tried, from the end: a verdict comes last; bounds a hostile text's cost
MAX_OBJECT_CHARS = 4_096  # a candidate object longer than this is not a verdict (bounds each decode)
_OBJECT_START = re.compile(r'\{\s*"')


class VerdictParseError(ValueError):
    pass


def _parse_int(digits: str) -> int | float:
    """Huge integer literals become inf (a bad score) instead of Python's int-size ValueError (a skipped fragment)."""
    return int(digits) if len(digits) <= 64 else math.inf


_DECODER = json.JSONDecoder(parse_int=_parse_int)


def _score(value: object, scale: tuple[int, int]) -> int | None:
    """The integer score, or None for anything else (bool, string, fraction, non-finite, out of range)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return None  # NaN, Infinity, -Infinity and 1e400 (parsed as inf) are bad scores, not fragments to skip
    score = int(value)
    return score if scale[0] <= score <= scale[1] else None


def _json_objects(text: str) -> list[object]:
    """What JSON decodes to at each ``{"`` (the last ``MAX_CANDIDATES`` of them), in order of appearance; the
    exception where it does not decode (malformed, deep nesting)."""
    starts = [match.start() for match in _OBJECT_START.finditer(text)][-MAX_CANDIDATES:]
    objects: list[object] = []
    for start in starts:
        try:
            objects.append(_DECODER.raw_decode(text[start:start + MAX_OBJECT_CHARS])[0])
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, deep nesting
            objects.append(exc)
    return objects


def parse_verdict(content: str | None, keys: Sequence[str], scale: tuple[int, int] = (1, 10),
                  reasoning: str | None = None) -> dict[str, int]:
    """Scores from the answer (falling back to the reasoning text only when the answer has none)."""
    problems = []
    for source in (content, reasoning):
        if not isinstance(source, str):  # None, or a malformed cached response: nothing to read
            continue
        for data in reversed(_json_objects(source)):
            if isinstance(data, Exception):
                problems.append(f"malformed JSON ({type(data).__name__})")
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
