"""Hostile cases, round three (issue 35, classes 4, 5, 9, 10): scores that were not accuracies, runs that diverged
and exited 0, configs the schema accepted that made no sense, and data files whose duplicates the last one won. Each
gets a correct number or a sentence naming the key, file, line or step. The table is docs/hostile_cases.md."""

from __future__ import annotations

import pytest

from tests.conftest import RL, SFT

# --- class 5: a diverged run stops non-zero naming the step ---------------------------------------------------------

def test_an_rl_run_whose_loss_turns_nan_stops_naming_the_step_and_writes_no_final_model(tiny, tmp_path):
    """tau 1e-300 is 0 in float32: R / tau is NaN, so every weight would be NaN after step 1 (was: DONE.json)."""
    from pipeline_lib.engines.local import rl as rl_module
    from pipeline_lib.engines.local.common import DivergedError

    spec = RL | {"advantage_params": {"tau": 1e-300}, "steps": 2}
    with pytest.raises(DivergedError, match=r"step 1 diverged: loss nan"):
        rl_module.train_rl(spec, tiny / "data/rl_train.parquet", tiny / "init", tmp_path, 0, progress=False)
    assert not (tmp_path / "DONE.json").exists() and not (tmp_path / "final").exists()


def test_an_sft_run_whose_weights_overflow_stops_naming_the_step(tiny, tmp_path):
    from pipeline_lib.engines.local import sft as sft_module
    from pipeline_lib.engines.local.common import DivergedError

    with pytest.raises(DivergedError, match=r"SFT .*: step \d+ diverged"):
        sft_module.train_sft(SFT | {"lr": 1e30, "warmup_steps": 0}, tiny / "data/sft_train.parquet", tiny / "tok",
                             tmp_path, 0, progress=False)
    assert not (tmp_path / "DONE.json").exists() and not (tmp_path / "final").exists()


# --- class 10: data files whose duplicates used to be resolved silently -----------------------------------------------

@pytest.mark.parametrize("name, text, says", [
    ("train.csv", "question,final_answer,final_answer\nWhat?,1,2\n",
     r"train\.csv, line 1: the header names column\(s\) \['final_answer'\] more than once"),
    ("train.jsonl", '{"question": "What?", "final_answer": "1"}\n{"question": "Why?", "final_answer": "1", '
                    '"final_answer": "2"}\n', r"train\.jsonl, line 2: key 'final_answer' appears twice"),
    ("train.json", '[{"question": "What?", "final_answer": "1", "question": "Why?"}]',
     r"train\.json: key 'question' appears twice"),
    ("train.csv", "question,final_answer\n", r"train\.csv: split 'train' has no rows"),
    ("train.jsonl", "", r"train\.jsonl: split 'train' has no rows"),
    ("train.jsonl", "\n\n", r"train\.jsonl: split 'train' has no rows"),
], ids=["csv_duplicate_header", "jsonl_duplicate_key", "json_duplicate_key", "csv_header_only", "empty_jsonl",
        "blank_jsonl"])
def test_duplicate_columns_and_empty_files_are_errors_naming_file_and_line(tmp_path, name, text, says):
    from pipeline_lib.data.schema import DataError
    from pipeline_lib.data.sources import SourceSpec, load_split

    (tmp_path / name).write_text(text)
    with pytest.raises(DataError, match=says) as excinfo:
        load_split("deepmath", SourceSpec(hub="x", local=str(tmp_path / name)), "train", ("question", "final_answer"))
    assert "_line" not in str(excinfo.value)
