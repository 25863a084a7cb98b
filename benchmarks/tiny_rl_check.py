"""Does RL learn in the tiny default? SFT, then each RL method from it, evaluated, paired against SFT.

Run: python benchmarks/tiny_rl_check.py --split rl_val                   # tune shared settings on validation
     python benchmarks/tiny_rl_check.py --split rl_test --seeds 0 1 2    # once, with the chosen settings
     python benchmarks/tiny_rl_check.py --split rl_test --seeds 3 4 5 --out results/tiny_rl_check_fresh
                                                                         # do the verdicts replicate on fresh seeds?

Calls the library directly (no Snakemake) with ``config/config.yaml`` (``--patch`` JSON merged on top,
for trying settings), one process per (task, seed) is fine to run side by side (``--tasks``/``--seeds``),
finished runs are reused. ``--report`` only prints: per task and method, greedy and sampled pass@1
and the paired difference to SFT (and SoftmaxGRPO − GRPO) with its 95% interval (the report's pairing,
:func:`pipeline_lib.paper.reproduction.compare`: a t-interval whose unit is the seed), then the verdicts
of the greedy comparisons under the claims table's rules (:mod:`pipeline_lib.paper.verdicts`, Holm over
these comparisons only, ``report.min_seeds`` from the config), plus each stage's wall time. Run on seeds
the default run did not use (``--seeds 3 4 5``), it checks whether the default report's verdicts
replicate with the same code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from pipeline_lib.core.config import load_config_file, validate_config

REPO = Path(__file__).resolve().parents[1]


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in patch.items():
        out[key] = merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def load_config(patch: dict[str, Any]) -> dict[str, Any]:
    config = merge(load_config_file(REPO / "config/config.yaml"), patch)
    return dict(validate_config(config, REPO / "workflow/schemas/config.schema.yaml"))


def build_data(config: dict[str, Any], out: Path) -> Path:
    from pipeline_lib.core.data.build import build_tiny, build_tokenizer

    data, tiny = out / "data", config["data"]["tiny"]
    if not (data / "tokenizer" / "manifest.json").is_file():
        spec = {k: v for k, v in tiny.items() if k not in ("tasks", "reward_weights")}
        for task in tiny["tasks"]:
            build_tiny(task, spec, config["seed"], tiny["reward_weights"].get(task), data / task)
        build_tokenizer([data / t / f"{kind}_train.parquet" for t in tiny["tasks"] for kind in ("sft", "rl")],
                        config["data"]["tokenizer"]["vocab_size"], data / "tokenizer")
    return data


def run_one(config: dict[str, Any], out: Path, task: str, seed: int, methods: list[str], split: str) -> None:
    import torch

    from pipeline_lib.jobs.engines.local.rl import train_rl
    from pipeline_lib.jobs.engines.local.sft import train_sft
    from pipeline_lib.jobs.eval.evaluate import evaluate_to
    from pipeline_lib.plan.settings import group_rl_spec, sft_spec

    torch.set_num_threads(1)
    data = build_data(config, out)
    eval_data = data / task / f"{split}.parquet"
    timings_path = out / "timings.jsonl"

    def timed(stage: str, fn: Any) -> None:
        started, cpu = time.perf_counter(), time.process_time()
        fn()
        with open(timings_path, "a", encoding="utf-8") as handle:  # CPU seconds: the machine may be shared
            handle.write(json.dumps({"stage": stage, "task": task, "seed": seed,
                                     "seconds": time.perf_counter() - started,
                                     "cpu_seconds": time.process_time() - cpu}) + "\n")

    sft_dir = out / "train" / task / "sft" / f"seed{seed}"
    if not (sft_dir / "DONE.json").is_file():
        timed("sft", lambda: train_sft(sft_spec(config, task, "sft", "local"), data / task / "sft_train.parquet",
                                       data / "tokenizer", sft_dir, seed, progress=False))
    runs = {"sft": sft_dir}
    for method in methods:
        run_dir = out / "train" / task / method / f"seed{seed}"
        if not (run_dir / "DONE.json").is_file():
            timed("rl", lambda run_dir=run_dir, method=method: train_rl(
                group_rl_spec(config, task, method, "local"), data / task / "rl_train.parquet", sft_dir / "final",
                run_dir, seed, progress=False))
        runs[method] = run_dir
    for method, run_dir in runs.items():
        eval_dir = out / "eval" / split / task / method / f"seed{seed}"
        if not (eval_dir / "metrics.json").is_file():
            timed("eval", lambda run_dir=run_dir, eval_dir=eval_dir: evaluate_to(
                eval_dir, run_dir / "final", eval_data, dict(config["eval"]), seed))


def report(out: Path, split: str, tasks: list[str], methods: list[str], seeds: list[int],
           min_seeds: int) -> dict[str, Any]:
    from pipeline_lib.paper.reproduction import compare, prompt_scores
    from pipeline_lib.paper.verdicts import rules, verdicts

    results: dict[str, Any] = {}
    claims = []
    for task in tasks:
        scores = {(task, m, s): prompt_scores(out / "eval" / split / task / m / f"seed{s}" / "generations.jsonl")
                  for m in ["sft", *methods] for s in seeds}
        print(f"\n{task} ({split}, seeds {seeds}, {len(scores[(task, 'sft', seeds[0])]['pass@1_greedy'])} prompts)")
        pairs = [(m, "sft") for m in methods]
        if "softmax_exact" in methods and "grpo_exact" in methods:
            pairs.append(("softmax_exact", "grpo_exact"))
        for metric in ("pass@1_greedy", "pass@1_sampled"):
            for method in ["sft", *methods]:
                values = [round(100 * float(scores[(task, method, s)][metric].mean()), 1) for s in seeds]
                print(f"  {metric:15s} {method:14s} {np.mean(values):5.1f}  per seed {values}")
            for a, b in pairs:
                diff = compare(scores, task, a, b, metric, strict=True).result
                results[f"{task}/{metric}/{a}-{b}"] = diff.as_dict()
                print(f"  {metric:15s} {a} - {b}: {diff.format(scale=100, with_method=True)}"
                      f"{'  (excludes 0)' if diff.excludes_zero else ''}")
                if metric == "pass@1_greedy":
                    claims.append((f"{task} greedy {a} - {b}", diff))
    print(f"\n{rules(min_seeds)} Holm here runs over these {len(claims)} comparisons only.")
    for (name, diff), verdict in zip(claims, verdicts([d for _, d in claims], min_seeds), strict=True):
        results[f"verdict/{name}"] = {"verdict": verdict.text, "holm_p": verdict.adjusted_p}
        print(f"  {name}: {diff.format(scale=100)}  Holm p {verdict.format_p()}  -> {verdict.text}")
    timings = out / "timings.jsonl"
    if timings.is_file():
        rows = [json.loads(line) for line in timings.read_text().splitlines()]
        for stage in sorted({r["stage"] for r in rows}):
            values = [r["seconds"] for r in rows if r["stage"] == stage]
            cpu = [r["cpu_seconds"] for r in rows if r["stage"] == stage and "cpu_seconds" in r]
            print(f"stage {stage}: {len(values)} runs, wall mean {np.mean(values):.1f} s, max {max(values):.1f} s"
                  + (f"; CPU mean {np.mean(cpu):.1f} s" if cpu else ""))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", choices=["rl_val", "rl_test"], default="rl_val")
    parser.add_argument("--tasks", nargs="+", default=None, help="default: train.tasks")
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default: train.seeds")
    parser.add_argument("--methods", nargs="+", default=["grpo_exact", "softmax_exact"])
    parser.add_argument("--patch", default="{}", help="JSON merged over config/config.yaml")
    parser.add_argument("--out", type=Path, default=Path("results/tiny_rl_check"))
    parser.add_argument("--report", action="store_true", help="only summarise finished runs")
    args = parser.parse_args(argv)
    config = load_config(json.loads(args.patch))
    tasks, seeds = args.tasks or config["train"]["tasks"], args.seeds or config["train"]["seeds"]
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report:
        for task in tasks:
            for seed in seeds:
                run_one(config, args.out, task, seed, args.methods, args.split)
    results = report(args.out, args.split, tasks, args.methods, seeds, config["report"]["min_seeds"])
    (args.out / f"report_{args.split}.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
