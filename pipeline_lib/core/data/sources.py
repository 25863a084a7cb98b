"""Reading raw datasets: from the Hugging Face hub by name and revision, or from local files.

Local sources (air-gapped clusters, tests) are a directory holding one file per split
(``{split}.parquet``, ``.jsonl``, ``.json`` or ``.csv``) or, for a one-split dataset,
a single file. Every frame is checked for the columns its builder needs before use.

Local text files are read without type guessing: JSON values keep their JSON types
(a 30-digit integer stays exact, ``"007"`` stays a string, a missing key is ``None``,
never NaN), and every CSV cell is a string. Each frame carries a ``_line`` column, the
line of the file a row came from (JSONL and CSV; the record number for JSON, the row
for parquet and the hub), so a builder's error names the file and that line even after
rows were split or de-duplicated (:func:`where`).

Every kind of bad row is named by file and line: bytes that are not UTF-8 (or a character cut at
the end of a truncated file), JSON that does not parse, a CSV row of the wrong width. CSV cells
may be as long as real data has them (a MeetingBank transcript exceeds the csv module's 128 KB
default), and a null in a parquet integer column stays ``None`` in its own row instead of turning
the whole column into floats (which blamed the first row for the seventh's null).
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline_lib.core.data.schema import DataError, source_fingerprint

__all__ = ["LINE", "SourceSpec", "load_split", "where"]

LINE = "_line"  # the column holding each row's line (or record/row number) in its source file

# The csv module's cell limit is process-wide and 128 KB by default; real transcripts are longer. Raised once, to
# the largest value a C long holds on every platform (sys.maxsize overflows where a C long is 32 bits).
csv.field_size_limit(max(csv.field_size_limit(), min(sys.maxsize, 2**31 - 1)))


def _frame(records: list[dict[str, Any]], lines: list[int]) -> pd.DataFrame:
    """Object columns holding the parsed values as they are (no dtype inference, missing keys as None)."""
    columns = list(dict.fromkeys(key for record in records for key in record))
    data = {c: pd.Series([r.get(c) for r in records], dtype=object) for c in columns}
    return pd.DataFrame({**data, LINE: pd.Series(lines, dtype="int64")})


def _read_text(path: Path, dataset: str) -> str:
    """The file as text, or a DataError naming the line and column of the first byte that is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8").removeprefix("\ufeff")  # a byte-order mark is not part of the first cell
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        what = ("a UTF-8 character cut off at the end of the file (truncated?)" if exc.end >= len(data)
                and exc.reason == "unexpected end of data" else f"byte {data[exc.start:exc.start + 1]!r} is not UTF-8")
        raise DataError(dataset, f"{path}, line {line}", f"{what} (column {column}); the file must be UTF-8 "
                        "text") from None


class _DuplicateKeyError(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: an object with the same key twice is an error (JSON keeps the last)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKeyError(f"key {key!r} appears twice in one object (JSON would silently keep the last)")
        seen[key] = value
    return seen


def _loads(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_unique_keys)


#: A JSON escape of a UTF-16 surrogate half (``\ud800``-``\udfff``): only a pair of them is a character.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _lone_surrogate(text: str, value: Any) -> str | None:
    """Why ``value`` (parsed from ``text``) cannot be written as UTF-8: a lone surrogate escape, which JSON parses into
    a string that no UTF-8 file (Parquet, JSON Lines) can hold; None when it can. The escape is looked for in the
    text first, so a clean file costs one regular-expression scan."""
    if not _SURROGATE_ESCAPE.search(text):
        return None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"a lone UTF-16 surrogate escape ({exc.object[exc.start:exc.end].encode('unicode_escape').decode()}) "
                "is not a character; the value must be valid Unicode")
    return None


def _read_jsonl(path: Path, dataset: str) -> pd.DataFrame:
    records, lines = [], []
    for number, line in enumerate(_read_text(path, dataset).split("\n"), 1):  # only \n ends a JSON Lines line
        if not line.strip():
            continue
        try:
            record = _loads(line)
        except _DuplicateKeyError as exc:
            raise DataError(dataset, f"{path}, line {number}", str(exc)) from None
        except ValueError as exc:
            raise DataError(dataset, f"{path}, line {number}", f"not valid JSON ({exc})") from None
        if not isinstance(record, dict):
            raise DataError(dataset, f"{path}, line {number}",
                            f"expected a JSON object, got {type(record).__name__}")
        if (problem := _lone_surrogate(line, record)) is not None:
            raise DataError(dataset, f"{path}, line {number}", problem)
        records.append(record)
        lines.append(number)
    return _frame(records, lines)


def _read_json(path: Path, dataset: str) -> pd.DataFrame:
    """A JSON array of objects (numbered as records 1, 2, ...)."""
    try:
        data = _loads(_read_text(path, dataset))
    except _DuplicateKeyError as exc:
        raise DataError(dataset, str(path), str(exc)) from None
    except ValueError as exc:
        raise DataError(dataset, str(path), f"not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise DataError(dataset, str(path), "expected a JSON array of objects (one per row)")
    for number, record in enumerate(data, 1):
        if not isinstance(record, dict):
            raise DataError(dataset, f"{path}, record {number}", f"expected a JSON object, got {type(record).__name__}")
        if (problem := _lone_surrogate(json.dumps(record), record)) is not None:
            raise DataError(dataset, f"{path}, record {number}", problem)
    return _frame(data, list(range(1, len(data) + 1)))


def _read_csv(path: Path, dataset: str) -> pd.DataFrame:
    """Every cell a string (an empty cell is ``""``); rows numbered by the file line they start on."""
    records, lines = [], []
    reader = csv.reader(io.StringIO(_read_text(path, dataset), newline=""))
    start = 1
    try:
        header = next(reader, None)
        if header is None:
            return _frame([], [])
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:
            raise DataError(dataset, f"{path}, line {reader.line_num}", f"the header names column(s) {repeated} more "
                            "than once (a reader would silently keep only the last)")
        start = reader.line_num + 1
        for row in reader:
            if len(row) != len(header) and any(row):
                raise DataError(dataset, f"{path}, line {start}", f"{len(row)} cells for {len(header)} columns")
            if any(row):
                records.append(dict(zip(header, row, strict=True)))
                lines.append(start)
            start = reader.line_num + 1
    except csv.Error as exc:  # e.g. a cell beyond even the raised size limit
        raise DataError(dataset, f"{path}, line {start}", f"not readable as CSV ({exc})") from None
    return _frame(records, lines)


def _read_parquet(path: Path, dataset: str) -> pd.DataFrame:
    """Typed columns, nothing guessed; an integer column with nulls keeps its integers (None where null) rather
    than becoming floats, so the builder names the row that has the null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(dataset, str(path), f"not a readable parquet file ({exc})") from None
    frame = table.to_pandas(integer_object_nulls=True)
    for column in frame.columns:  # nullable extension dtypes a pandas writer recorded (Int64, boolean): None for NA
        if isinstance(frame[column].dtype, pd.api.extensions.ExtensionDtype) and frame[column].hasnans:
            frame[column] = pd.Series([None if pd.isna(v) else v for v in frame[column].astype(object)],
                                      index=frame.index, dtype=object)
    return frame.assign(**{LINE: range(1, len(frame) + 1)})


_READERS: dict[str, Callable[[Path, str], pd.DataFrame]] = {
    ".parquet": _read_parquet, ".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv}
_UNIT = {".jsonl": "line", ".csv": "line", ".json": "record"}


def where(facts: dict[str, Any], line: int) -> str:
    """``<file>, line N`` (record N for JSON, row N for parquet and the hub) for an error message."""
    return f"{facts['file']}, {facts.get('unit', 'row')} {line}"


@dataclass(frozen=True)
class SourceSpec:
    """Where one raw dataset comes from (config ``data.datasets.<name>.sources.<role>``)."""

    hub: str
    config: str | None = None
    revision: str | None = None
    local: str | None = None

    @classmethod
    def from_config(cls, section: dict[str, Any]) -> SourceSpec:
        return cls(hub=section["hub"], config=section.get("config"), revision=section.get("revision"),
                   local=section.get("local"))

    def describe(self) -> dict[str, Any]:
        return {"hub": self.hub, "config": self.config, "revision": self.revision or "unpinned (hub default branch)",
                "local": self.local}


def _local_file(spec: SourceSpec, split: str) -> Path:
    root = Path(spec.local)
    if root.is_file():
        return root
    for suffix in _READERS:
        candidate = root / f"{split}{suffix}"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{spec.hub}: no file for split {split!r} under {root} "
                            f"(expected {split}.parquet/.jsonl/.json/.csv)")


def load_split(dataset: str, spec: SourceSpec, split: str, required: tuple[str, ...]) -> tuple[pd.DataFrame, dict]:
    """One split as a DataFrame (with its :data:`LINE` column) plus facts for the manifest; raises DataError
    naming missing columns."""
    if spec.local:
        path = _local_file(spec, split)
        if path.suffix not in _READERS:  # the config check catches this at parse time; a direct call gets it here
            raise DataError(dataset, str(path), f"no reader for suffix {path.suffix!r}; readable: {list(_READERS)}")
        frame = _READERS[path.suffix](path, dataset)
        origin = str(path)
        facts = {"split": split, "file": origin, "unit": _UNIT.get(path.suffix, "row"), **source_fingerprint([path])}
    else:  # pragma: no cover - needs the network; the same frames are built from local fixtures in tests
        import datasets

        loaded = datasets.load_dataset(spec.hub, spec.config, revision=spec.revision, split=split)
        frame = loaded.to_pandas()
        frame = frame.assign(**{LINE: range(1, len(frame) + 1)})
        origin = f"hf://{spec.hub}/{spec.config or ''}@{spec.revision or 'main'}:{split}"
        facts = {"split": split, "file": origin, "unit": "row", "fingerprint": getattr(loaded, "_fingerprint", None)}
    if frame.empty:  # before the columns: an empty file has none to name
        raise DataError(dataset, origin, f"split {split!r} has no rows (an empty file, or a CSV header with no rows "
                        "below it)")
    missing = [c for c in required if c not in frame.columns]
    if missing:
        found = [c for c in frame.columns if c != LINE]
        raise DataError(dataset, origin, f"missing column(s) {missing}; found {found}")
    return frame, facts


