"""Judge files as people and disks really make them (issue 60 item 7): a ratings CSV saved by a spreadsheet (BOM,
CRLF, spaces) is read, a rating that Python's ``int`` would stretch to a number (``1_0``) is refused, and a judge job
that fails while writing (a full disk) leaves no partial output set. Rows of docs/hostile_cases.md."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from pipeline_lib.core.rubrics import RUBRICS
from pipeline_lib.jobs.judge import calibration, score
from tests.chat_server import ChatServer

MEETING = RUBRICS["meetingbank"]
ITEMS = {"item-001", "item-002"}


def _sheet(rows: list[list[str]], header: list[str] | None = None) -> str:
    return "\r\n".join(",".join(row) for row in [header or ["item_id", *MEETING.keys], *rows]) + "\r\n"


def test_an_excel_saved_ratings_csv_with_a_bom_and_crlf_is_read(tmp_path):
    """Excel's "CSV UTF-8" starts with a BOM and ends rows with CRLF: it was reported as missing ``item_id``."""
    path = tmp_path / "ratings.csv"
    path.write_bytes(b"\xef\xbb\xbf" + _sheet([["item-001", *["5"] * 5], ["item-002", " 7", *["7"] * 4]]).encode())
    assert calibration.read_ratings(path, MEETING, ITEMS) == {"item-001": MEETING.normalise(dict.fromkeys(
        MEETING.keys, 5)), "item-002": MEETING.normalise(dict.fromkeys(MEETING.keys, 7))}
    spaced = tmp_path / "spaced.csv"  # a header cell with a space after it (a hand-edited sheet)
    spaced.write_text(_sheet([["item-001", *["5"] * 5]], ["item_id ", *MEETING.keys]))
    assert set(calibration.read_ratings(spaced, MEETING, ITEMS)) == {"item-001"}


@pytest.mark.parametrize("cell", ["1_0", "1e1", "\u0661\u0660", "10.0", "", "0x0A"])
def test_a_rating_int_would_stretch_to_a_number_is_refused_naming_file_and_line(tmp_path, cell):
    """``int("1_0")`` is 10 (and ``int("١٠")`` too): a rating is a plain integer, anything else an error."""
    path = tmp_path / "ratings.csv"
    path.write_text(_sheet([["item-001", *["5"] * 5], ["item-002", cell, *["5"] * 4]]))
    with pytest.raises(calibration.RatingsError, match=rf"ratings.csv:3: {MEETING.keys[0]}=.* is not an integer"):
        calibration.read_ratings(path, MEETING, ITEMS)


def test_a_ratings_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_bytes(_sheet([["item-001", *["5"] * 5], ["item-002", *["5"] * 5]]).encode() + b"caf\xe9\r\n")
    with pytest.raises(calibration.RatingsError, match=r"ratings.csv:4: not UTF-8"):
        calibration.read_ratings(path, MEETING, ITEMS)


def test_a_judge_job_that_fails_mid_write_leaves_no_output_set(tmp_path, monkeypatch):
    """A full disk while ``summary.json`` is written: ``scores.jsonl`` (written just before) and the older set of a
    previous run are removed with it, so no partial or mixed set is left for anything to read."""
    import pandas as pd

    n = 3
    data = tmp_path / "data.parquet"
    pd.DataFrame({"prompt": [f"Summarise segment {i}" for i in range(n)],
                  "reward_model": [{"ground_truth": "The motion passed."}] * n,
                  "extra_info": [{"title": f"Council {i}", "transcript": f"Chair: motion {i} passed 5 to 2."}
                                 for i in range(n)]}).to_parquet(data)
    generations = tmp_path / "generations.jsonl"
    generations.write_text("".join(json.dumps({"prompt_index": i, "mode": "greedy", "sample": 0,
                                               "text": f"The motion passed, item {i}."}) + "\n" for i in range(n)))
    out = tmp_path / "out"
    outputs = [out / "scores.jsonl", out / "summary.json"]
    out.mkdir()
    for path in outputs:  # a previous run's complete set
        path.write_text("old\n")
        Path(f"{path}.prov.json").write_text("{}\n")
    real_write_json = score.write_json

    def disk_full(target, payload):
        if Path(target).name == "summary.json":
            Path(target).with_name(".summary.json.partial").write_text("{")  # what a torn write leaves
            raise OSError(errno.ENOSPC, "No space left on device", str(target))
        return real_write_json(target, payload)

    monkeypatch.setattr(score, "write_json", disk_full)
    with ChatServer(content=lambda body: json.dumps(dict.fromkeys(MEETING.keys, 6))) as server:
        judge = {"kind": "llm", "label": "judge", "endpoint": {"base_url": server.base_url, "model": "judge"}}
        argv = ["--judge", json.dumps(judge), "--rubric", "meetingbank", "--generations", str(generations),
                "--data", str(data), "--cache", str(tmp_path / "judge.sqlite"), "--out", str(out)]
        with pytest.raises(OSError, match="No space left"):
            score.main(argv)
        assert not [p for p in outputs if p.exists()] and not list(out.glob("*.prov.json"))
        monkeypatch.setattr(score, "write_json", real_write_json)
        assert score.main(argv) == 0  # the rerun writes the whole set (its answers come from the cache)
    assert all(p.exists() for p in outputs)
    assert len((out / "scores.jsonl").read_text().splitlines()) == n
