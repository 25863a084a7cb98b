"""How many seeds each claim of the default report needs before its interval can exclude 0.

Run: python benchmarks/seeds_needed.py --results results        # a finished default run (its eval/ and paper/data/)

For every paired claim of the claims table that the run's seeds can test (RL − SFT, SoftmaxGRPO − GRPO, Exact and
Sim, greedy pass@1; the gradient-allocation shift, and beside it its two parts, which the report shows but does not
test), this reads the per-seed, per-prompt scores the report reads
(:func:`pipeline_lib.paper.reproduction.prompt_scores`), computes the report's interval
(:func:`pipeline_lib.core.stats.paired_interval`) and projects its half-width to n seeds with the same estimate of the
seed-to-seed spread: seed part t(n - 1)^2 sd^2 / n, prompt part t(prompts - 1)^2 v_prompts scaled by 3 / n (the
seed-averaged per-prompt differences get less noisy with seeds; kept at the run's value it gives the "fixed" column).
A claim "can exclude 0" at n seeds when the projected half-width is below its mean difference: alone at 95%, and
under Holm over the table's claims (the smallest p-value must pass 0.05 / claims). The projection assumes the true
difference is the run's mean; it is a planning number, not a power analysis.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from pipeline_lib.core.stats import paired_interval
from pipeline_lib.paper.allocation_split import allocation_split
from pipeline_lib.paper.reproduction import allocation_shift, prompt_scores

#: (claim, a, b): the claims table's paired greedy comparisons on the verifiable tasks.
CLAIMS = [("RL (GRPO-Exact) - SFT", "grpo_exact", "sft"), ("SoftmaxGRPO-Exact - SFT", "softmax_exact", "sft"),
          ("SoftmaxGRPO - GRPO (Exact)", "softmax_exact", "grpo_exact"),
          ("SoftmaxGRPO - GRPO (Sim)", "softmax_sim", "grpo_sim")]


def half_width(sd: float, prompt_var: float, n_items: int, n: int, tail: float, prompt_scale: float) -> float:
    seed = scipy_stats.t.isf(tail, n - 1) ** 2 * sd**2 / n
    prompts = scipy_stats.t.isf(tail, n_items - 1) ** 2 * prompt_var * prompt_scale if n_items > 1 else 0.0
    return math.sqrt(seed + prompts)


def seeds_needed(mean: float, sd: float, prompt_var: float, n_items: int, seeds_now: int, tail: float,
                 prompt_scaling: bool, most: int = 30) -> str:
    for n in range(3, most + 1):
        scale = seeds_now / n if prompt_scaling else 1.0
        if half_width(sd, prompt_var, n_items, n, tail, scale) < abs(mean):
            return str(n)
    return f">{most}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--tasks", nargs="+", default=["countdown_tiny", "arith_tiny"])
    parser.add_argument("--claims", type=int, default=10, help="claims in the table's Holm family")
    args = parser.parse_args(argv)
    rows = []
    for task in args.tasks:
        for claim, a, b in CLAIMS:
            seeds = sorted(int(p.name[4:]) for p in (args.results / "eval" / task / a).glob("seed*"))
            if len(seeds) < 2:
                continue
            score = {m: np.array([prompt_scores(args.results / "eval" / task / m / f"seed{s}" / "generations.jsonl")
                                  ["pass@1_greedy"].to_numpy() for s in seeds]) for m in (a, b)}
            result = paired_interval(score[a], score[b])
            per_seed = (score[a] - score[b]).mean(axis=1)
            rows.append({"task": task, "claim": claim, "n_items": score[a].shape[1], "per_seed": per_seed,
                         "result": result, "sd": float(per_seed.std(ddof=1))})
    allocation = args.results / "paper" / "data" / "gradient_allocation.csv"
    if allocation.is_file():
        shifts = allocation_shift(pd.read_csv(allocation))
        parts = [(s["task"], f"allocation: {s['claim'].name}", s["result"]) for s in shifts]
        if (args.results / "train").is_dir():  # the report's split of the shift, for scale
            split = allocation_split(args.results / "train", [s["task"] for s in shifts])
            parts += [(r.task, f"allocation: {r.part}", r.result) for r in split.itertuples()]
        for task, claim, result in parts:
            if result is None or result.n_seeds < 2:
                continue
            rows.append({"task": task, "claim": claim, "n_items": 1, "per_seed": None, "result": result,
                         "sd": math.sqrt(result.seed_var * result.n_seeds)})
    tail_alone, tail_holm = 0.025, 0.025 / args.claims
    print(f"{'task':<15} {'claim':<31} {'mean':>6} {'interval now':>17} {'sd seeds':>8} "
          f"{'seeds: 95% alone':>16} {'with Holm (fixed)':>18}   per-seed differences")
    for row in rows:
        r = row["result"]
        alone = seeds_needed(r.mean, row["sd"], r.prompt_var, row["n_items"], r.n_seeds, tail_alone, True)
        holm = seeds_needed(r.mean, row["sd"], r.prompt_var, row["n_items"], r.n_seeds, tail_holm, True)
        holm_fixed = seeds_needed(r.mean, row["sd"], r.prompt_var, row["n_items"], r.n_seeds, tail_holm, False)
        per_seed = " ".join(f"{100 * v:+.1f}" for v in row["per_seed"]) if row["per_seed"] is not None else ""
        print(f"{row['task']:<15} {row['claim']:<31} {100 * r.mean:+6.1f} {r.format(scale=100):>17} "
              f"{100 * row['sd']:8.1f} {alone:>16} {holm + ' (' + holm_fixed + ')':>18}   {per_seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
