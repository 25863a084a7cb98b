"""A run's end in an order a kill cannot undo: the trained model is recorded before anything is freed.

A long run ends with steps that each take minutes (export the final model, collect its logs, move kept files back
from the scratch), then ``DONE.json``, then freeing its resume state (checkpoints). A time limit can strike between
any two of them, and Snakemake removes ``DONE.json`` of a failed job, so the retry sees an unfinished run. Without a
record it would train again: from step 0 where the checkpoints were already freed.

``END.json`` (the journal) records each end step once it is complete, the first one with a manifest of ``final/``
(every file's size and sha256). A retry whose journal belongs to this run (the run digest of ``run.json``,
:func:`pipeline_lib.core.checkpoint.claim_run_dir`, and the config digest) and whose ``final/`` matches the manifest
trains nothing: it redoes only the end steps not recorded, rewrites ``DONE.json`` and frees what is left
(:func:`finish_run`). A run whose identity changed is not affected: the journal names another run digest, so it is
ignored (and for verl it is set aside with the rest of the old run's state). To retrain a finished run on purpose,
delete its ``final/`` (or its run directory).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pipeline_lib.core.checkpoint import RUN_IDENTITY, read_json_state
from pipeline_lib.core.io import write_json

__all__ = ["END_NAME", "EndJournal", "finish_run", "manifest"]

log = logging.getLogger("pipeline_lib.core.run_end")

END_NAME = "END.json"
#: The journal's name for the first end step: ``final/`` exported (its manifest recorded).
EXPORTED = "export"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest(directory: Path) -> dict[str, list[Any]]:
    """Every file under ``directory`` (relative name -> [size, sha256]): what a complete ``final/`` holds."""
    return {str(p.relative_to(directory)): [p.stat().st_size, _sha256(p)]
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _run_digest(run_dir: Path) -> str | None:
    """The run digest ``run.json`` records (None where the engine keeps none)."""
    owner = read_json_state(run_dir / RUN_IDENTITY)
    return owner.get("run_sha256") if isinstance(owner, dict) else None


class EndJournal:
    """``END.json`` of one run: the end steps done so far, valid only for the run (config and run digest) that
    wrote it."""

    def __init__(self, run_dir: str | os.PathLike[str], config_sha256: str, final: str = "final") -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / END_NAME
        self.final = self.run_dir / final
        self.owner = {"config_sha256": config_sha256, "run_sha256": _run_digest(self.run_dir)}
        self.record = self._read()

    def _read(self) -> dict[str, Any]:
        record = read_json_state(self.path)
        if not isinstance(record, dict):
            return {}
        if {key: record.get(key) for key in self.owner} != self.owner:
            log.warning("%s: written by another run (%s), not this one (%s): ignored", self.path,
                        {key: record.get(key) for key in self.owner}, self.owner)
            return {}
        return record

    @property
    def steps(self) -> list[str]:
        return list(self.record.get("steps", []))

    def final_verified(self) -> bool:
        """Whether ``final/`` was exported by this run and every file is as recorded (sizes and sha256)."""
        recorded = self.record.get("final")
        if EXPORTED not in self.steps or not isinstance(recorded, dict) or not recorded:
            return False
        if not self.final.is_dir():
            log.warning("%s: the journal records an export but %s is missing: training again", self.path, self.final)
            return False
        for name, (size, sha) in recorded.items():
            path = self.final / name
            if not path.is_file() or path.stat().st_size != size or _sha256(path) != sha:
                log.warning("%s: %s differs from the export the journal records: training again", self.path, path)
                return False
        return True

    def done(self, step: str) -> None:
        """Record ``step`` as complete (the export with ``final/``'s manifest), atomically."""
        record = {**self.owner, "steps": [*self.steps, step], "final": self.record.get("final")}
        if step == EXPORTED:
            record["final"] = manifest(self.final)
        write_json(self.path, record)
        self.record = record


def finish_run(run_dir: str | os.PathLike[str], config_sha256: str, *, train: Callable[[], Any],
               export: Callable[[], Path], steps: Sequence[tuple[str, Callable[[], Any]]],
               publish: Callable[[], Path], free: Callable[[], Any] = lambda: None, final: str = "final") -> Path:
    """Train (unless this run's ``final/`` is already exported and verified), then the end in order: ``export``
    (returns ``final/``; recorded with its manifest), each of ``steps`` not yet recorded (recorded as it completes),
    ``publish`` (writes ``DONE.json``, returned) and ``free`` (checkpoints, scratch). Every step must be safe to run
    again after a kill inside it: only a complete one is recorded. A kill anywhere leaves a state whose retry trains
    nothing once the export is recorded."""
    journal = EndJournal(run_dir, config_sha256, final)
    if journal.final_verified():
        missing = [name for name, _ in steps if name not in journal.steps]
        log.info("%s: final/ is this run's and complete (%s): not training again; redoing %s, DONE.json, freeing",
                 run_dir, journal.path, ", ".join(missing) or "no end step")
    else:
        train()
        exported = export()
        if exported != journal.final:
            raise ValueError(f"export wrote {exported}, the journal records {journal.final}")
        journal.done(EXPORTED)
    for name, step in steps:
        if name not in journal.steps:
            step()
            journal.done(name)
    done = publish()
    free()
    return done
