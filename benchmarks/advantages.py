"""Advantage estimators: SoftmaxGRPO vs GRPO, and our vectorised GRPO vs a verl-style loop.

Run: python benchmarks/advantages.py [--groups 512 --group-size 16 --repeats 50]
Prints median wall times measured side by side in one run and the two ratios the
foundation issue targets: softmax/grpo <= 1.2 and loop/ours >= 10.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

import torch

from pipeline_lib.core.rl.advantages import group_advantages


def verl_style_grpo_loop(scores: torch.Tensor, index: list[int], epsilon: float = 1e-6) -> torch.Tensor:
    """Per-uid dictionary loop in the shape of verl's ``compute_grpo_outcome_advantage``.

    Kept to our singleton convention (a group of one gets 0) so outputs are comparable.
    """
    scores = scores.clone()
    id2score: dict[int, list[torch.Tensor]] = defaultdict(list)
    id2mean, id2std = {}, {}
    for i in range(scores.shape[0]):
        id2score[index[i]].append(scores[i])
    for idx, values in id2score.items():
        stacked = torch.stack(values)
        id2mean[idx] = stacked.mean()
        id2std[idx] = stacked.std() if len(values) > 1 else torch.tensor(float("inf"))
    for i in range(scores.shape[0]):
        scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
    return scores


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=512)
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    gen = torch.Generator().manual_seed(0)
    n = args.groups * args.group_size
    rewards = (torch.rand(n, generator=gen) < 0.4).float()
    perm = torch.randperm(n, generator=gen)  # shuffled, non-contiguous ids as verl's uids are
    group_ids = (torch.arange(n) // args.group_size)[perm] * 7 + 3
    index = group_ids.tolist()

    ours_grpo = median_seconds(lambda: group_advantages("grpo", rewards, group_ids), args.repeats)
    ours_softmax = median_seconds(lambda: group_advantages("softmax", rewards, group_ids, tau=0.1), args.repeats)
    loop = median_seconds(lambda: verl_style_grpo_loop(rewards, index), max(3, args.repeats // 10))

    diff = (group_advantages("grpo", rewards, group_ids) - verl_style_grpo_loop(rewards, index)).abs().max().item()
    print(f"batch: {args.groups} groups x {args.group_size} rollouts = {n}, torch threads = {args.threads}")
    print(f"grpo (ours, vectorised)   {ours_grpo * 1e3:9.3f} ms")
    print(f"softmax (ours, vectorised){ours_softmax * 1e3:9.3f} ms")
    print(f"grpo (verl-style loop)    {loop * 1e3:9.3f} ms   max |ours - loop| = {diff:.2e}")
    print(f"ratio softmax / grpo      {ours_softmax / ours_grpo:9.2f}   (target <= 1.2)")
    print(f"ratio loop / ours grpo    {loop / ours_grpo:9.1f}   (target >= 10)")


if __name__ == "__main__":
    main()
