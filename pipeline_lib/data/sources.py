"""Reading raw datasets: from the Hugging Face hub by name and revision, or from local files.

Local sources (air-gapped clusters, tests) are a directory holding one file per split
(``{split}.parquet``, ``.jsonl``, ``.json`` or ``.csv``) or, for a one-split dataset,
a single file. Every frame is checked for the columns its builder needs before use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline_lib.data.schema import DataError, source_fingerprint

__all__ = ["SourceSpec", "load_split"]

_READERS = {".parquet": pd.read_parquet, ".jsonl": lambda p: pd.read_json(p, lines=True), ".json": pd.read_json,
            ".csv": pd.read_csv}


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
    """One split as a DataFrame plus facts for the manifest; raises DataError naming missing columns."""
    if spec.local:
        path = _local_file(spec, split)
        frame = _READERS[path.suffix](path)
        origin = str(path)
        facts = {"split": split, "file": origin, **source_fingerprint([path])}
    else:  # pragma: no cover - needs the network; the same frames are built from local fixtures in tests
        import datasets

        loaded = datasets.load_dataset(spec.hub, spec.config, revision=spec.revision, split=split)
        frame = loaded.to_pandas()
        origin = f"hf://{spec.hub}/{spec.config or ''}@{spec.revision or 'main'}:{split}"
        facts = {"split": split, "file": origin, "fingerprint": getattr(loaded, "_fingerprint", None)}
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise DataError(dataset, origin, f"missing column(s) {missing}; found {list(frame.columns)}")
    if frame.empty:
        raise DataError(dataset, origin, f"split {split!r} is empty")
    return frame, facts


