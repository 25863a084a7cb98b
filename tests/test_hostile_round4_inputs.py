"""Hostile inputs, round four (issue 45, items 4, 5, 6, 8): near-duplicate questions across the split, planted and
damaged checkpoints, golds stored as text in exponent form, raw sources replaced with same-size or older content.
Each case is a row of docs/hostile_cases.md ("Round four: inputs")."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from tests.conftest import crash_after, params, sft_spec

# --- item 5: nothing unpickled; a damaged checkpoint is set aside, never a wedge ---------------------------------


class _Payload:
    """A pickle that runs code when loaded the old way: ``open(marker, "w")`` creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _killed_sft_run(tiny, run: Path, monkeypatch) -> None:
    from pipeline_lib.jobs.engines.local import sft as sft_module

    crash_after(sft_module, 3, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        sft_module.train_sft(sft_spec(), tiny / "data/sft_train.parquet", tiny / "tok", run, 0, progress=False)
    monkeypatch.undo()
    assert (run / "checkpoint/trainer_state.pt").is_file()


@pytest.mark.parametrize("damage", ["planted_pickle", "truncated_model", "missing_model"])
def test_a_planted_or_damaged_sft_checkpoint_is_set_aside_and_the_rerun_starts_clean(tiny, tmp_path, monkeypatch,
                                                                                     caplog, damage):
    from pipeline_lib.jobs.engines.local import sft as sft_module

    data, tok = tiny / "data/sft_train.parquet", tiny / "tok"
    sft_module.train_sft(sft_spec(), data, tok, tmp_path / "straight", 0, progress=False)
    run, marker = tmp_path / "killed", tmp_path / "payload-ran"
    _killed_sft_run(tiny, run, monkeypatch)
    checkpoint = run / "checkpoint"
    if damage == "planted_pickle":
        torch.save({"step": 3, "config_sha256": "x", "payload": _Payload(marker)}, checkpoint / "trainer_state.pt")
    elif damage == "truncated_model":
        weights = checkpoint / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        (checkpoint / "model.safetensors").unlink()
    caplog.set_level(logging.WARNING)
    for _ in range(2):  # the rerun, and a forced rerun of the finished run, both finish
        sft_module.train_sft(sft_spec(), data, tok, run, 0, progress=False)
    assert not marker.exists(), "the planted pickle ran"
    aside = [p for p in run.iterdir() if p.name.startswith("checkpoint.unreadable-")]
    assert len(aside) == 1, sorted(p.name for p in run.iterdir())
    says = {"planted_pickle": "refused: the checkpoint holds objects that would run code",
            "truncated_model": "model.safetensors is damaged", "missing_model": "model.safetensors missing"}[damage]
    assert says in caplog.text and f"set aside as {aside[0].name}" in caplog.text
    a, b = params(tmp_path / "straight/final"), params(run / "final")  # a clean start reproduces the straight run
    for key in a:
        torch.testing.assert_close(a[key], b[key])


def test_a_planted_imagenet_checkpoint_is_set_aside_never_run(tmp_path, monkeypatch, caplog):
    from pipeline_lib.jobs.classify import train as train_module
    from tests.conftest import CLASSIFY_PARAMS, classify_spec, final_parameters
    from tests.test_hostile_inputs import _kill_after_step_10

    straight, run, marker = tmp_path / "straight", tmp_path / "run", tmp_path / "payload-ran"
    train_module.train(classify_spec("softmax", 8), 0, straight, progress=False, params=CLASSIFY_PARAMS)
    _kill_after_step_10(monkeypatch, run)
    torch.save({"step": 10, "payload": _Payload(marker)}, run / "checkpoint.pt")
    caplog.set_level(logging.WARNING)
    train_module.train(classify_spec("softmax", 8), 0, run, progress=False, params=CLASSIFY_PARAMS)
    assert not marker.exists(), "the planted pickle ran"
    (aside,) = run.glob("checkpoint.pt.unreadable-*")
    assert "refused: the checkpoint holds objects that would run code" in caplog.text and aside.name in caplog.text
    for key, value in final_parameters(straight).items():
        torch.testing.assert_close(value, final_parameters(run)[key])


def test_the_checkpoint_loader_refuses_every_pickled_object_but_reads_rng_state(tmp_path):
    import random

    import numpy as np

    from pipeline_lib.core.checkpoint import load_torch_state, rng_state, set_rng_state

    good = tmp_path / "good.pt"
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    torch.save({"rng": rng_state(), "step": 1}, good)
    expected = (torch.rand(2), np.random.rand(2), random.random())
    set_rng_state(load_torch_state(good)["rng"])
    got = (torch.rand(2), np.random.rand(2), random.random())
    assert torch.equal(expected[0], got[0]) and np.array_equal(expected[1], got[1]) and expected[2] == got[2]
    bad = tmp_path / "bad.pt"
    torch.save({"rng": np.random.get_state()}, bad)  # a numpy object: refused like any other global
    assert load_torch_state(bad) is None and not bad.exists()


# --- item 4: one normal form for "the same question" -------------------------------------------------------------

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


# --- item 8: raw sources tracked by content ----------------------------------------------------------------------

def test_sources_digest_follows_content_not_size_or_mtime(tmp_path):
    import os

    from pipeline_lib.core.data.real import sources_digest

    raw = tmp_path / "raw.jsonl"
    raw.write_text('{"question": "What is 7 + 7?"}\n')
    before, stat = sources_digest([str(raw)]), raw.stat()
    raw.write_text('{"question": "What is 8 + 8?"}\n')  # same size
    os.utime(raw, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the old mtime
    assert sources_digest([str(raw)]) != before
    raw.write_text('{"question": "What is 7 + 7?"}\n')
    assert sources_digest([str(raw)]) == before
    assert sources_digest([str(tmp_path / "gone.jsonl")]) != before


@pytest.mark.slow  # one Snakemake build and four dry runs (about 40 CPU s)
def test_a_raw_source_replaced_with_same_size_or_older_content_plans_the_build(workflow_copy):
    """The reported case: a raw file replaced by same-size content with its mtime restored, or by ``cp -p`` of an
    older backup, planned nothing (only the audit noticed)."""
    import os
    import shutil
    import subprocess

    import yaml

    from pipeline_lib.core.config import validate_config
    from tests.conftest import FIXTURES, REPO, real_spec, snakemake

    raw, backup = workflow_copy / "raw/deepmath.jsonl", workflow_copy / "backup/deepmath.jsonl"
    raw.parent.mkdir(), backup.parent.mkdir()
    original = (FIXTURES / "deepmath/train.jsonl").read_text()
    edited = original.replace("Evaluate 7! / 5!.", "Evaluate 8! / 6!.")  # same size: one question, another gold
    assert edited != original and len(edited) == len(original)
    backup.write_text(edited)
    os.utime(backup, (1_600_000_000, 1_600_000_000))  # an older backup
    raw.write_text(original)
    config = validate_config(yaml.safe_load((REPO / "config/config.yaml").read_text()),
                             REPO / "workflow/schemas/config.schema.yaml")
    config["data"]["datasets"]["deepmath"] = real_spec("deepmath") | {"sources": {"main": {
        "hub": "zwhe99/DeepMath-103K", "local": "raw/deepmath.jsonl"}}}
    (workflow_copy / "raw.yaml").write_text(yaml.safe_dump(config))
    target = "results/data/deepmath/rl_test.parquet"

    def plan() -> subprocess.CompletedProcess:
        result = snakemake(workflow_copy, target, "-n", "--configfile", "raw.yaml")
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    built = snakemake(workflow_copy, target, "--cores", "1", "--configfile", "raw.yaml")
    assert built.returncode == 0, built.stderr[-3000:]
    assert "Nothing to be done" in plan().stdout
    stat = raw.stat()
    raw.write_text(edited)
    os.utime(raw, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, mtime restored
    assert raw.stat().st_size == stat.st_size and raw.stat().st_mtime_ns == stat.st_mtime_ns
    replanned = plan()
    assert "data_build" in replanned.stdout and "Nothing to be done" not in replanned.stdout, replanned.stdout[-2000:]
    raw.write_text(original)  # the content it was built from: nothing to do again
    os.utime(raw, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert "Nothing to be done" in plan().stdout
    shutil.copy2(backup, raw)  # cp -p from an older backup
    assert raw.stat().st_mtime < stat.st_mtime
    replanned = plan()
    assert "data_build" in replanned.stdout and "Nothing to be done" not in replanned.stdout, replanned.stdout[-2000:]
