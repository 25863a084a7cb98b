"""Supervised fine-tuning on the SFT parquet (verl multi-turn schema): log-likelihood of the demonstration.

    python -m pipeline_lib.jobs.engines.local.sft --spec JSON --data results/data/T/sft_train.parquet \
        --tokenizer results/data/tokenizer --run-dir results/train/T/sft/seed0 --seed 0

Only assistant tokens carry loss. Resumable (``checkpoint/`` every ``checkpoint_every`` steps);
the final model is ``final/`` and ``DONE.json`` marks completion.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm import tqdm

from pipeline_lib.core.checkpoint import MetricsLog, claim_run_dir, rng_state, run_identity, set_rng_state, write_done
from pipeline_lib.core.cli import add_run_arguments, entry_parser
from pipeline_lib.core.model import (
    build_model,
    encode_prompts,
    load_model,
    pack,
    response_logprobs,
    save_model_atomic,
)
from pipeline_lib.core.provenance import config_digest, write_provenance
from pipeline_lib.core.run_end import EndJournal
from pipeline_lib.core.run_spec import LocalSFTKnobs, RunSpec
from pipeline_lib.core.tracking import TrackingSettings
from pipeline_lib.jobs.engines.local.common import (
    TrainingCheckpoint,
    check_finite_weights,
    clip_finite_gradients,
    cosine_with_warmup,
)
from pipeline_lib.jobs.eval.evaluate import add_eval_arguments, eval_after_training

log = logging.getLogger("pipeline_lib.jobs.engines.local.sft")


def load_sft_examples(path: Path, tokenizer: Any, max_response_tokens: int) -> tuple[list, list]:
    frame = pd.read_parquet(path)
    conversations = [[dict(m) for m in messages] for messages in frame["messages"]]
    prompts = encode_prompts(tokenizer, [c[:-1] for c in conversations])
    eos = tokenizer.eos_token_id
    responses = [[*tokenizer(c[-1]["content"], add_special_tokens=False)["input_ids"][:max_response_tokens], eos]
                 for c in conversations]
    return prompts, responses


def train_sft(spec: RunSpec, data: Path, tokenizer_dir: Path, run_dir: Path, seed: int,
              init: Path | None = None, progress: bool = True, kind: str = "sft", step_name: str = "train_sft",
              tracking: TrackingSettings | None = None) -> Path:
    """SFT from ``init`` (or from scratch, seeded: ``spec.model``'s architecture) with the spec's typed settings
    (:class:`~pipeline_lib.core.run_spec.SFTSettings`, local knobs); ``kind``/``step_name`` label runs that reuse it
    (STaR, teachers)."""
    from transformers import AutoTokenizer

    sft = spec.sft
    if sft is None or not isinstance(sft.knobs, LocalSFTKnobs):
        raise ValueError(f"run spec {spec.task}/{spec.method}: a local SFT run needs the local engine's SFT settings")
    run_dir.mkdir(parents=True, exist_ok=True)
    digest = config_digest({"spec": spec.to_dict(), "seed": seed, "data": str(data), "init": str(init)})
    # resume only this run's state: same config, code and input contents (else it is set aside, and named)
    claim_run_dir(run_dir, run_identity({"config_sha256": digest, "kind": kind}, [data, tokenizer_dir, init]), "local")

    def publish() -> Path:
        final = run_dir / "final"
        done = write_done(run_dir, step=sft.steps, total_steps=sft.steps, config_sha256=digest, kind=kind, seed=seed)
        outputs = [done, run_dir / "metrics.jsonl", final / "config.json", final / "model.safetensors"]
        write_provenance(outputs, step=step_name, inputs=[data, tokenizer_dir / "tokenizer.json"],
                         params={"spec": spec.to_dict(), "init": str(init)}, config_sha256=digest,
                         seeds={"run": seed}, started_at=started)
        return done

    started = time.time()
    journal = EndJournal(run_dir, digest)
    if journal.final_verified():  # a kill after the export (e.g. while the checkpoint was freed): only the end redone
        log.info("%s: final/ is this run's and complete: not training again", run_dir)
        return publish()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    checkpoint = TrainingCheckpoint(run_dir, digest)
    state = checkpoint.load()
    if state is not None:
        model = load_model(checkpoint.dir)
    else:
        model = load_model(init) if init else build_model(tokenizer, spec.model, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=sft.lr, weight_decay=sft.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: cosine_with_warmup(s, sft.knobs.warmup_steps, sft.steps))
    prompts, responses = load_sft_examples(data, tokenizer, sft.knobs.max_response_tokens)
    torch.manual_seed(seed)
    step = 0
    if state is not None:
        # after the scheduler's constructor, which would otherwise reset the learning rate to step 0's
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
        step = state["step"]
        log.info("resuming SFT from step %d", step)
    metrics = MetricsLog(run_dir / "metrics.jsonl", step, tracking)
    model.train()
    bar = tqdm(total=sft.steps, initial=step, desc=f"sft {data.parent.name} seed={seed}", file=sys.stderr,
               disable=not progress)
    n = len(prompts)
    while step < sft.steps:
        epoch, offset = divmod(step * sft.batch_size, n)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 7919 + epoch)).tolist()
        batch = [order[(offset + i) % n] for i in range(sft.batch_size)]
        ids, attention, response = pack([prompts[i] for i in batch], [responses[i] for i in batch],
                                        tokenizer.pad_token_id)
        logprobs = response_logprobs(model, ids, attention, response)
        loss = -logprobs.sum() / response.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = clip_finite_gradients(model, loss, sft.knobs.grad_clip, step + 1, f"SFT {run_dir}")
        optimizer.step()
        check_finite_weights(model, step + 1, f"SFT {run_dir}")
        scheduler.step()
        step += 1
        bar.update(1)
        # verl's SFT trainer's names (docs/tracking.md)
        metrics.write({"step": step, "train/loss": float(loss.detach()), "train/lr": scheduler.get_last_lr()[0],
                       "train/grad_norm": float(grad_norm), "train/global_tokens": int(response.sum())})
        if step % sft.checkpoint_every == 0 or step == sft.steps:
            checkpoint.save(model, tokenizer, {"optimizer": optimizer.state_dict(),
                                               "scheduler": scheduler.state_dict(), "rng": rng_state(), "step": step})
    bar.close()
    metrics.close()
    save_model_atomic(model, tokenizer, run_dir / "final")
    journal.done("export")  # from here a retry trains nothing (pipeline_lib.core.run_end)
    return publish()


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.jobs.engines.local.sft")
    add_run_arguments(parser)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, required=True)
    parser.add_argument("--init", type=Path, default=None, help="start from this HF model instead of scratch")
    parser.add_argument("--kind", default="sft", help="run label in DONE.json; provenance step is train_<kind>")
    add_eval_arguments(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    train_sft(RunSpec.from_json(args.spec), args.data, args.tokenizer, args.run_dir, args.seed, args.init,
              kind=args.kind, step_name=f"train_{args.kind}", tracking=args.tracking)
    eval_after_training(args, args.run_dir / "final")
    return 0


if __name__ == "__main__":
    sys.exit(main())
