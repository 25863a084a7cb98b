"""Reward throughput, measured side by side in one run.

Run: python benchmarks/rewards.py
* similarity pairs/s: ours (rapidfuzz LCS) vs the official SQuAD F1 + a pure-Python LCS on the same tokens (the
  authors' r_sim, issue 56; target >= 10x, max |diff| at rounding);
* math items/s: a 2-process TimeoutPool vs serial in-process Math-Verify (target >= 1.6x on 2 cores);
* adversarial math items: wall time of each, which must stay under the timeout + 0.5 s.
"""

from __future__ import annotations

import math
import random
import re
import string
import time
from collections import Counter

from math_verify import parse, verify

from pipeline_lib.core.rewards import score_batch
from pipeline_lib.core.rewards.mathverify import _get_pool, gold_answer, prediction_text
from pipeline_lib.core.rewards.similarity import SIM_WEIGHTS, similarity_score


def _lcs(a: list[str], b: list[str]) -> int:
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def reference_similarity(prediction: str, reference: str) -> float:
    def normalize(s: str) -> str:
        s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
        return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())

    p, g = normalize(prediction).split(), normalize(reference).split()
    same = sum((Counter(p) & Counter(g)).values())
    f1 = 0 if same == 0 else (2 * (same / len(p)) * (same / len(g))) / ((same / len(p)) + (same / len(g)))
    rouge = 2 * _lcs(p, g) / (len(p) + len(g)) if p and g else 0.0
    return SIM_WEIGHTS[0] * f1 + SIM_WEIGHTS[1] * rouge


def main() -> None:
    rng = random.Random(0)
    vocabulary = [f"w{i}" for i in range(300)] + ["the", "a", "council", "motion", "vote", "12", "3.5"]
    pairs = [(" ".join(rng.choices(vocabulary, k=rng.randint(50, 150))),
              " ".join(rng.choices(vocabulary, k=rng.randint(50, 150)))) for _ in range(300)]
    start = time.perf_counter()
    reference = [reference_similarity(p, r) for p, r in pairs]
    reference_s = time.perf_counter() - start
    start = time.perf_counter()
    ours = [similarity_score(p, r)["score"] for p, r in pairs]
    ours_s = time.perf_counter() - start
    diff = max(abs(a - b) for a, b in zip(ours, reference, strict=True))
    print(f"similarity: {len(pairs)} pairs of 50-150 words")
    print(f"  reference (SQuAD F1 + Python LCS) {len(pairs) / reference_s:10.0f} pairs/s")
    print(f"  ours (rapidfuzz LCS)               {len(pairs) / ours_s:10.0f} pairs/s")
    print(f"  ratio {reference_s / ours_s:.1f}x (target >= 10), max |ours - reference| = {diff}")

    items = []
    for _ in range(240):
        value = rng.randint(1, 10_000)
        shown = rng.choice([f"{value:,}", f"\\frac{{{2 * value}}}{{2}}", f"{value} \\text{{ dollars}}",
                            f"{value + 1}", f"{value}.0"])
        items.append((f"Reasoning ... so the answer is \\boxed{{{shown}}}.", f"#### {value:,}"))
    pool = _get_pool()
    score_batch("math", [s for s, _ in items[:8]], [g for _, g in items[:8]])  # start and warm the workers
    start = time.perf_counter()
    serial = [verify(parse(f"\\boxed{{{gold_answer(g)}}}"), parse(prediction_text(s))) for s, g in items]
    serial_s = time.perf_counter() - start
    start = time.perf_counter()
    pooled = score_batch("math", [s for s, _ in items], [g for _, g in items])
    pooled_s = time.perf_counter() - start
    agree = sum(float(a) == b["score"] for a, b in zip(serial, pooled, strict=True))
    print(f"math: {len(items)} GSM8K-style items, pool of {pool.processes} processes")
    print(f"  serial Math-Verify {len(items) / serial_s:8.1f} items/s")
    print(f"  pooled             {len(items) / pooled_s:8.1f} items/s   ratio {serial_s / pooled_s:.2f}x "
          f"(target >= 1.6), agreement {agree}/{len(items)}")

    adversarial = ["\\boxed{9^{9^{9^{9^{9}}}}}", "\\boxed{" + "(" * 2000 + "1" + ")" * 2000 + "}",
                   "\\boxed{\\int_0^{10^{10}} e^{x^{x^x}} dx}", "\\boxed{" + "x+" * 5000 + "1}",
                   "\\boxed{100!!!!!!}"]
    results = pool.map([(prediction_text(a), "3") for a in adversarial])
    worst = max(r.seconds for r in results)
    print(f"adversarial math items (timeout {pool.timeout:g} s): "
          + ", ".join(f"{r.seconds:.2f}s{' (timed out)' if r.timed_out else ''}" for r in results))
    # Seconds count from the batch's start: an item waits for a worker, then runs at most `timeout` (pebble kills
    # the worker and starts a fresh one), so the batch is bounded by rounds of (timeout + worker restart).
    rounds = math.ceil(len(adversarial) / pool.processes)
    bound = rounds * (pool.timeout + 0.5)
    print(f"  worst {worst:.2f} s from the batch's start, bound {rounds} rounds x (timeout + 0.5) = {bound:.2f} s -> "
          f"{'ok' if worst <= bound else 'EXCEEDED'}")


if __name__ == "__main__":
    main()
