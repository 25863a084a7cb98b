"""How often does each claim of the default report get its verdict at n seeds, and does a verdict hold on other seeds?

Run: python benchmarks/verdict_stability.py --results R1 R2 R3 [--sizes 3 4 5]
         # R: finished runs of the tiny default on disjoint training seeds (e.g. the default run and the fresh-seed
         # runs of benchmarks/replicate_verdicts.py: seeds 0-2, 3-5, 6-8)

Pools the per-seed, per-prompt scores (``results/eval``) and gradient-allocation shares (``results/paper/data``)
of the runs, then for every subset of n pooled seeds computes the claims table exactly as the report does
(:func:`pipeline_lib.paper.reproduction.paired_claims`, :func:`pipeline_lib.paper.verdicts.verdicts`: paired
t-intervals, Holm over the table) and counts each claim's verdicts. For two disjoint subsets of n seeds -- what
``replicate_verdicts.py`` does with two runs -- it counts how often every *supported* or *contradicted* verdict of
the first comes out the same on the second. The subsets share seeds with each other and come from the few seeds
pooled, so the rates are a planning number for choosing ``report.min_seeds`` and ``train.seeds``, not a power
analysis. The judged claim (one seed in the default) is left out.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline_lib.core.yaml_files import load_yaml
from pipeline_lib.paper.reproduction import (
    VERIFIABLE_PAIRS,
    allocation_shift,
    compare,
    load_scores,
    paired_claims,
)
from pipeline_lib.paper.verdicts import MIN_SEEDS, verdicts

REPO = Path(__file__).resolve().parents[1]
ALLOCATION_METHODS = ("grpo_exact", "softmax_exact")
POSITIVE = ("supported", "contradicted")


def pooled(results: list[Path]) -> tuple[dict, pd.DataFrame, list[int]]:
    """Per-prompt scores and allocation rows of every run, keyed by seed; a run present in two trees must agree."""
    scores: dict = {}
    allocation = []
    for root in results:
        table1 = pd.read_csv(root / "paper/data/table1.csv")
        for key, value in load_scores(table1, root / "eval").items():
            if key in scores and not all(scores[key][m].equals(value[m]) for m in value):
                raise SystemExit(f"{root}: run {key} differs from the same run in an earlier --results tree")
            scores[key] = value
        allocation.append(pd.read_csv(root / "paper/data/gradient_allocation.csv"))
    frame = pd.concat(allocation)
    frame = frame[frame["method"].isin(ALLOCATION_METHODS)].drop_duplicates()
    clashes = frame[frame.duplicated(["task", "method", "seed"], keep=False)]
    if not clashes.empty:
        raise SystemExit(f"runs {sorted(set(map(tuple, clashes[['task', 'method', 'seed']].values.tolist())))} have "
                         "different gradient-allocation rows in two --results trees")
    methods = {m for pair in VERIFIABLE_PAIRS for m in pair}
    tasks = sorted({t for t, _, _ in scores})
    seeds = sorted(s for s in {s for _, _, s in scores} if all((t, m, s) in scores for t in tasks for m in methods))
    return scores, frame, seeds


def claims_at(scores: dict, allocation: pd.DataFrame, seeds: tuple[int, ...], reference: dict) -> dict:
    """(claim, task) -> verdict text for the report's paired claims on ``seeds`` only."""
    subset = {k: v for k, v in scores.items() if k[2] in seeds}
    tasks = sorted({t for t, _, _ in subset})
    verifiable = [compare(subset, task, a, b, "pass@1_greedy") for task in tasks for a, b in VERIFIABLE_PAIRS]
    shifts = allocation_shift(allocation[allocation["seed"].isin(seeds)])
    claims = paired_claims([c for c in verifiable if c.result is not None], shifts, [], reference)
    return {(c.claim, c.task): v.text.split(" (")[0] for c, v in zip(claims, verdicts([c.result for c in claims]),
                                                                     strict=True)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, nargs="+", required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 4, 5])
    parser.add_argument("--reference", type=Path, default=REPO / "config/paper_reference.yaml")
    parser.add_argument("--most", type=int, default=400, help="at most this many subsets per size (random)")
    args = parser.parse_args(argv)
    reference = load_yaml(args.reference, "paper reference data")["table1"]
    scores, allocation, seeds = pooled(args.results)
    print(f"pooled seeds: {seeds} (from {len(args.results)} runs)")
    rng = random.Random(0)
    for n in args.sizes:
        if n < MIN_SEEDS or n > len(seeds):
            print(f"\nn = {n}: skipped (needs {MIN_SEEDS} to {len(seeds)} seeds)")
            continue
        subsets = list(itertools.combinations(seeds, n))
        if len(subsets) > args.most:
            subsets = rng.sample(subsets, args.most)
        table = {s: claims_at(scores, allocation, s, reference) for s in subsets}
        print(f"\nn = {n} seeds, {len(subsets)} subsets: share of subsets giving each verdict")
        keys = list(next(iter(table.values())))
        for key in keys:
            counts = Counter(verdict[key] for verdict in table.values())
            shares = ", ".join(f"{word} {100 * counts[word] / len(table):.0f}%"
                               for word in ("supported", "contradicted", "inconclusive") if counts[word])
            print(f"  {key[1]:<15} {key[0][:70]:<70} {shares}")
        pairs = [(a, b) for a in subsets for b in subsets if not set(a) & set(b)]
        if not pairs:
            print(f"  no two disjoint subsets of {n} among {len(seeds)} seeds: replication not counted")
            continue
        with_positive = [(a, b) for a, b in pairs if any(v in POSITIVE for v in table[a].values())]
        held = [all(table[b][k] == v for k, v in table[a].items() if v in POSITIVE) for a, b in with_positive]
        positives = np.mean([sum(v in POSITIVE for v in table[a].values()) for a, _ in pairs])
        print(f"  disjoint pairs: {len(pairs)}; mean positive verdicts per report {positives:.2f}; reports with one "
              f"or more: {100 * len(with_positive) / len(pairs):.0f}%; of those, every positive verdict holds on the "
              f"other subset: {100 * np.mean(held) if held else float('nan'):.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
