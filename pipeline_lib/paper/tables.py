"""Table writers shared by every paper artefact: booktabs LaTeX, Markdown and CSV."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from pipeline_lib.core.io import write_csv_frame, write_text

__all__ = ["latex_escape", "to_latex_booktabs", "to_markdown", "write_table"]

_LATEX_SPECIALS = {"&": r"\&", "%": r"\%", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
                   "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


def to_latex_booktabs(
    frame: pd.DataFrame,
    caption: str,
    label: str,
    raw_columns: Sequence[str] = (),
    column_format: str | None = None,
) -> str:
    """A ``table`` environment with booktabs rules; ``raw_columns`` hold LaTeX already."""
    columns = list(frame.columns)
    column_format = column_format or "l" + "c" * (len(columns) - 1)
    header = " & ".join(rf"\textbf{{{c if c in raw_columns else latex_escape(str(c))}}}" for c in columns) + r" \\"
    rows = []
    for _, row in frame.iterrows():
        cells = [str(row[c]) if c in raw_columns else latex_escape(str(row[c])) for c in columns]
        rows.append(" & ".join(cells) + r" \\")
    return "\n".join([
        r"\begin{table}[t]", r"\centering", r"\small",
        rf"\begin{{tabular}}{{{column_format}}}", r"\toprule", header, r"\midrule", *rows,
        r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", rf"\label{{{label}}}", r"\end{table}", "",
    ])


def to_markdown(frame: pd.DataFrame) -> str:
    columns = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(str(v).replace("|", r"\|") for v in row) + " |")
    return "\n".join(lines) + "\n"


def write_table(
    frame: pd.DataFrame,
    stem: str | os.PathLike[str],
    caption: str,
    label: str,
    latex_frame: pd.DataFrame | None = None,
    raw_columns: Sequence[str] = (),
    column_format: str | None = None,
) -> list[Path]:
    """Write ``stem``.csv/.md/.tex; ``latex_frame`` may carry LaTeX-formatted cells."""
    stem = Path(stem)
    paths = [stem.with_suffix(".csv"), stem.with_suffix(".md"), stem.with_suffix(".tex")]
    write_csv_frame(frame, paths[0])
    write_text(paths[1], f"**{caption}**\n\n" + to_markdown(frame))
    write_text(paths[2], to_latex_booktabs(latex_frame if latex_frame is not None else frame, caption, label,
                                           raw_columns=raw_columns, column_format=column_format))
    return paths
