"""Answer extraction shared by every reward and by evaluation.

Order: drop everything up to the last ``</think>``; then prefer the last
``<answer>...</answer>``; else the last ``\\boxed{...}`` (nested braces handled).
:func:`final_text` is the same cut without ``\\boxed{}``, as the authors' ``final_text`` makes it.
"""

from __future__ import annotations

import re

__all__ = ["after_think", "extract_answer", "final_text", "last_answer_tag", "last_boxed"]

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BOXED_OPENERS = ("\\boxed{", "\\fbox{")
_END_MARKERS = ("<|im_end|>", "<|endoftext|>")  # Qwen's end-of-turn and end-of-text tokens, if decoded as text


def after_think(text: str) -> str:
    """The text after the last ``</think>`` (all of it if there is none)."""
    cut = text.rfind("</think>")
    return text if cut < 0 else text[cut + len("</think>"):]


def last_answer_tag(text: str) -> str | None:
    """The last ``<answer>...</answer>`` span as ``_ANSWER_RE.findall`` pairs them, found in linear time.

    The regex retries every ``<answer>`` when no ``</answer>`` follows, which is quadratic on a hostile
    ``"<answer>" * n``; the same left-to-right pairing with ``str.find`` stops at the first unclosed tag.
    """
    last, position = None, 0
    while (start := text.find("<answer>", position)) >= 0:
        end = text.find("</answer>", start + len("<answer>"))
        if end < 0:
            break
        last, position = text[start + len("<answer>"):end], end + len("</answer>")
    return last.strip() if last is not None else None


def final_text(text: str) -> str:
    """The answer a reply gives, as the authors cut it (``softmaxgrpo/rewards.py`` ``final_text``): Qwen's
    ``<|im_end|>``/``<|endoftext|>`` removed, the text after the last ``</think>`` (all of it if there is none),
    then the last ``<answer>...</answer>`` span if there is one; stripped of surrounding whitespace.

    Applied to both sides of r_sim (the reply and the reference) and to AlpacaEval answers before the annotator,
    so the thinking trace is never compared or judged. Linear time (:func:`last_answer_tag`)."""
    for marker in _END_MARKERS:
        text = text.replace(marker, "")
    tail = after_think(text.strip()).strip()
    tagged = last_answer_tag(tail)
    return tagged if tagged is not None else tail


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}``, balancing nested braces; None if unclosed."""
    start = max(text.rfind(opener) for opener in _BOXED_OPENERS)
    if start < 0:
        return None
    position = text.index("{", start) + 1
    depth = 1
    for index in range(position, len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[position:index].strip()
    return None


def extract_answer(text: str | None, allow_boxed: bool = True) -> str | None:
    """The final answer span of a response, or None when it has none."""
    if not isinstance(text, str):
        return None
    tail = after_think(text)
    tagged = last_answer_tag(tail)
    if tagged is not None:
        return tagged
    return last_boxed(tail) if allow_boxed else None
