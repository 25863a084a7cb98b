"""CSV cells a spreadsheet would run as formulas (issue 45; pipeline_lib.core.io): neutralised with a leading
``'`` when written and read back as written; numbers, dash placeholders and ordinary text are left alone, so a frame
without such a cell is written byte for byte as pandas writes it. A row of docs/hostile_cases.md."""

from __future__ import annotations

import pandas as pd

from pipeline_lib.core.io import from_spreadsheet_cell, read_csv_frame, spreadsheet_cell, write_csv_frame

FORMULAS = ["=1+1", "+1+1", "-2+3+cmd|' /C calc'!A0", "@SUM(A1)", "\tx", "\rx", "'=quoted already", "'plain quote"]


def test_spreadsheet_cells_are_neutralised_and_read_back_as_written(tmp_path):
    for text in FORMULAS:
        assert spreadsheet_cell(text) == "'" + text and from_spreadsheet_cell(spreadsheet_cell(text)) == text
    for text in ("-3", "+1.5e-2", "--", "plain", "", "a=b"):  # numbers and ordinary text are left alone
        assert spreadsheet_cell(text) == text == from_spreadsheet_cell(text)
    frame = pd.DataFrame({"label": [*FORMULAS, "GRPO"], "value": [-1.5] * 9, "=col": [True] * 9})
    write_csv_frame(frame, tmp_path / "t.csv")
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0] == "label,value,'=col" and lines[1] == "'=1+1,-1.5,True"
    plain = pd.DataFrame({"label": ["GRPO", "--", "-", "-3"], "value": [-1.5, 2.0, 3.0, 4.0]})  # no formula cell:
    write_csv_frame(plain, tmp_path / "plain.csv")  # byte for byte as pandas writes it
    assert (tmp_path / "plain.csv").read_text() == plain.to_csv(index=False)
    back = read_csv_frame(tmp_path / "t.csv")
    assert back["label"].tolist() == frame["label"].tolist() and back.columns.tolist() == frame.columns.tolist()
