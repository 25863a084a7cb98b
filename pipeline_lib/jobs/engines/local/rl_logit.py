"""RL-Logit (paper App. B): group RL whose reward is the policy's own likelihood of the expert answer.

    python -m pipeline_lib.jobs.engines.local.rl_logit --spec JSON --data .../rl_train.parquet \
        --demonstrations .../sft_train.parquet --init .../sft/seed0/final --run-dir .../rl_logit/seed0 --seed 0

For a rollout with reasoning z (``split_reasoning``) the reward is ``log pi(a* | q, z)`` (variant
``logprob``) or the negative perplexity ``-exp(-log pi(a* | q, z) / |a*|)`` (``neg_perplexity``),
where a* is the answer part of the prompt's expert demonstration. It is computed by the current
policy without gradient, for the whole rollout batch in one forward pass.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from pipeline_lib.core.baselines import RLLogitSettings
from pipeline_lib.core.model import pack, response_logprobs
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.jobs.engines.local.rl import GroupRLMethod, StepContext, method_main
from pipeline_lib.jobs.methods.expert import expert_demonstrations, split_reasoning

__all__ = ["VARIANTS", "RLLogit", "answer_logprob_rewards"]

VARIANTS = ("logprob", "neg_perplexity")


@torch.no_grad()
def answer_logprob_rewards(model: torch.nn.Module, tokenizer: Any, prompt_ids: list[list[int]], reasonings: list[str],
                           answers: list[str], variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(reward, summed log-prob of a*) per row, from one batched forward of prompt + z + a* + EOS."""
    if variant not in VARIANTS:
        raise ValueError(f"RL-Logit variant {variant!r} not in {VARIANTS}")
    contexts = [list(p) + tokenizer(z, add_special_tokens=False)["input_ids"] for p, z in zip(prompt_ids, reasonings,
                                                                                               strict=True)]
    targets = [tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for a in answers]
    ids, attention, answer_mask = pack(contexts, targets, tokenizer.pad_token_id)
    was_training = model.training
    model.eval()
    logprob = response_logprobs(model, ids, attention, answer_mask).sum(-1)
    model.train(was_training)
    if variant == "logprob":
        return logprob, logprob
    return -torch.exp(-logprob / answer_mask.sum(-1)), logprob


class RLLogit(GroupRLMethod):
    kind = "rl_logit"

    def __init__(self, spec: RunSpec, demonstrations: Path) -> None:
        super().__init__(spec)
        if not isinstance(spec.baseline, RLLogitSettings):
            raise ValueError(f"RL-Logit's run spec needs RLLogitSettings as its baseline, got {spec.baseline!r}")
        self.settings: RLLogitSettings = spec.baseline
        self.demonstrations_path = demonstrations
        self.answers: list[str] = []

    def prepare(self, ctx: StepContext) -> None:
        self.answers = [split_reasoning(d)[1] for d in expert_demonstrations(ctx.frame, self.demonstrations_path)]

    def score(self, ctx: StepContext, rows: list[int], responses: list[list[int]], texts: list[str]
              ) -> tuple[torch.Tensor, dict[str, float]]:
        reasonings = [split_reasoning(t)[0] for t in texts]
        rewards, logprob = answer_logprob_rewards(ctx.model, ctx.tokenizer, [ctx.prompt_ids[r] for r in rows],
                                                  reasonings, [self.answers[r] for r in rows],
                                                  self.settings.variant)
        return rewards, {"expert_answer_logprob": float(logprob.mean())}


def main(argv: list[str] | None = None) -> int:
    return method_main(argv, module="pipeline_lib.jobs.engines.local.rl_logit", description=__doc__,
                       step_name="train_rl_logit", extra_input=("demonstrations", "the task's sft_train.parquet"),
                       make_method=RLLogit)


if __name__ == "__main__":
    sys.exit(main())
