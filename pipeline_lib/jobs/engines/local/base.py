"""Base: the model every tiny run starts from, saved untrained so evaluation treats it like any checkpoint.

    python -m pipeline_lib.jobs.engines.local.base --spec JSON --tokenizer results/data/tokenizer \
        --run-dir results/train/T/base/seed0 --seed 0

The paper's Base row evaluates the pretrained Qwen2.5-1.5B before any post-training. The tiny default
has no pretraining (nothing can be downloaded), so its "base" model is the seeded random
initialisation that SFT and Rationalization start from: the floor every method improves on, not a
pretrained model. ``DONE.json`` records that (``pretrained: false``). With an ``init`` (a real HF
model directory, as on the GPU cluster) the base is that model, copied as it is.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

from pipeline_lib.core.checkpoint import MetricsLog, write_done
from pipeline_lib.core.cli import add_run_arguments, entry_parser
from pipeline_lib.core.model import build_model, load_model, save_model_atomic
from pipeline_lib.core.provenance import config_digest, write_provenance
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.core.tracking import TrackingSettings

__all__ = ["make_base"]

log = logging.getLogger("pipeline_lib.jobs.engines.local.base")


def make_base(spec: dict[str, Any], tokenizer_dir: Path | None, run_dir: Path, seed: int, init: Path | None = None,
              tracking: TrackingSettings | None = None) -> Path:
    """Write ``final/``, a one-line ``metrics.jsonl`` (parameter count) and ``DONE.json`` (0 steps)."""
    from transformers import AutoTokenizer

    started = time.time()
    run_dir.mkdir(parents=True, exist_ok=True)
    if init is None and tokenizer_dir is None:
        raise ValueError("a Base model built from scratch needs --tokenizer (a pretrained --init brings its own)")
    digest = config_digest({"spec": spec, "seed": seed, "init": str(init)})
    tokenizer = AutoTokenizer.from_pretrained(init or tokenizer_dir)
    # A pretrained base keeps its own precision (a bf16 1.5B model copied at fp32 would double its size on disk).
    model = load_model(init, dtype="auto") if init else build_model(tokenizer, spec["model"], seed)
    final = save_model_atomic(model, tokenizer, run_dir / "final")
    metrics = MetricsLog(run_dir / "metrics.jsonl", -1, tracking)
    metrics.write({"step": 0, "parameters": sum(p.numel() for p in model.parameters())})
    metrics.close()
    done = write_done(run_dir, step=0, total_steps=0, config_sha256=digest, kind="base", seed=seed,
                      pretrained=init is not None)
    weights = sorted(final.glob("*.safetensors"))  # large pretrained models are saved in shards
    write_provenance([done, run_dir / "metrics.jsonl", final / "config.json", *weights],
                     step="train_base", inputs=[tokenizer_dir / "tokenizer.json"] if init is None else [],
                     params={"spec": spec},
                     config_sha256=digest, seeds={"run": seed}, started_at=started)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.jobs.engines.local.base")
    add_run_arguments(parser, threads=False)
    parser.add_argument("--tokenizer", type=Path, default=None, help="the tokenizer of a Base built from scratch")
    parser.add_argument("--init", type=Path, default=None, help="a pretrained HF model to use as the base")
    args = parser.parse_args(argv)
    make_base({"model": RunSpec.from_json(args.spec).model}, args.tokenizer, args.run_dir, args.seed, args.init,
              args.tracking)
    return 0


if __name__ == "__main__":
    sys.exit(main())
