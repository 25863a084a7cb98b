"""Group-RL log-probs with each prompt computed once per group vs once per rollout, side by side in one run.

Run: python benchmarks/shared_prompt.py [--prompts 16 --group-size 8 --prompt-tokens 46 --response-tokens 31]

The tiny default's model (``train.model`` of ``config/config.yaml``, random weights: the cost depends only on the
shapes) on one thread; a batch shaped like one RL step (prompts x group size rows, response lengths drawn around
``--response-tokens``). Prints the seconds of the no-grad pass (old-policy and reference log-probs) and of
forward+backward (the update) for both paths, their ratio, and the largest difference of the values.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

from pipeline_lib.core.config import load_config_file, validate_config
from pipeline_lib.core.model import build_model, pack, response_logprobs

REPO = Path(__file__).resolve().parents[1]


class ShapesOnlyTokenizer:
    """Just what ``build_model`` reads: the vocabulary size and the special ids."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size, self.eos_token_id, self.pad_token_id = vocab_size, 1, 0

    def __len__(self) -> int:
        return self.vocab_size


def timed(fn, repeats: int) -> float:
    fn()
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats


def default_model_and_group_rows(n_prompts: int, group_size: int, prompt_tokens: int
                                 ) -> tuple[dict, torch.nn.Module, torch.Generator, list[list[int]]]:
    """The tiny default's config and model (random weights, one thread), a seeded generator, and one RL step's rows:
    ``n_prompts`` random prompts of about ``prompt_tokens`` tokens, each repeated ``group_size`` times."""
    torch.set_num_threads(1)
    config = dict(validate_config(load_config_file(REPO / "config/config.yaml"),  # with the schema defaults
                                  REPO / "workflow/schemas/config.schema.yaml"))
    vocab = config["data"]["tokenizer"]["vocab_size"]
    model = build_model(ShapesOnlyTokenizer(vocab), config["train"]["model"], 0)
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, vocab, (prompt_tokens + int(torch.randint(-4, 5, (1,), generator=generator)),),
                             generator=generator).tolist() for _ in range(n_prompts)]
    return config, model, generator, [p for p in prompts for _ in range(group_size)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=46)
    parser.add_argument("--response-tokens", type=int, default=31)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    config, model, generator, rows = default_model_and_group_rows(args.prompts, args.group_size, args.prompt_tokens)
    vocab = config["data"]["tokenizer"]["vocab_size"]
    responses = [torch.randint(2, vocab, (max(1, args.response_tokens + int(torch.randint(-6, 7, (1,),
                 generator=generator))),), generator=generator).tolist() for _ in rows]
    ids, attention, response = pack(rows, responses, 0)

    def no_grad(share: bool) -> torch.Tensor:
        with torch.no_grad():
            return response_logprobs(model, ids, attention, response, share_prompts=share)

    def update(share: bool) -> None:
        half = len(rows) // 2  # one of the two minibatches of a step
        model.zero_grad()
        response_logprobs(model, ids[:half], attention[:half], response[:half], share_prompts=share).sum().backward()

    difference = float((no_grad(True) - no_grad(False)).abs().max())
    print(f"{len(rows)} rows ({args.prompts} prompts x {args.group_size}), ~{args.prompt_tokens} prompt and "
          f"~{args.response_tokens} response tokens, model {config['train']['model']}")
    for name, fn in [("no-grad log-probs", no_grad), ("forward+backward, half the rows", update)]:
        per_row, shared = timed(lambda fn=fn: fn(False), args.repeats), timed(lambda fn=fn: fn(True), args.repeats)
        print(f"{name:34s} per rollout {per_row:.3f} s   shared prompt {shared:.3f} s   ratio {per_row / shared:.2f}x")
    print(f"largest |difference| of the log-probs: {difference:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
