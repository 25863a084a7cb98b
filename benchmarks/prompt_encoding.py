"""What a tiny RL run spends encoding its training prompts: all of them up front, or each when a step first reads it.

Run: python benchmarks/prompt_encoding.py --results results          # needs results/data/ of a run (tokenizer, tasks)

For each task, the rows one RL run reads (``train.rl``'s steps x prompts_per_step, in ``train_rl``'s order for seed
0) are encoded both ways, side by side in this process: ``encode_prompts`` over the whole ``rl_train.parquet`` (what
``train_rl`` did) and :class:`pipeline_lib.jobs.engines.local.common.LazyPromptIds` read at those rows (what it does
now).
Prints the CPU seconds of each, their ratio, and checks that both give every read row the same token ids.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch
import yaml

from pipeline_lib.core.model import encode_prompts
from pipeline_lib.jobs.engines.local.common import LazyPromptIds

REPO = Path(__file__).resolve().parents[1]


def rows_read(n: int, steps: int, prompts_per_step: int, seed: int) -> list[int]:
    """The prompt rows of every step, as ``train_rl`` draws them."""
    rows = []
    for step in range(steps):
        epoch, offset = divmod(step * prompts_per_step, n)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 7919 + epoch)).tolist()
        rows += [order[(offset + i) % n] for i in range(prompts_per_step)]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--tasks", nargs="+", default=["countdown_tiny", "arith_tiny", "meeting_tiny"])
    parser.add_argument("--repeats", type=int, default=3, help="best of this many timings each")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    rl = yaml.safe_load((REPO / "config/config.yaml").read_text())["train"]["rl"]
    tokenizer = AutoTokenizer.from_pretrained(args.results / "data" / "tokenizer")
    for task in args.tasks:
        prompts = list(pd.read_parquet(args.results / "data" / task / "rl_train.parquet")["prompt"])
        rows = rows_read(len(prompts), rl["steps"], rl["prompts_per_step"], seed=0)
        eager_s, lazy_s = [], []
        for _ in range(args.repeats):
            started = time.process_time()
            eager = encode_prompts(tokenizer, [[dict(m) for m in p] for p in prompts])
            eager_s.append(time.process_time() - started)
            started = time.process_time()
            lazy = LazyPromptIds(tokenizer, prompts)
            read = [lazy[r] for r in rows]
            lazy_s.append(time.process_time() - started)
        if read != [eager[r] for r in rows]:
            raise SystemExit(f"{task}: the lazily encoded ids differ from encoding every prompt")
        print(f"{task}: {len(prompts)} prompts, a run reads {len(set(rows))} distinct rows; encode all "
              f"{min(eager_s):.3f} CPU s, on first read {min(lazy_s):.3f} CPU s, "
              f"ratio {min(eager_s) / min(lazy_s):.1f}x; ids identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
