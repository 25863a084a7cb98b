"""Atomic file output: a reader never sees half a file, a crash never leaves one.

Every writer in the package goes through :func:`atomic_path`: content is written
to a temporary sibling and renamed over the target only once complete. CSV files go
through :func:`write_csv_rows` / :func:`write_csv_frame`, which neutralise cells a
spreadsheet would run as a formula, and are read back with :func:`read_csv_frame` /
:func:`from_spreadsheet_cell`.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic_path", "from_spreadsheet_cell", "output_set", "read_csv_frame", "save_figure", "sha256_file",
           "spreadsheet_cell", "write_csv_frame", "write_csv_rows", "write_json", "write_text"]


_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` on success.

    The temporary name keeps the target's suffix so format-sniffing writers
    (matplotlib's ``savefig``, pandas) pick the right format.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".tmp{target.suffix}", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the permissions open() would
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def output_set(*targets: str | os.PathLike[str]) -> Iterator[None]:
    """A job's outputs as one set: each file is still written atomically (:func:`atomic_path`), and when anything
    inside fails (a full disk mid-write, an error between two files) every target and its provenance sidecar is
    removed, the ones written before the failure and any older copy, so no partial or mixed set is left behind."""
    try:
        yield
    except BaseException:
        for target in targets:
            for path in (Path(target), Path(f"{target}.prov.json")):  # provenance.SIDECAR_SUFFIX
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        raise


def write_text(target: str | os.PathLike[str], text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(target: str | os.PathLike[str], payload: Any) -> None:
    write_text(target, json.dumps(payload, indent=2, sort_keys=True, allow_nan=False) + "\n")


#: First characters that make a spreadsheet read a cell as a formula (OWASP "CSV injection"), and the quote that
#: marks a neutralised cell (so a cell that itself began with a quote is quoted too, and the mark is reversible).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")
#: Left as written: a plain number (a spreadsheet reads it as that number) and a placeholder of dashes (``--``, "not
#: run"), which computes nothing.
_HARMLESS = re.compile(r"^(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|-+)$")


def spreadsheet_cell(value: Any) -> Any:
    """``value`` safe to open in a spreadsheet: text that would start a formula gets a leading ``'`` (OWASP).

    A plain number written as text (``-3``, ``+1.5e-2``) and a dash placeholder (``--``) are left alone.
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _HARMLESS.match(value):
        return "'" + value
    return value


def from_spreadsheet_cell(value: Any) -> Any:
    """The text :func:`spreadsheet_cell` was given: its leading ``'`` removed."""
    if isinstance(value, str) and value.startswith("'") and value[1:].startswith(_FORMULA_START):
        return value[1:]
    return value


def write_csv_rows(target: str | os.PathLike[str], rows: Iterable[Iterable[Any]]) -> None:
    """A CSV a person may open in a spreadsheet: every cell through :func:`spreadsheet_cell`, written atomically."""
    buffer = io.StringIO()
    csv.writer(buffer).writerows([spreadsheet_cell(cell) for cell in row] for row in rows)
    write_text(target, buffer.getvalue())


def write_csv_frame(frame: Any, target: str | os.PathLike[str]) -> None:
    """A pandas frame as CSV (no index), its text cells and column names through :func:`spreadsheet_cell`."""
    safe = frame.rename(columns=spreadsheet_cell)
    carriage_return = False
    for column in safe.columns:
        if not _is_numeric(safe[column]):
            safe[column] = safe[column].map(spreadsheet_cell)
            carriage_return |= bool(safe[column].map(lambda cell: isinstance(cell, str) and "\r" in cell).any())
    with atomic_path(target) as tmp:
        # the csv module quotes a cell holding a line terminator's character, and "\n" alone leaves a "\r" bare,
        # which splits the row for every reader: a frame with one is written with "\r\n" rows
        safe.to_csv(tmp, index=False, lineterminator="\r\n" if carriage_return else "\n")


def read_csv_frame(path: str | os.PathLike[str]) -> Any:
    """A CSV written by :func:`write_csv_frame`, as pandas reads it, with the text cells as they were given."""
    import pandas as pd  # only the readers of tables need pandas; core.io is imported by every job

    frame = pd.read_csv(path).rename(columns=from_spreadsheet_cell)
    for column in frame.columns:
        if not _is_numeric(frame[column]):
            frame[column] = frame[column].map(from_spreadsheet_cell)
    return frame


def _is_numeric(column: Any) -> bool:
    """A numeric or boolean column (no text cell to neutralise)."""
    return column.dtype.kind in "biufcmM"


def sha256_file(path: str | os.PathLike[str], chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def save_figure(fig: Any, *paths: str | os.PathLike[str], dpi: int = 150) -> None:
    """Save a matplotlib figure to each path (format from the suffix) atomically, then close it."""
    import matplotlib.pyplot as plt

    for path in paths:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
