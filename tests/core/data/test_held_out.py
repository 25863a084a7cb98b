"""Held-out splits on the text the model sees: every builder's test prompts are absent from what it trains on, also
when the raw sources hold the same prompt written two ways (issue 35, class 3)."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from pipeline_lib.core.data.build import build_real, build_tiny
from pipeline_lib.core.data.real import BUILDERS, CONFLICTING_GOLDS
from pipeline_lib.core.data.schema import model_prompt
from pipeline_lib.core.data.tiny import TASKS
from tests.chat_server import ChatServer
from tests.conftest import ENGINE_TINY, FIXTURES, _build, _deepmath_row, real_spec

TRAINED, HELD_OUT = ("rl_train", "sft_train", "rl_sim_train"), ("rl_test", "rl_val")


def model_visible_prompts(out: Path, outputs: tuple[str, ...]) -> dict[str, set[str]]:
    """Each output's prompts as the model sees them, read back from the parquet files (not from the builder)."""
    found = {}
    for name in outputs:
        if (out / f"{name}.parquet").is_file():
            frame = pd.read_parquet(out / f"{name}.parquet")
            column = frame["prompt"] if "prompt" in frame.columns else frame["messages"].map(lambda m: list(m)[:-1])
            found[name] = {model_prompt([dict(m) for m in messages]) for messages in column}
    return found


def assert_held_out(out: Path) -> None:
    trained = set().union(*model_visible_prompts(out, TRAINED).values())
    held = model_visible_prompts(out, HELD_OUT)
    assert held, f"no held-out output in {out}"
    for name, prompts in held.items():
        shared = prompts & trained
        assert not shared, f"{name}: {len(shared)} of {len(prompts)} prompts are training prompts, e.g. {min(shared)}"


def _pad(value):
    """The same text as the model will see it after stripping, written with trailing whitespace."""
    return value + "  \n" if isinstance(value, str) else value


def _padded_copies(source: Path, target: Path, column) -> None:
    """``target``: every row of ``source`` and, after them, a copy whose prompt text has trailing whitespace."""
    lines = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(json.dumps(row) + "\n" for row in [*lines, *map(column, lines)]))


def _pad_column(name):
    return lambda row: row | {name: _pad(row[name])}


def _pad_conversation(row):
    turns = [dict(t) for t in row["conversations"]]
    turns[0]["value"] = _pad(turns[0]["value"])
    return row | {"conversations": turns}


def _permuted(row):
    return row | {"nums": list(reversed(row["nums"]))}  # another prompt text, the same task (sorted numbers, target)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_real_builder_holds_out_the_prompts_the_model_sees(name, tmp_path):
    """Each source doubled with copies that differ only where the prompt strips them (trailing whitespace) or, for
    Countdown, by the order of the numbers: no test prompt may reach an output trained on."""
    spec = real_spec(name, holdout_fraction=0.5)
    hostile = tmp_path / "raw"
    if name == "gsm8k":  # the official test split's questions, padded, added to train
        (hostile / "main").mkdir(parents=True)
        test = FIXTURES / "gsm8k/main/test.jsonl"
        shutil.copy(test, hostile / "main/test.jsonl")
        train = [json.loads(line) for line in (FIXTURES / "gsm8k/main/train.jsonl").read_text().splitlines()]
        padded = [_pad_column("question")(json.loads(line)) for line in test.read_text().splitlines()]
        (hostile / "main/train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train + padded))
        spec["sources"]["main"]["local"] = str(hostile / "main")
    elif name == "countdown":
        for role in ("main", "gold"):
            _padded_copies(FIXTURES / f"countdown/{role}/train.jsonl", hostile / role / "train.jsonl", _permuted)
            spec["sources"][role]["local"] = str(hostile / role)
    else:
        column = {"deepmath": _pad_column("question"), "poetry": _pad_column("poem"),
                  "meetingbank": _pad_column("prompt"), "openthoughts": _pad_conversation}[name]
        _padded_copies(Path(spec["sources"]["main"]["local"]), hostile / "train.jsonl", column)
        spec["sources"]["main"]["local"] = str(hostile / "train.jsonl")
    if name == "poetry":
        with ChatServer() as server:
            spec["synthesis"] = {"base_url": server.base_url, "model": "m", "concurrency": 1, "backoff_s": 0.01}
            build_real(name, spec, tmp_path / "out", None)
    else:
        build_real(name, spec, tmp_path / "out", None)
    assert_held_out(tmp_path / "out")
    manifest = json.loads((tmp_path / "out/manifest.json").read_text())
    assert manifest["held_out"]["prompts_shared_by_train_and_test"] == 0


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_tiny_builder_holds_out_the_prompts_the_model_sees(task, tmp_path):
    build_tiny(task, ENGINE_TINY | {"n_val": 8}, 0, None, tmp_path)
    assert_held_out(tmp_path)


def test_deepmath_questions_differing_by_trailing_whitespace_are_one_prompt(tmp_path):
    """The reported case: 24 questions, each also written with trailing whitespace; was 15 of 24 test prompts in
    train while the manifest said nothing leaked."""
    rows = [_deepmath_row(i) for i in range(24)]
    rows += [r | {"question": r["question"] + "   "} for r in rows]
    source = tmp_path / "train.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _build("deepmath", source, tmp_path)
    assert_held_out(out)
    manifest = json.loads((out / "manifest.json").read_text())
    counts, filters = manifest["row_counts"], manifest["filters"]
    assert counts["rl_train"] + counts["rl_test"] == 24  # each question once
    assert filters["duplicate prompt within test"] + filters["duplicate prompt within train"] == 24


def test_a_duplicate_question_with_another_gold_is_removed_and_counted(tmp_path):
    """The reported case: the same question with golds 10 and 12345 kept both rows in test, uncounted."""
    rows = [_deepmath_row(i) for i in range(12)]
    rows.append(rows[5] | {"final_answer": "12345"})  # question 5's gold is 10
    rows.append(rows[7] | {"question": rows[7]["question"] + " "})  # same prompt, same gold: one copy kept
    source = tmp_path / "train.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _build("deepmath", source, tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["filters"][CONFLICTING_GOLDS] == 2
    assert "removed from every split" in manifest["held_out"]["conflicting_golds"]
    questions = [row["prompt"][-1]["content"] for split in ("train", "test")
                 for row in pd.read_parquet(out / f"rl_{split}.parquet").to_dict("records")]
    assert not any(q.startswith("What is 5 + 5?") for q in questions)
    assert sum(q.startswith("What is 7 + 7?") for q in questions) == 1
    assert len(questions) == 11
