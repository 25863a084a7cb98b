"""Log-probs of labels at the paper's vocabulary: verl 0.9.1's per-row fallback vs the project's chunked gather.

Run: PYTHONPATH=. python benchmarks/logprobs.py [--rows 1024 --vocab 151936 --dtype bfloat16 --repeats 3]
Without flash-attn, verl's ``logprobs_from_logits`` runs ``logprobs_from_logits_v2``, a loop over rows (tokens under
``use_remove_padding``); :func:`pipeline_lib.core.rl.logprobs.chunked_logprobs` replaces it
(:mod:`pipeline_lib.jobs.engines.verl.logprobs`). Prints median wall times measured side by side in one run (forward,
and forward + backward as in the training pass), the largest difference between the two, and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from pipeline_lib.core.rl.logprobs import chunked_logprobs
from pipeline_lib.jobs.engines.verl.logprobs import verl_fallback


def median_seconds(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    fn()  # warm-up
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine with verl installed")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)

    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(args.rows, args.vocab, generator=gen) * 4).to(dtype).to(device)
    labels = torch.randint(0, args.vocab, (args.rows,), generator=gen).to(device)
    upstream = torch.randn(args.rows, generator=gen).to(device)
    verl_loop = verl_fallback()

    def train_pass(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        x = logits.detach().requires_grad_(True)
        (fn(x, labels).float() * upstream).sum().backward()

    loop_fwd = median_seconds(lambda: verl_loop(logits, labels), args.repeats, device)
    ours_fwd = median_seconds(lambda: chunked_logprobs(logits, labels), args.repeats, device)
    loop_train = median_seconds(lambda: train_pass(verl_loop), args.repeats, device)
    ours_train = median_seconds(lambda: train_pass(chunked_logprobs), args.repeats, device)
    diff = (chunked_logprobs(logits, labels) - verl_loop(logits, labels).float()).abs().max().item()

    print(f"logits: {args.rows} rows x vocab {args.vocab}, {args.dtype}, {device}, torch threads = {args.threads}, "
          f"median of {args.repeats}")
    print(f"forward  verl loop (logprobs_from_logits_v2) {loop_fwd * 1e3:10.1f} ms")
    print(f"forward  chunked (ours)                      {ours_fwd * 1e3:10.1f} ms")
    print(f"fwd+bwd  verl loop                           {loop_train * 1e3:10.1f} ms")
    print(f"fwd+bwd  chunked (ours)                      {ours_train * 1e3:10.1f} ms")
    print(f"max |ours - verl loop| = {diff:.2e}")
    print(f"ratio verl loop / chunked: forward {loop_fwd / ours_fwd:.2f}, fwd+bwd {loop_train / ours_train:.2f}")


if __name__ == "__main__":
    main()
