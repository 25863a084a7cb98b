"""The local engine's attention (grouped key/value heads passed to SDPA as they are) vs ``transformers``' stock SDPA
(key/value heads copied once per query head), side by side in one run.

Run: python benchmarks/grouped_attention.py [--prompts 16 --group-size 8 --prompt-tokens 46 --new-tokens 40]

The tiny default's model (``train.model`` of ``config/config.yaml``: 4 query heads, 2 key/value heads; random
weights, the cost depends only on the shapes) on one thread. Prints the seconds of one RL step's sampling (prompts x
group size rows, ``--new-tokens`` decode steps) and of forward+backward over half of those rows (one minibatch of
the update) for both attention implementations, their ratio, and whether the samples are the same.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
from shared_prompt import default_model_and_group_rows, timed
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from pipeline_lib.core.model import _grouped_sdpa_attention, generate, pack, response_logprobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=46)
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    config, model, _, rows = default_model_and_group_rows(args.prompts, args.group_size, args.prompt_tokens)

    def sample(implementation: object) -> list[list[int]]:
        AttentionInterface.register("sdpa", implementation)  # what "sdpa" runs in this process
        torch.manual_seed(0)
        with torch.no_grad():
            return generate(model, rows, max_new_tokens=args.new_tokens, greedy=False, temperature=1.0, eos_id=-1,
                            pad_id=0)

    stock, grouped = sdpa_attention_forward, _grouped_sdpa_attention
    responses = sample(stock)
    same = responses == sample(grouped)
    half = len(rows) // 2
    ids, attention, response = pack(rows[:half], responses[:half], 0)

    def update(implementation: object) -> None:
        AttentionInterface.register("sdpa", implementation)
        model.zero_grad()
        response_logprobs(model, ids, attention, response).sum().backward()

    print(f"{len(rows)} rows ({args.prompts} prompts x {args.group_size}), ~{args.prompt_tokens} prompt tokens, "
          f"{args.new_tokens} new tokens, model {config['train']['model']}")
    for name, fn in [("sampling", sample), ("forward+backward, half the rows", update)]:
        slow, fast = timed(lambda fn=fn: fn(stock), args.repeats), timed(lambda fn=fn: fn(grouped), args.repeats)
        print(f"{name:34s} stock SDPA {slow:.3f} s   grouped KV {fast:.3f} s   ratio {slow / fast:.2f}x")
    print(f"the same samples from both: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
