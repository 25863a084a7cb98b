"""Iterative DPO on GPU (paper App. B) with TRL's ``DPOTrainer``, from the local engine's method spec.

    python -m pipeline_lib.jobs.engines.trl.dpo run --spec JSON --data .../rl_train.parquet \
        --demonstrations .../sft_train.parquet --init .../sft/seed0/final --run-dir .../iterative_dpo/seed0 --seed 0

Same scheme as :mod:`pipeline_lib.jobs.engines.local.dpo` (``train.baselines.iterative_dpo``): round r draws
``pairs_per_round`` training questions, samples one response per question from the round's starting
model (the SFT model in round 1), pairs the expert demonstration (chosen) against that sample
(rejected), and trains ``steps_per_round`` optimizer steps of ``batch_size`` pairs with
``trl.DPOTrainer``. The reference model is the round's starting model, as in Pang et al. 2024
(Iterative RPO: M_{t+1} is initialised from and regularised towards M_t), and as in the local engine,
so each round is a DPO step away from the model that produced its rejected samples rather than ever
further from SFT. The last ``validation_prompts`` training prompts never enter a pair; greedy verifier
accuracy on them picks the best round, which becomes ``final/`` (the test split is never used).

Generation goes through the evaluation backends (:func:`pipeline_lib.jobs.eval.backends.open_backend`:
vLLM on GPU, ``hf`` on CPU) and training through TRL (optionally under ``accelerate launch`` for
several GPUs / DeepSpeed), each in its own child process, so vLLM's GPU memory is released before
training starts. Every step of a round leaves a file (``samples.jsonl``, ``pairs.jsonl``, ``model/``,
``validation.jsonl``, ``round.json`` last), and a rerun continues from the first missing one: a
finished round, or a finished part of one, is never redone.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline_lib.core.attempts import guard_attempt
from pipeline_lib.core.baselines import IterativeDPOSettings
from pipeline_lib.core.checkpoint import ConfigMismatchError, read_json_state, set_aside, write_done
from pipeline_lib.core.cli import add_run_arguments, add_seed_argument, add_spec_argument, entry_parser
from pipeline_lib.core.io import write_json, write_text
from pipeline_lib.core.provenance import config_digest, write_provenance
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.core.tracking import Tracker, TrackingSettings
from pipeline_lib.jobs.eval.backends import open_backend
from pipeline_lib.jobs.methods.expert import expert_demonstrations
from pipeline_lib.jobs.methods.rewards import rollout_rewards

__all__ = ["REQUIRED_TRL", "dpo_settings", "train_command", "train_iterative_dpo", "train_round"]

log = logging.getLogger("pipeline_lib.jobs.engines.trl.dpo")

#: The TRL release this module is tested against (pyproject `test`/`gpu` extras, envs/train-verl.yaml): the newest
#: with `trl.experimental.ppo.AutoModelForCausalLMWithValueHead`, which verl imports in every FSDP model build.
REQUIRED_TRL = "1.12.0"
MODULE = "pipeline_lib.jobs.engines.trl.dpo"


def dpo_settings(spec: RunSpec) -> dict[str, Any]:
    """The trainer's arguments from its run spec: its :class:`IterativeDPOSettings` (``train.baselines.iterative_dpo``
    as the plan read it) as one JSON mapping, which the rounds' ``accelerate launch`` processes take as ``--spec``,
    with the generation settings of its sampling and validation."""
    if not isinstance(spec.baseline, IterativeDPOSettings):
        raise ValueError(f"Iterative DPO's run spec needs IterativeDPOSettings as its baseline, got {spec.baseline!r}")
    return {**spec.baseline.to_dict(), "generation": dict(spec.generation or {})}


def gradient_accumulation(spec: Mapping[str, Any]) -> int:
    """Steps accumulated so one optimizer step sees ``batch_size`` pairs over all processes."""
    per_step = spec["per_device_batch_size"] * spec["num_processes"]
    if spec["batch_size"] % per_step:
        raise ValueError(f"train.baselines.iterative_dpo.batch_size ({spec['batch_size']}) must be a multiple of "
                         f"per_device_batch_size x num_processes ({per_step})")
    return spec["batch_size"] // per_step


def _check_trl() -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("trl")
    except PackageNotFoundError as exc:
        raise ImportError(f"Iterative DPO on GPU needs trl=={REQUIRED_TRL} (the `test` extra or "
                          "envs/train-verl.yaml)") from exc
    if found != REQUIRED_TRL:
        raise ImportError(f"trl {found} is installed; pipeline_lib.jobs.engines.trl is pinned to trl=={REQUIRED_TRL}")


# --- child processes ------------------------------------------------------------------------------------------------

def generate_file(model: Path, generation: Mapping[str, Any], prompts: Path, out: Path, seed: int,
                  greedy: bool) -> Path:
    """One generation per prompt of ``prompts`` (JSONL of chat messages) -> ``out`` (JSONL text + tokens)."""
    import torch


    messages = [json.loads(line) for line in prompts.read_text().splitlines() if line.strip()]
    with open_backend(model, dict(generation), seed, out.parent) as backend:
        torch.manual_seed(seed)  # after loading: the hf backend samples with torch's global generator (vLLM: seed)
        generations = backend.generate(messages, samples=1, greedy=greedy)
    write_text(out, "".join(json.dumps({"text": g[0].text, "tokens": g[0].tokens}) + "\n" for g in generations))
    return out


def train_round(spec: Mapping[str, Any], pairs: Path, start: Path, out: Path, seed: int) -> Path:
    """DPO on ``pairs`` from ``start`` (also the frozen reference) -> HF model ``out`` + ``train_log.jsonl``."""
    _check_trl()
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    records = [json.loads(line) for line in pairs.read_text().splitlines() if line.strip()]
    dataset = Dataset.from_list([{"prompt": r["prompt"], "chosen": [{"role": "assistant", "content": r["chosen"]}],
                                  "rejected": [{"role": "assistant", "content": r["rejected"]}]} for r in records])
    staging = out.with_name(f".{out.name}.tmp")
    args = DPOConfig(
        output_dir=str(staging / "trainer"), seed=seed, data_seed=seed, max_steps=spec["steps_per_round"],
        per_device_train_batch_size=spec["per_device_batch_size"],
        gradient_accumulation_steps=gradient_accumulation(spec), learning_rate=float(spec["lr"]),
        weight_decay=float(spec["weight_decay"]), max_grad_norm=float(spec["grad_clip"]),
        lr_scheduler_type="constant", warmup_steps=0, beta=float(spec["beta"]), loss_type=list(spec["loss_type"]),
        max_length=spec["max_length"], bf16=bool(spec["bf16"]),
        gradient_checkpointing=bool(spec["gradient_checkpointing"]),
        logging_steps=1, save_strategy="no", report_to=[], use_cpu=not torch.cuda.is_available(),
    )
    model = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(start, dtype=torch.bfloat16 if spec["bf16"] else torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(start)
    trainer = DPOTrainer(model=model, ref_model=reference, args=args, train_dataset=dataset,
                         processing_class=tokenizer)
    trainer.train()
    trainer.save_model(str(staging))
    trainer.accelerator.wait_for_everyone()
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(staging)
        logged = [h for h in trainer.state.log_history if "loss" in h and "step" in h]
        (staging / "train_log.jsonl").write_text("".join(json.dumps(h) + "\n" for h in logged))
        shutil.rmtree(staging / "trainer", ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)  # the model directory appears complete or not at all
    return out


# --- the orchestrating process ----------------------------------------------------------------------------------------

def train_command(spec: Mapping[str, Any], pairs: Path, start: Path, out: Path, seed: int) -> list[str]:
    """``train-round`` as a child process; under ``accelerate launch`` for several processes or a launch config."""
    inner = ["-m", MODULE, "train-round", "--spec", json.dumps(dict(spec)), "--pairs", str(pairs),
             "--start", str(start), "--out", str(out), "--seed", str(seed)]
    if spec["num_processes"] == 1 and not spec["accelerate_config"]:
        return [sys.executable, *inner]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(spec["num_processes"])]
    if spec["accelerate_config"]:
        launch += ["--config_file", str(spec["accelerate_config"])]
    return [*launch, *inner]


def _run(command: Sequence[str], label: str) -> None:
    """Run one child step; a failure names the step, and a rerun resumes at it."""
    log.info("%s: %s", label, " ".join(command[:6]) + " ...")
    result = subprocess.run(list(command), check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{label} failed with exit code {result.returncode}; rerun to resume from this step")


def _generate(model: Path, spec: Mapping[str, Any], prompts: list[list[dict[str, str]]], out: Path, seed: int,
              greedy: bool, label: str) -> list[dict[str, Any]]:

    if out.is_file():  # a resumed round: reuse its generations, or set an unreadable file aside and generate again
        lines = _read_generations(out, len(prompts), set_aside_if_bad=True)
        if lines is not None:
            return lines
    request = out.with_name(out.stem + ".prompts.jsonl")
    write_text(request, "".join(json.dumps(p) + "\n" for p in prompts))
    _run([sys.executable, "-m", MODULE, "generate", "--model", str(model), "--spec",
          json.dumps(spec["generation"]), "--prompts", str(request), "--out", str(out), "--seed", str(seed)]
         + (["--greedy"] if greedy else []), label)
    lines = _read_generations(out, len(prompts), set_aside_if_bad=False)
    assert lines is not None  # set_aside_if_bad=False raises instead
    return lines


def _read_generations(out: Path, expected: int, set_aside_if_bad: bool) -> list[dict[str, Any]] | None:
    """The generations of ``out``, one per prompt; an unreadable or short file is set aside (None) or an error."""

    try:
        lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]
        problem = None if len(lines) == expected else f"{len(lines)} generations for {expected} prompts"
    except ValueError as exc:
        lines, problem = [], f"unreadable ({exc})"
    if problem is None:
        return lines
    if set_aside_if_bad:
        set_aside(out, problem)
        return None
    raise RuntimeError(f"{out}: {problem}")


def _publish_copy(source: Path, target: Path) -> Path:
    staging = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging, ignore=shutil.ignore_patterns("train_log.jsonl"))
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def round_records(run_dir: Path, spec: Mapping[str, Any], r: int) -> list[dict[str, Any]]:
    """Round ``r``'s ``metrics.jsonl`` records: TRL's log lines (``loss``, ``rewards/margins``...) at the run's
    global step, with ``round``, ``margin`` and ``accuracy``."""
    train_log = run_dir / "rounds" / f"round{r}" / "model" / "train_log.jsonl"
    return [{**entry, "step": (r - 1) * spec["steps_per_round"] + int(entry["step"]), "round": r,
             "margin": entry.get("rewards/margins"), "accuracy": entry.get("rewards/accuracies")}
            for entry in (json.loads(line) for line in train_log.read_text().splitlines() if line.strip())]


def _track_round(tracker: Tracker | None, run_dir: Path, spec: Mapping[str, Any], summary: Mapping[str, Any]) -> None:
    """A finished round's curve to the tracking backends: its training steps, then its validation accuracy at its
    last step (``val/pass_at_1_greedy``: a name every backend keeps as it is)."""
    if tracker is None:
        return
    records = round_records(run_dir, spec, summary["round"])
    for record in records:
        tracker.log(record)
    tracker.log({"step": summary["round"] * spec["steps_per_round"],
                 "val/pass_at_1_greedy": summary["validation_pass@1_greedy"]})


def train_iterative_dpo(spec: Mapping[str, Any], data: Path, demonstrations: Path, init: Path, run_dir: Path,
                        seed: int, tracking: TrackingSettings | None = None) -> Path:
    """Run (or resume) every round, pick the best on the validation prompts, publish ``final/`` and ``DONE.json``."""
    import pandas as pd
    import torch


    started = time.time()
    gradient_accumulation(spec)  # fail before any generation on an impossible batch layout
    run_dir.mkdir(parents=True, exist_ok=True)
    digest = config_digest({"spec": dict(spec), "seed": seed, "data": str(data), "init": str(init), "engine": "trl"})
    identity = run_dir / "run.json"
    recorded = read_json_state(identity)  # an unreadable one is set aside and rewritten below
    if isinstance(recorded, dict) and recorded.get("config_sha256") != digest:
        raise ConfigMismatchError(f"{identity} belongs to another config; delete {run_dir} to start over")
    write_json(identity, {"config_sha256": digest, "engine": "trl"})
    frame = pd.read_parquet(data)
    if len(frame) <= spec["validation_prompts"]:
        raise ValueError(f"{data}: {len(frame)} prompts, need more than validation_prompts="
                         f"{spec['validation_prompts']}")
    prompts = [[dict(m) for m in p] for p in frame["prompt"]]
    expert = expert_demonstrations(frame, demonstrations)
    n_train = len(frame) - spec["validation_prompts"]
    validation = list(range(n_train, len(frame)))
    summaries: list[dict[str, Any]] = []
    # rounds are the unit of resume: the store is rebuilt from the finished rounds, then grows a round at a time
    tracker = Tracker(tracking) if tracking is not None else None
    for r in range(1, spec["rounds"] + 1):
        round_dir = run_dir / "rounds" / f"round{r}"
        summary_path = round_dir / "round.json"
        summary = read_json_state(summary_path)  # an unreadable one is set aside: the round's last part reruns
        if isinstance(summary, dict):
            summaries.append(summary)
            _track_round(tracker, run_dir, spec, summary)
            continue
        round_dir.mkdir(parents=True, exist_ok=True)
        start = run_dir / "rounds" / f"round{r - 1}" / "model" if r > 1 else init
        rows = torch.randperm(n_train, generator=torch.Generator().manual_seed(seed * 7919 + r))[
            :spec["pairs_per_round"]].tolist()
        samples = _generate(start, spec, [prompts[i] for i in rows], round_dir / "samples.jsonl", seed * 1000 + r,
                            greedy=False, label=f"round {r}: sampling from {start}")
        pairs = round_dir / "pairs.jsonl"
        if not pairs.is_file():
            write_text(pairs, "".join(json.dumps({"row": i, "prompt": prompts[i], "chosen": expert[i],
                                                  "rejected": s["text"]}) + "\n"
                                      for i, s in zip(rows, samples, strict=True)))
        model_dir = round_dir / "model"
        if not (model_dir / "config.json").is_file():
            _run(train_command(spec, pairs, start, model_dir, seed * 1000 + r), f"round {r}: DPO training")
        answers = _generate(model_dir, spec, [prompts[i] for i in validation], round_dir / "validation.jsonl", seed,
                            greedy=True, label=f"round {r}: validation")
        accuracy = float(rollout_rewards(frame, validation, [a["text"] for a in answers], None)[1].mean())
        summary = {"round": r, "validation_pass@1_greedy": accuracy, "validation_prompts": len(validation),
                   "rejected_length": sum(s["tokens"] for s in samples) / len(samples), "config_sha256": digest}
        write_json(summary_path, summary)
        log.info("round %d: validation pass@1 %.3f (%s)", r, accuracy, summary_path)
        summaries.append(summary)
        _track_round(tracker, run_dir, spec, summary)
    if tracker is not None:
        tracker.close()
    lines = [json.dumps(record) for r in range(1, spec["rounds"] + 1) for record in round_records(run_dir, spec, r)]
    metrics = run_dir / "metrics.jsonl"
    write_text(metrics, "".join(line + "\n" for line in lines))
    best = max(summaries, key=lambda s: (s["validation_pass@1_greedy"], -s["round"]))
    final = _publish_copy(run_dir / "rounds" / f"round{best['round']}" / "model", run_dir / "final")
    write_json(run_dir / "rounds.json", {"rounds": summaries, "best_round": best["round"],
                                         "selected_by": "validation_pass@1_greedy"})
    total = spec["rounds"] * spec["steps_per_round"]
    done = write_done(run_dir, step=total, total_steps=total, config_sha256=digest, kind="iterative_dpo",
                      engine="trl", seed=seed, best_round=best["round"])
    write_provenance([done, metrics, run_dir / "rounds.json", final / "config.json",
                      *sorted(final.glob("*.safetensors"))],
                     step="train_trl_iterative_dpo", inputs=[data, demonstrations, init / "config.json"],
                     params={"spec": dict(spec)}, config_sha256=digest, seeds={"run": seed}, started_at=started)
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = entry_parser(__doc__, MODULE)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="every round (resumable), best round -> final/")
    add_run_arguments(run, threads=False)
    run.add_argument("--data", type=Path, required=True, help="the task's rl_train.parquet (prompts, verifier)")
    run.add_argument("--demonstrations", type=Path, required=True, help="the task's sft_train.parquet")
    run.add_argument("--init", type=Path, required=True, help="the SFT model (round 1's start and reference)")
    generate = commands.add_parser("generate", help="child step: one generation per prompt")
    generate.add_argument("--model", type=Path, required=True)
    add_spec_argument(generate, "the generation settings (eval backend spec)")
    generate.add_argument("--prompts", type=Path, required=True)
    generate.add_argument("--out", type=Path, required=True)
    add_seed_argument(generate)
    generate.add_argument("--greedy", action="store_true")
    round_ = commands.add_parser("train-round", help="child step: one round of DPO training")
    add_spec_argument(round_, "the Iterative DPO settings (the run spec's dpo_settings)")
    round_.add_argument("--pairs", type=Path, required=True)
    round_.add_argument("--start", type=Path, required=True)
    round_.add_argument("--out", type=Path, required=True)
    add_seed_argument(round_)
    args = parser.parse_args(argv)
    if args.command == "run":
        absolute = {k: getattr(args, k).resolve() for k in ("data", "demonstrations", "init", "run_dir")}
        with guard_attempt(absolute["run_dir"]):  # retries that fit the failure (pipeline_lib.core.attempts)
            train_iterative_dpo(dpo_settings(RunSpec.from_json(args.spec)), seed=args.seed, tracking=args.tracking,
                                **absolute)
    elif args.command == "generate":
        generate_file(args.model, json.loads(args.spec), args.prompts, args.out, args.seed, args.greedy)
    else:
        train_round(json.loads(args.spec), args.pairs, args.start, args.out, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
