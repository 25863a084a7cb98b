"""Iterative DPO (paper App. B): rounds of DPO from the SFT model, expert answer preferred over an on-policy sample.

    python -m pipeline_lib.jobs.engines.local.dpo --spec JSON --data .../rl_train.parquet \
        --demonstrations .../sft_train.parquet --init .../sft/seed0/final --run-dir .../iterative_dpo/seed0 --seed 0

Round r samples one response per question from the current policy (``pairs_per_round`` questions),
pairs it as rejected against the question's expert demonstration (chosen), and trains
``steps_per_round`` steps of the DPO loss with the round's starting model as the frozen reference
(Pang et al.'s iterative scheme). The last ``validation_prompts`` training prompts never enter a pair;
greedy verifier accuracy on them picks the best round, which becomes ``final/`` (the test split is
never used for selection). Each finished round is kept in ``rounds/round<r>/`` and a rerun resumes
after the last one.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from tqdm import tqdm

from pipeline_lib.core.baselines import IterativeDPOSettings
from pipeline_lib.core.checkpoint import (
    RESUME_STATE,
    ConfigMismatchError,
    MetricsLog,
    claim_run_dir,
    read_json_state,
    run_identity,
    write_done,
)
from pipeline_lib.core.cli import add_run_arguments, entry_parser
from pipeline_lib.core.io import write_json
from pipeline_lib.core.model import generate, load_model, pack, response_logprobs, save_model_atomic
from pipeline_lib.core.provenance import config_digest, write_provenance
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.core.tracking import TrackingSettings
from pipeline_lib.jobs.engines.local.common import LazyPromptIds, check_finite_weights, clip_finite_gradients
from pipeline_lib.jobs.methods.expert import expert_demonstrations
from pipeline_lib.jobs.methods.rewards import rollout_rewards

__all__ = ["dpo_loss", "train_iterative_dpo"]

log = logging.getLogger("pipeline_lib.jobs.engines.local.dpo")


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, margin): -log sigmoid(beta * margin), margin = chosen minus rejected policy/reference log-ratio."""
    margin = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    return -F.logsigmoid(beta * margin).mean(), margin.detach()


def _sequence_logprobs(model: torch.nn.Module, prompts: list[list[int]], responses: list[list[int]], pad_id: int
                       ) -> torch.Tensor:
    ids, attention, mask = pack(prompts, responses, pad_id)
    return response_logprobs(model, ids, attention, mask).sum(-1)


@torch.no_grad()
def greedy_accuracy(model: torch.nn.Module, tokenizer: Any, frame: pd.DataFrame, prompt_ids: Sequence[list[int]],
                    rows: list[int], spec: IterativeDPOSettings) -> float:
    """Mean verifier correctness of greedy answers on ``rows`` (the held-out validation prompts)."""
    correct = []
    for start in range(0, len(rows), spec.batch_size):
        chunk = rows[start:start + spec.batch_size]
        responses = generate(model, [prompt_ids[r] for r in chunk], max_new_tokens=spec.max_new_tokens, greedy=True,
                             temperature=1.0, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id)
        correct.append(rollout_rewards(frame, chunk, [tokenizer.decode(r, skip_special_tokens=True)
                                                      for r in responses], None)[1])
    return float(torch.cat(correct).mean())


def train_iterative_dpo(spec: IterativeDPOSettings, data: Path, demonstrations: Path, init: Path, run_dir: Path,
                        seed: int, progress: bool = True, tracking: TrackingSettings | None = None) -> Path:
    from transformers import AutoTokenizer

    started = time.time()
    run_dir.mkdir(parents=True, exist_ok=True)
    digest = config_digest({"spec": spec.to_dict(), "seed": seed, "data": str(data), "init": str(init)})
    # resume only this run's rounds: same config, code and input contents (else they are set aside, and named)
    claim_run_dir(run_dir, run_identity({"config_sha256": digest}, [data, demonstrations, init]), "local",
                  state=(*RESUME_STATE, "rounds"))
    tokenizer = AutoTokenizer.from_pretrained(init)
    frame = pd.read_parquet(data)
    if len(frame) <= spec.validation_prompts:
        raise ValueError(f"{data}: {len(frame)} prompts, need more than validation_prompts="
                         f"{spec.validation_prompts}")
    prompt_ids = LazyPromptIds(tokenizer, list(frame["prompt"]))  # 3 x 128 pairs and 100 validation rows are read
    eos = tokenizer.eos_token_id
    chosen_ids = [[*tokenizer(d, add_special_tokens=False)["input_ids"][:spec.max_response_tokens], eos]
                  for d in expert_demonstrations(frame, demonstrations)]
    n_train = len(frame) - spec.validation_prompts
    validation = list(range(n_train, len(frame)))
    rounds_dir = run_dir / "rounds"
    summaries: list[dict[str, Any]] = []
    for r in range(1, spec.rounds + 1):
        summary_path = rounds_dir / f"round{r}" / "round.json"
        summary = read_json_state(summary_path)  # an unreadable one is set aside: that round is trained again
        if not isinstance(summary, dict):
            break
        if summary.get("config_sha256") != digest:
            raise ConfigMismatchError(f"{summary_path} belongs to config {summary.get('config_sha256')}, this run has "
                                      f"{digest}; delete {run_dir} to start over")
        summaries.append(summary)
    done_rounds = len(summaries)
    model = load_model(rounds_dir / f"round{done_rounds}" if done_rounds else init)
    metrics = MetricsLog(run_dir / "metrics.jsonl", done_rounds * spec.steps_per_round, tracking)
    bar = tqdm(total=spec.rounds * spec.steps_per_round, initial=done_rounds * spec.steps_per_round,
               desc=f"iterative_dpo {data.parent.name} seed={seed}", file=sys.stderr, disable=not progress)
    for r in range(done_rounds + 1, spec.rounds + 1):
        torch.manual_seed(seed * 1_000 + r)  # each round is reproducible on its own, so resuming is exact
        reference = load_model(rounds_dir / f"round{r - 1}" if r > 1 else init).eval()
        rows = torch.randperm(n_train, generator=torch.Generator().manual_seed(seed * 7919 + r))[
            :spec.pairs_per_round].tolist()
        prompts = [prompt_ids[i] for i in rows]
        rejected: list[list[int]] = []
        for start in range(0, len(rows), spec.batch_size_generate):
            rejected += generate(model, prompts[start:start + spec.batch_size_generate],
                                 max_new_tokens=spec.max_new_tokens, greedy=False, temperature=spec.temperature,
                                 eos_id=eos, pad_id=tokenizer.pad_token_id)
        chosen = [chosen_ids[i] for i in rows]
        with torch.no_grad():
            ref_chosen = _sequence_logprobs(reference, prompts, chosen, tokenizer.pad_token_id)
            ref_rejected = _sequence_logprobs(reference, prompts, rejected, tokenizer.pad_token_id)
        optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
        model.train()
        for s in range(spec.steps_per_round):
            start = (s * spec.batch_size) % len(rows)
            pick = [(start + k) % len(rows) for k in range(spec.batch_size)]
            both = _sequence_logprobs(model, [prompts[k] for k in pick] * 2, [chosen[k] for k in pick] +
                                      [rejected[k] for k in pick], tokenizer.pad_token_id)
            loss, margin = dpo_loss(both[: len(pick)], both[len(pick):], ref_chosen[pick], ref_rejected[pick],
                                    spec.beta)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            where = f"iterative DPO {run_dir} round {r}"
            clip_finite_gradients(model, loss, spec.grad_clip, s + 1, where)
            optimizer.step()
            check_finite_weights(model, s + 1, where)
            bar.update(1)
            metrics.write({"step": (r - 1) * spec.steps_per_round + s + 1, "round": r, "loss": float(loss.detach()),
                           "margin": float(margin.mean()), "accuracy": float((margin > 0).float().mean())})
        accuracy = greedy_accuracy(model, tokenizer, frame, prompt_ids, validation, spec)
        save_model_atomic(model, tokenizer, rounds_dir / f"round{r}")
        summary = {"round": r, "validation_pass@1_greedy": accuracy, "validation_prompts": len(validation),
                   "rejected_length": sum(map(len, rejected)) / len(rejected), "config_sha256": digest}
        write_json(summary_path := rounds_dir / f"round{r}" / "round.json", summary)
        log.info("round %d: validation pass@1 %.3f (%s)", r, accuracy, summary_path)
        summaries.append(summary)
    bar.close()
    metrics.close()
    best = max(summaries, key=lambda s: (s["validation_pass@1_greedy"], -s["round"]))
    final = save_model_atomic(load_model(rounds_dir / f"round{best['round']}"), tokenizer, run_dir / "final")
    write_json(run_dir / "rounds.json", {"rounds": summaries, "best_round": best["round"],
                                         "selected_by": "validation_pass@1_greedy"})
    total = spec.rounds * spec.steps_per_round
    done = write_done(run_dir, step=total, total_steps=total, config_sha256=digest, kind="iterative_dpo", seed=seed,
                      best_round=best["round"])
    write_provenance([done, run_dir / "metrics.jsonl", run_dir / "rounds.json", final / "config.json",
                      final / "model.safetensors"], step="train_iterative_dpo",
                     inputs=[data, demonstrations, init / "config.json", init / "model.safetensors"],
                     params={"spec": spec.to_dict()}, config_sha256=digest, seeds={"run": seed}, started_at=started)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.jobs.engines.local.dpo")
    add_run_arguments(parser)
    parser.add_argument("--data", type=Path, required=True, help="the task's rl_train.parquet (prompts, verifier)")
    parser.add_argument("--demonstrations", type=Path, required=True, help="the task's sft_train.parquet")
    parser.add_argument("--init", type=Path, required=True, help="the SFT model (round 0 and first reference)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    settings = RunSpec.from_json(args.spec).baseline  # the method's own section is the whole of its settings
    if not isinstance(settings, IterativeDPOSettings):
        raise SystemExit(f"--spec: Iterative DPO needs IterativeDPOSettings as its baseline, got {settings!r}")
    train_iterative_dpo(settings, args.data, args.demonstrations, args.init, args.run_dir, args.seed,
                        tracking=args.tracking)
    return 0


if __name__ == "__main__":
    sys.exit(main())
