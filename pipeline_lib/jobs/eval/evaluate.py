"""Evaluate a checkpoint on held-out prompts (backends: HF transformers on CPU, vLLM, an OpenAI-compatible server).

    python -m pipeline_lib.jobs.eval.evaluate --model results/train/T/M/seed0/final --data
    results/data/T/rl_test.parquet \
        --spec JSON --out results/eval/T/M/seed0

Writes ``generations.jsonl`` (prompt index, sample, text, length, reward components) and
``metrics.json``: greedy pass@1, sampled pass@1 and pass@k (unbiased estimator over n samples),
mean response length in tokens. Rewards come from the same registry as training.

Accuracy (pass@1, pass@k) is the task's verifier's: each row is scored by its data source's own composition
(:data:`~pipeline_lib.core.rewards.DATA_SOURCE_REWARDS`: the math verifier for arithmetic, the Countdown checker...),
whatever reward weights training used. A run trained on another composition (``data.tiny.reward_weights``, stored
in each row's ``extra_info``, or a spec's ``reward_weights``) has that weighted reward reported beside it under its
own name (``reward_mean_<mode>``, each generation's ``reward``), never as an accuracy: weights ``{math: 0.5}`` made
an all-correct model's pass@1 0.5 and its pass@4 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from math import comb
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from pipeline_lib.core.cli import add_seed_argument, add_spec_argument, add_threads_argument, entry_parser, json_text
from pipeline_lib.core.io import write_json, write_text
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.core.rewards import DATA_SOURCE_REWARDS, compute_scores, health_counts
from pipeline_lib.jobs.eval.backends import open_backend
from pipeline_lib.jobs.methods.rewards import verifier_info

log = logging.getLogger("pipeline_lib.jobs.eval.evaluate")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def score_rows(frame: pd.DataFrame, texts: list[str], rows: list[int], reward_weights: dict | None
               ) -> list[dict[str, float]]:
    """The training reward of each text: ``reward_weights``, else the row's ``extra_info`` composition."""
    records = frame.iloc[rows]
    return compute_scores(list(records["data_source"]), texts, [r["ground_truth"] for r in records["reward_model"]],
                          [dict(e) for e in records["extra_info"]], reward_weights)


def verifier_rows(frame: pd.DataFrame, texts: list[str], rows: list[int]) -> list[dict[str, float]]:
    """Each text scored by its task's verifier (the data source's own composition), for accuracy and pass@k."""
    records = frame.iloc[rows]
    return compute_scores(list(records["data_source"]), texts, [r["ground_truth"] for r in records["reward_model"]],
                          [verifier_info(d, e) for d, e in zip(records["data_source"], records["extra_info"],
                                                                 strict=True)])


def trains_on_another_reward(frame: pd.DataFrame, reward_weights: dict | None) -> bool:
    """Whether training's reward differs from the verifier on any row (then it is reported beside the accuracy)."""
    if reward_weights:
        return True
    for source, info in zip(frame["data_source"], frame["extra_info"], strict=True):
        weights = dict(info).get("reward_weights")
        if weights and source in DATA_SOURCE_REWARDS and {str(k): float(v) for k, v in dict(weights).items()
                                                          if v is not None} != DATA_SOURCE_REWARDS[source]:
            return True
    return False


def correct_verdict(result: dict[str, float]) -> bool:
    """The verifier's verdict: its ``acc`` where it gives one, else a full score (a similarity reward's 1.0)."""
    return bool(result["acc"] >= 1.0) if "acc" in result else result["score"] >= 1.0


def evaluate(model_dir: Path, data: Path, spec: dict[str, Any], seed: int, work_dir: Path | None = None
             ) -> tuple[dict[str, Any], list[dict]]:
    """Greedy and sampled generations for every held-out prompt, scored by the task's reward registry entry."""
    frame = pd.read_parquet(data)
    max_prompts = spec.get("max_prompts")
    if max_prompts is not None:
        if isinstance(max_prompts, bool) or not isinstance(max_prompts, int) or max_prompts < 1:
            raise ValueError(f"max_prompts {max_prompts!r}: a number of prompts >= 1, or null for all")
        frame = frame.iloc[:max_prompts]
    prompts = [[dict(m) for m in p] for p in frame["prompt"]]
    weights = spec.get("reward_weights")
    other_reward = trains_on_another_reward(frame, weights)
    n_samples = spec["samples"]
    generations: list[dict] = []
    correct_counts = [0] * len(frame)
    greedy_scores, sample_scores, lengths = [], [], []
    rewards: dict[str, list[float]] = {"greedy": [], "sample": []}
    torch.manual_seed(seed)
    with open_backend(model_dir, spec, seed, work_dir or Path(model_dir)) as backend:
        for mode, repeats in (("greedy", 1), ("sample", n_samples)):
            if repeats == 0:
                continue
            outputs = backend.generate(prompts, samples=repeats, greedy=mode == "greedy")
            flat = [(row, k, g) for row, per_prompt in enumerate(outputs) for k, g in enumerate(per_prompt)]
            texts, rows = [g.text for _, _, g in flat], [row for row, _, _ in flat]
            scores = verifier_rows(frame, texts, rows)
            trained = score_rows(frame, texts, rows, weights) if other_reward else [{}] * len(flat)
            for (row, k, generation), result, reward in zip(flat, scores, trained, strict=True):
                generations.append({"prompt_index": row, "mode": mode, "sample": k, "text": generation.text,
                                    "length": generation.tokens, **result,
                                    **({"reward": reward["score"]} if other_reward else {})})
                if other_reward:
                    rewards[mode].append(reward["score"])
                if mode == "greedy":
                    greedy_scores.append(result["score"])
                    lengths.append(generation.tokens)
                else:
                    sample_scores.append(result["score"])
                    correct_counts[row] += correct_verdict(result)
    metrics: dict[str, Any] = {"prompts": len(frame), "pass@1_greedy": sum(greedy_scores) / len(greedy_scores),
                               "mean_length_greedy": sum(lengths) / len(lengths), "backend": spec.get("backend", "hf")}
    if n_samples:
        metrics["pass@1_sampled"] = sum(sample_scores) / len(sample_scores)
        metrics["mean_length_sampled"] = sum(g["length"] for g in generations if g["mode"] == "sample") / len(
            sample_scores)
        for k in spec["pass_k"]:
            if k > n_samples:  # the config check refuses this (eval.pass_k); a direct call is told, not ignored
                raise ValueError(f"pass@{k} needs at least {k} samples per prompt; this evaluation draws {n_samples}")
            metrics[f"pass@{k}"] = sum(pass_at_k(n_samples, c, k) for c in correct_counts) / len(frame)
    metrics["score_kind"] = "verifier"
    if other_reward:  # the weighted training reward, under its own name
        metrics["reward_mean_greedy"] = sum(rewards["greedy"]) / len(rewards["greedy"])
        if rewards["sample"]:
            metrics["reward_mean_sampled"] = sum(rewards["sample"]) / len(rewards["sample"])
        metrics["reward_kind"] = (f"training reward {json.dumps(weights)}" if weights
                                  else "training reward (the rows' extra_info reward_weights)")
    # Items the verifier timed out on or failed count as wrong in pass@1: say how many, per mode.
    for mode in ("greedy", "sample"):
        counts = health_counts([g for g in generations if g["mode"] == mode])
        metrics.update({f"reward_{kind}_{mode}": count for kind, count in counts.items()})
    return metrics, generations


def evaluate_to(out: Path, model_dir: Path, data: Path, spec: dict[str, Any], seed: int,
                started: float | None = None) -> dict[str, Any]:
    """Evaluate and write ``generations.jsonl``, ``metrics.json`` and their provenance into ``out``.

    Training entry points call it in-process after their last step (``--eval-*``), which saves a job's
    Python and torch start-up per run; the outputs are the ``eval_checkpoint`` rule's, byte for byte.
    """
    started = time.time() if started is None else started
    out.mkdir(parents=True, exist_ok=True)
    metrics, generations = evaluate(model_dir, data, spec, seed, work_dir=out)
    write_text(out / "generations.jsonl", "".join(json.dumps(g) + "\n" for g in generations))
    write_json(out / "metrics.json", metrics)
    write_provenance([out / "metrics.json", out / "generations.jsonl"], step="eval_checkpoint",
                     inputs=[data, model_dir / "config.json", model_dir / "model.safetensors"],
                     params={"spec": spec}, seeds={"eval": seed}, started_at=started)
    log.info("metrics: %s", metrics)
    return metrics


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """``--eval-data/--eval-spec/--eval-out`` of a training entry point: evaluate the final model in-process."""
    parser.add_argument("--eval-data", type=Path, default=None, help="held-out parquet to evaluate the final model on")
    parser.add_argument("--eval-spec", default=None, type=json_text, help="JSON of config `eval` (with --eval-data)")
    parser.add_argument("--eval-out", type=Path, default=None, help="eval directory (with --eval-data)")
    parser.add_argument("--eval-seed", type=int, default=0)


def eval_after_training(args: argparse.Namespace, model_dir: Path) -> None:
    """Run the in-process evaluation a training entry point was asked for (all three flags or none)."""
    given = [args.eval_data is not None, args.eval_spec is not None, args.eval_out is not None]
    if not any(given):
        return
    if not all(given):
        raise SystemExit("--eval-data, --eval-spec and --eval-out go together")
    evaluate_to(args.eval_out, model_dir, args.eval_data, json.loads(args.eval_spec), args.eval_seed)


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.jobs.eval.evaluate")
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    add_spec_argument(parser, "config `eval`")
    add_seed_argument(parser, required=False)
    parser.add_argument("--out", type=Path, required=True)
    add_threads_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    evaluate_to(args.out, args.model, args.data, json.loads(args.spec), args.seed, started=time.time())
    return 0


if __name__ == "__main__":
    sys.exit(main())
