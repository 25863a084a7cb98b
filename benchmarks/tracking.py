"""What live tracking costs a training step: one RL step's record to ``metrics.jsonl`` and the TensorBoard store.

Run: python benchmarks/tracking.py [--steps 500]

Times :class:`pipeline_lib.checkpoint.MetricsLog` writing the local RL loop's record (verl's names, ~20 scalars)
without tracking and with the default backend (``tensorboard``: event files, flushed every step), and the one-time
rebuild of a resumed run's store from its kept records. Compare with a tiny RL step (about 1 s on 2 cores,
``results/benchmarks/train_local_group/``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from pipeline_lib.checkpoint import MetricsLog
from pipeline_lib.tracking import TrackingSettings

RECORD = {"critic/score/mean": 0.4, "response_length/mean": 12.0, "actor/pg_loss": 0.01, "actor/kl_loss": 0.002,
          "actor/pg_clipfrac": 0.05, "actor/ppo_kl": 0.0001, "actor/grad_norm": 0.8, "timing_s/step": 1.0,
          "timing_s/update_actor": 0.4, "softmaxgrpo/pass_rate": 0.4, "softmaxgrpo/groups_all_correct": 0.1,
          "softmaxgrpo/groups_all_wrong": 0.2, "softmaxgrpo/abs_advantage_mean": 0.7, "softmaxgrpo/tau/median": 0.3,
          "softmaxgrpo/reward_timeouts": 0, "softmaxgrpo/reward_failures": 0}


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


if __name__ == "__main__":
    main()
