"""Are two results trees the same numbers? Compares every training, evaluation and data file two runs both made.

Used to show that a refactor kept the default run bit-identical on one machine:
``python benchmarks/compare_results.py OLD_RESULTS results``. ``metrics.jsonl`` rows are compared on the keys both
rows have, timing keys left out (new logged columns are additions, wall-clock times differ run to run); other
``.jsonl`` files row by row, ``metrics.json`` without timing keys, checkpoints and parquet files byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

TIMING = ("timing", "time", "elapsed", "duration", "wall", "seconds", "started", "finished", "timestamp")
STAGES = ("train/", "eval/", "data/")


def _untimed(row: Any) -> Any:
    return {k: v for k, v in row.items() if not any(t in k.lower() for t in TIMING)} if isinstance(row, dict) else row


def _rows(path: Path) -> list[Any]:
    return [_untimed(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def same(old: Path, new: Path) -> bool:
    if old.name == "metrics.jsonl":
        a, b = _rows(old), _rows(new)
        return len(a) == len(b) and all({k: x[k] for k in x if k in y} == {k: y[k] for k in x if k in y}
                                        for x, y in zip(a, b, strict=True))
    if old.suffix == ".jsonl":
        return _rows(old) == _rows(new)
    if old.name == "metrics.json":
        return _untimed(json.loads(old.read_text())) == _untimed(json.loads(new.read_text()))
    return _sha256(old) == _sha256(new)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    args = parser.parse_args()
    compared, differ, missing = 0, [], []
    for old in sorted(p for p in args.old.rglob("*") if p.is_file()):
        rel = old.relative_to(args.old).as_posix()
        if not rel.startswith(STAGES) or "stale/" in rel:
            continue
        if old.suffix not in (".jsonl", ".safetensors", ".parquet") and old.name != "metrics.json":
            continue
        new = args.new / rel
        if not new.exists():
            missing.append(rel)
            continue
        compared += 1
        if not same(old, new):
            differ.append(rel)
    print(f"compared {compared}: {compared - len(differ)} same, {len(differ)} differ; {len(missing)} missing in new")
    for rel in differ:
        print("DIFFER", rel)
    for rel in missing:
        print("MISSING", rel)
    return 1 if differ or missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
