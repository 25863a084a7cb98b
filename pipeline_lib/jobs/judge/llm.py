"""Score items with an OpenAI-compatible judge: cached, concurrent, and a parse failure is retried, then recorded.

A response that does not parse is asked again with an ``attempt`` marker in the request
(so it has its own cache key); after ``parse_retries`` failures the item is recorded as
failed with the reason. Nothing is ever scored 0 by default. An unparseable answer is
removed from the cache, so a rerun (after the server or the prompt is fixed) asks again
instead of replaying the failure. A transport failure (429/5xx, timeout, a refused oversize answer) is not a verdict:
the client has already retried it with the same request (same prompt, same cache key), so the item fails with that
reason and is never re-asked under a "Re-evaluation" prompt. The cache is read first (:func:`cached_results`): an
item whose stored answer for any attempt parses is not asked again, so a job whose items are all cached needs no
server at all. A verdict is read from the judge alone (:func:`parse_verdict`): the answer must have finished, its
final object is the verdict (the whole answer under the endpoint's ``structured_output``), and an object that the
item's inputs contain is never one: such an item is *refused* (``{"failed": "refused verdict: ...", "refused": true}``),
which the scoring job counts at both ends of the scale rather than as a judge failure. An endpoint whose circuit
opened (:class:`EndpointUnavailableError`) stops the scoring at once: answers given so far stay cached.

A request's cache key holds the judge's identity (:meth:`EndpointConfig.identity`: served command or base URL, model,
revision, sampling) and the rubric's (:meth:`Rubric.identity`: keys, scale, template digest); every scored result
says whether its answer came from the cache and which endpoint gave it (``answered_by``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pipeline_lib.core.llm_client import ChatRequest, EndpointConfig, ResponseCache, run_chat_requests
from pipeline_lib.core.rubrics import Rubric
from pipeline_lib.jobs.judge.parse import QuotedVerdictError, VerdictParseError, parse_verdict

__all__ = ["REFUSED", "cached_results", "judge_with_llm"]

#: How a refused verdict's reason starts: the judged text holds the verdict (the candidate wrote it).
REFUSED = "refused verdict"


def _request(rubric: Rubric, prompt: str, attempt: int) -> ChatRequest:
    messages = [{"role": "user", "content": prompt}]
    if attempt:  # a distinct request (and cache key) for a re-ask after an unparseable verdict
        messages.insert(0, {"role": "system", "content": f"Re-evaluation {attempt}: end with the JSON scores."})
    return ChatRequest(tuple(messages), context={"rubric": rubric.identity()})


def _verdict(rubric: Rubric, response: dict[str, Any], item: dict[str, str], endpoint: EndpointConfig
             ) -> dict[str, int] | str:
    """The scores, or the reason the response has none."""
    if "error" in response:
        return response["error"]
    try:
        return parse_verdict(response.get("content"), rubric.keys, rubric.scale, response.get("reasoning"),
                             finish_reason=response.get("finish_reason"), quoted=[item[f] for f in rubric.fields],
                             whole=endpoint.structured_output != "none")
    except QuotedVerdictError as exc:
        return f"{REFUSED}: {exc}"
    except VerdictParseError as exc:
        return f"unparseable verdict: {exc}"


def _failed(reason: str) -> dict[str, Any]:
    return {"failed": reason, "refused": True} if reason.startswith(REFUSED) else {"failed": reason}


def _scored(rubric: Rubric, verdict: dict[str, int], attempt: int, response: dict[str, Any]) -> dict[str, Any]:
    return {"scores": verdict, "score_100": rubric.normalise(verdict), "attempts": attempt + 1,
            "cached": bool(response.get("cached")), "answered_by": response.get("answered_by")}


def cached_results(rubric: Rubric, items: Sequence[dict[str, str]], endpoint: EndpointConfig, cache_path: Path,
                   parse_retries: int = 2) -> list[dict[str, Any] | None]:
    """Each item's result from the cache alone, or None where the server must be asked; reads, never asks.

    The first attempt whose stored answer parses wins: an item whose first answer was unparseable (and so
    forgotten) and whose re-ask parsed is answered by the stored re-ask, as in the run that stored it. A served
    judge's key holds its command, not its address, so ``endpoint`` need not point at a live server; an answer
    stored for another endpoint is never taken (:meth:`ResponseCache.get` with the endpoint's identity)."""
    cache = ResponseCache(cache_path)
    identity = endpoint.identity()
    results: list[dict[str, Any] | None] = []
    for item in items:
        prompt = rubric.render(**item)
        found = None
        for attempt in range(parse_retries + 1):
            response = cache.get(_request(rubric, prompt, attempt).cache_key(endpoint), identity)
            verdict = _verdict(rubric, response, item, endpoint) if response is not None else None
            if isinstance(verdict, dict):
                found = _scored(rubric, verdict, attempt, {**response, "cached": True})  # type: ignore[dict-item]
                break
        results.append(found)
    return results


def judge_with_llm(rubric: Rubric, items: Sequence[dict[str, str]], endpoint: EndpointConfig, cache_path: Path,
                   parse_retries: int = 2, on_done: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """One result per item: ``{"scores": {...}, "score_100": x, ...}`` or ``{"failed": reason}`` (with
    ``"refused": True`` where the judged text holds the verdict)."""
    prompts = [rubric.render(**item) for item in items]
    cache = ResponseCache(cache_path)
    results = cached_results(rubric, items, endpoint, cache_path, parse_retries)
    pending = [index for index, result in enumerate(results) if result is None]
    if on_done and len(pending) < len(items):
        on_done(len(items) - len(pending))
    reasons: dict[int, str] = {}
    for attempt in range(parse_retries + 1):
        if not pending:
            break
        requests = {index: _request(rubric, prompts[index], attempt) for index in pending}
        responses = dict(zip(pending, run_chat_requests(endpoint, list(requests.values()), cache,
                                                        on_done=on_done if attempt == 0 else None), strict=True))
        verdicts = {index: _verdict(rubric, response, items[index], endpoint) for index, response in responses.items()}
        unusable = [index for index in pending if isinstance(verdicts[index], str) and "error" not in responses[index]]
        for index in unusable:  # never replay an unparseable answer: forget it (a rerun asks again) ...
            cache.discard(requests[index].cache_key(endpoint))
        stale = [index for index in unusable if responses[index].get("cached")]
        if stale:  # ... and one stored by an earlier run (before the server was fixed) is asked again now
            fresh = run_chat_requests(endpoint, [requests[index] for index in stale], cache)
            for index, response in zip(stale, fresh, strict=True):
                responses[index] = response
                verdicts[index] = _verdict(rubric, response, items[index], endpoint)
                if isinstance(verdicts[index], str) and "error" not in response:
                    cache.discard(requests[index].cache_key(endpoint))
        still = []
        for index in pending:
            verdict = verdicts[index]
            if isinstance(verdict, str) and "error" in responses[index]:
                results[index] = {"failed": verdict}  # retries exhausted on the same request: no other prompt
            elif isinstance(verdict, str):
                reasons[index] = verdict
                still.append(index)
            else:
                results[index] = _scored(rubric, verdict, attempt, responses[index])
        pending = still
    for index in pending:
        results[index] = _failed(reasons[index])
    return [r for r in results if r is not None]
