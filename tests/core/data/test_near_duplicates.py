"""One normal form for "the same question" (issue 45 item 4, issue 60 item 3; pipeline_lib.core.data.question_form):
copies that differ by an NBSP, a zero-width space, full-width digits, CRLF, " ?", case, LaTeX spacing or ``$``
delimiters, Cyrillic homoglyphs, Arabic-Indic digits, HTML entities, markdown emphasis, numbers as words or "plus" for
"+" merge into one prompt, never cross the train/test split (GSM8K's test questions copied into train are removed
from train), and are counted in the manifest by kind; different questions (``x²`` and ``x2``, ``10⁵`` and ``105``)
stay apart. The cases are rows of docs/hostile_cases.md."""

from __future__ import annotations

import re
from pathlib import Path

_FULL_WIDTH = str.maketrans("0123456789", "".join(chr(0xFF10 + d) for d in range(10)))
_ARABIC_INDIC = str.maketrans("0123456789", "".join(chr(0x0660 + d) for d in range(10)))
_CYRILLIC = str.maketrans("aeopcxy", "\u0430\u0435\u043e\u0440\u0441\u0445\u0443")  # а е о р с х у
_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "twenty-one",
          "twenty-two", "twenty-three"]
# each: a copy a reader calls the same question, written differently, and the kind of difference the manifest counts
VARIANTS = {
    "nbsp": (lambda q: q.replace(" ", "\u00a0", 1), "whitespace"),
    "zero_width_space": (lambda q: q.replace(" ", " \u200b", 1), "format_character"),
    "full_width_digits": (lambda q: q.translate(_FULL_WIDTH), "compatibility"),
    "crlf": (lambda q: q.replace(" ", "\r\n", 1), "whitespace"),
    "space_before_question_mark": (lambda q: q.replace("?", " ?"), "punctuation"),
    "case": (lambda q: q.upper(), "case"),
    "latex_thin_space": (lambda q: q.replace(" + ", r"\,+\,"), "latex"),
    "latex_control_space": (lambda q: q.replace("What is", r"What\ is"), "latex"),
    "dollar_math": (lambda q: re.sub(r"(\d+ \+ \d+)", r"$\1$", q), "latex"),
    "cyrillic_homoglyphs": (lambda q: q.translate(_CYRILLIC), "confusable"),
    "arabic_indic_digits": (lambda q: q.translate(_ARABIC_INDIC), "digits"),
    "html_entities": (lambda q: q.replace("+", "&#43;").replace("What", "&#87;hat"), "html_entity"),
    "markdown_emphasis": (lambda q: re.sub(r"(\d+ \+ \d+)", r"**\1**", q).replace("What", "_What_"), "markup"),
    "numbers_as_words": (lambda q: re.sub(r"\d+", lambda m: _WORDS[int(m.group(0))], q), "number_words"),
    "plus_for_+": (lambda q: q.replace("+", "plus"), "operators"),
}
#: different questions: plain NFKC merged each pair (a superscript is an exponent, not a digit)
DISTINCT = [("x\u00b2 + 1", "x2 + 1"), ("10\u2075", "105"), ("What is 1 2 + 3?", "What is 12 + 3?"),
            ("a\u2081 + b", "a1 + b"), ("Find \u03c0 r", "Find n r"), ("modern", "modem"), ("$5 and $10", "5 and 10"),
            ("a_1 + b_2", "a1 + b2"), ("2*3*4", "234"), ("3 four", "3 4 four"), ("x**2 + y**2", "x2 + y2")]


def test_the_normal_form_merges_every_variant_and_nothing_else():
    from pipeline_lib.core.data.schema import question_form

    question = "What is 12 + 3?"
    for name, (variant, _) in VARIANTS.items():
        assert variant(question) != question, name
    forms = {name: question_form(variant(question)) for name, (variant, _) in VARIANTS.items()}
    assert set(forms.values()) == {question_form(question)}, forms
    assert question_form("What is 12 + 4?") != question_form(question)
    for first, second in DISTINCT:
        assert question_form(first) != question_form(second), (first, second)
    assert question_form("x\u00b2") == question_form("x^2") == question_form("x^{2}") == question_form("$x^2$")
    assert question_form("10\u2075") == question_form("10^5")
    for text in [v(question) for v, _ in VARIANTS.values()] + [a for pair in DISTINCT for a in pair]:
        assert question_form(question_form(text)) == question_form(text), text  # a form is its own form


def test_each_variant_is_counted_under_its_own_kind():
    from pipeline_lib.core.data.question_form import merge_kinds

    question = "What is 12 + 3?"
    texts = [question] + [variant(question) for variant, _ in VARIANTS.values()]
    assert merge_kinds(texts) == [(kind,) for _, kind in VARIANTS.values()]


def _read_keys(out: Path, name: str) -> list[str]:
    import pandas as pd

    from pipeline_lib.core.data.schema import prompt_key, question_form

    frame = pd.read_parquet(out / f"{name}.parquet")
    column = frame["prompt"] if "prompt" in frame.columns else frame["messages"].map(lambda m: list(m)[:-1])
    # the question is the text before the fixed suffix: its own trailing punctuation is part of the normal form
    return [prompt_key([dict(m) | {"content": question_form(m["content"].split(" Please reason")[0])}
                        for m in messages]) for messages in column]


def test_near_duplicate_questions_merge_never_cross_the_split_and_are_counted(tmp_path):
    """The reported cases: copies differing by NBSP, zero-width space, full-width digits, CRLF, " ?" or case (issue
    45: 25-31 of ~43 test prompts had a training twin) and by LaTeX spacing, ``$``, Cyrillic homoglyphs,
    Arabic-Indic digits, HTML entities, markdown emphasis, number words or "plus" (issue 60: 19-31 of 34-45); the
    manifest reported 0."""
    import json

    from tests.conftest import _build, _deepmath_row

    rows = [_deepmath_row(i) for i in range(24)]
    rows += [r | {"question": variant(r["question"])} for variant, _ in VARIANTS.values() for r in rows[:24]]
    source = tmp_path / "train.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _build("deepmath", source, tmp_path)
    train, test = _read_keys(out, "rl_train"), _read_keys(out, "rl_test")
    sft = _read_keys(out, "sft_train")
    assert len(set(train)) == len(train) and len(set(test)) == len(test)  # each question once
    assert len(train) + len(test) == 24 and test and train
    assert not set(test) & (set(train) | set(sft))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["near_duplicates_merged"] == 24 * len(VARIANTS)
    expected: dict[str, int] = {}
    for _, kind in VARIANTS.values():
        expected[kind] = expected.get(kind, 0) + 24
    assert manifest["near_duplicates_by_kind"] == expected
    assert manifest["held_out"]["prompts_shared_by_train_and_test"] == 0


def test_gsm8k_test_questions_copied_into_train_with_cosmetic_changes_are_removed_from_train(tmp_path):
    import json

    from pipeline_lib.core.data.build import build_real
    from tests.conftest import FIXTURES, real_spec

    main = tmp_path / "raw/main"
    main.mkdir(parents=True)
    test_rows = [json.loads(line) for line in (FIXTURES / "gsm8k/main/test.jsonl").read_text().splitlines()]
    train_rows = [json.loads(line) for line in (FIXTURES / "gsm8k/main/train.jsonl").read_text().splitlines()]
    twins = [r | {"question": variant(r["question"])} for variant, _ in VARIANTS.values() for r in test_rows
             if variant(r["question"]) != r["question"]]  # "What is" and " + " are not in every GSM8K question
    assert len(twins) > 6 * len(test_rows)  # more than the six variants of issue 45
    (main / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test_rows))
    (main / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train_rows + twins))
    build_real("gsm8k", real_spec("gsm8k"), tmp_path / "clean", None)  # the fixture as shipped: the baseline
    spec = real_spec("gsm8k")
    spec["sources"]["main"]["local"] = str(main)
    build_real("gsm8k", spec, tmp_path / "out", None)
    out = tmp_path / "out"
    assert not set(_read_keys(out, "rl_test")) & (set(_read_keys(out, "rl_train")) | set(_read_keys(out, "sft_train")))
    manifest, clean = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("out", "clean"))
    assert manifest["row_counts"] == clean["row_counts"]  # every twin removed, nothing else
    removed = "train prompt also in test (removed from train)"
    assert manifest["filters"][removed] - clean["filters"].get(removed, 0) == len(twins)
    assert manifest["near_duplicates_merged"] == len(twins) and clean["near_duplicates_merged"] == 0
