"""Rationalization (STaR, paper App. B): an annotator writes a rationale for each expert answer; SFT on the result.

    python -m pipeline_lib.jobs.engines.local.rationalization --spec JSON --data .../sft_train.parquet \
        --annotator .../base/seed0/final --tokenizer results/data/tokenizer --run-dir .../rationalization/seed0 --seed 0

The annotator sees the question with the expert answer as a hint (``hint``, formatted with
``{answer}``) and samples a response; its reasoning part (``split_reasoning``) is kept and the expert's
answer part appended, giving (question, rationale, answer) demonstrations in the SFT schema
(``rationalized_sft.parquet`` in the run directory). SFT on them then runs with the SFT settings and
starting point (the base model; in the tiny default that is SFT's own seeded initialisation), so
Rationalization and SFT differ only in the demonstrations. The paper's annotator
is the base model; the tiny base is untrained (see ``base.py``), so the tiny default names the SFT
model as annotator (``annotator`` in config).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from pipeline_lib.core.baselines import RationalizationSettings
from pipeline_lib.core.checkpoint import read_json_state, run_identity
from pipeline_lib.core.cli import add_run_arguments, entry_parser
from pipeline_lib.core.io import atomic_path, write_json
from pipeline_lib.core.model import encode_prompts, generate, load_model
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.core.tracking import TrackingSettings
from pipeline_lib.jobs.engines.local.sft import train_sft
from pipeline_lib.jobs.methods.rationalization import assemble, hinted_prompts, rationalized_frame

__all__ = ["assemble", "hinted_prompts", "rationalize", "rationalized_frame", "train_rationalization"]

log = logging.getLogger("pipeline_lib.jobs.engines.local.rationalization")


def rationalize(model: torch.nn.Module, tokenizer: Any, conversations: list[list[dict[str, str]]],
                settings: RationalizationSettings, seed: int) -> list[str]:
    """One (rationale + expert answer part) demonstration per conversation (user turns, then the expert's)."""
    torch.manual_seed(seed)
    hinted, answers = hinted_prompts(conversations, settings.hint)
    prompts = encode_prompts(tokenizer, hinted)
    out: list[str] = []
    for start in range(0, len(prompts), settings.batch_size):
        responses = generate(model, prompts[start:start + settings.batch_size],
                             max_new_tokens=settings.max_new_tokens, greedy=False, temperature=settings.temperature,
                             eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id)
        out += [tokenizer.decode(r, skip_special_tokens=True) for r in responses]
    return assemble(out, answers)


def train_rationalization(spec: RunSpec, data: Path, annotator: Path, tokenizer_dir: Path, run_dir: Path,
                          seed: int, init: Path | None = None, progress: bool = True,
                          tracking: TrackingSettings | None = None) -> Path:
    """Annotate (once; reused on resume) with the spec's Rationalization settings (``spec.baseline``: the STaR hint,
    length, temperature, batch), then SFT from ``init``, the base model (None = the seeded scratch init), with the
    spec's SFT settings."""
    from transformers import AutoTokenizer

    if not isinstance(spec.baseline, RationalizationSettings):
        raise ValueError(f"Rationalization's run spec needs RationalizationSettings as its baseline, got "
                         f"{spec.baseline!r}")
    settings = spec.baseline

    run_dir.mkdir(parents=True, exist_ok=True)
    annotated = run_dir / "rationalized_sft.parquet"
    stamp = run_dir / "rationalized_sft.json"
    # the annotation is reused only for the same settings, code and input contents (the resume rule of every engine:
    # pipeline_lib.core.checkpoint.run_identity); else it is made again
    identity = {"annotate": settings.to_dict(), "annotator": str(annotator), "data": str(data), "seed": seed,
                "run": run_identity({"annotate": settings.to_dict(), "seed": seed}, [data, annotator])}
    if not annotated.is_file() or read_json_state(stamp) != identity:  # unreadable: set aside, redone
        frame = pd.read_parquet(data)
        conversations = [[dict(m) for m in messages] for messages in frame["messages"]]
        tokenizer = AutoTokenizer.from_pretrained(annotator)
        demos = rationalize(load_model(annotator).eval(), tokenizer, conversations, settings, seed)
        rows = rationalized_frame(frame, demos)
        with atomic_path(annotated) as tmp:
            rows.to_parquet(tmp, index=False)
        write_json(stamp, identity)  # after the parquet: a stamp always describes a complete file
        log.info("annotated %d demonstrations; first: %r", len(rows), demos[0][:200])
    return train_sft(spec, annotated, tokenizer_dir, run_dir, seed, init=init, progress=progress,
                     kind="rationalization", step_name="train_rationalization", tracking=tracking)


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.jobs.engines.local.rationalization")
    add_run_arguments(parser)
    parser.add_argument("--data", type=Path, required=True, help="the task's sft_train.parquet")
    parser.add_argument("--annotator", type=Path, required=True, help="HF model that writes the rationales")
    parser.add_argument("--init", type=Path, default=None, help="the base model SFT starts from (default: scratch)")
    parser.add_argument("--tokenizer", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    train_rationalization(RunSpec.from_json(args.spec), args.data, args.annotator,
                          args.tokenizer, args.run_dir, args.seed, args.init, tracking=args.tracking)
    return 0


if __name__ == "__main__":
    sys.exit(main())
