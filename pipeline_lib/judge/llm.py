"""Score items with an OpenAI-compatible judge: cached, concurrent, and a parse failure is retried, then recorded.

A response that does not parse is asked again with an ``attempt`` marker in the request
(so it has its own cache key); after ``parse_retries`` failures the item is recorded as
failed with the reason. Nothing is ever scored 0 by default. An unparseable answer is
removed from the cache, so a rerun (after the server or the prompt is fixed) asks again
instead of replaying the failure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pipeline_lib.judge.parse import VerdictParseError, parse_verdict
from pipeline_lib.judge.rubrics import Rubric
from pipeline_lib.llm_client import ChatRequest, EndpointConfig, ResponseCache, run_chat_requests

__all__ = ["judge_with_llm"]


def _request(prompt: str, attempt: int) -> ChatRequest:
    messages = [{"role": "user", "content": prompt}]
    if attempt:  # a distinct request (and cache key) for a re-ask after an unparseable verdict
        messages.insert(0, {"role": "system", "content": f"Re-evaluation {attempt}: end with the JSON scores."})
    return ChatRequest(tuple(messages))


def judge_with_llm(rubric: Rubric, items: Sequence[dict[str, str]], endpoint: EndpointConfig, cache_path: Path,
                   parse_retries: int = 2, on_done: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """One result per item: ``{"scores": {...}, "score_100": x}`` or ``{"failed": reason}``."""
    prompts = [rubric.render(**item) for item in items]
    cache = ResponseCache(cache_path)
    results: list[dict[str, Any] | None] = [None] * len(items)
    pending = list(range(len(items)))
    reasons: dict[int, str] = {}
    for attempt in range(parse_retries + 1):
        if not pending:
            break
        responses = run_chat_requests(endpoint, [_request(prompts[i], attempt) for i in pending], cache,
                                      on_done=on_done if attempt == 0 else None)
        still = []
        for index, response in zip(pending, responses, strict=True):
            if "error" in response:
                reasons[index] = response["error"]
                still.append(index)
                continue
            try:
                scores = parse_verdict(response.get("content"), rubric.keys, rubric.scale, response.get("reasoning"))
            except VerdictParseError as exc:
                cache.discard(_request(prompts[index], attempt).cache_key(endpoint))
                reasons[index] = f"unparseable verdict: {exc}"
                still.append(index)
                continue
            results[index] = {"scores": scores, "score_100": rubric.normalise(scores), "attempts": attempt + 1}
        pending = still
    for index in pending:
        results[index] = {"failed": reasons[index]}
    return [r for r in results if r is not None]
