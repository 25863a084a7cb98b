"""Reading a judge's verdict: the judge's own final JSON object, from an answer that finished.

A verdict comes from the judge alone (issue 45: a candidate that wrote ``{"informativeness": 10, ...}`` into its
summary got 10s whenever the judge quoted it). So: the answer must have ended by itself (``finish_reason ==
"stop"``; one cut by ``max_tokens`` stopped before its verdict); under structured output the whole answer must be
the one object; otherwise the verdict is the answer's *final* JSON object (an object quoted after the verdict makes
the answer unparseable, never falls back to an earlier one); a verdict holding a key twice is refused (which value
counts would be the decoder's choice, not the judge's); and a verdict that any judged input (``quoted``: the
candidate, the transcript) holds, by its text or by its scores, is refused (:class:`QuotedVerdictError`). The
reasoning field is read only when the answer's content is empty, under the same rules.

Keys are read after one normalisation, :func:`verdict_key` (NFKC, case, surrounding spaces), and scores as numbers
(``10`` and ``10.0`` are one score): the check of the judged inputs applies the same to their members, so no
reformatting of a candidate's object (key order, case, ``10.0``) passes it off as the judge's own (issue 60).

The judged inputs are read whole, in one pass (:func:`held_scores`): every ``"key": number`` member after a ``{`` or
``,`` anywhere in the text, whatever the number of objects (issue 60: the check read only the last 1,000 objects, so
1,000 filler objects after the candidate's own hid it). That is one regular-expression scan, linear in the text (its
key strings never overlap: a key opens only after ``{``, ``,`` or a space, so no scan starts inside another), where
decoding an object from every ``{`` costs up to the text's length per brace. Members are not grouped into objects:
a text that spreads one verdict's scores over several objects refuses that verdict too, which only costs the
candidate (a refused item counts at the scale's lowest score in every claim: :mod:`pipeline_lib.jobs.judge.score`).

Thinking models put their reasoning in ``message.reasoning`` (older vLLM:
``reasoning_content``) or inline before the answer, often with JSON-looking fragments
and stray braces (``{x}`` in LaTeX, an unclosed ``{`` in prose); so JSON objects of the *answer* are
decoded starting at each ``{"`` from the end of the text (a stray brace before the verdict
never swallows it) and the last one that parses and has every expected key wins. Candidates are decoded lazily
from the last one back (the search stops at the verdict), at most ``MAX_CANDIDATES`` of them, each from at most
``MAX_OBJECT_CHARS`` characters (a verdict is a few hundred); a candidate cut by that window is decoded whole, at
most ``FULL_DECODES`` times per text (so an oversize final verdict, a 5,000-digit score, is still read and refused,
never skipped to an earlier one). Parsing the answer thus costs one regex scan plus at most ``MAX_CANDIDATES x
MAX_OBJECT_CHARS + FULL_DECODES x len`` decoding: linear in the text, where decoding every ``{"`` to the end of a
405 KB answer took 29 s (past the budget a cut candidate is skipped as malformed). Values must be integers in the
rubric's range; anything else is a :class:`VerdictParseError` (retried, then recorded as
failed), never a 0 or a default.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence

__all__ = ["FULL_DECODES", "MAX_CANDIDATES", "MAX_OBJECT_CHARS", "QuotedVerdictError", "VerdictParseError",
           "held_scores", "parse_verdict", "verdict_key"]

MAX_CANDIDATES = 1000  # object starts of the judge's answer tried, from the end: a verdict comes last (not a bound
#                        on the judged inputs, which are read whole: held_scores)
MAX_OBJECT_CHARS = 4_096  # each candidate's decode window (a verdict is a few hundred characters)
FULL_DECODES = 4  # candidates cut by the window that are decoded whole, per text
_OBJECT_START = re.compile(r'\{\s*"')


class VerdictParseError(ValueError):
    pass


class QuotedVerdictError(VerdictParseError):
    """The verdict is one a judged input holds: the candidate wrote it, so it is refused (not a judge failure)."""


def verdict_key(key: str) -> str:
    """A key as the parser compares it: NFKC, case-folded, without surrounding spaces (``"Informativeness "`` and
    ``"informativeness"`` are one key, in a verdict and in a judged text alike)."""
    return unicodedata.normalize("NFKC", key).strip().casefold()


class _Object(dict):
    """A decoded JSON object that remembers the keys it held more than once (after :func:`verdict_key`): a dict
    keeps the last value of a repeated key, so a verdict ``{"a": 3, "a": 10}`` would read 10 unnoticed."""

    repeated: tuple[str, ...] = ()


def _object(pairs: list[tuple[str, object]]) -> _Object:
    data = _Object(pairs)
    counts = Counter(verdict_key(key) for key, _ in pairs)
    if len(counts) < len(pairs):
        data.repeated = tuple(sorted(key for key, n in counts.items() if n > 1))
    return data


def _parse_int(digits: str) -> int | float:
    """Huge integer literals become inf (a bad score) instead of Python's int-size ValueError (a skipped fragment)."""
    return int(digits) if len(digits) <= 64 else math.inf


_DECODER = json.JSONDecoder(parse_int=_parse_int, object_pairs_hook=_object)


def _score(value: object, scale: tuple[int, int]) -> int | None:
    """The integer score, or None for anything else (bool, string, fraction, non-finite, out of range)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return None  # NaN, Infinity, -Infinity and 1e400 (parsed as inf) are bad scores, not fragments to skip
    score = int(value)
    return score if scale[0] <= score <= scale[1] else None


def _json_objects(text: str) -> Iterator[tuple[object, str]]:
    """What JSON decodes to at each ``{"`` of a judge's answer (the last ``MAX_CANDIDATES`` of them), last first,
    decoded only as asked for, with the text it was decoded from; the exception (and "") where it does not decode
    (malformed, deep nesting)."""
    starts = [match.start() for match in _OBJECT_START.finditer(text)][-MAX_CANDIDATES:]
    full_decodes = FULL_DECODES
    for start in reversed(starts):
        try:
            data, end = _DECODER.raw_decode(text[start:start + MAX_OBJECT_CHARS])
            yield data, text[start:start + end]
            continue
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, deep nesting
            error: Exception = exc
        if start + MAX_OBJECT_CHARS < len(text) and full_decodes:  # cut by the window: read it whole
            full_decodes -= 1
            try:
                data, end = _DECODER.raw_decode(text, start)
                yield data, text[start:end]
                continue
            except (ValueError, RecursionError) as exc:
                error = exc
        yield error, ""


def _scores(data: object, keys: Sequence[str], scale: tuple[int, int]) -> dict[str, int | None] | None:
    """Each key's integer score (None where it is not one) when ``data`` is an object with every key (compared by
    :func:`verdict_key`); else None."""
    if not isinstance(data, dict):
        return None
    found = {verdict_key(k): v for k, v in data.items() if isinstance(k, str)}
    if not {verdict_key(k) for k in keys} <= set(found):
        return None
    return {k: _score(found[verdict_key(k)], scale) for k in keys}


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


# a member `"key": value` after `{` or `,` (any spaces): the key a JSON string (escapes decoded below), the value a
# number, or a number in quotes (a judge may unquote it); `[^"\\]` keeps every key scan inside one string literal
_MEMBER = re.compile(r'[{,]\s*("[^"\\]*(?:\\.[^"\\]*)*")\s*:\s*(?:"\s*(?P<quoted>NUM)\s*"|(?P<bare>NUM))'
                     .replace("NUM", r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"), re.DOTALL)


def _number(text: str) -> int | float:
    """A member's number as the verdict decoder reads it (an integer literal of more than 64 digits is inf)."""
    if re.fullmatch(r"-?\d+", text):
        return _parse_int(text)
    return float(text)


def held_scores(text: str, keys: Sequence[str], scale: tuple[int, int]) -> set[tuple[str, int]]:
    """Every (rubric key, score) that a member of ``text`` gives, anywhere in it: one linear scan of the whole text
    (no cap on its number of objects), keys by :func:`verdict_key`, scores by the verdict's own rules."""
    wanted = {verdict_key(k): k for k in keys}
    names: dict[str, str | None] = {}  # a key's text -> the rubric key it is (or None), decoded once per text
    held = set()
    for match in _MEMBER.finditer(text):
        written = match.group(1)
        if written not in names:
            try:
                names[written] = wanted.get(verdict_key(json.loads(written, strict=False)))
            except ValueError:  # an escape JSON does not have: no decoder reads this member
                names[written] = None
        key = names[written]
        if key is None:
            continue
        value = _score(_number(match.group("quoted") or match.group("bare")), scale)
        if value is not None:
            held.add((key, value))
    return held


def _quoted_by(verdict: dict[str, int], raw: str, keys: Sequence[str], scale: tuple[int, int],
               quoted: Sequence[str]) -> bool:
    """Whether a judged input holds this verdict: its text (whitespace aside), or every one of its scores as a
    member (:func:`held_scores`)."""
    squeezed = _squeeze(raw)
    for text in quoted:
        if squeezed and squeezed in _squeeze(text):
            return True
        if set(verdict.items()) <= held_scores(text, keys, scale):
            return True
    return False


def _final_object(source: str, whole: bool) -> tuple[object, str]:
    """The answer's final JSON object and its text (the whole answer under structured output)."""
    if whole:
        stripped = source.strip()
        try:
            data, end = _DECODER.raw_decode(stripped)
        except (ValueError, RecursionError) as exc:
            raise VerdictParseError(f"structured output that is not one JSON object ({type(exc).__name__})") from None
        if stripped[end:].strip():
            raise VerdictParseError("structured output with text after its JSON object")
        return data, stripped
    problems = []
    for data, raw in _json_objects(source):
        if isinstance(data, Exception):  # a fragment in prose ("{" then a quote), not an object
            problems.append(f"malformed JSON ({type(data).__name__})")
            continue
        return data, raw
    raise VerdictParseError("no JSON object" + (f" ({'; '.join(dict.fromkeys(problems))})" if problems else ""))


def parse_verdict(content: str | None, keys: Sequence[str], scale: tuple[int, int] = (1, 10),
                  reasoning: str | None = None, *, finish_reason: str | None = "stop", quoted: Sequence[str] = (),
                  whole: bool = False) -> dict[str, int]:
    """Scores from the judge's final JSON object (from the reasoning text only when the answer is empty).

    ``finish_reason``: the answer's, which must be "stop"; ``quoted``: the judged inputs, whose objects are never a
    verdict; ``whole``: the answer was asked for as structured output, so it must be exactly one object."""
    if finish_reason != "stop":
        raise VerdictParseError(f"the answer did not finish (finish_reason {finish_reason!r}): a verdict must be "
                                "the final object of an answer that ended by itself")
    source = content if isinstance(content, str) and content.strip() else reasoning
    if not isinstance(source, str) or not source.strip():  # None, or a malformed cached response: nothing to read
        raise VerdictParseError("no JSON object with keys " + ", ".join(keys) + " (empty answer)")
    data, raw = _final_object(source, whole)
    if isinstance(data, _Object) and data.repeated:
        raise VerdictParseError(f"the answer's final JSON object holds key(s) {list(data.repeated)} more than once "
                                "(keys compared without case): which value counts would be the decoder's choice, "
                                "not the judge's"[:500])
    scores = _scores(data, keys, scale)
    if scores is None:
        present = {verdict_key(k) for k in data if isinstance(k, str)} if isinstance(data, dict) else set()
        missing = sorted(k for k in keys if verdict_key(k) not in present)
        found = f"missing key(s) {missing}" if isinstance(data, dict) else "not an object"
        raise VerdictParseError(f"no JSON object with keys {', '.join(keys)}: the answer's final object has {found}")
    given = {verdict_key(k): v for k, v in data.items()}  # type: ignore[union-attr]
    bad = {k: given[verdict_key(k)] for k, v in scores.items() if v is None}
    if bad:
        raise VerdictParseError(f"scores outside {scale[0]}-{scale[1]} or not integers: {bad}"[:500])
    verdict = {k: int(v) for k, v in scores.items() if v is not None}
    if _quoted_by(verdict, raw, keys, scale, quoted):
        raise QuotedVerdictError("the answer's final JSON object is one the judged text contains (a candidate's own "
                                 "scores are never a verdict)")
    return verdict
