"""RARO (paper App. B): one model, shared weights, acting as policy and as relativistic critic; both by GRPO.

    python -m pipeline_lib.jobs.engines.local.raro --spec JSON --data .../rl_train.parquet \
        --demonstrations .../sft_train.parquet --init .../sft/seed0/final --run-dir .../raro/seed0 --seed 0

Per step the policy answers B prompts M times (task prompts, unchanged). Each answer is shown to
the critic (the same model under a critic system prompt) beside the prompt's expert answer, in a
random order; the critic replies ``<answer>1</answer>``, ``<answer>2</answer>`` or
``<answer>tie</answer>``, and the policy's reward is read from the outcome table
(``rewards.policy``: fooling the critic pays, a tie pays partially). The critic trains on its own
groups: critic prompts are drawn partly from a replay buffer of past (prompt, policy answer) pairs
and partly from this step, each sampled M times and rewarded by ``rewards.critic`` (identifying the
expert pays). Policy and critic groups go through one GRPO update together (mixed batch).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from pipeline_lib.core.baselines import RaroSettings
from pipeline_lib.core.model import encode_prompts, generate, pack, response_logprobs
from pipeline_lib.core.run_spec import RunSpec
from pipeline_lib.jobs.engines.local.rl import GroupRLMethod, RolloutBatch, StepContext, method_main
from pipeline_lib.jobs.methods.expert import expert_demonstrations
from pipeline_lib.jobs.methods.raro import VERDICTS, critic_messages, outcome_rewards, parse_verdict

__all__ = ["CRITIC_CHOICES", "VERDICTS", "Raro", "critic_messages", "outcome_rewards", "parse_verdict",
           "sample_critic_choices"]

#: The three well-formed critic replies; ``critic_decoding: choice`` samples only among them.
CRITIC_CHOICES = ("<answer>1</answer>", "<answer>2</answer>", "<answer>tie</answer>")


@torch.no_grad()
def sample_critic_choices(model: torch.nn.Module, tokenizer: Any, prompts: list[list[int]], samples: int,
                          temperature: float, generator: torch.Generator) -> list[list[int]]:
    """Constrained critic decoding: ``samples`` replies per prompt, each one of :data:`CRITIC_CHOICES` drawn from the
    model's own probabilities of the three complete replies (+ EOS), renormalised over them at ``temperature``.

    A small model that was never taught the critic's reply format almost never writes a valid verdict, so every
    critic reward is the same and GRPO has nothing to learn from; restricting the reply to the valid set (as guided
    ``choice`` decoding does in vLLM) keeps the critic's choice the model's own and trainable.
    """
    choices = [tokenizer(c, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for c in CRITIC_CHOICES]
    contexts = [p for p in prompts for _ in choices]
    ids, attention, reply_mask = pack(contexts, choices * len(prompts), tokenizer.pad_token_id)
    was_training = model.training
    model.eval()
    scores = response_logprobs(model, ids, attention, reply_mask).sum(-1).view(len(prompts), len(choices))
    model.train(was_training)
    probs = torch.softmax(scores / temperature, dim=-1).repeat_interleave(samples, dim=0)
    picked = torch.multinomial(probs, 1, generator=generator).squeeze(1).tolist()
    return [list(choices[i]) for i in picked]


class Raro(GroupRLMethod):
    kind = "raro"

    def __init__(self, spec: RunSpec, demonstrations: Path) -> None:
        super().__init__(spec)
        if not isinstance(spec.baseline, RaroSettings):
            raise ValueError(f"RARO's run spec needs RaroSettings as its baseline, got {spec.baseline!r}")
        self.settings: RaroSettings = spec.baseline
        self.demonstrations_path = demonstrations
        self.experts: list[str] = []
        self.questions: list[str] = []
        self.buffer: list[tuple[int, str]] = []

    def prepare(self, ctx: StepContext) -> None:
        self.experts = expert_demonstrations(ctx.frame, self.demonstrations_path)
        self.questions = ["\n".join(m["content"] for m in prompt) for prompt in ctx.frame["prompt"]]

    def _judge(self, ctx: StepContext, pairs: list[tuple[int, str]], samples: int, generator: torch.Generator
               ) -> tuple[list[list[int]], list[list[int]], list[str]]:
        """Critic prompts for (row, policy answer) pairs in random order, ``samples`` replies each."""
        raro, tokenizer = self.settings, ctx.tokenizer
        expert_first = (torch.rand(len(pairs), generator=generator) < 0.5).tolist()
        messages = [critic_messages(raro.critic_system_prompt, self.questions[row],
                                    *((self.experts[row], answer) if first else (answer, self.experts[row])))
                    for (row, answer), first in zip(pairs, expert_first, strict=True)]
        unique = encode_prompts(tokenizer, messages)
        prompts = [p for p in unique for _ in range(samples)]
        if raro.critic_decoding == "choice":
            replies = sample_critic_choices(ctx.model, tokenizer, unique, samples, ctx.spec.rl.temperature, generator)
        else:
            replies = generate(ctx.model, prompts, max_new_tokens=raro.critic_max_new_tokens, greedy=False,
                               temperature=ctx.spec.rl.temperature, eos_id=tokenizer.eos_token_id,
                               pad_id=tokenizer.pad_token_id)
        texts = [tokenizer.decode(r, skip_special_tokens=True) for r in replies]
        verdicts = [parse_verdict(t, first) for t, first in zip(texts, (f for f in expert_first for _ in
                                                                       range(samples)), strict=True)]
        return prompts, replies, verdicts

    def collect(self, ctx: StepContext, rows: list[int]) -> RolloutBatch:
        raro, group_size = self.settings, ctx.spec.rl.group_size
        generator = torch.Generator().manual_seed(ctx.seed * 1_000_003 + ctx.step)
        expanded, responses, texts = self.policy_rollouts(ctx, rows)
        _, correct = self.verifier(ctx, expanded, texts)
        # policy reward: one critic verdict per policy answer
        _, _, verdicts = self._judge(ctx, list(zip(expanded, texts, strict=True)), 1, generator)
        policy_rewards = outcome_rewards(verdicts, raro.rewards["policy"])
        # critic groups: replayed pairs plus one fresh pair per prompt
        fresh = [(row, texts[i * group_size + int(torch.randint(group_size, (1,), generator=generator))])
                 for i, row in enumerate(rows)]
        n_critic = raro.critic_prompts_per_step
        n_replay = min(len(self.buffer), round(raro.replay_fraction * n_critic))
        replayed = [self.buffer[int(i)] for i in torch.randperm(len(self.buffer), generator=generator)[:n_replay]]
        fresh_idx = torch.randperm(len(fresh), generator=generator)[: n_critic - n_replay]
        critic_pairs = replayed + [fresh[int(i)] for i in fresh_idx]
        critic_prompts, critic_replies, critic_verdicts = self._judge(ctx, critic_pairs, group_size, generator)
        critic_rewards = outcome_rewards(critic_verdicts, raro.rewards["critic"])
        self.buffer = (self.buffer + fresh)[-raro.replay_size:]
        n_groups = len(rows) + len(critic_pairs)
        group_ids = torch.arange(n_groups).repeat_interleave(group_size)
        critic_rows = [row for row, _ in critic_pairs for _ in range(group_size)]
        identified = torch.tensor([v == "expert_better" for v in critic_verdicts], dtype=torch.float32)
        share = {v: sum(x == v for x in critic_verdicts) / len(critic_verdicts) for v in VERDICTS}
        return RolloutBatch(
            [ctx.prompt_ids[r] for r in expanded] + critic_prompts, responses + critic_replies, expanded + critic_rows,
            torch.cat([policy_rewards, critic_rewards]), torch.cat([correct, identified]), group_ids, len(expanded),
            {"critic_reward_mean": float(critic_rewards.mean()), "critic_replayed": len(replayed),
             **{f"critic_{v}": share[v] for v in VERDICTS},
             "policy_fooled_critic": sum(v == "policy_better" for v in verdicts) / len(verdicts)})

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": list(self.buffer)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer = [tuple(pair) for pair in state.get("buffer", [])]


def main(argv: list[str] | None = None) -> int:
    return method_main(argv, module="pipeline_lib.jobs.engines.local.raro", description=__doc__, step_name="train_raro",
                       extra_input=("demonstrations", "the task's sft_train.parquet"), make_method=Raro)


if __name__ == "__main__":
    sys.exit(main())
