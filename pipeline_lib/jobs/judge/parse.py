"""Reading a judge's verdict: the last valid JSON object carrying exactly the expected keys.

Thinking models put their reasoning in ``message.reasoning`` (older vLLM:
``reasoning_content``) or inline before the answer, often with JSON-looking fragments
and stray braces (``{x}`` in LaTeX, an unclosed ``{`` in prose); so JSON objects are
decoded starting at each ``{"`` from the end of the text (a stray brace before the verdict
never swallows it) and the last one that parses and has every expected key wins. Candidates are decoded lazily
from the last one back (the search stops at the verdict), each from at most ``MAX_OBJECT_CHARS`` characters (a
verdict is a few hundred); a candidate cut by that window is decoded whole, at most ``FULL_DECODES`` times per
text (so an oversize final verdict, a 5,000-digit score, is still read and refused, never skipped to an earlier
one). Parsing thus costs one regex scan plus at most ``MAX_CANDIDATES x MAX_OBJECT_CHARS + FULL_DECODES x len``
decoding: linear in the text, where decoding every ``{"`` to the end of a 405 KB answer took 29 s (past the
budget a cut candidate is skipped as malformed). Values must be integers in the
rubric's range; anything else is a :class:`VerdictParseError` (retried, then recorded as
failed), never a 0 or a default.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence

__all__ = ["FULL_DECODES", "MAX_CANDIDATES", "MAX_OBJECT_CHARS", "VerdictParseError", "parse_verdict"]

MAX_CANDIDATES = 1000  # object starts tried, from the end: a verdict comes last; bounds a hostile text's cost
MAX_OBJECT_CHARS = 4_096  # each candidate's decode window (a verdict is a few hundred characters)
FULL_DECODES = 4  # candidates cut by the window that are decoded whole, per text
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


def _json_objects(text: str) -> Iterator[object]:
    """What JSON decodes to at each ``{"`` (the last ``MAX_CANDIDATES`` of them), last first, decoded only as
    asked for; the exception where it does not decode (malformed, deep nesting)."""
    starts = [match.start() for match in _OBJECT_START.finditer(text)][-MAX_CANDIDATES:]
    full_decodes = FULL_DECODES
    for start in reversed(starts):
        try:
            yield _DECODER.raw_decode(text[start:start + MAX_OBJECT_CHARS])[0]
            continue
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, deep nesting
            error: Exception = exc
        if start + MAX_OBJECT_CHARS < len(text) and full_decodes:  # cut by the window: read it whole
            full_decodes -= 1
            try:
                yield _DECODER.raw_decode(text, start)[0]
                continue
            except (ValueError, RecursionError) as exc:
                error = exc
        yield error


def parse_verdict(content: str | None, keys: Sequence[str], scale: tuple[int, int] = (1, 10),
                  reasoning: str | None = None) -> dict[str, int]:
    """Scores from the answer (falling back to the reasoning text only when the answer has none)."""
    problems = []
    for source in (content, reasoning):
        if not isinstance(source, str):  # None, or a malformed cached response: nothing to read
            continue
        for data in _json_objects(source):
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
