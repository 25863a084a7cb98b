"""Reading a local data file (pipeline_lib.core.data.sources, issue 35, class 10): a CSV header naming a column twice,
a JSONL line or JSON record giving a key twice, and an empty or header-only file are errors naming the file and line,
never resolved silently (the last one used to win). The cases are rows of docs/hostile_cases.md."""

from __future__ import annotations

import pytest


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
    from pipeline_lib.core.data.schema import DataError
    from pipeline_lib.core.data.sources import SourceSpec, load_split

    (tmp_path / name).write_text(text)
    with pytest.raises(DataError, match=says) as excinfo:
        load_split("deepmath", SourceSpec(hub="x", local=str(tmp_path / name)), "train", ("question", "final_answer"))
    assert "_line" not in str(excinfo.value)
