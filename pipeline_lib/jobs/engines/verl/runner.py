"""What every verl training run does, whatever its kind: claim the run directory, run verl (resuming), check it got to
the last step, export the final actor, collect the metrics and end the run (:func:`run`).

A kind (SFT: :class:`.sft.SFTRun`, RL: :class:`.train.RLRun`) is a :class:`VerlRun` whose hooks bring its own steps:
its overrides and their check, its command, what it checks before the claim, keeps while verl runs and collects at
the end. This module imports neither kind's code, so the SFT entry point (:mod:`.sft`) imports no RL code and its code
digest covers none: an edit of the advantage estimators reruns no SFT job (issue 58).

verl resumes from ``DIR/checkpoints`` by itself (``trainer.resume_mode=auto``), so a resubmitted job continues where
the last one stopped. That is only right for the same run: the run directory holds the digest of its config, code
(its kind's entry module) and inputs (``DIR/run.json``), and a run whose config, code or inputs changed first sets the
other run's state aside (:func:`pipeline_lib.core.checkpoint.claim_run_dir`) and starts clean. After verl exits 0 the
run is only accepted if ``latest_checkpointed_iteration.txt`` equals the configured step count (verl has exited 0
short of its last step before); then the final actor is exported to Hugging Face format (verl's FSDP model merger, in
this process) as ``DIR/final``, verl's file-logger output becomes ``metrics.jsonl`` (under verl's metric names:
``docs/tracking.md``) and ``DONE.json`` is written last (:func:`pipeline_lib.core.run_end.finish_run`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from pipeline_lib.core.checkpoint import DONE_NAME, claim_run_dir, run_identity, write_done
from pipeline_lib.core.io import write_text
from pipeline_lib.core.provenance import config_digest, write_provenance
from pipeline_lib.core.run_end import finish_run
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.core.tracking import Tracker
from pipeline_lib.jobs.engines.verl import check_verl_version
from pipeline_lib.jobs.engines.verl.overrides import done_kind, tracking_env
from pipeline_lib.jobs.engines.verl.paths import TrainPaths, checkpoint_dir, metrics_log_path
from pipeline_lib.jobs.engines.verl.prune import keep_dumps, place_scratch, prune

check_verl_version()  # the pin (REQUIRED_VERL), checked when the engine is imported

__all__ = ["TRACKER", "VerlRun", "VerlRunError", "finished_step", "merge_actor", "merger_arguments",
           "rebuild_tracking_store", "resumed_overrides", "rotate_metrics", "run", "train_verl", "verl_records",
           "verl_run_identity", "write_metrics"]

log = logging.getLogger("pipeline_lib.jobs.engines.verl.runner")

TRACKER = "latest_checkpointed_iteration.txt"


class VerlRunError(RuntimeError):
    """verl failed or stopped short; the message says which and where its output is."""


def finished_step(ckpt_dir: Path) -> int | None:
    """The step of verl's last complete checkpoint (its tracker file), or None before the first one."""
    tracker = ckpt_dir / TRACKER
    if not tracker.is_file():
        return None
    text = tracker.read_text().strip()
    if not text.isdigit():
        raise VerlRunError(f"{tracker}: expected a step number, found {text!r}")
    return int(text)


def verl_run_identity(kind: str, spec: RunSpec, paths: TrainPaths, seed: int, *, entry: str) -> dict[str, Any]:
    """What a verl run's resume state depends on (:func:`pipeline_lib.core.checkpoint.run_identity`): its settings and
    seed, the code its kind's entry module (``entry``) imports, and the content of what it reads: the data files and
    the initial model's files (an SFT run redone with another result leaves the RL run's config unchanged, yet its
    checkpoints are another run's). verl resumes whatever ``checkpoints/`` holds and a finished tracker skips verl, so
    anything else in the run directory (checkpoints, rollout dumps, metrics, the RARO replay buffer, a merged model,
    DONE.json) belongs to this identity or is set aside."""
    return run_identity({"kind": kind, "spec": spec.to_dict(), "seed": seed},
                        [paths.train_files, paths.val_files, paths.init], entry=entry)


def resumed_overrides(overrides: Sequence[str]) -> list[str]:
    """A resumed run's overrides: no validation before training, which verl would log at the step it resumes from
    (a second record of that step, and one more validation pass per resubmission)."""
    return [("trainer.val_before_train=false" if item.startswith("trainer.val_before_train=") else item)
            for item in overrides]


def rotate_metrics(run_dir: Path) -> None:
    """verl's file logger truncates its file on open: keep each earlier attempt's file under a new name."""
    current = metrics_log_path(run_dir)
    if current.exists():
        attempt = len(list(run_dir.glob("verl_metrics.*.jsonl")))
        current.rename(run_dir / f"verl_metrics.{attempt}.jsonl")


def verl_records(run_dir: Path, last_step: int) -> dict[int, dict[str, Any]]:
    """Every attempt's file-logger records up to ``last_step``, by step (a later attempt's record of a step replaces
    an earlier attempt's whole, so no key of a step that was redone survives from the attempt that was cut)."""
    by_step: dict[int, dict[str, Any]] = {}
    files = sorted(run_dir.glob("verl_metrics.*.jsonl"), key=lambda p: int(p.name.split(".")[1]))
    for path in [*files, metrics_log_path(run_dir)]:
        if not path.exists():
            continue
        attempt: dict[int, dict[str, Any]] = {}
        numbered = [(n, line) for n, line in enumerate(path.read_bytes().split(b"\n"), start=1) if line.strip()]
        for number, line in numbered:
            try:
                record = json.loads(line)
                step, data = int(record["step"]), dict(record["data"])
            except (ValueError, KeyError, TypeError) as exc:
                if path != metrics_log_path(run_dir) and number == numbered[-1][0]:
                    # an earlier attempt killed mid-write: its last step is redone (and logged) by a later attempt
                    log.warning("%s:%d: torn last line of a killed attempt skipped (%s)", path, number, exc)
                    continue
                raise VerlRunError(f"{path}:{number}: not a verl file-logger record ({exc})") from exc
            if step <= last_step:
                attempt.setdefault(step, {}).update(data)
        by_step.update(attempt)
    return dict(sorted(by_step.items()))


def rebuild_tracking_store(paths: TrainPaths, resume_step: int) -> None:
    """Before verl (re)starts from ``resume_step``: the run's TensorBoard store holds exactly the earlier attempts'
    steps up to it, and verl's writer appends from the next step on, so a resumed curve has every step once."""
    if paths.tracking is None or "tensorboard" not in paths.tracking.backends:
        return
    records = verl_records(paths.run_dir, resume_step)
    Tracker(replace(paths.tracking, backends=("tensorboard",)),
            [{"step": step, **data} for step, data in sorted(records.items())]).close()


def write_metrics(run_dir: Path, total_steps: int,
                  extra: Callable[[int], Mapping[str, Any]] | None = None) -> Path:
    """Every attempt's verl metrics -> ``metrics.jsonl``, one line per step (a later attempt's step wins); ``extra``:
    a kind's own values of a step, before verl's (RL: the reward health), under the one set of names."""
    lines = [json.dumps({"step": step, **(extra(step) if extra else {}), **data})
             for step, data in sorted(verl_records(run_dir, total_steps).items())]
    target = run_dir / "metrics.jsonl"
    write_text(target, "".join(line + "\n" for line in lines))
    return target


def merger_arguments(step_dir: Path, target: Path) -> argparse.Namespace:
    """The arguments verl's merger CLI parses from ``python -m verl.model_merger merge --backend fsdp --local_dir
    STEP_DIR --target_dir TARGET``, every other option at its default (a test compares them with verl's parser)."""
    return argparse.Namespace(operation="merge", backend="fsdp", local_dir=str(step_dir), target_dir=str(target),
                              tie_word_embedding=False, trust_remote_code=False, is_value_model=False,
                              use_cpu_initialization=False, hf_upload_path=None, private=False)


def merge_actor(step_dir: Path, target: Path) -> Path:
    """verl's sharded FSDP checkpoint -> a Hugging Face model directory, published atomically. verl's own merger,
    called in this process (which has imported verl to validate the run) rather than as ``python -m
    verl.model_merger``: a second interpreter importing verl cost 13-29 CPU s per run on CPU."""
    from verl.model_merger.base_model_merger import generate_config_from_args
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    log.info("exporting %s to %s with verl's FSDP model merger", step_dir, target)
    try:
        merger = FSDPModelMerger(generate_config_from_args(merger_arguments(step_dir, staging)))
        merger.merge_and_save()
        merger.cleanup()
    except Exception as exc:
        raise VerlRunError(f"model merge of {step_dir} failed: {type(exc).__name__}: {exc}") from exc
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


@dataclass(frozen=True)
class VerlRun:
    """One verl run of one kind: the hooks :func:`run` calls for what differs between SFT and RL. A kind's entry
    module subclasses it (``kind``: ``sft`` / ``rl``; ``entry``: the module whose code the run's identity covers), so
    the shared steps import no kind's code."""

    spec: RunSpec
    paths: TrainPaths
    seed: int
    kind: ClassVar[str]
    entry: ClassVar[str]

    @property
    def total(self) -> int:
        """The run's step count (its settings' ``steps``)."""
        raise NotImplementedError

    def overrides(self) -> list[str]:
        """verl's Hydra overrides of this run."""
        raise NotImplementedError

    def validate(self, overrides: Sequence[str]) -> None:
        """Check the overrides against verl's own config (no GPU); raise naming the run."""
        raise NotImplementedError

    def command(self, overrides: Sequence[str]) -> list[str]:
        """The command that runs verl with these overrides."""
        raise NotImplementedError

    def before_claim(self) -> None:
        """What must hold before the run directory is claimed and GPUs are used (not on a dry run)."""

    def resume_point(self) -> int | None:
        """The step verl resumes from (None: from scratch): its last checkpoint, by default."""
        return finished_step(checkpoint_dir(self.paths.run_dir))

    def env(self) -> dict[str, str]:
        """This kind's variables in verl's environment, beside the file logger's and the tracking store's."""
        return {}

    def keeping(self) -> contextlib.AbstractContextManager[Any]:
        """What runs beside verl (RL: the probe keeper)."""
        return contextlib.nullcontext()

    def check_kept(self) -> None:
        """After verl reached the last step: what it had to leave behind is there (RL: the probe policies)."""

    def export(self) -> Path:
        """The first end step: the last checkpoint's actor -> ``final/`` (Hugging Face format)."""
        raise NotImplementedError

    def collect(self, overrides: Sequence[str]) -> None:
        """The end step that collects the run's outputs from verl's (metrics, by default)."""
        write_metrics(self.paths.run_dir, self.total)

    def end_steps(self, dump_every: int, overrides: Sequence[str] = ()) -> list[tuple[str, Callable[[], Any]]]:
        """The end steps after the export, in order (:func:`pipeline_lib.core.run_end.finish_run`): the outputs
        collected (:meth:`collect`), then the kept dumps moved back from the scratch. Each is safe to redo after a kill
        inside it (outputs written whole, :func:`.prune.keep_dumps`); checkpoints and the scratch are freed only
        after ``DONE.json``."""
        return [("collect", lambda: self.collect(overrides)),
                ("keep_dumps", lambda: keep_dumps(self.paths.run_dir, dump_every))]

    def done_fields(self) -> dict[str, Any]:
        """This kind's own fields of ``DONE.json``."""
        return {}

    def inputs(self) -> list[Path]:
        """The files the run read, for its provenance."""
        return [self.paths.train_files]

    def outputs(self) -> list[Path]:
        """The files the run made (beside ``DONE.json`` and ``final/``), for its provenance."""
        return [self.paths.run_dir / "metrics.jsonl"]


def run(job: VerlRun, dump_every: int, dry_run: bool = False, scratch_dir: Path | None = None) -> Path | None:
    """Validate, run verl to the last step (resuming), check it got there, export and publish the run, then free its
    scratch (:func:`.prune.prune`). ``scratch_dir`` (``site.scratch_root/<task>/<name>/seed<k>``): where verl's
    checkpoints and rollout dumps live (:func:`.prune.place_scratch`); ``dump_every``: every how many steps a finished
    run keeps a rollout dump (``site.rollout_dump_every``)."""
    started = time.time()
    spec, paths, seed, kind = job.spec, job.paths, job.seed, job.kind
    run_dir = paths.run_dir
    overrides = job.overrides()
    job.validate(overrides)
    if dry_run:
        print(json.dumps({"command": job.command(overrides), "overrides": overrides}, indent=1))
        return None
    job.before_claim()
    digest = config_digest({"kind": kind, "spec": spec.to_dict(), "seed": seed})
    claim_run_dir(run_dir, verl_run_identity(kind, spec, paths, seed, entry=job.entry), "verl", state=None)
    rotate_metrics(run_dir)
    total = job.total
    box: dict[str, list[str]] = {"overrides": list(overrides)}

    def train() -> None:
        box["overrides"] = train_verl(job, overrides, scratch_dir)

    def publish() -> Path:
        # A baseline's DONE.json names it, as the local engine's do (an OPD run is a verl RL run, its kind is "opd").
        return write_done(run_dir, step=total, total_steps=total, config_sha256=digest, kind=done_kind(kind, spec),
                          engine="verl", advantage=spec.estimator.name if spec.estimator else None, seed=seed,
                          **job.done_fields())

    def free() -> None:
        removed = prune(run_dir, dump_every)  # the last checkpoint was kept until DONE.json, for a resubmission
        log.info("%s: finished, pruned %d checkpoint/dump paths (every %d-th rollout dump kept)", run_dir,
                 len(removed), dump_every)
        write_provenance([run_dir / DONE_NAME, *job.outputs(), run_dir / "final" / "config.json"],
                         step=f"train_verl_{kind}", inputs=job.inputs(),
                         params={"spec": spec.to_dict(), "overrides": box["overrides"]}, config_sha256=digest,
                         seeds={"run": seed}, started_at=started)

    return finish_run(run_dir, digest, train=train, export=job.export, steps=job.end_steps(dump_every, overrides),
                      publish=publish, free=free)


def train_verl(job: VerlRun, overrides: Sequence[str], scratch_dir: Path | None) -> list[str]:
    """Run verl to the run's last step, resuming from its checkpoints (nothing to do where the tracker is there
    already); return the overrides it ran with."""
    paths, total = job.paths, job.total
    run_dir = paths.run_dir
    overrides = list(overrides)
    if scratch_dir is not None:  # after the claim: another run's links are set aside, this run's are resumed
        place_scratch(run_dir, scratch_dir)
    resume_step = job.resume_point()
    if resume_step is not None and resume_step < total:
        overrides = resumed_overrides(overrides)
    command = job.command(overrides)
    write_text(run_dir / "verl_command.json", json.dumps({"command": command, "overrides": overrides}, indent=1))
    rebuild_tracking_store(paths, resume_step or 0)
    env = os.environ | {**job.env(), "VERL_FILE_LOGGER_PATH": str(metrics_log_path(run_dir)), **tracking_env(paths)}
    ckpt = checkpoint_dir(run_dir)
    label = f"{job.kind} run {run_dir}"
    with job.keeping():
        if finished_step(ckpt) != total:
            log.info("running verl (resumes from %s if it holds a checkpoint): %s", ckpt, " ".join(command))
            result = subprocess.run(command, env=env, check=False)
            if result.returncode != 0:
                raise VerlRunError(f"{label}: verl exited with code {result.returncode}; rerun to resume from {ckpt}")
    reached = finished_step(ckpt)
    if reached != total:
        raise VerlRunError(f"{label}: verl exited 0 but its last checkpoint is step {reached} of {total} "
                           f"({ckpt / TRACKER}); not marking the run done, rerun to resume")
    job.check_kept()
    return overrides
