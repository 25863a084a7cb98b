"""RL-Logit (paper App. B) on verl: an agent loop whose reward is the current policy's likelihood of the expert answer.

For a rollout with reasoning z (``split_reasoning`` of the decoded response) the reward is
``log pi(a* | q, z)`` (variant ``logprob``) or ``-exp(-log pi(a* | q, z) / |a*|)`` (``neg_perplexity``),
a* being the answer part of the row's expert demonstration (``extra_info.reference``) followed by EOS,
exactly as the local engine's :func:`pipeline_lib.jobs.engines.local.rl_logit.answer_logprob_rewards`.

The log-probs come from the *rollout server* that generated the response: it holds the policy's current
weights (verl syncs them before every rollout), so asking it for the prompt log-probs of
``prompt + z + a* + EOS`` (``max_tokens=1``, ``prompt_logprobs=0``) scores a* under the current policy,
with no gradient and no second copy of the model; vLLM batches the concurrent requests of a step and its
prefix cache already holds ``prompt + z``. The score becomes ``AgentLoopOutput.reward_score`` (verl's
``rm_scores``), so the task's verifier is not the training reward. Validation rows (``extra_info.split``
other than ``train``) are left to the verifier, so verl's ``val-core`` metrics stay task accuracy.

Registered by ``rl_logit_agent_loops.yaml`` (``actor_rollout_ref.rollout.agent.agent_loop_config_path``)
as ``rl_logit_<variant>``; :mod:`.translate` selects it as the default agent loop.
"""

from __future__ import annotations

import math
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from pipeline_lib.jobs.engines.verl.translate import RL_LOGIT_AGENT_LOOPS, RL_LOGIT_VARIANTS, rl_logit_agent_loop
from pipeline_lib.jobs.methods.expert import split_reasoning

__all__ = ["AGENT_LOOP_CONFIG", "VARIANTS", "RLLogitAgentLoop", "agent_loop_name", "logit_reward"]

VARIANTS = RL_LOGIT_VARIANTS
#: The agent loop registry file (one entry per variant) handed to verl.
AGENT_LOOP_CONFIG = RL_LOGIT_AGENT_LOOPS
agent_loop_name = rl_logit_agent_loop


def logit_reward(answer_logprob: float, answer_tokens: int, variant: str) -> float:
    """The RL-Logit reward from the summed log-prob of a* + EOS over its ``answer_tokens`` tokens."""
    if variant == "logprob":
        return answer_logprob
    if variant == "neg_perplexity":
        return -math.exp(-answer_logprob / answer_tokens)
    raise ValueError(f"RL-Logit variant {variant!r} not in {VARIANTS}")


class RLLogitAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn rollout, then one prompt-log-prob request that scores the expert answer."""

    def __init__(self, *args: Any, variant: str, **kwargs: Any) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"{AGENT_LOOP_CONFIG}: RL-Logit variant {variant!r} not in {VARIANTS}")
        super().__init__(*args, **kwargs)
        self.variant = variant

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        output = await super().run(sampling_params, **kwargs)
        extra_info = dict(kwargs.get("extra_info") or {})
        if extra_info.get("split", "train") != "train":
            return output  # validation: scored by the task's verifier through verl's reward loop
        reference = extra_info.get("reference")
        if not reference:
            raise KeyError(f"RL-Logit needs the expert demonstration in extra_info.reference; row "
                           f"{extra_info.get('index')!r} has none (extra_info keys: {sorted(extra_info)})")
        answer_logprob, answer_tokens = await self.answer_logprob(output, reference)
        output.reward_score = logit_reward(answer_logprob, answer_tokens, self.variant)
        output.extra_fields["reward_extra_info"] = {"expert_answer_logprob": answer_logprob}
        return output

    async def answer_logprob(self, output: AgentLoopOutput, reference: str) -> tuple[float, int]:
        """(sum of log pi(a* + EOS | q, z), its token count), z being the reasoning part of ``output``'s response."""
        text = self.tokenizer.decode(output.response_ids, skip_special_tokens=True)
        reasoning = split_reasoning(text)[0]
        answer = split_reasoning(reference)[1]
        context = list(output.prompt_ids) + self.tokenizer(reasoning, add_special_tokens=False)["input_ids"]
        target = self.tokenizer(answer, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        scored = await self.server_manager.generate(
            request_id=f"rl-logit-{id(output)}-{len(context)}", prompt_ids=context + target,
            sampling_params={"max_tokens": 1, "prompt_logprobs": 0, "temperature": 1.0, "logprobs": False})
        # verl's extract_prompt_logprobs: entry i is [log p(sequence[i+1] | sequence[:i+1])].
        per_token = scored.extra_fields.get("prompt_logprobs")
        if per_token is None or len(per_token) != len(context) + len(target):
            raise RuntimeError(f"rollout server returned no prompt log-probs for {len(context) + len(target)} tokens "
                               f"(got {None if per_token is None else len(per_token)}); RL-Logit needs a server that "
                               f"honours sampling_params.prompt_logprobs (vLLM)")
        first = len(context) - 1
        return float(sum(row[0] for row in per_token[first:first + len(target)])), len(target)
