"""A verl rollout server stand-in backed by a REAL tiny causal LM (the local engine's), for agent-loop tests.

verl's agent loops talk to the rollout through ``server_manager.generate(request_id, *, prompt_ids,
sampling_params, ...) -> TokenOutput`` (``verl.workers.rollout.llm_server.LLMServerClient``). On a GPU
that is vLLM; here it is a torch model on the CPU, answering the same requests the same way:

- samples up to ``max_tokens`` (default: the configured response length) new tokens at ``temperature``
  (0 = greedy), stopping after EOS; ``logprobs`` truthy returns each sampled token's log-prob;
- ``prompt_logprobs=0`` returns, like verl's ``vllm_rollout.utils.extract_prompt_logprobs``,
  ``extra_fields["prompt_logprobs"][i] == [log p(prompt[i+1] | prompt[:i+1])]`` with
  ``extra_fields["prompt_ids"][i] == [prompt[i+1]]`` and a dummy ``[0.0]`` / ``[0]`` for the last position.

Every request is recorded in ``calls`` so tests can check what an agent loop asked for. Sampling uses a
seeded ``torch.Generator``, so a test run is reproducible. Shared by the RL-Logit and RARO loop tests.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from verl.workers.rollout.replica import TokenOutput

__all__ = ["TinyRolloutServer"]


class TinyRolloutServer:
    """``generate`` with vLLM's semantics (sampling, sampled-token and prompt log-probs) from a torch model."""

    def __init__(self, model: torch.nn.Module, eos_token_id: int, response_length: int, seed: int = 0) -> None:
        self.model = model.eval()
        self.eos_token_id = int(eos_token_id)
        self.response_length = int(response_length)
        self.generator = torch.Generator().manual_seed(seed)
        self.calls: list[dict[str, Any]] = []

    @torch.no_grad()
    def _next_logprobs(self, ids: list[int]) -> torch.Tensor:
        """[len(ids), V]: row i is log p(next token | ids[:i+1]) over the vocabulary."""
        logits = self.model(input_ids=torch.tensor([ids])).logits[0].float()
        return F.log_softmax(logits, dim=-1)

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data: Any = None, video_data: Any = None, audio_data: Any = None,
                       mm_processor_kwargs: Any = None, **kwargs: Any) -> TokenOutput:
        params = dict(sampling_params)
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "sampling_params": params})
        if image_data or video_data or audio_data:
            raise ValueError("TinyRolloutServer is text-only")
        max_tokens = params.get("max_tokens", params.get("max_new_tokens", self.response_length))
        if max_tokens < 1:
            raise ValueError(f"max_tokens {max_tokens} < 1 (vLLM rejects it too)")
        temperature = float(params.get("temperature", 1.0))
        extra: dict[str, Any] = {}
        ids = list(prompt_ids)
        if params.get("prompt_logprobs") is not None:
            if params["prompt_logprobs"] != 0:
                raise ValueError("TinyRolloutServer implements prompt_logprobs=0 only (the sampled token's log-prob)")
            table = self._next_logprobs(ids)[:-1]
            targets = torch.tensor(ids[1:])
            chosen = table.gather(-1, targets[:, None])[:, 0]
            extra["prompt_logprobs"] = [[float(v)] for v in chosen] + [[0.0]]
            extra["prompt_ids"] = [[int(t)] for t in targets] + [[0]]
        tokens: list[int] = []
        logprobs: list[float] = []
        for _ in range(max_tokens):
            step = self._next_logprobs(ids)[-1]
            if temperature == 0:
                token = int(step.argmax())
            else:
                probs = torch.softmax(step / temperature, dim=-1)
                token = int(torch.multinomial(probs, 1, generator=self.generator))
            tokens.append(token)
            logprobs.append(float(step[token]))
            ids.append(token)
            if token == self.eos_token_id:
                break
        return TokenOutput(token_ids=tokens, log_probs=logprobs if params.get("logprobs") else None,
                           stop_reason="completed", extra_fields=extra)
