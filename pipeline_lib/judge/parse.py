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
from collections.abc import Sequence

__all__ = ["VerdictParseError", "parse_verdict"]


class VerdictParseError(ValueError):
    pass


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
    for source in (content or "", reasoning or ""):
        for candidate in reversed(_json_objects(source)):
            try:
                data = json.loads(candidate)
            except json.JSONDecodeError:
                problems.append("malformed JSON")
                continue
            if not isinstance(data, dict) or not set(keys) <= set(data):
                problems.append(f"missing key(s) {sorted(set(keys) - set(data))}" if isinstance(data, dict)
                                else "not an object")
                continue
            values = {k: data[k] for k in keys}
            bad = {k: v for k, v in values.items()
                   if isinstance(v, bool) or not isinstance(v, int | float) or float(v) != int(v)
                   or not scale[0] <= int(v) <= scale[1]}
            if bad:
                raise VerdictParseError(f"scores outside {scale[0]}-{scale[1]} or not integers: {bad}")
            return {k: int(v) for k, v in values.items()}
    raise VerdictParseError("no JSON object with keys " + ", ".join(keys)
                            + (f" ({'; '.join(dict.fromkeys(problems))})" if problems else ""))
