"""The verl preflight: every kind of verl job of the paper plan trains 2 real steps on CPU before a GPU hour is spent.

    snakemake --configfile config/preflight.yaml            # every kind, one job each (workflow/rules/preflight.smk)
    python -m pipeline_lib.jobs.engines.verl.preflight model --preflight JSON --tokenizer DIR --out DIR
    python -m pipeline_lib.jobs.engines.verl.preflight run --preflight JSON --kind grpo --init DIR --out DIR

A job builds its run spec exactly as the real run's (:mod:`.translate` over the paper config, ``preflight.base``),
with the task's App. B row scaled down by ``preflight.row`` (2 steps, a few prompts, short lengths, one trainer
process) and the model replaced by a tiny random Qwen2 of the paper model's architecture with the pipeline's own
tokenizer. The only overrides added to the real run's are the CPU ones (:func:`.cpu.cpu_overrides`), and the run goes
through the real entry point (:func:`.train.run` for RL, :func:`.sft.run` for SFT: validation, launcher, verl's own
trainer with its own vLLM rollout on vLLM's CPU build, checkpoint check, model merger, metrics, rollouts,
``DONE.json``). Afterwards the job checks that
verl trained every step (a gradient wherever an advantage is not 0) and, for RL, that every update reached the
rollout: the weights vLLM holds after each sync (a digest read inside vLLM, :data:`.cpu.SYNC_LOG_ENV`) change with
every update, and verl's rollout-vs-actor probability gap stays small; then it prints each step's numbers, so the job
log shows them.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pipeline_lib.core.cli import entry_parser, json_text
from pipeline_lib.core.config import load_config_file, merge_config, validate_config
from pipeline_lib.core.env import env
from pipeline_lib.core.io import atomic_path
from pipeline_lib.jobs.engines.verl import cpu
from pipeline_lib.jobs.engines.verl.cpu import cpu_overrides
from pipeline_lib.jobs.engines.verl.translate import TrainPaths
from pipeline_lib.plan import METHODS, PlanError, RunSpec, validate_planned_config
from pipeline_lib.plan.settings import engine_settings, eval_spec, verl_tasks, with_variant

__all__ = ["CHECKS", "KINDS", "MODEL_DIR", "SFT_KIND", "Preflight", "PreflightError", "build_tiny_model",
           "check_advantages", "check_run", "check_weight_syncs", "eval_spec_for", "kind_spec",
           "load_preflight_config", "main", "run_kind", "start_of", "weight_syncs"]

log = logging.getLogger("pipeline_lib.jobs.engines.verl.preflight")



@dataclass(frozen=True)
class Preflight:
    """One preflight kind: the registry method whose verl job it trains 2 steps on CPU, and what it checks after."""

    method: str
    """The method (a :data:`~pipeline_lib.plan.registry.METHODS` entry with a verl job) whose real run it reproduces."""
    nonzero_update: bool = False
    """Its rewards vary within a group even on a random tiny model, so some update must have a gradient."""
    log_prob_rewards: bool = False
    """Every reward is a log-prob of the expert answer (finite, < 0): RL-Logit's."""
    own_teacher: bool = False
    """The method's teacher (``train.baselines.<section>.teacher``) becomes the tiny model on a trainer GPU of its
    own, beside the student's (OPD)."""


#: The preflight's kinds (``preflight.kinds``; the job ``results/preflight/<kind>/DONE.json``), each reading its
#: method's registry entry. GRPO and SoftmaxGRPO train as their -Sim jobs: a random tiny model never solves a
#: Countdown prompt, so under the verifier every group's rewards are equal, every advantage 0 and the update empty;
#: the similarity reward varies within a group. RL-Logit's update may be empty: its reward is log pi(a* | q, z) with z
#: the rollout's reasoning (the text before ``</think>`` or an ``<answer>`` line); the tiny model's 32-token rollouts
#: rarely hold either, so z is empty, every rollout of a group gets the same reward and the advantage is 0.
CHECKS: dict[str, Preflight] = {
    "sft": Preflight("sft"),
    "rl_logit": Preflight("rl_logit", log_prob_rewards=True),
    "raro": Preflight("raro"),
    "opd": Preflight("opd", nonzero_update=True, own_teacher=True),
    "grpo": Preflight("grpo_sim", nonzero_update=True),
    "softmax": Preflight("softmax_sim", nonzero_update=True),
    "softmax_ess": Preflight("softmax_ess"),
}


def _kinds() -> dict[str, tuple[str, str]]:
    unknown = {kind: p.method for kind, p in CHECKS.items()
               if p.method not in METHODS or "verl" not in METHODS[p.method].engines}
    if unknown:
        raise PlanError(f"preflight kinds name methods without a verl job in the registry: {unknown}")
    return {kind: (str(METHODS[p.method].engines["verl"].verl_kind), p.method) for kind, p in CHECKS.items()}


#: Preflight kind -> (verl trainer, the paper config's method whose real run it reproduces), from the registry.
KINDS: dict[str, tuple[str, str]] = _kinds()
#: The kind whose trainer is verl's SFT: it starts from the tiny model; an RL kind starts where the paper plan's run
#: of its method does (:func:`start_of`).
SFT_KIND = next(kind for kind, (trainer, _) in KINDS.items() if trainer == "sft")
#: The tiny random Qwen2 (rule ``preflight_model``): on CPU the preflight's base model.
MODEL_DIR = "results/preflight/model"
#: verl's rollout-vs-actor log-prob gap after an update; above this the rollout did not get the new weights.
PROBS_DIFF_TOLERANCE = 1e-2
class PreflightError(RuntimeError):
    """A preflight job found verl not training as the real run would; the message names the kind and the check."""


#: Keys of ``preflight.row``: a ``train.task_settings`` row's settings (its ``methods`` and ``engine`` are the
#: preflight's own).
ROW_KEYS = ("tau", "similarity_weights", "rl", "sft")


def _checks(kind: str) -> Preflight:
    """What the preflight checks for ``kind``."""
    if kind not in CHECKS:
        raise PreflightError(f"unknown preflight kind {kind!r}; known: {sorted(KINDS)} (preflight.CHECKS)")
    return CHECKS[kind]


def load_preflight_config(section: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(the preflight section, the paper config it checks)``, the paper config validated by the pipeline schema."""
    section = dict(section)
    missing = [k for k in ("base", "task", "paper_task", "row", "model", "kinds", "seed", "val_prompts")
               if k not in section]
    if missing:
        raise PreflightError(f"preflight config lacks {missing} (config/preflight.yaml shows each)")
    if "sft" in section:
        raise PreflightError("preflight.sft moved: use preflight.row.sft (verl's own SFT knobs under "
                             "preflight.row.sft.verl), as in a train.task_settings row")
    flat = sorted(set(section["row"]) - set(ROW_KEYS))
    if flat:
        raise PreflightError(f"preflight.row has {flat}: the row is a train.task_settings row merged over the paper "
                             f"task's, with keys {list(ROW_KEYS)} (RL settings under rl, verl's knobs under rl.verl)")
    unknown = sorted(set(section["kinds"]) - set(KINDS) - {"eval"})
    if unknown:
        raise PreflightError(f"preflight.kinds has unknown {unknown}; known: {[*KINDS, 'eval']}")
    base_path = Path(section["base"])
    if not base_path.is_file():
        raise PreflightError(f"preflight.base: {base_path} does not exist (the paper config the preflight checks)")
    base = load_config_file(base_path)
    validate_planned_config(base, "workflow/schemas/config.schema.yaml")
    if section["paper_task"] not in verl_tasks(base):
        raise PreflightError(f"preflight.paper_task {section['paper_task']!r} is not a verl task of {base_path} "
                             f"(rows of train.task_settings: {sorted(verl_tasks(base))})")
    return section, base


def start_of(kind: str, section: Mapping[str, Any]) -> tuple[str, str]:
    """``(the file the job of `kind` waits for, the model directory it starts from)``, chosen as the paper plan
    chooses its run's start (:func:`pipeline_lib.plan.runs.start_of`): the SFT kind, and under the paper config's
    ``train.rl_start: base`` every RL kind, from the tiny model, the base model on CPU; under ``sft`` (or for a
    method that always starts from SFT) an RL kind from the SFT kind's merged model."""
    if KINDS[kind][0] != "sft" and (_rl_start(str(section["base"])) == "sft"
                                     or METHODS[KINDS[kind][1]].from_starting_point):
        return f"results/preflight/{SFT_KIND}/DONE.json", f"results/preflight/{SFT_KIND}/final"
    return f"{MODEL_DIR}/config.json", MODEL_DIR


@functools.cache
def _rl_start(base: str) -> str:
    """``train.rl_start`` of the paper config ``base`` (the schema's default where it sets none), read once."""
    config = validate_config(load_config_file(Path(base)), "workflow/schemas/config.schema.yaml")
    return str(config["train"]["rl_start"])


#: Next-token steps that fit the tiny model to the task's demonstrations before any kind starts from it.
FIT_STEPS = 30


def build_tiny_model(tokenizer_dir: str | os.PathLike[str], model_spec: Mapping[str, Any], seed: int,
                     out: str | os.PathLike[str], demonstrations: str | os.PathLike[str] | None = None,
                     fit_steps: int = FIT_STEPS) -> Path:
    """A tiny Qwen2 (the paper model's architecture) with the pipeline's tokenizer, as an HF directory; with
    ``demonstrations`` (an ``sft_train.parquet``) first fitted to them for ``fit_steps`` next-token steps, so its
    sampled replies look like answers: the -Sim reward compares final texts (the authors' r_sim), and a random
    model's replies share no token with a Countdown expression, so no group would have a gradient to check."""
    import pandas as pd
    import torch
    from transformers import AutoTokenizer

    from pipeline_lib.core.model import build_model, save_model_atomic

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    model = build_model(tokenizer, dict(model_spec), seed)
    if demonstrations is not None and fit_steps > 0:
        chats = [list(messages) for messages in pd.read_parquet(demonstrations)["messages"]]
        texts = [tokenizer.apply_chat_template([dict(m) for m in chat], tokenize=False) for chat in chats]
        batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True,
                          max_length=int(model_spec.get("max_positions", 512)))
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        generator = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        model.train()
        for _ in range(fit_steps):
            rows = torch.randint(len(texts), (min(16, len(texts)),), generator=generator)
            loss = model(input_ids=batch["input_ids"][rows], attention_mask=batch["attention_mask"][rows],
                         labels=labels[rows]).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        log.info("tiny model fitted to %s for %d steps (last loss %.3f)", demonstrations, fit_steps, float(loss))
    model.config.attn_implementation = "sdpa"  # a plain checkpoint: verl loads it with its own attention
    return save_model_atomic(model, tokenizer, out)


def _preflight_paper_config(section: Mapping[str, Any], base: Mapping[str, Any], model_dir: str) -> dict[str, Any]:
    """The paper config with the preflight task in place of the paper task: its App. B row
    (``train.task_settings.<paper_task>``) with ``preflight.row`` merged over it, key by key, the tiny model in place
    of the paper model; every other setting as the real run's."""
    config = copy.deepcopy(dict(base))
    row = merge_config(copy.deepcopy(dict(config["train"]["task_settings"][section["paper_task"]])),
                       copy.deepcopy(dict(section["row"])))
    row.pop("methods", None)
    config["train"]["task_settings"] = {section["task"]: row}
    config["train"]["verl"]["model"] = model_dir
    return config


def kind_spec(kind: str, section: Mapping[str, Any], base: Mapping[str, Any], model_dir: str,
              env_vars: Mapping[str, str] | None = None) -> RunSpec:
    """The run spec of one preflight kind, built by the real run's spec builder (the registry entry's, over the
    preflight's paper config), plus the CPU overrides (``env_vars``: more variables for verl's Ray workers)."""
    trainer, method = KINDS[kind]
    config = _preflight_paper_config(section, base, model_dir)
    for baseline, settings in (section.get("baselines") or {}).items():  # sizes only, e.g. RARO's critic prompts
        config["train"]["baselines"][baseline] = {**config["train"]["baselines"][baseline], **settings}
    task = section["task"]
    if _checks(kind).own_teacher:  # the teacher: the tiny model again (the paper's Qwen3-8B is the GPU run's), on
        # one trainer "GPU" of its own beside the student's, as on a GPU node
        own = config["train"]["baselines"][METHODS[method].section]
        own["teacher"] = {**own["teacher"], "hub": model_dir}
        own["verl"] = {**(own.get("verl") or {}), "gpus_per_node": 1, "tensor_parallel_size": 1}
        knobs = config["train"]["task_settings"][task].setdefault("rl", {}).setdefault("verl", {})
        knobs["gpus_per_node"] = engine_settings(config, task, "rl", "verl")["gpus_per_node"] + 1
    spec = METHODS[method].engines["verl"].spec(config, task, method, "verl")
    if METHODS[method].variants:  # a method with variants (RL-Logit): its first variant's run
        spec = with_variant(spec, config["train"]["baselines"][METHODS[method].section][METHODS[method].variants][0])
    cpu_settings = cpu_overrides(trainer, (spec.rl or spec.sft).knobs.gpus_per_node, dict(env_vars or {}))
    return replace(spec, extra_overrides=(*spec.extra_overrides, *cpu_settings))


def _small_validation(source: Path, rows: int, out: Path) -> Path:
    """The first ``rows`` prompts of the task's test split: validation before training stays seconds."""
    import pandas as pd

    with atomic_path(out) as tmp:
        pd.read_parquet(source).head(rows).to_parquet(tmp)
    return out


def weight_syncs(sync_log: Path) -> list[list[str]]:
    """The digests of the rollout's weights after each weight sync, in order (one line per sync, written by the
    rollout's vLLM worker: :func:`.cpu._record_weight_syncs`); empty when no sync reached vLLM."""
    if not sync_log.is_file():
        return []
    return [json.loads(line)["digests"] for line in sync_log.read_text().splitlines() if line.strip()]


def check_weight_syncs(kind: str, rows: Sequence[Mapping[str, Any]], syncs: Sequence[Sequence[str]],
                       sync_log: Path) -> None:
    """The weights reached the rollout after every update: verl synced them before training and after each step
    (``steps + 1`` syncs read back inside vLLM), and each update with a gradient (``actor/grad_norm`` > 0) left vLLM
    holding weights it had not held before. A rollout that keeps its old weights fails here even where the
    probability gap stays small (a tiny learning rate barely moves the tokens' probabilities)."""
    steps = [row for row in rows if row["step"] > 0]
    if len(syncs) < len(steps) + 1:
        raise PreflightError(f"{kind}: the rollout's vLLM received {len(syncs)} weight sync(s), expected one before "
                             f"training and one after each of the {len(steps)} steps ({sync_log}): the rollout did "
                             f"not get the updated weights")
    moved = sum(1 for row in steps if abs(row.get("actor/grad_norm", 0.0)) > 0)
    distinct = len({tuple(digests) for digests in syncs})
    if distinct < moved + 1:
        raise PreflightError(f"{kind}: {moved} step(s) updated the actor, but the rollout's vLLM held only {distinct} "
                             f"distinct weight state(s) over {len(syncs)} syncs ({sync_log}): the updated weights "
                             f"did not reach the rollout")


def check_advantages(kind: str, run_dir: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Every step whose rollouts have a non-zero advantage (``rollouts.jsonl``, from verl's rollout dumps) updated
    the actor (``actor/grad_norm`` > 0); RL-Logit's rewards are log-probs of the expert answer (finite, < 0)."""
    grad = {row["step"]: abs(row.get("actor/grad_norm", 0.0)) for row in rows}
    path = run_dir / "rollouts.jsonl"
    if not path.is_file():
        raise PreflightError(f"{kind}: {path} missing (verl's rollout dumps were not collected)")
    for line in path.read_text().splitlines():
        step = json.loads(line)
        moving = sum(1 for value in step["advantage"] if value != 0)
        if moving and not grad.get(step["step"], 0.0) > 0:
            raise PreflightError(f"{kind}: step {step['step']} has {moving} rollout(s) with a non-zero advantage "
                                 f"but actor/grad_norm 0 ({path}): verl did not train on them")
        if _checks(kind).log_prob_rewards and not all(math.isfinite(r) and r < 0 for r in step["reward"]):
            raise PreflightError(f"{kind}: step {step['step']} rewards {step['reward']} are not all log-probs "
                                 f"(finite, < 0) of the expert answer ({path}): the RL-Logit reward did not run")


def check_run(kind: str, run_dir: Path, steps: int, sync_log: Path | None = None) -> list[dict[str, Any]]:
    """verl trained every step (metrics for 1..steps, ``DONE.json``) and, for RL, the rollout after the update
    sampled from the updated weights (the weights vLLM holds after each sync, ``sync_log``, and verl's
    rollout-vs-actor probability gap); returns the per-step metrics."""
    if not (run_dir / "DONE.json").is_file():
        raise PreflightError(f"{kind}: {run_dir}/DONE.json missing")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    trained = sorted(row["step"] for row in rows if row["step"] > 0)  # step 0: validation before training
    if trained != list(range(1, steps + 1)):
        raise PreflightError(f"{kind}: verl logged steps {trained}, expected 1..{steps} ({run_dir}/metrics.jsonl)")
    if _checks(kind).nonzero_update and not max(abs(row.get("actor/grad_norm", 0.0)) for row in rows) > 0:
        raise PreflightError(f"{kind}: every step's actor/grad_norm is 0: verl trained nothing ({run_dir})")
    if KINDS[kind][0] == "rl":
        if sync_log is None:
            raise PreflightError(f"{kind}: an RL run is checked with its weight-sync log (sync_log)")
        check_advantages(kind, run_dir, rows)
        check_weight_syncs(kind, rows, weight_syncs(sync_log), sync_log)
        last = rows[-1]
        gap = last.get("training/rollout_probs_diff_max")
        if gap is None:
            raise PreflightError(f"{kind}: step {last['step']} has no training/rollout_probs_diff_max (rollout "
                                 f"log-probs not returned?)")
        if not gap <= PROBS_DIFF_TOLERANCE:
            raise PreflightError(f"{kind}: after the update the rollout's token probabilities differ from the "
                                 f"actor's by up to {gap:.3g} (> {PROBS_DIFF_TOLERANCE}): the rollout did not "
                                 f"sample from the updated weights")
    return rows


_SHOWN = ("loss", "train/loss", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/score/mean",
          "actor/distillation/loss", "response_length/mean", "training/rollout_probs_diff_max", "timing_s/step")


def _print_steps(kind: str, rows: Sequence[Mapping[str, Any]]) -> None:
    for row in rows:
        keys = [*_SHOWN, *sorted(key for key in row if key.startswith("val-core/"))]
        shown = ", ".join(f"{key}={row[key]:.4g}" for key in keys if isinstance(row.get(key), int | float))
        print(f"[preflight {kind}] verl step {row['step']}: {shown}", flush=True)


def run_kind(kind: str, preflight: Mapping[str, Any], init: Path, out: Path, resume: bool = False) -> Path:
    """One preflight job: the kind's real run, 2 steps on CPU, from a clean run directory, then its checks; returns
    ``DONE.json``. ``resume``: a retry of the job (Snakemake's attempt > 1) continues the run from its last verl
    checkpoint instead (the run directory's run.json still sets aside another config's state)."""
    import shutil

    from pipeline_lib.jobs.engines.verl import sft, train

    os.environ.update({cpu.ENV: "1"})  # this process's verl and every process it starts (torchrun ranks, Ray workers)
    cpu.install()
    section, base = load_preflight_config(preflight)
    data = Path("results/data") / section["task"]
    sync_log = out.parent / f"{kind}_weight_syncs.jsonl"  # beside the run directory, which is cleaned below
    if not resume:  # a resumed run's syncs: the earlier attempts' and this one's
        sync_log.unlink(missing_ok=True)
    env_vars = {cpu.SYNC_LOG_ENV: str(sync_log.resolve())}
    if env(cpu.SKIP_SYNC_ENV) == "1":  # the stale-weights control of the tests
        env_vars[cpu.SKIP_SYNC_ENV] = "1"
    spec = kind_spec(kind, section, base, str(init), env_vars)
    if KINDS[kind][0] == "sft":
        paths = TrainPaths(out, data / "sft_train.parquet")
    else:
        val = _small_validation(data / "rl_test.parquet", int(section["val_prompts"]),
                                out.parent / f"{kind}_val.parquet")
        paths = TrainPaths(out, data / "rl_train.parquet", val, init)
    if not resume:  # a first attempt trains from scratch, never resumes a stale run (a retry: from its checkpoint)
        shutil.rmtree(out, ignore_errors=True)
    print(f"[preflight {kind}] verl {KINDS[kind][0]} run in {out} (spec: {spec.to_json()})", flush=True)
    done = (sft if KINDS[kind][0] == "sft" else train).run(spec, paths, int(section["seed"]))
    rows = check_run(kind, out, (spec.rl or spec.sft).steps, sync_log if KINDS[kind][0] == "rl" else None)
    _print_steps(kind, rows)
    return done


def eval_spec_for(preflight: Mapping[str, Any]) -> dict[str, Any]:
    """The paper config's evaluation settings for a verl checkpoint, through the paper's backend (vLLM: its CPU
    build here), with ``preflight.eval`` in place of the sizes (a few prompts, short generations; its ``vllm``
    keys over the paper's engine settings, e.g. the tiny model's context length)."""
    section, base = load_preflight_config(preflight)
    spec, own = eval_spec(base), dict(section.get("eval") or {})
    engine = {**spec.get("vllm", {}), **own.pop("vllm", {})}
    return {**spec, **own, "vllm": engine}


def main(argv: Sequence[str] | None = None) -> int:
    parser = entry_parser(__doc__, summary="line")
    sub = parser.add_subparsers(dest="command", required=True)
    model = sub.add_parser("model", help="the tiny random Qwen2 with the pipeline's tokenizer")
    model.add_argument("--preflight", required=True, type=json_text, help="`preflight` section: JSON file or JSON")
    model.add_argument("--tokenizer", required=True)
    model.add_argument("--demonstrations", type=Path, default=None,
                       help="the task's sft_train.parquet, fitted for FIT_STEPS steps first")
    model.add_argument("--out", required=True, type=Path)
    job = sub.add_parser("run", help="one kind's verl run, 2 steps on CPU, and its checks")
    job.add_argument("--preflight", required=True, type=json_text, help="`preflight` section: JSON file or JSON")
    job.add_argument("--kind", required=True, choices=sorted(KINDS))
    job.add_argument("--init", required=True, type=Path,
                     help="the model the kind starts from (start_of: the tiny model, or the SFT kind's final/)")
    job.add_argument("--out", required=True, type=Path)
    job.add_argument("--attempt", type=int, default=1,
                     help="Snakemake's attempt: a retry (> 1, e.g. after a Slurm time limit) resumes the run")
    args = parser.parse_args(argv)
    if args.command == "model":
        section, _ = load_preflight_config(json.loads(args.preflight))
        build_tiny_model(args.tokenizer, section["model"], int(section["seed"]), args.out, args.demonstrations)
        return 0
    try:
        run_kind(args.kind, json.loads(args.preflight), args.init, args.out, resume=args.attempt > 1)
    except PreflightError as error:
        print(f"preflight failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
