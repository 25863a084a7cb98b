"""Rationalization (STaR, paper App. B) on the GPU path: the base model annotates, verl's SFT trainer trains.

    python -m pipeline_lib.jobs.engines.verl.rationalization --spec JSON --data .../sft_train.parquet \
        --model Qwen/Qwen2.5-1.5B --out .../rationalization/seed0/rationalized_sft.parquet --seed 0

The annotator (the base model, ``train.verl.model``) sees each question with the expert answer as a
hint and samples one response through the evaluation generation backends
(:func:`pipeline_lib.jobs.eval.backends.open_backend`: vLLM on GPU, ``hf`` on CPU); the prompt, hint and
assembly are Rationalization's own, shared with the local engine (:mod:`pipeline_lib.jobs.methods.rationalization`),
so both engines build the same (question, rationale, expert answer) demonstrations. The parquet is in the SFT schema;
rule ``train_verl_rationalization`` then runs ``python -m pipeline_lib.jobs.engines.verl.sft`` on it
with the task's SFT settings (``pipeline_lib.plan.settings.sft_spec``), so Rationalization and SFT differ only
in the demonstrations.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline_lib.core.baselines import RationalizationSettings
from pipeline_lib.core.cli import add_run_arguments, entry_parser
from pipeline_lib.core.io import atomic_path
from pipeline_lib.core.provenance import config_digest, write_provenance
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.jobs.engines.verl.paths import TrainPaths
from pipeline_lib.jobs.eval.backends import open_backend
from pipeline_lib.jobs.methods.rationalization import assemble, hinted_prompts, rationalized_frame

__all__ = ["annotate", "annotation_settings", "rationalization_paths"]

log = logging.getLogger("pipeline_lib.jobs.engines.verl.rationalization")

METHOD = "rationalization"


def annotation_settings(spec: RunSpec) -> dict[str, Any]:
    """The annotator's arguments from its run spec: the STaR hint (its Rationalization settings) and the generation
    settings."""
    if not isinstance(spec.baseline, RationalizationSettings):
        raise ValueError(f"the annotation's run spec needs RationalizationSettings as its baseline, got "
                         f"{spec.baseline!r}")
    return {"hint": spec.baseline.hint, "generation": dict(spec.generation or {})}


def rationalization_paths(task: str, seed: int, root: str | Path = ".") -> TrainPaths:
    """Files of the rationalization SFT run: it trains on the annotated parquet inside its own run directory."""
    run_dir = Path(root).resolve() / f"results/train/{task}/{METHOD}/seed{seed}"
    return TrainPaths(run_dir=run_dir, train_files=run_dir / "rationalized_sft.parquet")


def annotate(spec: Mapping[str, Any], data: Path, model: str | Path, out: Path, seed: int) -> Path:
    """Write ``out`` (SFT schema): every demonstration of ``data`` with the annotator's rationale before its answer."""
    import pandas as pd
    import torch


    started = time.time()
    frame = pd.read_parquet(data)
    if "messages" not in frame:
        raise ValueError(f"{data}: no `messages` column (expected the SFT schema)")
    conversations = [[dict(m) for m in messages] for messages in frame["messages"]]
    hinted, answers = hinted_prompts(conversations, spec["hint"])
    out.parent.mkdir(parents=True, exist_ok=True)
    with open_backend(Path(model), dict(spec["generation"]), seed, out.parent) as backend:
        torch.manual_seed(seed)  # after loading: the hf backend samples with torch's global generator (vLLM: seed)
        generations = backend.generate(hinted, samples=1, greedy=False)
    demos = assemble([g[0].text for g in generations], answers)
    with atomic_path(out) as tmp:
        rationalized_frame(frame, demos).to_parquet(tmp, index=False)
    empty = sum(not g[0].text.strip() for g in generations)
    log.info("annotated %d demonstrations (%d empty annotations); first: %r", len(demos), empty, demos[0][:200])
    write_provenance([out], step="annotate_rationales", inputs=[data], params={"spec": dict(spec), "model": str(model)},
                     config_sha256=config_digest({"spec": dict(spec), "model": str(model), "seed": seed}),
                     seeds={"annotate": seed}, started_at=started)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.jobs.engines.verl.rationalization")
    add_run_arguments(parser, run_dir=False, threads=False, tracking=False)
    parser.add_argument("--data", type=Path, required=True, help="the task's sft_train.parquet")
    parser.add_argument("--model", help="the annotator: HF directory or hub name (default: the spec's model)")
    parser.add_argument("--out", type=Path, required=True, help="rationalized_sft.parquet to write")
    args = parser.parse_args(argv)
    spec = RunSpec.from_json(args.spec)
    annotate(annotation_settings(spec), args.data, args.model or spec.model, args.out, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
