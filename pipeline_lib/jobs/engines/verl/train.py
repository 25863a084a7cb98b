"""Entry point of the verl RL rules (group RL and the verl baselines: OPD, RL-Logit, RARO): one RL run, resumable,
published like the local engine's.

    python -m pipeline_lib.jobs.engines.verl.train rl --spec JSON --data RL.parquet --val-data TEST.parquet \\
        [--init START_DIR/final] --run-dir DIR --seed K     # no --init: from the spec's model (the base model)

A run builds its Hydra overrides from the spec (:mod:`.translate`), checks them against verl (:mod:`.checks`), then
runs ``python -m verl.trainer.main_ppo`` behind the Slurm/Ray launcher (:mod:`.launch`: a Ray cluster over every node
of a multi-node allocation); the steps every verl run shares (claim, resume, export, metrics, ``DONE.json``) are
:func:`.runner.run`'s. An SFT run has its own entry point (:mod:`.sft`), whose code holds none of the RL code here.

What RL adds: a checkpoint whose step verl never logged is redone (:func:`logged_resume_point`), the probe steps'
policies are kept past verl's checkpoint rotation and exported (:mod:`.probe_keep`), the metrics carry the reward
hook's verifier timeouts/failures, and verl's rollout dumps become ``rollouts.jsonl`` in the local engine's schema
(:func:`collect_rollouts`: the gradient-allocation table is computed the same way for both engines).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline_lib.core.attempts import guard_attempt
from pipeline_lib.core.checkpoint import probe_dir
from pipeline_lib.core.cli import add_run_arguments, entry_parser
from pipeline_lib.core.config import schema_defaults
from pipeline_lib.core.io import write_text
from pipeline_lib.core.rewards import compute_scores, health_counts
from pipeline_lib.core.rl.advantages import group_advantages
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.jobs.engines.verl.checks import validate_rl
from pipeline_lib.jobs.engines.verl.paths import probe_shards_dir
from pipeline_lib.jobs.engines.verl.probe_keep import ProbeKeeper, drop_after, export_probes, missing
from pipeline_lib.jobs.engines.verl.reward import dumped_health, read_health_records
from pipeline_lib.jobs.engines.verl.runner import (
    TRACKER,
    VerlRun,
    VerlRunError,
    finished_step,
    merge_actor,
    merger_arguments,
    rebuild_tracking_store,
    resumed_overrides,
    rotate_metrics,
    verl_records,
    verl_run_identity,
    write_metrics,
)
from pipeline_lib.jobs.engines.verl.runner import run as run_verl
from pipeline_lib.jobs.engines.verl.translate import (
    ESTIMATOR_MODULE,
    REWARD_HEALTH_ENV,
    TrainPaths,
    checkpoint_dir,
    needs_references,
    reward_health_dir,
    rl_overrides,
    rollout_dump_dir,
)

__all__ = ["ENTRY", "TRACKER", "RLRun", "VerlRunError", "build_command", "collect_metrics", "collect_rollouts",
           "finished_step", "logged_resume_point", "main", "merger_arguments", "prompt_keys", "prompt_rendering",
           "rebuild_tracking_store", "require_installed_project", "resumed_overrides", "rollout_groups",
           "rotate_metrics", "run", "training_prompt_rows", "unmatched_prompt_rows", "verl_run_identity"]

log = logging.getLogger("pipeline_lib.jobs.engines.verl.train")

#: This module: the code a verl RL run's identity and its rule's ``code`` parameter cover.
ENTRY = "pipeline_lib.jobs.engines.verl.train"
LAUNCHER = "pipeline_lib.jobs.engines.verl.launch"


def build_command(overrides: Sequence[str], spec: RunSpec) -> list[str]:
    """verl's PPO trainer behind the launcher (a Ray cluster over the allocation's nodes)."""
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]
    if importlib.util.find_spec(LAUNCHER) is None:  # the launcher is part of this package; kept swappable here
        return command
    return [sys.executable, "-m", LAUNCHER, "--gpus-per-node", str(spec.rl.knobs.gpus_per_node), "--", *command]


def logged_resume_point(run_dir: Path) -> int | None:
    """The step verl resumes from (None: from scratch), after setting aside a last checkpoint whose step was never
    logged.

    verl's RL trainer saves step k's checkpoint before it validates, dumps step k's rollouts and logs its metrics
    (``fit`` in verl/trainer/ppo/v1/trainer_base.py and ppo/ray_trainer.py). A job killed in between (a Slurm time
    limit, a preemption; the last step's validation makes the window long) resumes at k + 1, so step k's metrics and
    rollouts are lost for good, and for the last step verl is skipped and the run can never be collected. Such a
    checkpoint is removed and the tracker points at the previous complete one (verl keeps
    ``max_actor_ckpt_to_keep`` >= 2), whose next step verl redoes; with none left, the run starts over. The SFT
    trainer logs before it saves, so its checkpoints are always logged (:meth:`.runner.VerlRun.resume_point`).
    """
    ckpt = checkpoint_dir(run_dir)
    step = finished_step(ckpt)
    if step is None:
        return step
    records = verl_records(run_dir, step)

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



def collect_metrics(run_dir: Path, total_steps: int) -> Path:
    """Every attempt's verl metrics -> ``metrics.jsonl``, one line per step (a later attempt's step wins), with each
    step's verifier timeouts/failures (:func:`.runner.write_metrics`)."""
    health = _health_source(run_dir)
    return write_metrics(run_dir, total_steps, lambda step: _reward_health(run_dir, step, health))


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


@dataclass(frozen=True)
class RLRun(VerlRun):
    """A verl RL run: the launcher and verl's PPO trainer, the estimators' plug-in installed, RARO's data checked, a
    checkpoint never logged redone, the probe policies kept, and rollouts collected beside the metrics."""

    kind = "rl"
    entry = ENTRY

    @property
    def total(self) -> int:
        if self.spec.rl is None:
            raise VerlRunError(f"run spec {self.spec.task}/{self.spec.method}: no RL settings for a verl RL run")
        return int(self.spec.rl.steps)

    @property
    def probes(self) -> list[int]:
        """The steps whose policies the run keeps (``train.rl.probe_every``)."""
        return self.spec.rl.probe_steps() if self.spec.rl is not None else []

    def overrides(self) -> list[str]:
        return rl_overrides(self.spec, self.paths, self.seed)

    def validate(self, overrides: Sequence[str]) -> None:
        validate_rl(overrides, label=f"rl run {self.paths.run_dir}")

    def command(self, overrides: Sequence[str]) -> list[str]:
        return build_command(overrides, self.spec)

    def before_claim(self) -> None:
        require_installed_project()
        if needs_references(self.spec):  # every prompt needs its expert answer; fail before Ray and the GPUs
            from pipeline_lib.jobs.engines.verl.raro_loop import check_training_data

            check_training_data(self.paths.train_files)

    def resume_point(self) -> int | None:
        return logged_resume_point(self.paths.run_dir)

    def env(self) -> dict[str, str]:
        """The estimators' module for verl's workers and the reward hook's records folder (made here: its existence
        says they are kept)."""
        health = reward_health_dir(self.paths.run_dir)
        health.mkdir(exist_ok=True)
        return {"VERL_USE_EXTERNAL_MODULES": ESTIMATOR_MODULE, REWARD_HEALTH_ENV: str(health)}

    def keeping(self) -> contextlib.AbstractContextManager[Any]:
        return ProbeKeeper(self.paths.run_dir, self.probes)  # the probe policies past verl's checkpoint rotation

    def check_kept(self) -> None:
        run_dir, ckpt = self.paths.run_dir, checkpoint_dir(self.paths.run_dir)
        lost = missing(run_dir, self.probes)
        if lost:
            raise VerlRunError(f"rl run {run_dir}: verl finished, but the policies of probe step(s) {lost} "
                               f"(train.rl.probe_every {self.spec.rl.probe_every}) were not kept in "
                               f"{probe_shards_dir(run_dir)}: verl's checkpoint rotation deleted their actors before "
                               f"the keeper linked them (was this job's process stopped while verl ran?). To recover, "
                               f"train again from scratch (delete {ckpt} and {probe_shards_dir(run_dir)}, then rerun), "
                               f"or plan the run without the probe (train.rl.probe_every: null)")

    def export(self) -> Path:
        step_dir = checkpoint_dir(self.paths.run_dir) / f"global_step_{self.total}"
        return merge_actor(step_dir / "actor", self.paths.run_dir / "final")

    def collect(self, overrides: Sequence[str]) -> None:
        """The metrics with the reward health, and the rollouts (advantages recomputed, prompts matched to rows)."""
        import pandas as pd

        run_dir = self.paths.run_dir
        collect_metrics(run_dir, self.total)
        data_source = str(pd.read_parquet(self.paths.train_files, columns=["data_source"])["data_source"].iloc[0])
        collect_rollouts(run_dir, self.spec, run_dir / "final", data_source, self.total,
                         train_files=self.paths.train_files, overrides=overrides)

    def end_steps(self, dump_every: int, overrides: Sequence[str] = ()) -> list[tuple[str, Callable[[], Any]]]:
        """The probe steps' kept policies exported to ``probe/step_<s>/`` first (:func:`.probe_keep.export_probes`,
        each step's folder published by a rename), then the shared steps (:meth:`.runner.VerlRun.end_steps`); probe
        shards are freed only after ``DONE.json``."""
        probe = ("probe", lambda: export_probes(self.paths.run_dir, self.probes, merge_actor))
        return [probe, *super().end_steps(dump_every, overrides)]

    def done_fields(self) -> dict[str, Any]:
        return {"unmatched_prompt_rows": unmatched_prompt_rows(self.paths.run_dir / "rollouts.jsonl")}

    def inputs(self) -> list[Path]:
        init = [self.paths.init / "config.json"] if self.paths.init is not None else []
        return [self.paths.train_files, *([self.paths.val_files] if self.paths.val_files else []), *init]

    def outputs(self) -> list[Path]:
        return [*super().outputs(), self.paths.run_dir / "rollouts.jsonl",
                *(probe_dir(self.paths.run_dir, s) / "config.json" for s in self.probes)]


def run(spec: RunSpec, paths: TrainPaths, seed: int, dry_run: bool = False, scratch_dir: Path | None = None,
        dump_every: int | None = None) -> Path | None:
    """One verl RL run to its end (:func:`.runner.run`); None on a dry run. ``dump_every``: ``site.rollout_dump_every``
    (None: the schema's default)."""
    dump_every = schema_defaults("site")["rollout_dump_every"] if dump_every is None else dump_every
    return run_verl(RLRun(spec, paths, seed), dump_every, dry_run=dry_run, scratch_dir=scratch_dir)


def main(argv: Sequence[str] | None = None) -> int:
    parser = entry_parser(__doc__, summary="paragraph")
    parser.add_argument("kind", choices=["rl", "sft"],
                        help="rl (a verl SFT run has its own entry point, pipeline_lib.jobs.engines.verl.sft)")
    add_run_arguments(parser, threads=False)
    parser.add_argument("--data", type=Path, required=True, help="training parquet")
    parser.add_argument("--val-data", type=Path, help="held-out prompts for verl's validation (required)")
    parser.add_argument("--init", type=Path, help="the model (HF directory, another run's final/) to start from; "
                        "without it, the spec's model (the base model's hub id, train.rl_start: base)")
    parser.add_argument("--dry-run", action="store_true", help="validate and print the verl command, run nothing")
    parser.add_argument("--scratch-dir", type=Path, default=None,
                        help="site.scratch_root/<task>/<name>/seed<k>: where verl's checkpoints and rollout dumps go "
                             "(linked from the run directory; default: inside the run directory)")
    parser.add_argument("--dump-every", type=int, default=None,
                        help="site.rollout_dump_every: a finished run keeps every k-th rollout dump and the last "
                             "(default: the schema's)")
    args = parser.parse_args(argv)
    if args.kind != "rl":
        parser.error("this is the RL entry point; a verl SFT run is `python -m pipeline_lib.jobs.engines.verl.sft`, "
                     "whose code holds no RL code (so an edit of the advantages reruns no SFT job)")
    if args.val_data is None:
        parser.error("rl needs --val-data")
    absolute = {name: (value.resolve() if value is not None else None)
                for name, value in {"run_dir": args.run_dir, "train_files": args.data, "val_files": args.val_data,
                                    "init": args.init}.items()}
    with contextlib.nullcontext() if args.dry_run else guard_attempt(absolute["run_dir"]):  # retries that fit
        run(RunSpec.from_json(args.spec), TrainPaths(**absolute, tracking=args.tracking), args.seed,
            dry_run=args.dry_run, scratch_dir=args.scratch_dir.resolve() if args.scratch_dir else None,
            dump_every=args.dump_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
