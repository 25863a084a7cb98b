"""Entry point of the verl SFT rules (SFT, Rationalization's second step): one SFT run, resumable, published like the
local engine's.

    python -m pipeline_lib.jobs.engines.verl.sft --spec JSON --data SFT.parquet --run-dir DIR --seed K

The run's overrides come from its spec (:func:`.overrides.sft_overrides`), are checked against verl
(:func:`.compose.validate_sft`), and verl runs as ``torchrun -m verl.trainer.sft_trainer`` on one node; the steps
every verl run shares (claim, resume, export, metrics, ``DONE.json``) are :func:`.runner.run`'s. Its own entry point,
apart from the RL one (:mod:`.train`): nothing here imports RL code (advantages, rewards, the estimators' plug-in), so
the job's code digest covers none and an edit of the advantage estimators reruns no SFT job (issue 58;
``tests/workflow/test_layers.py`` holds the closure free of them).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline_lib.core.attempts import guard_attempt
from pipeline_lib.core.cli import add_run_arguments, entry_parser
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.jobs.engines.verl.compose import validate_sft
from pipeline_lib.jobs.engines.verl.overrides import sft_overrides
from pipeline_lib.jobs.engines.verl.paths import TrainPaths, checkpoint_dir
from pipeline_lib.jobs.engines.verl.runner import VerlRun, VerlRunError, merge_actor
from pipeline_lib.jobs.engines.verl.runner import run as run_verl

__all__ = ["ENTRY", "SFTRun", "build_command", "main", "run"]

#: This module: the code a verl SFT run's identity and its rule's ``code`` parameter cover.
ENTRY = "pipeline_lib.jobs.engines.verl.sft"


def build_command(overrides: Sequence[str], spec: RunSpec) -> list[str]:
    """verl's SFT trainer under torchrun, on one node with the task's GPUs."""
    if spec.sft is None:
        raise VerlRunError(f"run spec {spec.task}/{spec.method}: no SFT settings for a verl SFT run")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            f"--nproc_per_node={spec.sft.knobs.gpus_per_node}", "-m", "verl.trainer.sft_trainer", *overrides]


@dataclass(frozen=True)
class SFTRun(VerlRun):
    """A verl SFT run: verl's SFT trainer logs a step before it saves it, so its last checkpoint is where it resumes;
    its ``final/`` is the last checkpoint merged whole; it collects its metrics only."""

    kind = "sft"
    entry = ENTRY

    @property
    def total(self) -> int:
        if self.spec.sft is None:
            raise VerlRunError(f"run spec {self.spec.task}/{self.spec.method}: no SFT settings for a verl SFT run")
        return int(self.spec.sft.steps)

    def overrides(self) -> list[str]:
        return sft_overrides(self.spec, self.paths, self.seed)

    def validate(self, overrides: Sequence[str]) -> None:
        validate_sft(overrides, label=f"sft run {self.paths.run_dir}")

    def command(self, overrides: Sequence[str]) -> list[str]:
        return build_command(overrides, self.spec)

    def export(self) -> Path:
        return merge_actor(checkpoint_dir(self.paths.run_dir) / f"global_step_{self.total}",
                           self.paths.run_dir / "final")


#: An SFT run dumps no rollouts, so the thinning of the dumps (``site.rollout_dump_every``) has nothing to thin; the
#: plan passes the site's value all the same, and without it every dump (none) is kept. Not the schema's default: that
#: would import the config module, and with it the estimators' table, into the SFT job's code.
KEEP_EVERY_DUMP = 1


def run(spec: RunSpec, paths: TrainPaths, seed: int, dry_run: bool = False, scratch_dir: Path | None = None,
        dump_every: int | None = None) -> Path | None:
    """One verl SFT run to its end (:func:`.runner.run`); None on a dry run."""
    return run_verl(SFTRun(spec, paths, seed), KEEP_EVERY_DUMP if dump_every is None else dump_every,
                    dry_run=dry_run, scratch_dir=scratch_dir)


def main(argv: Sequence[str] | None = None) -> int:
    parser = entry_parser(__doc__, summary="paragraph")
    add_run_arguments(parser, threads=False)
    parser.add_argument("--data", type=Path, required=True, help="training parquet (chat messages)")
    parser.add_argument("--dry-run", action="store_true", help="validate and print the verl command, run nothing")
    parser.add_argument("--scratch-dir", type=Path, default=None,
                        help="site.scratch_root/<task>/<name>/seed<k>: where verl's checkpoints go (linked from the "
                             "run directory; default: inside the run directory)")
    parser.add_argument("--dump-every", type=int, default=None,
                        help="site.rollout_dump_every: a finished run keeps every k-th rollout dump and the last "
                             "(an SFT run dumps none; default: keep every one)")
    args = parser.parse_args(argv)
    run_dir = args.run_dir.resolve()
    with contextlib.nullcontext() if args.dry_run else guard_attempt(run_dir):  # retries that fit
        run(RunSpec.from_json(args.spec), TrainPaths(run_dir, args.data.resolve(), tracking=args.tracking), args.seed,
            dry_run=args.dry_run, scratch_dir=args.scratch_dir.resolve() if args.scratch_dir else None,
            dump_every=args.dump_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
