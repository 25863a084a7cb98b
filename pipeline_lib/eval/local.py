"""Evaluate a checkpoint on held-out prompts with the HF transformers backend (CPU, tiny models).

    python -m pipeline_lib.eval.local --model results/train/T/M/seed0/final --data results/data/T/rl_test.parquet \
        --spec JSON --out results/eval/T/M/seed0

Writes ``generations.jsonl`` (prompt index, sample, text, length, reward components) and
``metrics.json``: greedy pass@1, sampled pass@1 and pass@k (unbiased estimator over n samples),
mean response length in tokens. Rewards come from the same registry as training.
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

from pipeline_lib.engines.local.common import generate
from pipeline_lib.engines.local.model import encode_prompts, load_model
from pipeline_lib.io import write_json, write_text
from pipeline_lib.provenance import write_provenance
from pipeline_lib.rewards import compute_scores

log = logging.getLogger("pipeline_lib.eval.local")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def score_rows(frame: pd.DataFrame, texts: list[str], rows: list[int], reward_weights: dict | None
               ) -> list[dict[str, float]]:
    records = frame.iloc[rows]
    return compute_scores(list(records["data_source"]), texts, [r["ground_truth"] for r in records["reward_model"]],
                          [dict(e) for e in records["extra_info"]], reward_weights)


def evaluate(model_dir: Path, data: Path, spec: dict[str, Any], seed: int) -> tuple[dict[str, Any], list[dict]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_model(model_dir)
    frame = pd.read_parquet(data)
    if spec.get("max_prompts"):
        frame = frame.iloc[: spec["max_prompts"]]
    prompt_ids = encode_prompts(tokenizer, [[dict(m) for m in p] for p in frame["prompt"]])
    weights = spec.get("reward_weights")
    generations: list[dict] = []
    torch.manual_seed(seed)
    batch = spec["batch_size"]
    n_samples = spec["samples"]
    correct_counts = [0] * len(frame)
    greedy_scores, sample_scores, lengths = [], [], []
    for mode, repeats in (("greedy", 1), ("sample", n_samples)):
        if repeats == 0:
            continue
        expanded = [(row, k) for row in range(len(frame)) for k in range(repeats)]
        for start in range(0, len(expanded), batch):
            chunk = expanded[start:start + batch]
            responses = generate(model, [prompt_ids[row] for row, _ in chunk], max_new_tokens=spec["max_new_tokens"],
                                 greedy=mode == "greedy", temperature=spec["temperature"],
                                 eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id)
            texts = [tokenizer.decode(r, skip_special_tokens=True) for r in responses]
            scores = score_rows(frame, texts, [row for row, _ in chunk], weights)
            for (row, k), text, response, result in zip(chunk, texts, responses, scores, strict=True):
                generations.append({"prompt_index": row, "mode": mode, "sample": k, "text": text,
                                    "length": len(response), **result})
                if mode == "greedy":
                    greedy_scores.append(result["score"])
                    lengths.append(len(response))
                else:
                    sample_scores.append(result["score"])
                    correct_counts[row] += result["score"] >= 1.0
    metrics: dict[str, Any] = {"prompts": len(frame), "pass@1_greedy": sum(greedy_scores) / len(greedy_scores),
                               "mean_length_greedy": sum(lengths) / len(lengths)}
    if n_samples:
        metrics["pass@1_sampled"] = sum(sample_scores) / len(sample_scores)
        for k in spec["pass_k"]:
            if k <= n_samples:
                metrics[f"pass@{k}"] = sum(pass_at_k(n_samples, c, k) for c in correct_counts) / len(frame)
    metrics["score_kind"] = "verifier" if not weights else f"reward {weights}"
    return metrics, generations


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m pipeline_lib.eval.local", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--spec", required=True, help="JSON of config `eval`")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.time()
    spec = json.loads(args.spec)
    metrics, generations = evaluate(args.model, args.data, spec, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "generations.jsonl", "".join(json.dumps(g) + "\n" for g in generations))
    write_json(args.out / "metrics.json", metrics)
    write_provenance([args.out / "metrics.json", args.out / "generations.jsonl"], step="eval_checkpoint",
                     inputs=[args.data, args.model / "config.json", args.model / "model.safetensors"],
                     params={"spec": spec}, seeds={"eval": args.seed}, started_at=started)
    log.info("metrics: %s", metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
