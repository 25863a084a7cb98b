"""Entry point of the verl training rules: one SFT or RL run, resumable, published like the local engine's.

    python -m pipeline_lib.jobs.engines.verl.train sft --spec JSON --data SFT.parquet --run-dir DIR --seed K
    python -m pipeline_lib.jobs.engines.verl.train rl  --spec JSON --data RL.parquet --val-data TEST.parquet \
        [--init START_DIR/final] --run-dir DIR --seed K     # no --init: from the spec's model (the base model)

A run builds its Hydra overrides from the spec (:mod:`.translate`), checks them against verl
(:mod:`.validate`), then runs verl: RL as ``python -m verl.trainer.main_ppo`` behind the Slurm/Ray
launcher (:mod:`.launch`: a Ray cluster over every node of a multi-node allocation), SFT as
``torchrun -m verl.trainer.sft_trainer`` on one node. verl resumes from ``DIR/checkpoints`` by itself
(``trainer.resume_mode=auto``), so a resubmitted job continues where the last one stopped. That is only right for
the same run: the run directory holds the digest of its config, code and inputs (``DIR/run.json``), and a run whose
config, code or inputs changed first sets the other run's state aside
(:func:`pipeline_lib.core.checkpoint.claim_run_dir`,
the resume rule of every engine) and starts clean.

After verl exits 0 the run is only accepted if ``latest_checkpointed_iteration.txt`` equals the
configured step count (verl has exited 0 short of its last step before). Then the final actor is
exported to Hugging Face format (verl's FSDP model merger, in this process) as ``DIR/final``, verl's
rollout dumps become ``rollouts.jsonl`` in the local engine's schema (so the gradient-allocation table
is computed the same way for both engines), its file-logger output becomes ``metrics.jsonl`` (under verl's metric
names, which the local engine writes too: ``docs/tracking.md``), and ``DONE.json`` is written last.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline_lib.core.attempts import guard_attempt
from pipeline_lib.core.checkpoint import DONE_NAME, claim_run_dir, probe_dir, run_identity, write_done
from pipeline_lib.core.cli import add_run_arguments, entry_parser
from pipeline_lib.core.config import schema_defaults
from pipeline_lib.core.io import write_text
from pipeline_lib.core.provenance import config_digest, write_provenance
from pipeline_lib.core.rewards import compute_scores, health_counts
from pipeline_lib.core.rl.advantages import group_advantages
from pipeline_lib.core.run_end import finish_run
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.core.tracking import Tracker
from pipeline_lib.jobs.engines.verl import check_verl_version
from pipeline_lib.jobs.engines.verl.checks import validate_rl, validate_sft
from pipeline_lib.jobs.engines.verl.paths import probe_shards_dir
from pipeline_lib.jobs.engines.verl.probe_keep import ProbeKeeper, drop_after, export_probes, missing
from pipeline_lib.jobs.engines.verl.prune import keep_dumps, place_scratch, prune
from pipeline_lib.jobs.engines.verl.reward import dumped_health, read_health_records
from pipeline_lib.jobs.engines.verl.translate import (
    ESTIMATOR_MODULE,
    REWARD_HEALTH_ENV,
    TrainPaths,
    checkpoint_dir,
    done_kind,
    metrics_log_path,
    needs_references,
    reward_health_dir,
    rl_overrides,
    rollout_dump_dir,
    sft_overrides,
    tracking_env,
)

check_verl_version()  # the pin (REQUIRED_VERL), checked when the engine is imported

__all__ = ["build_command", "collect_metrics", "collect_rollouts", "end_steps", "export_final", "finished_step",
           "logged_resume_point", "main", "prompt_keys", "prompt_rendering", "rebuild_tracking_store",
           "resumed_overrides", "rollout_groups", "run", "train_verl", "training_prompt_rows", "unmatched_prompt_rows",
           "verl_run_identity"]

log = logging.getLogger("pipeline_lib.jobs.engines.verl.train")

TRACKER = "latest_checkpointed_iteration.txt"
LAUNCHER = "pipeline_lib.jobs.engines.verl.launch"


class VerlRunError(RuntimeError):
    """verl failed or stopped short; the message says which and where its output is."""


def build_command(kind: str, overrides: Sequence[str], spec: RunSpec) -> list[str]:
    """The command that runs verl for this run (RL behind the launcher, SFT under torchrun on one node)."""
    if kind == "sft":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                f"--nproc_per_node={spec.sft.knobs.gpus_per_node}", "-m", "verl.trainer.sft_trainer", *overrides]
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]
    if importlib.util.find_spec(LAUNCHER) is None:  # the launcher is part of this package; kept swappable here
        return command
    return [sys.executable, "-m", LAUNCHER, "--gpus-per-node", str(spec.rl.knobs.gpus_per_node), "--", *command]


def finished_step(ckpt_dir: Path) -> int | None:
    """The step of verl's last complete checkpoint (its tracker file), or None before the first one."""
    tracker = ckpt_dir / TRACKER
    if not tracker.is_file():
        return None
    text = tracker.read_text().strip()
    if not text.isdigit():
        raise VerlRunError(f"{tracker}: expected a step number, found {text!r}")
    return int(text)


def verl_run_identity(kind: str, spec: RunSpec, paths: TrainPaths, seed: int) -> dict[str, Any]:
    """What a verl run's resume state depends on (:func:`pipeline_lib.core.checkpoint.run_identity`): its settings and
    seed, the code this entry point imports, and the content of what it reads: the data files and the initial model's
    files (an SFT run redone with another result leaves the RL run's config unchanged, yet its checkpoints are another
    run's). verl resumes whatever ``checkpoints/`` holds and a finished tracker skips verl, so anything else in the
    run directory (checkpoints, rollout dumps, metrics, the RARO replay buffer, a merged model, DONE.json) belongs to
    this identity or is set aside."""
    return run_identity({"kind": kind, "spec": spec.to_dict(), "seed": seed},
                        [paths.train_files, paths.val_files, paths.init], entry="pipeline_lib.jobs.engines.verl.train")


def logged_resume_point(run_dir: Path, kind: str) -> int | None:
    """The step verl resumes from (None: from scratch), after setting aside a last checkpoint whose step was never
    logged.

    verl's RL trainer saves step k's checkpoint before it validates, dumps step k's rollouts and logs its metrics
    (``fit`` in verl/trainer/ppo/v1/trainer_base.py and ppo/ray_trainer.py). A job killed in between (a Slurm time
    limit, a preemption; the last step's validation makes the window long) resumes at k + 1, so step k's metrics and
    rollouts are lost for good, and for the last step verl is skipped and the run can never be collected. Such a
    checkpoint is removed and the tracker points at the previous complete one (verl keeps
    ``max_actor_ckpt_to_keep`` >= 2), whose next step verl redoes; with none left, the run starts over. The SFT
    trainer logs before it saves, so its checkpoints are always logged.
    """
    ckpt = checkpoint_dir(run_dir)
    step = finished_step(ckpt)
    if step is None or kind == "sft":
        return step
    records = _verl_records(run_dir, step)

    def logged(k: int) -> bool:  # a training record (not only validation) and the step's rollout dump
        trained = any(not key.startswith("val-") for key in records.get(k, {}))
        return trained and (rollout_dump_dir(run_dir) / f"{k}.jsonl").is_file()

    if logged(step):
        return step
    # verl prunes an old checkpoint to its data.pt (the actor goes): only one with its actor can be resumed
    earlier = sorted((int(d.name.rsplit("_", 1)[1]) for d in ckpt.glob("global_step_*")
                      if d.name.rsplit("_", 1)[1].isdigit() and int(d.name.rsplit("_", 1)[1]) < step
                      and (d / "actor").is_dir()), reverse=True)
    back = next((k for k in earlier if logged(k)), None)
    for directory in ckpt.glob("global_step_*"):
        suffix = directory.name.rsplit("_", 1)[1]
        if suffix.isdigit() and (back is None or int(suffix) > back):
            shutil.rmtree(directory)
    if back is None:
        (ckpt / TRACKER).unlink()
    else:
        write_text(ckpt / TRACKER, str(back))
    drop_after(run_dir, back or 0)  # a probe policy of a step verl redoes is another policy: kept again when saved
    log.warning("%s: verl's checkpoint of step %d was saved but the step's metrics/rollouts were never logged (the "
                "job stopped in between): resuming from %s instead, so step %d is redone and logged", run_dir, step,
                f"step {back}" if back is not None else "scratch", step)
    return back


def resumed_overrides(overrides: Sequence[str]) -> list[str]:
    """A resumed run's overrides: no validation before training, which verl would log at the step it resumes from
    (a second record of that step, and one more validation pass per resubmission)."""
    return [("trainer.val_before_train=false" if item.startswith("trainer.val_before_train=") else item)
            for item in overrides]


def _rotate_metrics(run_dir: Path) -> None:
    """verl's file logger truncates its file on open: keep each earlier attempt's file under a new name."""
    current = metrics_log_path(run_dir)
    if current.exists():
        attempt = len(list(run_dir.glob("verl_metrics.*.jsonl")))
        current.rename(run_dir / f"verl_metrics.{attempt}.jsonl")


def _verl_records(run_dir: Path, last_step: int) -> dict[int, dict[str, Any]]:
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
    records = _verl_records(paths.run_dir, resume_step)
    Tracker(replace(paths.tracking, backends=("tensorboard",)),
            [{"step": step, **data} for step, data in sorted(records.items())]).close()


def collect_metrics(run_dir: Path, total_steps: int) -> Path:
    """Every attempt's verl metrics -> ``metrics.jsonl``, one line per step (a later attempt's step wins)."""
    by_step = _verl_records(run_dir, total_steps)
    health = _health_source(run_dir)
    lines = []
    for step in sorted(by_step):
        data = by_step[step]
        lines.append(json.dumps({"step": step, **_reward_health(run_dir, step, health), **data}))  # one set of names
    target = run_dir / "metrics.jsonl"
    write_text(target, "".join(line + "\n" for line in lines))
    return target


def _health_source(run_dir: Path) -> Mapping[str, Mapping[str, int]] | None:
    """The reward hook's timeout/failure records of this run, or None where it kept none (a run from before it)."""
    directory = reward_health_dir(run_dir)
    if not directory.is_dir():
        log.warning("%s: no reward health records (%s missing), so reward_timeouts/reward_failures are logged as "
                    "null (unknown): verl's v1 trainer passes the verifier's timeouts/failures to neither its rollout "
                    "dump nor its training metrics", run_dir, directory)
        return None
    return read_health_records(directory)


def _reward_health(run_dir: Path, step: int, records: Mapping[str, Mapping[str, int]] | None) -> dict[str, int | None]:
    """Verifier items that timed out / failed in a step's training rollouts: from the dump where it carries the reward
    extras (the legacy trainer dumps them), else from the reward hook's records of the dumped rollouts, else null."""
    dump = rollout_dump_dir(run_dir) / f"{step}.jsonl"
    if not dump.exists():
        return {}
    rows = [json.loads(line) for line in dump.read_text().splitlines() if line.strip()]
    if rows and any(key.rsplit("/", 1)[-1] in ("timeouts", "failures") for key in rows[0]):
        counts: Mapping[str, int | None] = health_counts(rows)
    elif records is not None:
        counts = dumped_health(rows, records)
    else:
        counts = {"timeouts": None, "failures": None}
    return {f"softmaxgrpo/reward_{kind}": count for kind, count in counts.items()}


def rollout_groups(rows: Sequence[Mapping[str, Any]], path: Path, group_size: int | None = None) -> Any:
    """Each dumped rollout's prompt group, from what verl's dump holds.

    The v1 trainer dumps the rollout key ``{uid}_{session}_{index}`` as ``uid``; the legacy trainer (RARO, RL-Logit)
    dumps no uid (``RayPPOTrainer._log_rollout_data``), and its batch is reordered by ``_balance_batch`` before the
    dump, so neighbours are not a group: there the group is the decoded prompt (``input``), which is the same for
    the ``rollout.n`` rollouts of one prompt. Two rows of one step with the same prompt text become one group of
    ``2 n`` (logged: the recomputed advantage then normalises over both).
    """
    import numpy as np

    if all("uid" in row for row in rows):
        keys = np.array([str(row["uid"]).rsplit("_", 2)[0] for row in rows], dtype=object)
    else:
        missing = [number for number, row in enumerate(rows, start=1) if "input" not in row]
        if missing:
            raise VerlRunError(f"{path}: rows {missing[:10]} have neither `uid` nor `input`; cannot tell their "
                               f"prompt groups apart (keys of row {missing[0]}: {sorted(rows[missing[0] - 1])})")
        keys = np.array([row["input"] for row in rows], dtype=object)
    if group_size:
        names, sizes = np.unique(keys, return_counts=True)
        wrong = [(str(name)[:80], int(size)) for name, size in zip(names, sizes, strict=True) if size % group_size]
        if wrong:
            raise VerlRunError(f"{path}: prompt groups of a size other than a multiple of group_size={group_size}: "
                               f"{wrong[:5]}")
        merged = int((sizes > group_size).sum())
        if merged:
            log.warning("%s: %d prompt(s) appear more than once in the step; their rollouts form one group each",
                        path, merged)
    return keys


def prompt_keys(rows: Sequence[Mapping[str, Any]], path: Path) -> list[str]:
    """Each dumped rollout's prompt, the same on every visit of that prompt: the first 16 hex digits of the sha256 of
    the decoded prompt text (``input``), since verl 0.9.1's dumps carry no dataset row index and their ``uid`` is
    drawn anew per visit (``ray_trainer.py`` ``uuid.uuid4()``)."""
    missing = [number for number, row in enumerate(rows, start=1) if not isinstance(row.get("input"), str)]
    if missing:
        raise VerlRunError(f"{path}: rows {missing[:10]} have no `input` text; cannot tell which prompt they answer")
    return [hashlib.sha256(row["input"].encode("utf-8")).hexdigest()[:16] for row in rows]


def _override(overrides: Sequence[str], key: str) -> str | None:
    """The value the last override of ``key`` (``key=`` or ``+key=``) gives, as written; None where none does."""
    found = None
    for item in overrides:
        name, _, value = item.partition("=")
        if name.lstrip("+") == key:
            found = value
    return found


def _hydra_scalar(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def prompt_rendering(overrides: Sequence[str]) -> dict[str, Any]:
    """How verl 0.9.1 renders a training prompt for its rollout under these overrides (verl's defaults otherwise):
    the parquet column (``data.prompt_key``), the chat template's extra arguments (``data.apply_chat_template_kwargs``)
    and the left-padded length (``actor_rollout_ref.rollout.prompt_length``, else ``data.max_prompt_length``)."""
    length = _override(overrides, "actor_rollout_ref.rollout.prompt_length") \
        or _override(overrides, "data.max_prompt_length") or "512"
    kwargs: dict[str, Any] = {}
    whole = _override(overrides, "data.apply_chat_template_kwargs")
    if whole and whole.strip("{} "):  # Hydra's {k:v,...}
        for pair in whole.strip().strip("{}").split(","):
            name, _, value = pair.partition(":")
            kwargs[name.strip()] = _hydra_scalar(value)
    prefix = "data.apply_chat_template_kwargs."
    for item in overrides:
        name, _, value = item.partition("=")
        if name.lstrip("+").startswith(prefix):
            kwargs[name.lstrip("+")[len(prefix):]] = _hydra_scalar(value)
    return {"prompt_key": str(_hydra_scalar(_override(overrides, "data.prompt_key") or "prompt")),
            "prompt_length": int(_hydra_scalar(length)), "chat_template_kwargs": kwargs}


def training_prompt_rows(train_files: Path, tokenizer_dir: Path, overrides: Sequence[str]) -> dict[str, int]:
    """Each training prompt's key (:func:`prompt_keys`) -> its row in the training parquet, the prompt rendered as
    verl's rollout renders it and its dump decodes it: verl's Continuous Token builder for the model type (the chat
    template with the generation prompt, ``apply_chat_template_kwargs``; ``experimental/agent_loop``), capped and
    left-padded to the rollout's prompt length with the pad token (``_pad_token_ids``), then decoded with
    ``skip_special_tokens=True`` (``_log_rollout_data`` of both trainers). Two rows rendering alike keep the first."""
    import pandas as pd
    from transformers import AutoTokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    rendering = prompt_rendering(overrides)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = tokenizer_dir / "config.json"  # the model's type picks verl's builder (none: verl's default one)
    model_type = json.loads(config.read_text()).get("model_type") if config.is_file() else None
    builder = create_continuous_token_builder(tokenizer, hf_model_type=model_type if isinstance(model_type, str)
                                              else None, chat_template_kwargs=rendering["chat_template_kwargs"])
    column = rendering["prompt_key"]
    frame = pd.read_parquet(train_files, columns=[column])
    length = rendering["prompt_length"]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    padded = []
    for messages in frame[column]:  # once per training row: the lookup, not per rollout
        ids = builder.build_initial_tokens([dict(m) for m in messages])[-length:]
        padded.append([pad] * (length - len(ids)) + list(ids))
    texts = tokenizer.batch_decode(padded, skip_special_tokens=True)
    rows: dict[str, int] = {}
    for row, key in enumerate(prompt_keys([{"input": t} for t in texts], train_files)):
        rows.setdefault(key, row)
    if len(rows) < len(texts):
        log.warning("%s: %d training row(s) render like an earlier row; a rollout of either names the first",
                    train_files, len(texts) - len(rows))
    return rows


def collect_rollouts(run_dir: Path, spec: RunSpec, tokenizer_dir: Path, data_source: str,
                     total_steps: int, *, train_files: Path, overrides: Sequence[str] = ()) -> Path:
    """verl's per-step rollout dumps -> ``rollouts.jsonl`` in the local engine's schema.

    verl 0.9.1 dumps input, output, ground truth and score, but not the advantage, so the advantage is
    recomputed from the scores with the same registry
    (:func:`pipeline_lib.core.rl.advantages.group_advantages`; verl's GRPO/RLOO equal ours, see the tests),
    the length is the re-tokenised response, and ``correct`` is the task verifier's score (for the
    -Sim runs the training reward is not the verifier). ``prompt_uid`` names the visit (one group of one step);
    ``prompt_key`` names the prompt across the run's steps (:func:`prompt_keys`), which the gradient-allocation
    table needs to measure a prompt's pass rate over its other visits; ``prompt_row`` names its row in the training
    parquet (``train_files``, rendered under the run's ``overrides``: :func:`training_prompt_rows`), -1 where no row
    renders to the rollout's prompt (counted in a warning and in ``DONE.json``, :func:`unmatched_prompt_rows`).
    """
    import torch
    from transformers import AutoTokenizer

    from pipeline_lib.jobs.engines.verl.estimators import group_index

    dump = rollout_dump_dir(run_dir)
    files = sorted(dump.glob("*.jsonl"), key=lambda p: int(p.stem)) if dump.is_dir() else []
    steps = [int(p.stem) for p in files if int(p.stem) <= total_steps]
    if sorted(set(steps)) != list(range(1, total_steps + 1)):
        missing = sorted(set(range(1, total_steps + 1)) - set(steps))[:10]
        raise VerlRunError(f"{dump}: rollout dumps missing for steps {missing} (of {total_steps})")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if spec.estimator is None:
        raise VerlRunError(f"{run_dir}: an RL run spec without an estimator")
    lookup = training_prompt_rows(train_files, tokenizer_dir, overrides)
    unmatched = 0
    lines = []
    for path in files:
        step = int(path.stem)
        if step > total_steps:
            continue
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        uids = rollout_groups(rows, path, spec.rl.group_size if spec.rl is not None else None)
        groups = group_index(uids)
        rewards = torch.tensor([float(row["score"]) for row in rows], dtype=torch.float64)
        advantages = group_advantages(spec.estimator.name, rewards, groups, **spec.estimator.params)
        outputs = [row["output"] for row in rows]
        lengths = [len(ids) for ids in tokenizer(outputs, add_special_tokens=False)["input_ids"]]
        verifier = compute_scores([data_source] * len(rows), outputs, [row["gts"] for row in rows],
                                  [None] * len(rows))
        keys = prompt_keys(rows, path)
        prompt_row = [lookup.get(key, -1) for key in keys]
        unmatched += prompt_row.count(-1)
        lines.append(json.dumps({"step": step, "group": groups.tolist(), "prompt_uid": uids.tolist(),
                                 "prompt_key": keys, "prompt_row": prompt_row,
                                 "reward": rewards.tolist(), "advantage": advantages.tolist(), "length": lengths,
                                 "correct": [float(v["score"]) for v in verifier]}))
    if unmatched:
        log.warning("%s: %d rollout(s) answer a prompt that no row of %s renders to (prompt_row -1): verl rendered "
                    "it otherwise than training_prompt_rows does", run_dir, unmatched, train_files)
    target = run_dir / "rollouts.jsonl"
    write_text(target, "".join(line + "\n" for line in lines))
    return target


def unmatched_prompt_rows(path: Path) -> int:
    """The rollouts of ``rollouts.jsonl`` whose training row was not found (``prompt_row`` -1), for ``DONE.json``."""
    return sum(json.loads(line).get("prompt_row", []).count(-1) for line in path.read_text().splitlines()
               if line.strip())


def merger_arguments(step_dir: Path, target: Path) -> argparse.Namespace:
    """The arguments verl's merger CLI parses from ``python -m verl.model_merger merge --backend fsdp --local_dir
    STEP_DIR --target_dir TARGET``, every other option at its default (a test compares them with verl's parser)."""
    return argparse.Namespace(operation="merge", backend="fsdp", local_dir=str(step_dir), target_dir=str(target),
                              tie_word_embedding=False, trust_remote_code=False, is_value_model=False,
                              use_cpu_initialization=False, hf_upload_path=None, private=False)


def _merge_actor(step_dir: Path, target: Path) -> Path:
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


PLUGIN_GROUP, PLUGIN_NAME = "verl.plugins", "softmaxgrpo"


def require_installed_project(entry_points: Sequence[Any] | None = None) -> None:
    """Fail before Ray starts unless this environment has the project installed (its ``verl.plugins`` entry point).

    ``import verl`` loads that entry point in every Ray worker, which is what registers our advantage estimators on
    other nodes; without it they are importable only where Ray happens to put the driver's directory on
    ``sys.path``, and a worker fails deep inside verl with an unknown estimator. Every node runs the same
    environment (the job's conda env), so checking it here checks the workers'.
    """
    if entry_points is None:
        from importlib.metadata import entry_points as installed

        entry_points = list(installed(group=PLUGIN_GROUP))
    if not any(ep.name == PLUGIN_NAME and ep.value == ESTIMATOR_MODULE for ep in entry_points):
        raise VerlRunError(
            f"the project is not installed in this environment ({sys.executable}): the `{PLUGIN_GROUP}` entry point "
            f"`{PLUGIN_NAME} = {ESTIMATOR_MODULE}` is missing, so Ray workers on other nodes would not register the "
            f"pipeline's advantage estimators. Fix: `pip install --no-deps -e <repo>` in this environment (Snakemake's "
            f"`--sdm conda` runs envs/train-verl.post-deploy.sh, which does that, when it creates the env)")


def run(kind: str, spec: RunSpec, paths: TrainPaths, seed: int, dry_run: bool = False,
        scratch_dir: Path | None = None,
        dump_every: int | None = None) -> Path | None:
    """Validate, run verl to the last step (resuming), check it got there, export and publish the run, then free its
    scratch (:func:`.prune.prune`). ``scratch_dir`` (``site.scratch_root/<task>/<name>/seed<k>``): where verl's
    checkpoints and rollout dumps live (:func:`.prune.place_scratch`); ``dump_every``: ``site.rollout_dump_every``
    (None: the schema's default)."""
    dump_every = schema_defaults("site")["rollout_dump_every"] if dump_every is None else dump_every
    started = time.time()
    run_dir = paths.run_dir
    overrides = (sft_overrides if kind == "sft" else rl_overrides)(spec, paths, seed)
    (validate_sft if kind == "sft" else validate_rl)(overrides, label=f"{kind} run {run_dir}")
    command = build_command(kind, overrides, spec)
    if dry_run:
        print(json.dumps({"command": command, "overrides": overrides}, indent=1))
        return None
    if kind != "sft":
        require_installed_project()
    if needs_references(spec):  # every prompt needs its expert answer; fail before Ray and the GPUs
        from pipeline_lib.jobs.engines.verl.raro_loop import check_training_data

        check_training_data(paths.train_files)
    digest = config_digest({"kind": kind, "spec": spec.to_dict(), "seed": seed})
    claim_run_dir(run_dir, verl_run_identity(kind, spec, paths, seed), "verl", state=None)
    _rotate_metrics(run_dir)
    total = int((spec.sft if kind == "sft" else spec.rl).steps)
    box: dict[str, list[str]] = {"overrides": list(overrides)}

    def train() -> None:
        box["overrides"] = train_verl(kind, spec, paths, seed, overrides, scratch_dir, total)

    steps = end_steps(kind, spec, paths, total, dump_every, overrides)
    probes = spec.rl.probe_steps() if kind == "rl" and spec.rl is not None else []
    inputs = [paths.train_files]
    if kind == "rl":
        inputs += [paths.val_files, *([paths.init / "config.json"] if paths.init is not None else [])]

    def publish() -> Path:
        # A baseline's DONE.json names it, as the local engine's do (an OPD run is a verl RL run, its kind is "opd").
        rows = {"unmatched_prompt_rows": unmatched_prompt_rows(run_dir / "rollouts.jsonl")} if kind == "rl" else {}
        return write_done(run_dir, step=total, total_steps=total, config_sha256=digest,
                          kind=done_kind(kind, spec), engine="verl",
                          advantage=spec.estimator.name if spec.estimator else None, seed=seed, **rows)

    def free() -> None:
        removed = prune(run_dir, dump_every)  # the last checkpoint was kept until DONE.json, for a resubmission
        log.info("%s: finished, pruned %d checkpoint/dump paths (every %d-th rollout dump kept)", run_dir,
                 len(removed), dump_every)
        outputs = [run_dir / "metrics.jsonl", *([run_dir / "rollouts.jsonl"] if kind == "rl" else []),
                   *(probe_dir(run_dir, s) / "config.json" for s in probes)]
        write_provenance([run_dir / DONE_NAME, *outputs, run_dir / "final" / "config.json"],
                         step=f"train_verl_{kind}", inputs=inputs,
                         params={"spec": spec.to_dict(), "overrides": box["overrides"]}, config_sha256=digest,
                         seeds={"run": seed}, started_at=started)

    return finish_run(run_dir, digest, train=train, export=lambda: export_final(kind, run_dir, total), steps=steps,
                      publish=publish, free=free)


def train_verl(kind: str, spec: RunSpec, paths: TrainPaths, seed: int, overrides: Sequence[str],
               scratch_dir: Path | None, total: int) -> list[str]:
    """Run verl to the run's last step, resuming from its checkpoints (nothing to do where the tracker is there
    already); return the overrides it ran with."""
    run_dir = paths.run_dir
    overrides = list(overrides)
    if scratch_dir is not None:  # after the claim: another run's links are set aside, this run's are resumed
        place_scratch(run_dir, scratch_dir)
    resume_step = logged_resume_point(run_dir, kind)
    if resume_step is not None and resume_step < total:
        overrides = resumed_overrides(overrides)
    command = build_command(kind, overrides, spec)
    write_text(run_dir / "verl_command.json", json.dumps({"command": command, "overrides": overrides}, indent=1))
    rebuild_tracking_store(paths, resume_step or 0)
    reward_health_dir(run_dir).mkdir(exist_ok=True)  # the reward hook's records: their existence says they are kept
    env = os.environ | {"VERL_USE_EXTERNAL_MODULES": ESTIMATOR_MODULE,
                        "VERL_FILE_LOGGER_PATH": str(metrics_log_path(run_dir)),
                        REWARD_HEALTH_ENV: str(reward_health_dir(run_dir)), **tracking_env(paths)}
    ckpt = checkpoint_dir(run_dir)
    label = f"{kind} run {run_dir}"
    probes = spec.rl.probe_steps() if kind == "rl" and spec.rl is not None else []
    with ProbeKeeper(run_dir, probes):  # keeps the probe steps' policies past verl's checkpoint rotation
        if finished_step(ckpt) != total:
            log.info("running verl (resumes from %s if it holds a checkpoint): %s", ckpt, " ".join(command))
            result = subprocess.run(command, env=env, check=False)
            if result.returncode != 0:
                raise VerlRunError(f"{label}: verl exited with code {result.returncode}; rerun to resume from {ckpt}")
    reached = finished_step(ckpt)
    if reached != total:
        raise VerlRunError(f"{label}: verl exited 0 but its last checkpoint is step {reached} of {total} "
                           f"({ckpt / TRACKER}); not marking the run done, rerun to resume")
    lost = missing(run_dir, probes)
    if lost:
        raise VerlRunError(f"{label}: verl finished, but the policies of probe step(s) {lost} (train.rl.probe_every "
                           f"{spec.rl.probe_every}) were not kept in {probe_shards_dir(run_dir)}: verl's checkpoint "
                           f"rotation deleted their actors before the keeper linked them (was this job's process "
                           f"stopped while verl ran?). To recover, train again from scratch (delete {ckpt} and "
                           f"{probe_shards_dir(run_dir)}, then rerun), or plan the run without the probe "
                           f"(train.rl.probe_every: null)")
    return overrides


def export_final(kind: str, run_dir: Path, total: int) -> Path:
    """The first end step: the last checkpoint's actor -> ``final/`` (Hugging Face format)."""
    step_dir = checkpoint_dir(run_dir) / f"global_step_{total}"
    return _merge_actor(step_dir if kind == "sft" else step_dir / "actor", run_dir / "final")


def end_steps(kind: str, spec: RunSpec, paths: TrainPaths, total: int, dump_every: int,
              overrides: Sequence[str] = ()) -> list[tuple[str, Callable[[], Any]]]:
    """The end steps after the export, in order (:func:`pipeline_lib.core.run_end.finish_run`): the probe steps'
    kept policies exported to ``probe/step_<s>/`` (:func:`.probe_keep.export_probes`), the metrics and (RL) the
    rollouts collected from every dump, then the kept dumps moved back from the scratch. Each is safe to redo after a
    kill inside it (outputs written whole, a probe step's folder published by a rename, :func:`.prune.keep_dumps`);
    checkpoints, probe shards and the scratch are freed only after ``DONE.json``."""
    run_dir = paths.run_dir

    def collect() -> None:
        collect_metrics(run_dir, total)
        if kind == "rl":
            import pandas as pd

            data_source = str(pd.read_parquet(paths.train_files, columns=["data_source"])["data_source"].iloc[0])
            collect_rollouts(run_dir, spec, run_dir / "final", data_source, total, train_files=paths.train_files,
                             overrides=overrides)

    probes = spec.rl.probe_steps() if kind == "rl" and spec.rl is not None else []
    return [("probe", lambda: export_probes(run_dir, probes, _merge_actor)), ("collect", collect),
            ("keep_dumps", lambda: keep_dumps(run_dir, dump_every))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = entry_parser(__doc__, summary="paragraph")
    parser.add_argument("kind", choices=["sft", "rl"])
    add_run_arguments(parser, threads=False)
    parser.add_argument("--data", type=Path, required=True, help="training parquet")
    parser.add_argument("--val-data", type=Path, help="RL: held-out prompts for verl's validation")
    parser.add_argument("--init", type=Path, help="RL: the model (HF directory, another run's final/) to start "
                        "from; without it, the spec's model (the base model's hub id, train.rl_start: base)")
    parser.add_argument("--dry-run", action="store_true", help="validate and print the verl command, run nothing")
    parser.add_argument("--scratch-dir", type=Path, default=None,
                        help="site.scratch_root/<task>/<name>/seed<k>: where verl's checkpoints and rollout dumps go "
                             "(linked from the run directory; default: inside the run directory)")
    parser.add_argument("--dump-every", type=int, default=None,
                        help="site.rollout_dump_every: a finished run keeps every k-th rollout dump and the last "
                             "(default: the schema's)")
    args = parser.parse_args(argv)
    if args.kind == "rl" and args.val_data is None:
        parser.error("rl needs --val-data")
    absolute = {name: (value.resolve() if value is not None else None)
                for name, value in {"run_dir": args.run_dir, "train_files": args.data, "val_files": args.val_data,
                                    "init": args.init}.items()}
    with contextlib.nullcontext() if args.dry_run else guard_attempt(absolute["run_dir"]):  # retries that fit
        run(args.kind, RunSpec.from_json(args.spec), TrainPaths(**absolute, tracking=args.tracking), args.seed,
            dry_run=args.dry_run, scratch_dir=args.scratch_dir.resolve() if args.scratch_dir else None,
            dump_every=args.dump_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
