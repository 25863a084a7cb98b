"""The one normal form of "the same question" (issue 45 item 4, issue 60 item 3): a key, never shown to the model.

Two texts a reader calls the same question get equal forms; two different questions never do. The form is a fixed
sequence of named steps (:data:`KINDS`), each closing one class of cosmetic difference:

``format_character``
    Unicode format characters (category Cf: zero-width space, BOM, soft hyphen, bidi marks) removed.
``html_entity``
    HTML character references unescaped (``&amp;``, ``&#43;``, ``&nbsp;``), repeatedly, so double escaping too.
``whitespace``
    every whitespace character (NBSP, CRLF, tab, thin space, ideographic space) a space; runs become one space.
``latex``
    math delimiters dropped (``$...$`` by pandoc's rule, so ``$5 and $10`` stays currency; ``$$``, ``\\(``,
    ``\\)``, ``\\[``, ``\\]``), spacing commands (``\\,`` ``\\:`` ``\\;`` ``\\ `` ``\\quad`` ...) a space, or nothing
    between digit groups (``1\\,000`` is ``1000``), ``\\!`` nothing, ``\\left``/``\\right`` sizes dropped,
    ``\\dfrac``/``\\tfrac`` as ``\\frac``, ``\\text{..}``-like wrappers unwrapped, ``^{2}`` as ``^2``, escaped
    ``\\% \\$ \\& \\#`` as the character.
``markup``
    markdown emphasis (``**x**``, ``__x__``, ``*x*``, ``_x_`` at word boundaries, so ``a_1 + b_2`` and ``2*3*4`` are
    kept) and inline code backticks dropped; HTML ``<b> <i> <em> <strong> <u>`` tags dropped, ``<sup>``/``<sub>`` as
    ``^{..}``/``_{..}``.
``compatibility``
    Unicode compatibility decomposition (full-width letters and digits, ligatures, math alphanumerics, circled
    digits, ``½`` as ``1⁄2``) EXCEPT superscripts and subscripts, which become exponents and indices: ``x²`` is
    ``x^2`` (never ``x2``), ``10⁵`` is ``10^5`` (never ``105``), ``a₁`` is ``a_1``. Plain NFKC would merge those.
``digits``
    decimal digits of every script (Arabic-Indic, Devanagari, ...: ``unicodedata.decimal``) as ASCII (those with a
    compatibility decomposition, like full-width digits, are already ASCII by then).
``confusable``
    the Unicode TR39 skeleton, from Unicode's own confusables data (``confusables.tsv`` beside this module, its
    provenance in its header; no maintained library is installed here), applied to non-ASCII characters only:
    Cyrillic ``а е о р с х`` become Latin ``a e o p c x``, ``−`` becomes ``-``, curly quotes become ASCII. ASCII is
    kept as written (TR39 would fold ``m``/``rn`` and ``0``/``O``, merging "modern" and "modem"). A Greek letter
    is mapped only inside a word that also has an ASCII letter (``Whαt``); a Greek word of its own (``α``,
    ``π r^2``) is a variable and stays Greek, since TR39 maps ``π`` to ``n`` and ``σ`` to ``o``.
``case``
    casefolded.
``number_words``
    English cardinal numbers written as words (``twelve``, ``twenty-one``, ``one hundred and five``,
    ``three thousand``) as digits. Ordinals ("first") and fractions ("half") are not numbers here.
``operators``
    ``plus``, ``minus``, ``times``, ``multiplied by``, ``divided by`` between two operands (a digit, a one-letter
    variable or a bracket) as ``+ - * /``; ``×``, ``·``, ``⋅``, ``∗``, ``\\times``, ``\\cdot`` as ``*``, ``÷`` and
    ``\\div`` as ``/``. Spacing around an operator is kept as written (``12+3`` and ``12 + 3`` stay two forms).
``digit_grouping``
    thousands commas inside a number (``1,000`` and ``12,345,678``) dropped; a comma followed by a space, or by
    other than three digits, is kept (a list, or a decimal comma).
``punctuation``
    no space before ``. , ; : ! ?`` and no trailing punctuation.

:func:`merge_kinds` says which steps two texts needed to share a form: the manifest counts merges by kind.
"""

from __future__ import annotations

import functools
import html
import re
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["KINDS", "merge_kinds", "question_form"]

CONFUSABLES_PATH = Path(__file__).with_name("confusables.tsv")


# ---------------------------------------------------------------------------------------------------- format, html

def _format_characters(text: str) -> str:
    return "".join(c for c in text if unicodedata.category(c) != "Cf") if not text.isascii() else text


def _html_entities(text: str) -> str:
    for _ in range(4):  # double escaping (&amp;lt;) unescapes in two rounds; a fixed point within four
        if "&" not in text:
            break
        unescaped = html.unescape(text)
        if unescaped == text:
            break
        text = unescaped
    return text


def _whitespace(text: str) -> str:
    return _SPACE_CHARACTER.sub(" ", text)


_SPACE_CHARACTER = re.compile(r"[^\S ]")  # any whitespace but the ASCII space


# ---------------------------------------------------------------------------------------------------- LaTeX

_DISPLAY_MATH = re.compile(r"\$\$(.+?)\$\$", re.S)
# pandoc's rule: an opening $ has a non-space right after it, a closing $ a non-space right before it and no digit
# right after it; so "$5 and $10" is currency, "$x$" is math
_INLINE_MATH = re.compile(r"(?<![\\$])\$(?=[^\s$])((?:[^$\\]|\\.)*?)(?<=[^\s\\])\$(?!\d)", re.S)
_MATH_BRACKETS = re.compile(r"\\[()\[\]]")
_SPACE_COMMAND = r"(?:\\[,:;> ]|\\(?:quad|qquad|enspace|thinspace|medspace|thickspace)\b|\{,\})"
_GROUP_SEPARATOR = re.compile(rf"(?<=\d){_SPACE_COMMAND}(?=\d{{3}}(?!\d))")
_SPACING = re.compile(_SPACE_COMMAND)
_NEGATIVE_SPACE = re.compile(r"\\(?:!|negthinspace\b|negmedspace\b|negthickspace\b)")
_SIZES = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|Biggl|Biggr|big|Big|bigg|Bigg)\b\s*")
_FRAC = re.compile(r"\\[dt]frac\b")
_WRAPPERS = re.compile(r"\\(?:text|textrm|textbf|textit|textnormal|mathrm|emph|mbox)\s*\{([^{}]*)\}")
_SINGLE_SCRIPT = re.compile(r"([\^_])\{\s*([^{}\s])\s*\}")
_ESCAPED = re.compile(r"\\([%$&#])")


def _latex(text: str) -> str:
    if "$" in text:
        text = _DISPLAY_MATH.sub(r"\1", text)
        text = _INLINE_MATH.sub(r"\1", text)
    if "\\" in text or "{" in text:
        text = _MATH_BRACKETS.sub(" ", text)
        text = _GROUP_SEPARATOR.sub("", text)
        text = _SPACING.sub(" ", text)
        text = _NEGATIVE_SPACE.sub("", text)
        text = _SIZES.sub("", text)
        text = _FRAC.sub(r"\\frac", text)
        text = _WRAPPERS.sub(r"\1", text)
        text = _ESCAPED.sub(r"\1", text)
    if "^{" in text or "_{" in text:
        text = _SINGLE_SCRIPT.sub(r"\1\2", text)
    return text


# ---------------------------------------------------------------------------------------------------- markup

_TAGS = re.compile(r"</?(?:b|i|em|strong|u)>", re.I)
_SUP_SUB = re.compile(r"<(sup|sub)>(.*?)</\1>", re.I | re.S)
# emphasis opens after a non-word character (not a bracket, so f(x)*2 is kept) and closes before one
_EMPHASIS = re.compile(r"(?<![\w*\\)\]}])(\*\*|__|\*|_)(?=[^\s*_])(.+?)(?<=[^\s*_\\])\1(?![\w*])", re.S)
_CODE = re.compile(r"`([^`\n]+)`")


def _markup(text: str) -> str:
    if "<" in text:
        text = _SUP_SUB.sub(lambda m: ("^{" if m.group(1).lower() == "sup" else "_{") + m.group(2) + "}", text)
        text = _TAGS.sub("", text)
    if "*" in text or "_" in text:
        for _ in range(3):  # nested emphasis (***x***, **_x_**) unwraps one layer a round
            stripped = _EMPHASIS.sub(r"\2", text)
            if stripped == text:
                break
            text = stripped
    if "`" in text:
        text = _CODE.sub(r"\1", text)
    return _latex_scripts(text)


def _latex_scripts(text: str) -> str:
    return _SINGLE_SCRIPT.sub(r"\1\2", text) if "^{" in text or "_{" in text else text


# ---------------------------------------------------------------------------------------------------- compatibility

@functools.cache
def _compatible(char: str) -> str:
    """``char`` fully decomposed like NFKD, except that a superscript becomes ``^{..}`` and a subscript ``_{..}``."""
    decomposition = unicodedata.decomposition(char)
    if not decomposition or char.isspace():
        return char
    tag = None
    if decomposition.startswith("<"):
        tag, _, decomposition = decomposition.partition(" ")
    inner = "".join(_compatible(chr(int(code, 16))) for code in decomposition.split())
    if tag == "<super>":
        return "^{" + inner + "}"
    if tag == "<sub>":
        return "_{" + inner + "}"
    return inner


class _CharMap(dict[int, str]):
    """A ``str.translate`` table computed one character at a time and remembered."""

    def __init__(self, function: Callable[[str], str]) -> None:
        super().__init__()
        self.function = function

    def __missing__(self, code: int) -> str:
        value = self[code] = self.function(chr(code))
        return value


_COMPATIBLE = _CharMap(_compatible)
_JOINED_SCRIPTS = re.compile(r"\}([\^_])\{")  # x²³ decomposes to x^{2}^{3}: one exponent, x^{23}


def _compatibility(text: str) -> str:
    if text.isascii():
        return text
    text = unicodedata.normalize("NFC", text.translate(_COMPATIBLE))
    while True:  # join adjacent scripts of one kind: ^{2}^{3} -> ^{23}
        joined = re.sub(r"\^\{([^{}]*)\}\^\{([^{}]*)\}", r"^{\1\2}", text)
        joined = re.sub(r"_\{([^{}]*)\}_\{([^{}]*)\}", r"_{\1\2}", joined)
        if joined == text:
            break
        text = joined
    return _latex_scripts(text)


# ---------------------------------------------------------------------------------------------------- digits

def _ascii_digit(char: str) -> str:
    value = unicodedata.decimal(char, None)
    if value is None or char.isascii() or unicodedata.decomposition(char):
        return char  # a digit with a decomposition (full-width, math bold) is the compatibility step's
    return str(value)


_DIGITS = _CharMap(_ascii_digit)


def _digits(text: str) -> str:
    return text if text.isascii() else text.translate(_DIGITS)


# ---------------------------------------------------------------------------------------------------- confusables

@functools.cache
def _confusables() -> tuple[dict[int, str], dict[int, str]]:
    """(every non-Greek non-ASCII source -> prototype, Greek letters -> prototype) from ``confusables.tsv``.

    A prototype that TR39 gives an ASCII character as its skeleton (``rn`` for ``m``, ``''`` for ``"``) is that ASCII
    character, since the form keeps ASCII as written."""
    ascii_skeletons = {"rn": "m", "''": '"'}
    plain: dict[int, str] = {}
    greek: dict[int, str] = {}
    for line in CONFUSABLES_PATH.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        source, target = line.split("\t")
        code = int(source, 16)
        prototype = "".join(chr(int(t, 16)) for t in target.split())
        prototype = ascii_skeletons.get(prototype, prototype)
        if chr(code).isspace() or chr(code) in _SYMBOLS:
            continue  # whitespace is the whitespace step's, x-like operators (×) the operators step's
        (greek if unicodedata.name(chr(code), "").startswith("GREEK") else plain)[code] = prototype
    return plain, greek


_MIXED_GREEK_WORD = re.compile(r"\w*(?:[A-Za-z]\w*[\u0370-\u03ff\u1f00-\u1fff]|[\u0370-\u03ff\u1f00-\u1fff]\w*"
                               r"[A-Za-z])\w*")


def _confusable(text: str) -> str:
    if text.isascii():
        return text
    plain, greek = _confusables()
    text = unicodedata.normalize("NFD", text)
    text = _MIXED_GREEK_WORD.sub(lambda m: m.group(0).translate(greek), text)
    return unicodedata.normalize("NFC", text.translate(plain))


# ---------------------------------------------------------------------------------------------------- case

def _case(text: str) -> str:
    return text.casefold()


# ---------------------------------------------------------------------------------------------------- number words

_UNITS = {w: i for i, w in enumerate(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"])}
_TEENS = {w: i + 10 for i, w in enumerate(
    ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"])}
_TENS = {w: (i + 2) * 10 for i, w in enumerate(
    ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"])}
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_NUMBER_WORD = "|".join(sorted([*_UNITS, *_TEENS, *_TENS, "hundred", *_SCALES], key=len, reverse=True))
_NUMBER_RUN = re.compile(rf"\b(?:{_NUMBER_WORD})(?:(?:[ -]+|[ ]+and[ ]+)(?:{_NUMBER_WORD}))*\b")


def _small(tokens: list[str], i: int) -> tuple[int, int] | None:
    """1-99 (or zero) at ``tokens[i]``: a unit, a teen, or tens with an optional unit."""
    if i >= len(tokens):
        return None
    word = tokens[i]
    if word in _UNITS:
        return _UNITS[word], i + 1
    if word in _TEENS:
        return _TEENS[word], i + 1
    if word in _TENS:
        if i + 1 < len(tokens) and tokens[i + 1] in _UNITS and tokens[i + 1] != "zero":
            return _TENS[word] + _UNITS[tokens[i + 1]], i + 2
        return _TENS[word], i + 1
    return None


def _chunk(tokens: list[str], i: int) -> tuple[int, int] | None:
    """1-999 at ``tokens[i]``: ``small [hundred [and] [small]]``."""
    small = _small(tokens, i)
    if small is None:
        return None
    value, j = small
    if j < len(tokens) and tokens[j] == "hundred" and 0 < value < 10:
        value, j = value * 100, j + 1
        k = j + 1 if j < len(tokens) and tokens[j] == "and" else j
        rest = _small(tokens, k)
        if rest is not None and rest[0] > 0:
            value, j = value + rest[0], rest[1]
    return value, j


def _cardinal(tokens: list[str], i: int) -> tuple[int, int] | None:
    """A whole cardinal at ``tokens[i]``: chunks with decreasing scales (``three thousand two hundred``)."""
    total, last_scale, j = 0, None, i
    while True:
        k = j + 1 if last_scale is not None and j < len(tokens) and tokens[j] == "and" else j
        chunk = _chunk(tokens, k)
        if chunk is None:
            break
        value, after = chunk
        scale = _SCALES.get(tokens[after]) if after < len(tokens) else None
        if scale is not None and (last_scale is None or scale < last_scale):
            total, last_scale, j = total + value * scale, scale, after + 1
            continue
        if last_scale is not None and value >= 1000:
            break
        total, j = total + value, after
        break
    return (total, j) if j > i else None


def _number_words(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        tokens = re.split(r"[ -]+", match.group(0))
        out, i = [], 0
        while i < len(tokens):
            number = _cardinal(tokens, i)
            if number is None:
                out.append(tokens[i])
                i += 1
            else:
                out.append(str(number[0]))
                i = number[1]
        return " ".join(out)

    return _NUMBER_RUN.sub(replace, text) if any(w in text for w in ("zero", "one", "two", "three", "four", "five",
                                                                      "six", "seven", "eight", "nine", "ten",
                                                                      "eleven", "twelve", "teen", "ty ", "ty-",
                                                                      "hundred", "thousand", "illion")) else text


# ---------------------------------------------------------------------------------------------------- operators

_OPERAND_LEFT = r"(?:(?<=\d)|(?<=\b[a-z])|(?<=[)\]}]))"
_OPERAND_RIGHT = r"(?=\d|[a-z]\b|[(\[{\\-])"
_WORD_OPERATORS = [(re.compile(rf"{_OPERAND_LEFT}(\s+){word}(\s+){_OPERAND_RIGHT}"), symbol)
                   for word, symbol in (("plus", "+"), ("minus", "-"), ("times", "*"), ("multiplied by", "*"),
                                        ("divided by", "/"))]
_SYMBOL_OPERATORS = re.compile(r"\\times\b|\\cdot\b|\\div\b|[×⋅∗÷]|(?<=[\w)])·(?=[\w(])")
_SYMBOLS = {"\\times": "*", "\\cdot": "*", "\\div": "/", "×": "*", "⋅": "*", "∗": "*", "÷": "/", "·": "*"}


def _operators(text: str) -> str:
    text = _SYMBOL_OPERATORS.sub(lambda m: _SYMBOLS[m.group(0)], text)
    for pattern, symbol in _WORD_OPERATORS:
        text = pattern.sub(lambda m, s=symbol: f"{m.group(1)}{s}{m.group(2)}", text)
    return text


# ---------------------------------------------------------------------------------------------------- grouping

_GROUPED = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])(?!\.\d*,)")


def _digit_grouping(text: str) -> str:
    return _GROUPED.sub(lambda m: m.group(0).replace(",", ""), text) if "," in text else text


# ---------------------------------------------------------------------------------------------------- punctuation

_SPACE_BEFORE_PUNCTUATION = re.compile(r" +(?=[.,;:!?])")
_TRAILING_PUNCTUATION = re.compile(r"[\s.,;:!?]+$")


def _punctuation(text: str) -> str:
    return _TRAILING_PUNCTUATION.sub("", _SPACE_BEFORE_PUNCTUATION.sub("", text))


#: The steps, in the order applied; each name is a kind of difference the manifest counts.
STEPS: dict[str, Callable[[str], str]] = {
    "format_character": _format_characters,
    "html_entity": _html_entities,
    "whitespace": _whitespace,
    "latex": _latex,
    "markup": _markup,
    "compatibility": _compatibility,
    "digits": _digits,
    "confusable": _confusable,
    "case": _case,
    "number_words": _number_words,
    "operators": _operators,
    "digit_grouping": _digit_grouping,
    "punctuation": _punctuation,
}
KINDS = tuple(STEPS)
_SPACES = re.compile(r"  +")


def question_form(text: str, *, skip: str | None = None) -> str:
    """The normal form of ``text`` (module docstring); ``skip`` leaves one step out (for :func:`merge_kinds`)."""
    for name, step in STEPS.items():
        if name != skip:
            text = step(text)
            if name in ("whitespace", "latex", "markup", "number_words", "operators"):
                text = _SPACES.sub(" ", text)
    return text.strip()


def merge_kinds(texts: Sequence[str]) -> list[tuple[str, ...]]:
    """The kinds of difference by which texts with one form were merged: one tuple per text but the group's
    representative. A kind is a step without which a text's form and the representative's differ; the
    representative is the text that differs from the others in the fewest kinds (the plain copy among its variants).
    A text no single step separates (e.g. an NBSP that two steps would each remove) gets ``("several",)``."""
    texts = list(dict.fromkeys(texts))
    if len({question_form(t) for t in texts}) > 1:
        raise ValueError("merge_kinds: the texts have different forms")
    views = [{kind: question_form(t, skip=kind) for kind in KINDS} for t in texts]

    def differing(a: dict[str, str], b: dict[str, str]) -> tuple[str, ...]:
        return tuple(kind for kind in KINDS if a[kind] != b[kind])

    costs = [sum(len(differing(view, other)) for other in views) for view in views]
    representative = costs.index(min(costs))
    return [differing(view, views[representative]) or ("several",)
            for i, view in enumerate(views) if i != representative]
