"""Local dataset files are read without type guessing (issue "Nothing silent"): golds are read as written (JSON
integers exact, CSV cells as text), a missing or mistyped field, a bad Countdown task and a line that is not a JSON
object are errors naming the file and line, and a failed build (``python -m`` or Snakemake) leaves no partial
outputs."""

from __future__ import annotations

import json

import pytest

from tests.conftest import _build, _deepmath_row, _golds, _tiny_config


def _write_jsonl(path, rows, blank_lines_at=()):
    lines = []
    for index, row in enumerate(rows):
        if index in blank_lines_at:
            lines.append("")
        lines.append(row if isinstance(row, str) else json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("missing", [{"final_answer": None}, "drop"], ids=["null", "absent"])
def test_deepmath_row_without_final_answer_is_an_error_naming_file_and_line(tmp_path, missing):
    from pipeline_lib.core.data.schema import DataError

    rows = [_deepmath_row(i) for i in range(12)]
    # three duplicates first, so a row count after de-duplication would differ from the file line
    rows[1:1] = [_deepmath_row(0), _deepmath_row(0), _deepmath_row(0)]
    bad = _deepmath_row(99)
    if missing == "drop":
        del bad["final_answer"]
    else:
        bad |= missing
    rows.insert(9, bad)
    source = _write_jsonl(tmp_path / "train.jsonl", rows, blank_lines_at=(5,))  # a blank line before it, too
    with pytest.raises(DataError, match=r"deepmath: .*train\.jsonl, line 11: column 'final_answer' must be a "
                                        r"non-empty string, got None"):
        _build("deepmath", source, tmp_path)


def test_deepmath_golds_are_read_as_written(tmp_path):
    rows = [_deepmath_row(i) for i in range(16)]
    rows[0]["final_answer"] = "007"
    rows[1]["final_answer"] = 123456789012345678901234567890  # a JSON integer: exact, never 1.2345678901234568e+29
    rows[2]["final_answer"] = "123456789012345678901234567890"
    rows[3]["final_answer"] = 5  # another row's gold of another JSON type
    golds = _golds(_build("deepmath", _write_jsonl(tmp_path / "train.jsonl", rows), tmp_path))
    assert golds["What is 0 + 0?"] == "007"
    assert golds["What is 1 + 1?"] == golds["What is 2 + 2?"] == "123456789012345678901234567890"
    assert golds["What is 3 + 3?"] == "5"


@pytest.mark.parametrize("value", [7.5, 1e29, True, [1]], ids=["float", "float_big", "bool", "list"])
def test_deepmath_gold_of_another_type_is_an_error(tmp_path, value):
    from pipeline_lib.core.data.schema import DataError

    rows = [_deepmath_row(i) for i in range(10)]
    rows[4]["final_answer"] = value
    with pytest.raises(DataError, match=r"train\.jsonl, line 5: column 'final_answer'"):
        _build("deepmath", _write_jsonl(tmp_path / "train.jsonl", rows), tmp_path)


def test_csv_is_read_without_type_guessing(tmp_path):
    import csv

    from pipeline_lib.core.data.schema import DataError

    rows = [_deepmath_row(i) for i in range(16)]
    rows[0]["final_answer"] = "007"
    rows[1]["final_answer"] = "123456789012345678901234567890"
    rows[2]["question"] = "A question\nover two lines?"  # a quoted multi-line cell: later rows start a line later
    path = tmp_path / "train.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    golds = _golds(_build("deepmath", path, tmp_path))
    assert golds["What is 0 + 0?"] == "007" and golds["What is 1 + 1?"] == "123456789012345678901234567890"
    rows[6]["final_answer"] = ""  # an empty cell: a missing gold (file line 1 header + 6 rows + 1 extra line)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(DataError, match=r"train\.csv, line 9: column 'final_answer' must be a non-empty string"):
        _build("deepmath", path, tmp_path)


COUNTDOWN_BAD = [
    ({"target": 7.9, "nums": [1, 2, 4]}, r"target must be an integer, got 7\.9"),
    ({"target": 7.0, "nums": [1, 2, 4]}, r"target must be an integer, got 7\.0"),
    ({"target": "7", "nums": [1, 2, 4]}, r"target must be an integer, got '7'"),
    ({"target": None, "nums": [1, 2, 4]}, r"target must be an integer, got None"),
    ({"target": True, "nums": [1, 2, 4]}, r"target must be an integer, got True"),
    ({"nums": [1, 2, 4]}, r"target must be an integer, got None"),
    ({"target": 7, "nums": ["a", 2, 4]}, r"every entry of nums must be an integer, got 'a'"),
    ({"target": 7, "nums": [1.5, 2, 4]}, r"every entry of nums must be an integer, got 1\.5"),
    ({"target": 7, "nums": 124}, r"nums must be a list of integers, got 124"),
    ({"target": 7, "nums": "1 2 4"}, r"nums must be a list of integers, got '1 2 4'"),
    ({"target": 7, "nums": [1, 2]}, r"expected 3-4 numbers, got \[1, 2\]"),
]


@pytest.mark.parametrize("row, message", COUNTDOWN_BAD, ids=[str(i) for i in range(len(COUNTDOWN_BAD))])
def test_bad_countdown_task_is_an_error_naming_file_and_line(tmp_path, row, message):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import FIXTURES

    main = (FIXTURES / "countdown/main/train.jsonl").read_text().splitlines()
    main.insert(6, json.dumps(row))
    (tmp_path / "main.jsonl").write_text("\n".join(main) + "\n")
    with pytest.raises(DataError, match=r"countdown: .*main\.jsonl, line 7: " + message):
        _build("countdown", tmp_path / "main.jsonl", tmp_path)


@pytest.mark.parametrize("row, message", COUNTDOWN_BAD[:3], ids=["float", "float_integral", "string"])
def test_bad_countdown_gold_task_is_an_error_naming_file_and_line(tmp_path, row, message):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import FIXTURES

    gold = (FIXTURES / "countdown/gold/train.jsonl").read_text().splitlines()
    gold[2] = json.dumps(json.loads(gold[2]) | row)
    (tmp_path / "gold.jsonl").write_text("\n".join(gold) + "\n")
    with pytest.raises(DataError, match=r"countdown: .*gold\.jsonl, line 3: " + message):
        _build("countdown", FIXTURES / "countdown/main", tmp_path, gold=tmp_path / "gold.jsonl")


def test_bad_jsonl_lines_name_file_and_line(tmp_path):
    from pipeline_lib.core.data.schema import DataError

    rows = [json.dumps(_deepmath_row(i)) for i in range(5)]
    for bad, message in (("{not json", "line 3: not valid JSON"), ("[1, 2]", "line 3: expected a JSON object")):
        source = _write_jsonl(tmp_path / "train.jsonl", [*rows[:2], bad, *rows[2:]])
        with pytest.raises(DataError, match=message):
            _build("deepmath", source, tmp_path)


def _out_files(out):
    return sorted(p.name for p in out.iterdir()) if out.exists() else []


def test_failed_python_m_build_leaves_no_partial_outputs(tmp_path):
    import subprocess
    import sys

    from tests.conftest import real_spec, repo_env

    rows = [_deepmath_row(i) for i in range(30)]
    source = _write_jsonl(tmp_path / "train.jsonl", rows)
    spec = real_spec("deepmath", holdout_fraction=0.5)
    spec["sources"]["main"]["local"] = str(source)
    out = tmp_path / "results/data/deepmath"
    (out / "synthesis.sqlite").parent.mkdir(parents=True)
    (out / "synthesis.sqlite").write_text("a cache is kept")

    def build() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipeline_lib.core.data.build", "real", "--dataset", "deepmath",
                               "--spec", json.dumps(spec), "--out-dir", str(out)], capture_output=True, text=True,
                              timeout=300, env=repo_env() | {"OMP_NUM_THREADS": "1"})

    assert build().returncode == 0
    assert "rl_train.parquet.prov.json" in _out_files(out) and "manifest.json" in _out_files(out)
    rows[25]["final_answer"] = None  # the bad row is late: some splits are written before it is reached
    _write_jsonl(source, rows)
    result = build()
    assert result.returncode != 0 and f"{source}, line 26: column 'final_answer'" in result.stderr
    assert _out_files(out) == ["synthesis.sqlite"], result.stderr[-2000:]


@pytest.mark.slow
def test_failed_snakemake_build_leaves_no_partial_outputs(workflow_copy):
    import subprocess
    import sys

    import yaml

    from tests.conftest import repo_env

    rows = [_deepmath_row(i) for i in range(30)]
    source = _write_jsonl(workflow_copy / "deepmath.jsonl", rows)
    config = _tiny_config()  # the tiny default with one real dataset built
    config["data"]["datasets"]["deepmath"] = {"enabled": True, "holdout_fraction": 0.5, "sources": {
        "main": {"hub": "zwhe99/DeepMath-103K", "local": "deepmath.jsonl"}}}
    (workflow_copy / "data.yaml").write_text(yaml.safe_dump(config))

    def snakemake(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "snakemake", "results/data/deepmath/manifest.json", "--cores",
                               "1", "--configfile", "data.yaml", *args], cwd=workflow_copy, capture_output=True,
                              text=True, timeout=600, env=repo_env() | {"OMP_NUM_THREADS": "1"})

    assert snakemake().returncode == 0
    out = workflow_copy / "results/data/deepmath"
    assert "rl_test.parquet.prov.json" in _out_files(out)
    rows[25]["final_answer"] = None
    _write_jsonl(source, rows)
    result = snakemake("--forcerun", "data_build")
    assert result.returncode != 0
    log = (workflow_copy / "logs/data_build/deepmath.log").read_text()
    assert "deepmath.jsonl, line 26: column 'final_answer' must be a non-empty string" in log
    assert _out_files(out) == [], _out_files(out)


@pytest.mark.parametrize("name, role, relative, line, field, expected", [
    ("gsm8k", "demonstrations", "gsm8k/cot/train.jsonl", 2, "final_answer", "column 'final_answer'"),
    ("gsm8k", "main", "gsm8k/main/train.jsonl", 3, "answer", "column 'answer'"),
    ("meetingbank", "main", "meetingbank/train.jsonl", 4, "summary", "column 'summary'"),
    ("openthoughts", "main", "openthoughts/train.jsonl", 2, "conversations", "conversations must be a list"),
    ("openthoughts", "main", "openthoughts/train.jsonl", 3, "domain", "column 'domain' must be a string"),
])
def test_missing_or_mistyped_field_in_other_datasets_names_file_and_line(tmp_path, name, role, relative, line,
                                                                         field, expected):
    import shutil

    from pipeline_lib.core.data.build import build_real
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import FIXTURES, real_spec

    spec = real_spec(name)
    source = FIXTURES / relative
    copy = tmp_path / "src" / relative
    shutil.copytree(source.parent, copy.parent)
    rows = copy.read_text().splitlines()
    record = json.loads(rows[line - 1])
    record[field] = 12 if field in ("domain", "conversations") else None
    rows[line - 1] = json.dumps(record)
    copy.write_text("\n".join(rows) + "\n")
    local = spec["sources"][role]["local"]
    spec["sources"][role]["local"] = str(copy if local.endswith(".jsonl") else copy.parent)
    with pytest.raises(DataError, match=rf"{name}: .*{copy.name}, line {line}: .*{expected}"):
        build_real(name, spec, tmp_path / "out", None)
