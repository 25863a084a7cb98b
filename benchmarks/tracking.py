"""What live tracking costs a training step: one RL step's record to ``metrics.jsonl`` and the TensorBoard store.

Run: python benchmarks/tracking.py [--steps 500]

Times :class:`pipeline_lib.core.checkpoint.MetricsLog` writing the local RL loop's record (verl's names, ~20 scalars)
without tracking and with the default backend (``tensorboard``: event files, flushed every step), and the one-time
rebuild of a resumed run's store from its kept records; then what computing the logged quantities adds to a step of
the tiny default (16 groups of 8 rollouts, up to 40 response tokens, the tiny model's 671-token vocabulary): the
``softmaxgrpo/*`` group metrics (:func:`pipeline_lib.core.rl.group_metrics.group_step_metrics`) and ``actor/entropy``
from
the old-policy pass's logits. Compare with a tiny RL step (about 1 s on 2 cores,
``results/benchmarks/train_local_group/``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from pipeline_lib.core.checkpoint import MetricsLog
from pipeline_lib.core.model import _token_entropy
from pipeline_lib.core.rl.advantages import advantage_diagnostics
from pipeline_lib.core.rl.group_metrics import group_step_metrics
from pipeline_lib.core.tracking import TrackingSettings

RECORD = {"critic/score/mean": 0.4, "response_length/mean": 12.0, "actor/pg_loss": 0.01, "actor/kl_loss": 0.002,
          "actor/pg_clipfrac": 0.05, "actor/ppo_kl": 0.0001, "actor/grad_norm": 0.8, "timing_s/step": 1.0,
          "timing_s/update_actor": 0.4, "softmaxgrpo/pass_rate": 0.4, "softmaxgrpo/groups_all_correct": 0.1,
          "softmaxgrpo/groups_all_wrong": 0.2, "softmaxgrpo/abs_advantage_mean": 0.7, "softmaxgrpo/tau/median": 0.3,
          "softmaxgrpo/reward_timeouts": 0, "softmaxgrpo/reward_failures": 0, "actor/entropy": 0.28,
          **{f"softmaxgrpo/allocation/pass_{b}": 0.2 for b in ("0-0.2", "0.2-0.5", "0.5-0.7", "0.7-0.9", "0.9-1")}}
GROUPS, GROUP_SIZE, RESPONSE_TOKENS, VOCABULARY = 16, 8, 40, 671


def logged_quantities_seconds(repeats: int) -> tuple[float, float, float]:
    """(group metrics, entropy, the log-prob pass's cross-entropy) seconds per step on the tiny default's shapes."""
    gen = torch.Generator().manual_seed(0)
    n = GROUPS * GROUP_SIZE
    rewards = (torch.rand(n, generator=gen) < 0.3).float()
    groups = torch.arange(GROUPS).repeat_interleave(GROUP_SIZE)
    lengths = torch.randint(1, RESPONSE_TOKENS + 1, (n,), generator=gen).float()
    logits = torch.randn(n, RESPONSE_TOKENS, VOCABULARY, generator=gen)
    mask = torch.arange(RESPONSE_TOKENS)[None, :] < lengths[:, None]
    started = time.perf_counter()
    for _ in range(repeats):
        chosen = advantage_diagnostics("softmax_ess", rewards, groups, ess_fraction=0.5)
        group_step_metrics(rewards, rewards.abs(), lengths, groups, chosen)
    group = (time.perf_counter() - started) / repeats
    started = time.perf_counter()
    with torch.no_grad():
        for _ in range(repeats):
            _token_entropy(logits, mask)
        entropy = (time.perf_counter() - started) / repeats
        started = time.perf_counter()
        for _ in range(repeats):  # the pass the step already makes over the same logits, for scale
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), logits.flatten(0, 1).argmax(-1), reduction="none")
    return group, entropy, (time.perf_counter() - started) / repeats


def per_step_seconds(root: Path, steps: int, tracking: TrackingSettings | None) -> float:
    log = MetricsLog(root / "metrics.jsonl", -1, tracking)
    started = time.perf_counter()
    for step in range(1, steps + 1):
        log.write({"step": step, **RECORD})
    elapsed = time.perf_counter() - started
    log.close()
    return elapsed / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tracking = TrackingSettings(("tensorboard",), str(root / "tracking"), "bench", "task/method/seed0")
        (root / "plain").mkdir()
        (root / "tracked").mkdir()
        plain = per_step_seconds(root / "plain", args.steps, None)
        tracked = per_step_seconds(root / "tracked", args.steps, tracking)
        started = time.perf_counter()
        MetricsLog(root / "tracked/metrics.jsonl", args.steps, tracking).close()  # a resume: rebuild the store
        rebuild = time.perf_counter() - started
    print(f"{len(RECORD)} scalars per step, {args.steps} steps")
    print(f"metrics.jsonl only:            {1e3 * plain:.3f} ms/step")
    print(f"metrics.jsonl + tensorboard:   {1e3 * tracked:.3f} ms/step (+{1e3 * (tracked - plain):.3f} ms)")
    print(f"resume, rebuild {args.steps} steps: {1e3 * rebuild:.1f} ms once")
    torch.set_num_threads(1)  # as a tiny training job runs (--threads 1)
    group, entropy, log_probs = logged_quantities_seconds(50)
    print(f"softmaxgrpo/* group metrics (softmax_ess diagnostics included): {1e3 * group:.3f} ms/step")
    print(f"actor/entropy, {GROUPS * GROUP_SIZE} rollouts x <= {RESPONSE_TOKENS} tokens x {VOCABULARY} logits: "
          f"{1e3 * entropy:.3f} ms/step (the log-prob pass's cross-entropy on all {RESPONSE_TOKENS} columns: "
          f"{1e3 * log_probs:.3f} ms)")


if __name__ == "__main__":
    main()
