"""Group RL (GRPO, SoftmaxGRPO and every registered estimator) with the paper's PPO-clip + KL loss.

    python -m pipeline_lib.jobs.engines.local.rl --spec JSON --data results/data/T/rl_train.parquet \
        --init results/train/T/sft/seed0/final --run-dir results/train/T/softmax_exact/seed0 --seed 0

Per step: M rollouts for each of B prompts (KV-cached batched sampling), rewards from the
reward registry, advantages from ``group_advantages``, old-policy and reference log-probs,
then ``ppo_epochs`` passes over ``minibatches`` (whole groups each) of ``policy_loss``.
Every step appends to ``metrics.jsonl`` (under verl's metric names, and to the run's tracking backends:
:mod:`pipeline_lib.core.tracking`, ``docs/tracking.md``) and ``rollouts.jsonl`` (per rollout: group, prompt index,
reward, advantage, length, correctness); ``checkpoint/`` every K steps.

Baselines that are group RL with another reward, extra rollouts or another loss (RL-Logit,
RARO, OPD) subclass :class:`GroupRLMethod` and reuse this loop, its checkpointing and its logs.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm import tqdm

from pipeline_lib.core.checkpoint import (
    MetricsLog,
    claim_run_dir,
    probe_dir,
    rng_state,
    run_identity,
    set_rng_state,
    write_done,
)
from pipeline_lib.core.cli import add_run_arguments, entry_parser
from pipeline_lib.core.model import (
    generate,
    load_model,
    pack,
    response_logprobs,
    response_logprobs_and_entropy,
    save_model_atomic,
)
from pipeline_lib.core.provenance import config_digest, write_provenance
from pipeline_lib.core.rewards import reward_health
from pipeline_lib.core.rl.advantages import advantage_diagnostics, group_advantages
from pipeline_lib.core.rl.group_metrics import group_step_metrics
from pipeline_lib.core.rl.losses import PolicyLossConfig, policy_loss
from pipeline_lib.core.run_end import EndJournal
from pipeline_lib.core.run_spec import LocalRLKnobs, RunSpec
from pipeline_lib.core.tracking import TrackingSettings
from pipeline_lib.jobs.engines.local.common import (
    LazyPromptIds,
    TrainingCheckpoint,
    check_finite_weights,
    clip_finite_gradients,
)
from pipeline_lib.jobs.eval.evaluate import add_eval_arguments, eval_after_training
from pipeline_lib.jobs.methods.rewards import rollout_rewards

__all__ = ["GroupRLMethod", "RolloutBatch", "StepContext", "prompt_pool", "rollout_rewards", "train_rl"]

log = logging.getLogger("pipeline_lib.jobs.engines.local.rl")


@dataclass
class StepContext:
    """What a method may read while collecting a step: the live policy, the data and the run's settings."""

    spec: RunSpec
    model: torch.nn.Module
    tokenizer: Any
    frame: pd.DataFrame
    prompt_ids: Sequence[list[int]]  # per row of ``frame``, encoded on first use (LazyPromptIds)
    seed: int
    step: int = 0


@dataclass
class RolloutBatch:
    """One step's rollouts; groups are contiguous and numbered from 0, policy rollouts come first.

    ``n_policy`` rollouts answer the task prompts (they are what the metrics and ``rollouts.jsonl``
    describe); any after them are auxiliary rollouts a method trains on too (RARO's critic).
    """

    prompt_ids: list[list[int]]
    responses: list[list[int]]
    rows: list[int]
    rewards: torch.Tensor
    correct: torch.Tensor
    group_ids: torch.Tensor
    n_policy: int
    metrics: dict[str, float] = field(default_factory=dict)


class GroupRLMethod:
    """Group RL with the task's reward and the paper's loss; subclasses replace a hook, never the loop."""

    kind = "rl"
    uses_reference = True

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec

    def prepare(self, ctx: StepContext) -> None:
        """Load whatever the method needs besides the policy (expert answers, a teacher)."""

    def policy_rollouts(self, ctx: StepContext, rows: list[int]) -> tuple[list[int], list[list[int]], list[str]]:
        """M samples for each prompt row: (expanded rows, response ids, decoded texts)."""
        rl, tokenizer = ctx.spec.rl, ctx.tokenizer
        expanded = [row for row in rows for _ in range(rl.group_size)]
        responses = generate(ctx.model, [ctx.prompt_ids[r] for r in expanded],
                             max_new_tokens=rl.max_response_tokens,
                             greedy=False, temperature=rl.temperature, eos_id=tokenizer.eos_token_id,
                             pad_id=tokenizer.pad_token_id)
        return expanded, responses, [tokenizer.decode(r, skip_special_tokens=True) for r in responses]

    def score(self, ctx: StepContext, rows: list[int], responses: list[list[int]], texts: list[str]
              ) -> tuple[torch.Tensor, dict[str, float]]:
        """Training reward per rollout and extra metrics; the default is the task's reward registry entry."""
        rewards, _ = rollout_rewards(ctx.frame, rows, texts, ctx.spec.reward_weights)
        return rewards, {}

    def verifier(self, ctx: StepContext, rows: list[int], texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """The task verifier's (reward, correct), logged for every method so training curves are comparable."""
        return rollout_rewards(ctx.frame, rows, texts, None, verifier=True)

    def collect(self, ctx: StepContext, rows: list[int]) -> RolloutBatch:
        expanded, responses, texts = self.policy_rollouts(ctx, rows)
        if type(self).score is GroupRLMethod.score:  # one registry call gives both reward and correctness
            rewards, correct = rollout_rewards(ctx.frame, expanded, texts, ctx.spec.reward_weights)
            metrics: dict[str, float] = {}
        else:
            rewards, metrics = self.score(ctx, expanded, responses, texts)
            _, correct = self.verifier(ctx, expanded, texts)
        group_ids = torch.arange(len(rows)).repeat_interleave(ctx.spec.rl.group_size)
        return RolloutBatch([ctx.prompt_ids[r] for r in expanded], responses, expanded, rewards, correct, group_ids,
                            len(expanded), metrics)

    def loss(self, model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor, response_mask: torch.Tensor,
             old_logprobs: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor,
             ref_logprobs: torch.Tensor | None, config: PolicyLossConfig) -> tuple[torch.Tensor, dict[str, float]]:
        """(loss, metrics under verl's names) of one minibatch: the paper's clipped surrogate plus reference KL."""
        logprobs = response_logprobs(model, ids, attention, response_mask)
        out = policy_loss(logprobs, old_logprobs, advantages, response_mask, config, group_ids=group_ids,
                          ref_log_prob=ref_logprobs)
        return out.loss, {"actor/pg_loss": float(out.policy_loss), "actor/kl_loss": float(out.kl),
                          "actor/pg_clipfrac": out.clip_fraction, "actor/ppo_kl": out.approx_kl_old}

    def state_dict(self) -> dict[str, Any]:
        """Method state that must survive a resume (RARO's replay buffer)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def prompt_pool(n_rows: int, size: int | None, seed: int) -> list[int]:
    """The training rows a run draws its prompts from: all ``n_rows`` (``size`` None, as the paper), else ``size`` of
    them drawn with the run's seed (``train.rl.prompt_pool``), in row order. A small pool makes the run revisit its
    prompts, which the gradient-allocation table needs (a prompt's pass rate over its other visits)."""
    if size is None or size >= n_rows:
        return list(range(n_rows))
    return sorted(torch.randperm(n_rows, generator=torch.Generator().manual_seed(seed)).tolist()[:size])


def train_rl(spec: RunSpec, data: Path, init: Path, run_dir: Path, seed: int, progress: bool = True,
             method: GroupRLMethod | None = None, step_name: str = "train_rl",
             extra_inputs: tuple[Path, ...] = (), tracking: TrackingSettings | None = None) -> Path:
    """Train one group-RL run (GRPO family, or an RL-style baseline's ``method``) from its spec's typed settings
    (:class:`~pipeline_lib.core.run_spec.RLSettings` with the local knobs) and estimator."""
    from transformers import AutoTokenizer

    rl, estimator = spec.rl, spec.estimator
    if rl is None or not isinstance(rl.knobs, LocalRLKnobs) or estimator is None:
        raise ValueError(f"run spec {spec.task}/{spec.method}: a local RL run needs the local engine's group-RL "
                         f"settings and an estimator")
    method = method or GroupRLMethod(spec)
    run_dir.mkdir(parents=True, exist_ok=True)
    digest = config_digest({"spec": spec.to_dict(), "seed": seed, "data": str(data), "init": str(init)})
    # resume only this run's state: same config, code and input contents (else it is set aside, and named)
    claim_run_dir(run_dir, run_identity({"config_sha256": digest, "kind": method.kind},
                                        [data, init, *extra_inputs]), "local")

    def publish() -> Path:
        final = run_dir / "final"
        done = write_done(run_dir, step=rl.steps, total_steps=rl.steps, config_sha256=digest, kind=method.kind,
                          advantage=estimator.name, seed=seed)
        outputs = [done, run_dir / "metrics.jsonl", run_dir / "rollouts.jsonl", final / "config.json",
                   final / "model.safetensors",
                   *(probe_dir(run_dir, s) / "model.safetensors" for s in rl.probe_steps())]
        write_provenance(outputs, step=step_name,
                         inputs=[data, init / "config.json", init / "model.safetensors", *extra_inputs],
                         params={"spec": spec.to_dict()}, config_sha256=digest, seeds={"run": seed},
                         started_at=started)
        return done

    started = time.time()
    journal = EndJournal(run_dir, digest)
    if journal.final_verified():  # a kill after the export (e.g. while the checkpoint was freed): only the end redone
        log.info("%s: final/ is this run's and complete: not training again", run_dir)
        return publish()
    tokenizer = AutoTokenizer.from_pretrained(init)
    checkpoint = TrainingCheckpoint(run_dir, digest)
    state = checkpoint.load()
    model = load_model(checkpoint.dir if state is not None else init)
    model.train()
    reference = load_model(init).eval() if rl.beta > 0 and method.uses_reference else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=rl.lr, weight_decay=rl.weight_decay)
    loss_config = PolicyLossConfig(clip_low=rl.clip_low, clip_high=rl.clip_high, beta=rl.beta,
                                   kl_estimator=rl.kl_estimator, aggregation=rl.aggregation)
    frame = pd.read_parquet(data)
    ctx = StepContext(spec, model, tokenizer, frame, LazyPromptIds(tokenizer, list(frame["prompt"])), seed)
    method.prepare(ctx)
    torch.manual_seed(seed)
    step = 0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        method.load_state_dict(state.get("method", {}))
        step = state["step"]
        log.info("resuming RL from step %d", step)
    metrics = MetricsLog(run_dir / "metrics.jsonl", step, tracking)
    rollouts = MetricsLog(run_dir / "rollouts.jsonl", step)
    batch_prompts = rl.prompts_per_step
    adv_params = dict(estimator.params)
    bar = tqdm(total=rl.steps, initial=step, desc=f"{method.kind} {estimator.name} {data.parent.name} "
               f"seed={seed}", file=sys.stderr, disable=not progress)
    pool = prompt_pool(len(frame), rl.prompt_pool, seed)
    probe_steps = set(rl.probe_steps())  # the policies kept for Table 3's pass-rate probe (jobs.eval.probe)
    n = len(pool)
    while step < rl.steps:
        t0, health = time.perf_counter(), reward_health()
        epoch, offset = divmod(step * batch_prompts, n)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 7919 + epoch)).tolist()
        rows = [pool[order[(offset + i) % n]] for i in range(batch_prompts)]
        ctx.step = step
        batch = method.collect(ctx, rows)
        rewards, correct, group_ids = batch.rewards, batch.correct, batch.group_ids
        advantages = group_advantages(estimator.name, rewards, group_ids, **adv_params)
        chosen = advantage_diagnostics(estimator.name, rewards, group_ids, **adv_params)  # e.g. softmax_ess's tau
        ids, attention, response_mask = pack(batch.prompt_ids, batch.responses, tokenizer.pad_token_id)
        with torch.no_grad():
            # the old policy's entropy, from the same logits: verl's actor/entropy (computed with its old log-probs)
            old_logprobs, old_entropy = response_logprobs_and_entropy(model, ids, attention, response_mask)
            ref_logprobs = response_logprobs(reference, ids, attention, response_mask) if reference else None
        t1 = time.perf_counter()
        n_groups = int(group_ids.max()) + 1
        groups_per_minibatch = max(1, n_groups // rl.knobs.minibatches)
        update: dict[str, list[float]] = {}
        for _ in range(rl.ppo_epochs):
            for first in range(0, n_groups, groups_per_minibatch):
                sel = (group_ids >= first) & (group_ids < first + groups_per_minibatch)
                loss, minibatch = method.loss(
                    model, ids[sel], attention[sel], response_mask[sel], old_logprobs[sel], advantages[sel],
                    group_ids[sel], ref_logprobs[sel] if ref_logprobs is not None else None, loss_config)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                minibatch["actor/grad_norm"] = float(clip_finite_gradients(model, loss, rl.grad_clip, step + 1,
                                                                           f"RL {run_dir}"))
                optimizer.step()
                check_finite_weights(model, step + 1, f"RL {run_dir}")
                for key, value in minibatch.items():
                    update.setdefault(key, []).append(value)
        t2 = time.perf_counter()
        step += 1
        bar.update(1)
        policy = slice(0, batch.n_policy)
        lengths = response_mask[policy].sum(-1)
        # verl's names where verl logs the same quantity, ours under softmaxgrpo/ (docs/tracking.md)
        metrics.write({
            "step": step, "critic/score/mean": float(rewards[policy].mean()),
            "response_length/mean": float(lengths.mean()),
            **{key: sum(values) / len(values) for key, values in update.items()},  # mean over minibatch updates
            "actor/entropy": float(old_entropy.sum() / response_mask.sum().clamp(min=1)),  # token mean, update batch
            "timing_s/step": t2 - t0, "timing_s/update_actor": t2 - t1,
            **group_step_metrics(correct[policy], advantages[policy].abs(), lengths, group_ids[policy], chosen),
            **batch.metrics,
            # verifier items that timed out / failed this step (scored 0, never silently as wrong answers)
            **{f"softmaxgrpo/reward_{kind}": count - health[kind] for kind, count in reward_health().items()},
        })
        rollouts.write({"step": step, "group": group_ids[policy].tolist(), "prompt_index": batch.rows[policy],
                        "reward": rewards[policy].tolist(), "advantage": advantages[policy].tolist(),
                        "length": lengths.int().tolist(), "correct": correct[policy].int().tolist(),
                        **{key: values[policy] for key, values in chosen.items()}})
        bar.set_postfix(reward=f"{float(rewards[policy].mean()):.2f}",
                        pass_rate=f"{float(correct[policy].mean()):.2f}")
        if step in probe_steps:  # before the checkpoint: a resume from it never skips a kept policy
            save_model_atomic(model, tokenizer, probe_dir(run_dir, step))
        if step % rl.checkpoint_every == 0 or step == rl.steps:
            checkpoint.save(model, tokenizer, {"optimizer": optimizer.state_dict(), "rng": rng_state(), "step": step,
                                               "method": method.state_dict()})
    bar.close()
    metrics.close()
    rollouts.close()
    save_model_atomic(model, tokenizer, run_dir / "final")
    journal.done("export")  # from here a retry trains nothing (pipeline_lib.core.run_end)
    return publish()


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every group-RL entry point takes (this one, RL-Logit, RARO, OPD)."""
    add_run_arguments(parser)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--init", type=Path, required=True, help="starting (and reference) HF model")
    add_eval_arguments(parser)


def method_main(argv: list[str] | None, *, module: str, description: str | None, step_name: str,
                extra_input: tuple[str, str], make_method: Callable[[RunSpec, Path], GroupRLMethod],
                tracked_file: str | None = None) -> int:
    """The entry point of an RL-style baseline: the common arguments plus one extra input path.

    ``extra_input`` is (flag name, help); ``make_method(spec, path)`` builds the method (which reads its own section,
    ``spec.baseline``); the path (or ``path / tracked_file``) is recorded as an input in the provenance.
    """
    parser = entry_parser(description, module)
    add_common_arguments(parser)
    flag, help_text = extra_input
    parser.add_argument(f"--{flag}", type=Path, required=True, help=help_text)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    spec = RunSpec.from_json(args.spec)
    extra = getattr(args, flag)
    train_rl(spec, args.data, args.init, args.run_dir, args.seed, method=make_method(spec, extra),
             step_name=step_name, extra_inputs=(extra / tracked_file if tracked_file else extra,),
             tracking=args.tracking)
    eval_after_training(args, args.run_dir / "final")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.jobs.engines.local.rl")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    train_rl(RunSpec.from_json(args.spec), args.data, args.init, args.run_dir, args.seed,
             tracking=args.tracking)
    eval_after_training(args, args.run_dir / "final")
    return 0


if __name__ == "__main__":
    sys.exit(main())
