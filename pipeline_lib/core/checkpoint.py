"""Resumable long jobs: atomic checkpoints, a config digest guard and the DONE sentinel.

A run owns its directory. ``checkpoint.pt`` is replaced atomically every K steps;
``DONE.json`` (the only file Snakemake is told about) is written once the final
step is reached. Resuming with a different config is refused rather than mixed.

No partial file can wedge a rerun: resume state that cannot be read (a torn last line of ``metrics.jsonl`` after a
killed writer or a full disk, a truncated ``checkpoint.pt``) is named in the log, renamed aside
(:func:`set_aside`, ``<name>.unreadable-<time>``) and recomputed, or cut back to its last good line.

One resume rule for every engine (:func:`claim_run_dir`): a run directory is resumed only by the run whose identity
(:func:`run_identity`: the digest of its config, of its code, and of the content of every input it reads) wrote its
state, recorded in ``run.json``. Any other run first sets that state aside in ``stale/<old run digest>/`` (named in
the log, never deleted) and starts clean, so an input replaced at the same path (``data_tiny`` rerun under a killed SFT
run), an edited trainer or another config never resumes on the old state.

A finished run keeps no resume state: Snakemake reruns a job whose inputs, code or parameters changed by deleting
``DONE.json`` and running it again, and that rerun must train from the start, never resume from the old run's last
step (which would leave the old model in place and call it new).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline_lib.core.attempts import ATTEMPTS_NAME
from pipeline_lib.core.io import atomic_path, sha256_file, write_json
from pipeline_lib.core.provenance import SIDECAR_SUFFIX, code_digest, config_digest, entry_module
from pipeline_lib.core.tracking import Tracker, TrackingSettings

__all__ = ["CHECKPOINT_NAME", "DONE_NAME", "PROBE_DIR", "RESUME_STATE", "RUN_IDENTITY", "STALE_DIR",
           "ConfigMismatchError", "MetricsLog", "claim_run_dir", "discard_resume_state", "load_checkpoint",
           "load_torch_state", "probe_dir", "read_json_state", "rng_state", "run_identity", "save_checkpoint",
           "set_aside", "set_rng_state", "write_done"]

log = logging.getLogger("pipeline_lib.core.checkpoint")

CHECKPOINT_NAME = "checkpoint.pt"
DONE_NAME = "DONE.json"
#: Where an RL run keeps the policies of its pass-rate probe (``probe/step_<s>/``, Hugging Face format, past pruning;
#: ``train.rl.probe_every``), which ``pipeline_lib.jobs.eval.probe`` samples for the gradient-allocation table.
PROBE_DIR = "probe"


def probe_dir(run_dir: Path, step: int) -> Path:
    """The policy an RL run kept after ``step`` for the pass-rate probe."""
    return run_dir / PROBE_DIR / f"step_{step}"


class ConfigMismatchError(RuntimeError):
    """A checkpoint exists but was written under a different config digest."""


def set_aside(path: str | os.PathLike[str], reason: str) -> Path:
    """Rename unreadable resume state out of the way (kept for inspection, never read again) and log why."""
    path = Path(path)
    aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 10**9:09d}")
    os.replace(path, aside)
    log.warning("%s: %s; set aside as %s and recomputed", path, reason, aside.name)
    return aside


def read_json_state(path: str | os.PathLike[str]) -> Any | None:
    """A resume-state JSON file's content, or None when there is none; an unreadable one is set aside (so the
    caller recomputes it) instead of failing every rerun."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        set_aside(path, f"not readable JSON ({exc})")
        return None


def rng_state() -> dict[str, Any]:
    """Global torch / numpy / python RNG states, so a resumed run draws what the uninterrupted one would; only
    tensors, lists and numbers, so a checkpoint loads with ``weights_only=True`` (no numpy object is pickled)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {"torch": torch.get_rng_state(), "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
            "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    random.setstate(state["python"])


def save_checkpoint(run_dir: str | os.PathLike[str], state: dict[str, Any]) -> Path:
    target = Path(run_dir) / CHECKPOINT_NAME
    with atomic_path(target) as tmp:
        torch.save(state, tmp)
    return target


def load_checkpoint(run_dir: str | os.PathLike[str], config_sha256: str) -> dict[str, Any] | None:
    """The last checkpoint of this run, or None; raises if it belongs to another config."""
    path = Path(run_dir) / CHECKPOINT_NAME
    if not path.is_file():
        return None
    state = load_torch_state(path)
    if state is None:
        return None
    if state.get("config_sha256") != config_sha256:
        raise ConfigMismatchError(
            f"{path} was written with config {state.get('config_sha256')}, this run has {config_sha256}; "
            "delete the run directory to start over"
        )
    return state


def load_torch_state(path: Path) -> dict[str, Any] | None:
    """A ``torch.save``d state dict, or None (the file set aside) when it cannot be read: truncated, corrupt, or
    holding anything but tensors, containers and numbers. Loaded with ``weights_only=True``: a planted pickle (a
    checkpoint copied from elsewhere, a shared filesystem) is refused by torch's restricted unpickler, never run."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:  # weights_only refused a global: code or an object, not a state dict
        set_aside(path, f"refused: the checkpoint holds objects that would run code when unpickled, not plain "
                  f"tensors and numbers ({str(exc).splitlines()[0][:200]})")
        return None
    except (RuntimeError, EOFError, OSError, ValueError, AttributeError, ImportError, IndexError, KeyError,
            TypeError, UnicodeDecodeError) as exc:  # what torch.load / unpickling raise on a damaged file
        set_aside(path, f"unreadable checkpoint ({type(exc).__name__}: {str(exc)[:200]})")
        return None
    if not isinstance(state, dict):
        set_aside(path, f"a checkpoint holding a {type(state).__name__}, not a state dict")
        return None
    return state


def _step_records(path: Path) -> tuple[list[str], str | None]:
    """The lines of a per-step JSONL file up to its first unreadable one, and what was wrong with that one."""
    lines = []
    for number, line in enumerate(path.read_bytes().split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
            record = json.loads(text)
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                raise ValueError("not a JSON object with an integer 'step'")
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            return lines, f"line {number} is unreadable ({exc})"
        lines.append(text)
    return lines, None


class MetricsLog:
    """``metrics.jsonl`` (one JSON line per step); on resume it is cut back to the checkpoint's step.

    A torn or unreadable line (a killed writer, a full disk) ends what is kept: the file is set aside and rewritten
    with the good lines before it, so no rerun crashes on it.

    With ``tracking`` every record also goes to the run's tracking backends as it is written
    (:class:`pipeline_lib.core.tracking.Tracker`), the kept records first, so a resumed curve has each step once.
    """

    def __init__(self, path: Path, resume_step: int, tracking: TrackingSettings | None = None) -> None:
        self.path = path
        lines, problem = _step_records(path) if path.exists() else ([], None)
        if problem is not None:
            set_aside(path, problem)
        kept = [line for line in lines if json.loads(line)["step"] <= resume_step]
        with atomic_path(path) as tmp:
            tmp.write_text("".join(line + "\n" for line in kept))
        self.tracker = Tracker(tracking, map(json.loads, kept)) if tracking is not None else None
        self.handle = path.open("a")

    def write(self, record: dict[str, Any]) -> None:
        self.handle.write(json.dumps(record) + "\n")
        self.handle.flush()
        if self.tracker is not None:
            self.tracker.log(record)

    def close(self) -> None:
        self.handle.close()
        if self.tracker is not None:
            self.tracker.close()


def write_done(run_dir: str | os.PathLike[str], *, step: int, total_steps: int, config_sha256: str,
               **extra: Any) -> Path:
    if step != total_steps:
        raise RuntimeError(f"refusing to mark {run_dir} done at step {step} of {total_steps}")
    target = Path(run_dir) / DONE_NAME
    write_json(target, {"final_step": step, "total_steps": total_steps, "config_sha256": config_sha256, **extra})
    discard_resume_state(run_dir)
    return target


#: What a run resumes from: the classifier's ``checkpoint.pt``, the LM trainers' ``checkpoint/`` (and its swap dirs).
RESUME_STATE = (CHECKPOINT_NAME, "checkpoint", ".checkpoint.tmp", ".checkpoint.old")


def discard_resume_state(run_dir: str | os.PathLike[str]) -> None:
    """Remove a finished run's resume state (its final model lives in ``final/`` or ``final.pt``)."""
    for name in RESUME_STATE:
        path = Path(run_dir) / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


#: The run directory's owner: the identity (config, code, input digests) of the run whose resume state it holds.
RUN_IDENTITY = "run.json"
#: Where another run's state goes, one folder per run digest (``DIR/stale/<digest>/``); never deleted.
STALE_DIR = "stale"
#: Per-step logs that belong with the checkpoint they were written beside (set aside with it).
STEP_LOGS = ("metrics.jsonl", "rollouts.jsonl")


def _input_files(path: Path) -> list[tuple[str, Path]]:
    """A file, or every file under a folder (a model or tokenizer directory) but provenance sidecars (which a run
    never reads, and which record times), by name."""
    if path.is_dir():
        return [(f"{path}/{p.relative_to(path)}", p) for p in sorted(path.rglob("*"))
                if p.is_file() and not p.name.endswith(SIDECAR_SUFFIX)]
    return [(str(path), path)]


def run_identity(config: Mapping[str, Any], inputs: Iterable[str | os.PathLike[str] | None],
                 entry: str | None = None) -> dict[str, Any]:
    """What a run's state depends on: the digest of its ``config`` (its settings, seed and paths), of its code (the
    ``pipeline_lib`` files its entry module imports, :func:`pipeline_lib.core.provenance.code_digest`; default: the
    running entry point) and the sha256 of every file it reads (``inputs``: files or folders, every file inside;
    None entries are skipped). Two runs may share resume state only when these are equal."""
    files: dict[str, str] = {}
    for path in inputs:
        if path is not None:
            files |= {name: sha256_file(file) for name, file in _input_files(Path(path))}
    return {"config_sha256": config_digest(dict(config)), "code_sha256": code_digest(entry or entry_module()),
            "inputs": files}


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """Which parts of two identities differ, for the log: the config, the code, each changed input by name."""
    parts = [part for part in ("config_sha256", "code_sha256") if old.get(part) != new.get(part)]
    old_inputs = old.get("inputs") if isinstance(old.get("inputs"), dict) else {}
    changed = sorted(name for name in old_inputs.keys() | new["inputs"].keys()
                     if old_inputs.get(name) != new["inputs"].get(name))
    return ", ".join([*(p.removesuffix("_sha256") for p in parts), *(f"input {name}" for name in changed)])


def _set_aside_item(item: Path, stale: Path) -> Path:
    """Move ``item`` into ``stale``; a symbolic link (a checkpoint folder on scratch storage) stays where it is and
    what it points to is moved aside beside its target (same filesystem), ``stale`` holding a link to that."""
    if not item.is_symlink():
        return item.rename(stale / item.name)
    real = Path(os.path.realpath(item))
    if real.exists():
        aside, attempt = real.with_name(f"{real.name}.stale-{stale.name}"), 1
        while aside.exists():
            aside, attempt = real.with_name(f"{real.name}.stale-{stale.name}.{attempt}"), attempt + 1
        os.replace(real, aside)
        (stale / item.name).symlink_to(aside)
    return stale / item.name


def claim_run_dir(run_dir: str | os.PathLike[str], identity: Mapping[str, Any], engine: str,
                  state: Iterable[str] | None = RESUME_STATE, logs: Iterable[str] = STEP_LOGS) -> list[Path]:
    """Make ``run_dir`` the run ``identity`` (:func:`run_identity`) before reading any resume state; returns what was
    set aside (empty when the directory is this run's or holds no resume state).

    The resume rule of every engine: state is resumed only by the run that wrote it. When ``run.json`` names another
    run (or none: a directory from before it was recorded), the resume state present (``state``: names in the run
    directory) moves to ``stale/<old run digest>/``, the log names it and what differs, and the run starts clean.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    digest = config_digest(dict(identity))
    path = run_dir / RUN_IDENTITY
    previous = read_json_state(path)  # unreadable: set aside, so the state it described counts as unrecorded
    previous = previous if isinstance(previous, dict) else {}
    if previous.get("run_sha256") == digest:
        return []
    names = sorted(p.name for p in run_dir.iterdir() if p.name not in (RUN_IDENTITY, STALE_DIR, ATTEMPTS_NAME)) \
        if state is None \
        else dict.fromkeys(state)
    present = [run_dir / name for name in names if (run_dir / name).exists()]
    moved = []
    if present:
        present += [run_dir / name for name in dict.fromkeys(logs) if name not in names and (run_dir / name).exists()]
        base = run_dir / STALE_DIR / str(previous.get("run_sha256") or "unrecorded")
        target, attempt = base, 1
        while target.exists():  # the same old run set aside twice (A -> B -> A -> B): keep both
            target, attempt = base.with_name(f"{base.name}.{attempt}"), attempt + 1
        target.mkdir(parents=True)
        moved = [_set_aside_item(item, target) for item in present]
        why = _differences(previous.get("identity") or {}, identity) if previous else "no run recorded"
        log.warning("%s: its resume state belongs to run %s, this is run %s (changed: %s); set aside %s in %s "
                    "(not resumed, not deleted), starting clean", run_dir, previous.get("run_sha256") or "(unrecorded)",
                    digest, why, ", ".join(p.name for p in present), target)
    write_json(path, {"run_sha256": digest, "engine": engine, "identity": dict(identity)})
    return moved
