"""One normal form for "the same question" (issue 45, item 4; pipeline_lib.core.data.schema.question_form): copies
that differ by an NBSP, a zero-width space, full-width digits, CRLF, " ?" or case merge into one prompt, never cross
the train/test split (GSM8K's test questions copied into train are removed from train), and are counted in the
manifest. The cases are rows of docs/hostile_cases.md."""

from __future__ import annotations

from pathlib import Path

_FULL_WIDTH = str.maketrans("0123456789", "".join(chr(0xFF10 + d) for d in range(10)))
VARIANTS = {  # each: a copy a reader calls the same question, written differently
    "nbsp": lambda q: q.replace(" ", "\u00a0", 1),
    "zero_width_space": lambda q: q.replace(" ", " \u200b", 1),
    "full_width_digits": lambda q: q.translate(_FULL_WIDTH),
    "crlf": lambda q: q.replace(" ", "\r\n", 1),
    "space_before_question_mark": lambda q: q.replace("?", " ?"),
    "case": lambda q: q.upper(),
}


def test_the_normal_form_merges_every_variant_and_nothing_else():
    from pipeline_lib.core.data.schema import question_form

    question = "What is 12 + 3?"
    forms = {name: question_form(variant(question)) for name, variant in VARIANTS.items()}
    assert set(forms.values()) == {question_form(question)}, forms
    assert question_form("What is 12 + 4?") != question_form(question)
    assert question_form("What is 1 2 + 3?") != question_form(question)  # a space between digits is kept


def _read_keys(out: Path, name: str) -> list[str]:
    import pandas as pd

    from pipeline_lib.core.data.schema import prompt_key, question_form

    frame = pd.read_parquet(out / f"{name}.parquet")
    column = frame["prompt"] if "prompt" in frame.columns else frame["messages"].map(lambda m: list(m)[:-1])
    # the question is the text before the fixed suffix: its own trailing punctuation is part of the normal form
    return [prompt_key([dict(m) | {"content": question_form(m["content"].split(" Please reason")[0])}
                        for m in messages]) for messages in column]


def test_near_duplicate_questions_merge_never_cross_the_split_and_are_counted(tmp_path):
    """The reported case: copies differing by NBSP, zero-width space, full-width digits, CRLF, " ?" or case; 25-31
    of ~43 test prompts had a training twin and the manifest reported 0."""
    import json

    from tests.conftest import _build, _deepmath_row

    rows = [_deepmath_row(i) for i in range(24)]
    rows += [r | {"question": variant(r["question"])} for variant in VARIANTS.values() for r in rows[:24]]
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
    assert manifest["held_out"]["prompts_shared_by_train_and_test"] == 0


def test_gsm8k_test_questions_copied_into_train_with_cosmetic_changes_are_removed_from_train(tmp_path):
    import json

    from pipeline_lib.core.data.build import build_real
    from tests.conftest import FIXTURES, real_spec

    main = tmp_path / "raw/main"
    main.mkdir(parents=True)
    test_rows = [json.loads(line) for line in (FIXTURES / "gsm8k/main/test.jsonl").read_text().splitlines()]
    train_rows = [json.loads(line) for line in (FIXTURES / "gsm8k/main/train.jsonl").read_text().splitlines()]
    twins = [r | {"question": variant(r["question"])} for variant in VARIANTS.values() for r in test_rows]
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
