"""Numbers as a reader reads them, before a verifier compares answers (issue 60, item 5).

Math-Verify scores ``\\boxed{1\\,000}`` and ``1\\ 000`` against 1000, and ``½`` against ``1/2``, as wrong: the
spacing is digit grouping and the character is a fraction to anyone reading them. :func:`reader_numbers` rewrites
only those spellings, in linear time, and leaves every other character alone:

* digit grouping: a thin space (U+2009), a narrow no-break space (U+202F), a figure space (U+2007), a no-break
  space (U+00A0) and LaTeX's ``\\,``, ``\\thinspace``, ``\\ `` and ``{,}`` between digits are dropped where they
  split the digits into groups of three (``1\\,000\\,000``; ``3.141\\,59`` after a decimal point). ``3{,}14``
  (a decimal comma) and ``2\\,5`` are not groups of three and are left as written; an ASCII space is never taken for
  grouping (``1 000`` may be two numbers).
* vulgar fractions: every character Unicode decomposes as ``<fraction>`` (``½ ¾ ⅓ ⅞ ↉``..., found with
  :mod:`unicodedata`, not a hand table) becomes ``\\frac{n}{d}``; a whole number before it makes a mixed number
  (``2½`` -> ``\\frac{5}{2}``). Digits around the fraction slash U+2044 (``3⁄4``) read the same way.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal

__all__ = ["VULGAR_FRACTIONS", "decimal_equal", "is_plain_decimal", "reader_numbers"]


def _vulgar_fractions(last: int = 0xFFFF) -> dict[str, tuple[int, int]]:
    """Every character up to ``last`` whose Unicode decomposition is ``<fraction> n ⁄ d`` (``⅟``, a numerator alone,
    is not). All of them are in the Basic Multilingual Plane, which is scanned in ~15 ms at import (the whole range
    takes ~0.3 s; tests/core/rewards/test_hostile_rewards.py checks the two agree)."""
    table = {}
    for code in range(last + 1):
        decomposition = unicodedata.decomposition(chr(code))
        if decomposition.startswith("<fraction>"):
            text = "".join(chr(int(part, 16)) for part in decomposition.split()[1:])
            numerator, slash, denominator = text.partition("\u2044")
            if slash and numerator.isdigit() and denominator.isdigit():
                table[chr(code)] = (int(numerator), int(denominator))
    return table


#: ``½`` -> ``(1, 2)``: Unicode's vulgar fraction characters and their values.
VULGAR_FRACTIONS = _vulgar_fractions()
_SEPARATOR = r"(?:\\,|\\thinspace(?![A-Za-z])\s*|\\ |\{,\}|[\u00a0\u2007\u2009\u202f])"
_GROUPED = re.compile(rf"(?<![0-9])[0-9]{{1,3}}(?:{_SEPARATOR}[0-9]{{3}})+(?!{_SEPARATOR}?[0-9])"  # 1\,000\,000
                      rf"|(?<=[0-9]\.)[0-9]{{3}}(?:{_SEPARATOR}[0-9]{{3}})*{_SEPARATOR}[0-9]{{1,3}}"  # .141\,59
                      rf"(?!{_SEPARATOR}?[0-9])")
_SEPARATORS = re.compile(_SEPARATOR)
_FRACTION = re.compile(rf"(?<![0-9])(?:([0-9]+)[ \u2009\u202f]?)?([{''.join(VULGAR_FRACTIONS)}])"
                       r"|(?<![0-9])([0-9]+)\u2044([0-9]+)(?![0-9])")
_TRIGGERS = re.compile(rf"[0-9]{_SEPARATOR}[0-9]|[{''.join(VULGAR_FRACTIONS)}\u2044]")
#: A number written out in plain decimal digits (no exponent, no grouping).
_PLAIN_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def _fraction(match: re.Match[str]) -> str:
    if match.group(2) is None:  # 3⁄4
        return f"\\frac{{{match.group(3)}}}{{{match.group(4)}}}"
    numerator, denominator = VULGAR_FRACTIONS[match.group(2)]
    whole = int(match.group(1)) if match.group(1) and len(match.group(1)) <= 4000 else 0
    return f"\\frac{{{whole * denominator + numerator}}}{{{denominator}}}"


def reader_numbers(text: str) -> str:
    """``text`` with digit-grouping spaces dropped and vulgar fractions written as ``\\frac``; unchanged (the same
    object) when it has neither, which is nearly always, at the cost of one regex scan."""
    if not _TRIGGERS.search(text):
        return text
    text = _GROUPED.sub(lambda match: _SEPARATORS.sub("", match.group(0)), text)
    return _FRACTION.sub(_fraction, text)


def is_plain_decimal(text: str) -> bool:
    """``12``, ``-0.5``, ``.25``, a 400-digit ``3.14159...``: a finite number whatever its length (no exponent)."""
    return bool(_PLAIN_DECIMAL.fullmatch(text.strip()))


def decimal_equal(left: str, right: str) -> bool:
    """Exact equality of two plain decimals (:class:`~decimal.Decimal` compares exactly at any length; a float keeps
    about 16 significant digits, so ``0.333...33`` and ``0.333...34`` of 400 digits would be one number)."""
    return Decimal(left.strip()) == Decimal(right.strip())
