"""Data rows of every kind of bad (issue 28): non-finite GSM8K golds are counted out, never golds; bytes that are not
UTF-8, integers beyond int64, a difficulty beyond a float's range and a null in a parquet integer column are errors
naming the file and line (or row); CSV cells over 128 KB are read whole. The cases are rows of
docs/hostile_cases.md."""

from __future__ import annotations

import json

import pandas as pd
import pytest


@pytest.mark.parametrize("gold", ["NaN", "nan", "inf", "-Infinity", "1e400", "1_000"])
def test_gsm8k_non_finite_golds_are_counted_out_never_golds(tmp_path, gold):
    from pipeline_lib.core.data.build import build_real
    from tests.conftest import FIXTURES, real_spec

    main = tmp_path / "main"
    main.mkdir()
    (main / "test.jsonl").write_text((FIXTURES / "gsm8k/main/test.jsonl").read_text())
    rows = (FIXTURES / "gsm8k/main/train.jsonl").read_text().splitlines()
    rows.append(json.dumps({"question": "How many?", "answer": f"Many.\n#### {gold}"}))
    (main / "train.jsonl").write_text("\n".join(rows) + "\n")
    spec = real_spec("gsm8k")
    spec["sources"]["main"]["local"] = str(main)
    build_real("gsm8k", spec, tmp_path / "out", None)
    manifest = json.loads((tmp_path / "out/manifest.json").read_text())
    golds = [row["reward_model"]["ground_truth"] for split in ("train", "test")
             for row in pd.read_parquet(tmp_path / f"out/rl_{split}.parquet").to_dict("records")]
    assert gold not in golds and all(g.lstrip("-").replace(".", "", 1).isdigit() for g in golds), golds
    # the fixture's one word gold ("three") and this row, each counted
    assert manifest["filters"]["unparseable gold answer (no finite decimal number after ####)"] == 2, manifest


def _deepmath_file(tmp_path, rows_bytes: list[bytes], suffix=".jsonl") -> object:
    path = tmp_path / f"train{suffix}"
    path.write_bytes(b"\n".join(rows_bytes) + b"\n")
    return path


def _deepmath_rows(n=10):
    from tests.conftest import _deepmath_row

    return [json.dumps(_deepmath_row(i)).encode() for i in range(n)]


@pytest.mark.parametrize("damage, says", [
    (lambda rows: [*rows[:6], rows[6].replace(b"What", b"Wh\xe9t"), *rows[7:]],
     r"train\.jsonl, line 7: byte b'\\xe9' is not UTF-8 \(column 17\)"),
    (lambda rows: [*rows[:4], rows[4][:-2] + "é".encode()[:1]], r"train\.jsonl, line 5: a UTF-8 character cut off"),
], ids=["latin1_byte", "cut_mid_character"])
def test_jsonl_that_is_not_utf8_names_file_and_line(tmp_path, damage, says):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import _build

    path = _deepmath_file(tmp_path, damage(_deepmath_rows()))
    if "cut" in says:
        path.write_bytes(path.read_bytes().rstrip(b"\n"))  # a truncated file ends mid-character
    with pytest.raises(DataError, match=r"deepmath: .*" + says):
        _build("deepmath", path, tmp_path)


def _deepmath_csv(tmp_path, rows, encoding="utf-8"):
    import csv
    import io

    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path = tmp_path / "train.csv"
    path.write_bytes(buffer.getvalue().encode(encoding))
    return path


def test_csv_cells_longer_than_128kb_are_read(tmp_path):
    from tests.conftest import _build, _deepmath_row, _golds

    rows = [_deepmath_row(i) for i in range(12)]
    long_solution = "A long transcript-sized solution. " * 20_000 + "\\boxed{0}"  # ~680 KB, like MeetingBank's
    rows[0]["r1_solution_1"] = long_solution
    out = _build("deepmath", _deepmath_csv(tmp_path, rows), tmp_path)
    assert len(_golds(out)) == 12
    references = {row["extra_info"]["reference"] for split in ("train", "test")
                  for row in pd.read_parquet(out / f"rl_{split}.parquet").to_dict("records")}
    assert long_solution in references  # read whole, not cut at the csv module's 128 KB default


def test_csv_in_latin1_names_file_and_line(tmp_path):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import _build, _deepmath_row

    rows = [_deepmath_row(i) for i in range(8)]
    rows[5]["topic"] = "géométrie"
    with pytest.raises(DataError, match=r"train\.csv, line 7: byte b'\\xe9' is not UTF-8"):
        _build("deepmath", _deepmath_csv(tmp_path, rows, encoding="latin-1"), tmp_path)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**30], ids=["int64_max_plus_1", "int64_min_minus_1",
                                                                       "ten_to_30"])
def test_countdown_integers_beyond_int64_name_file_and_line(tmp_path, value):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import FIXTURES, _build

    main = (FIXTURES / "countdown/main/train.jsonl").read_text().splitlines()
    main.insert(6, json.dumps({"target": value, "nums": [1, 2, 4]}))
    (tmp_path / "main.jsonl").write_text("\n".join(main) + "\n")
    with pytest.raises(DataError, match=r"main\.jsonl, line 7: target must be an integer within the 64-bit range"):
        _build("countdown", tmp_path / "main.jsonl", tmp_path)


def test_deepmath_difficulty_beyond_float_range_names_file_and_line(tmp_path):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import _build, _deepmath_row

    rows = [json.dumps(_deepmath_row(i)) for i in range(10)]
    rows[3] = json.dumps(_deepmath_row(3)).replace('"difficulty": 1.0', '"difficulty": 1' + "0" * 400)
    (tmp_path / "train.jsonl").write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"train\.jsonl, line 4: difficulty must be a finite number"):
        _build("deepmath", tmp_path / "train.jsonl", tmp_path)


def test_a_null_in_a_parquet_integer_column_is_blamed_on_its_own_row(tmp_path):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import FIXTURES, _build

    rows = [json.loads(line) for line in (FIXTURES / "countdown/main/train.jsonl").read_text().splitlines()]
    targets = pd.array([r["target"] for r in rows], dtype="Int64")
    targets[6] = None  # row 7
    frame = pd.DataFrame({"target": targets, "nums": [r["nums"] for r in rows]})
    frame.to_parquet(tmp_path / "train.parquet", index=False)
    with pytest.raises(DataError, match=r"train\.parquet, row 7: target must be an integer, got None"):
        _build("countdown", tmp_path / "train.parquet", tmp_path)
    frame["target"] = frame["target"].fillna(7)
    frame.to_parquet(tmp_path / "train.parquet", index=False)
    _build("countdown", tmp_path / "train.parquet", tmp_path)  # the repaired file builds


def test_a_lone_surrogate_escape_is_refused_naming_file_and_line(tmp_path):
    """JSON parses `\\ud800` into a string no UTF-8 file can hold: refused at its line, before any writer fails with
    a traceback; a proper surrogate pair (an emoji) is a character and is read."""
    from pipeline_lib.core.data.schema import DataError
    from pipeline_lib.core.data.sources import _read_json, _read_jsonl

    good = {"question": "What is 1 + 1? \U0001f600", "answer": "2"}
    lines = [json.dumps(good), json.dumps(good), '{"question": "What is \\ud800 2?", "answer": "4"}']
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"train\.jsonl, line 3: a lone UTF-16 surrogate escape \(\\ud800\)"):
        _read_jsonl(path, "gsm8k")
    array = tmp_path / "train.json"
    array.write_text("[" + ", ".join(lines) + "]")
    with pytest.raises(DataError, match=r"train\.json, record 3: a lone UTF-16 surrogate"):
        _read_json(array, "gsm8k")
    path.write_text("\n".join(lines[:2]) + "\n")
    assert list(_read_jsonl(path, "gsm8k")["question"]) == [good["question"]] * 2
