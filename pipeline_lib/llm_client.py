"""One client for every OpenAI-compatible endpoint the pipeline calls (instruction synthesis, judges).

* Async (``openai.AsyncOpenAI``) with a concurrency cap.
* Retries with exponential backoff and jitter on 408/429/5xx, timeouts and dropped connections;
  other errors fail the item at once.
* A persistent SQLite cache (WAL mode, safe for concurrent writers) keyed by
  sha256(model, messages, sampling params): a rerun or a crash mid-way never repeats a finished request.
* The API key is read from the environment variable named in the config and never logged or stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import random
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ChatRequest", "EndpointConfig", "EndpointNotConfiguredError", "ResponseCache", "run_chat_requests"]

log = logging.getLogger("pipeline_lib.llm_client")
RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class EndpointNotConfiguredError(RuntimeError):
    """No base URL / model was given for a step that needs an LLM endpoint."""


@dataclass(frozen=True)
class EndpointConfig:
    base_url: str | None
    model: str | None
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 8
    timeout_s: float = 120.0
    max_retries: int = 5
    backoff_s: float = 1.0
    sampling: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, section: dict[str, Any], purpose: str) -> EndpointConfig:
        base_url = section.get("base_url") or os.environ.get("OPENAI_BASE_URL")
        if not base_url or not section.get("model"):
            raise EndpointNotConfiguredError(
                f"{purpose} needs an OpenAI-compatible endpoint: set `base_url` (or OPENAI_BASE_URL) and `model` "
                "in the config (e.g. a local `vllm serve` at http://127.0.0.1:8000/v1)"
            )
        return cls(base_url=base_url, model=section["model"], api_key_env=section.get("api_key_env", "OPENAI_API_KEY"),
                   concurrency=int(section.get("concurrency", 8)), timeout_s=float(section.get("timeout_s", 120)),
                   max_retries=int(section.get("max_retries", 5)), backoff_s=float(section.get("backoff_s", 1.0)),
                   sampling=dict(section.get("sampling", {})))

    def describe(self) -> dict[str, Any]:
        """What provenance may record: never the key itself."""
        return {"base_url": self.base_url, "model": self.model, "api_key_env": self.api_key_env,
                "sampling": self.sampling}


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[dict[str, str], ...]

    def cache_key(self, config: EndpointConfig) -> str:
        payload = {"model": config.model, "messages": list(self.messages), "sampling": config.sampling}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class ResponseCache:
    """Finished responses by cache key, in SQLite with WAL so parallel jobs can share one file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = str(path)
        self._local = threading.local()
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, response TEXT NOT NULL)")

    def _connect(self) -> sqlite3.Connection:
        if getattr(self._local, "db", None) is None:
            self._local.db = sqlite3.connect(self.path, timeout=60)
            # WAL + NORMAL: a commit survives a crash of this process (the cache's job) without an fsync per item;
            # only an OS crash or power loss can roll back the last few answers, which are then asked again.
            self._local.db.execute("PRAGMA synchronous=NORMAL")
        return self._local.db

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored response, or None (a miss, so it is asked again) when absent or not a readable JSON object."""
        row = self._connect().execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            response = json.loads(row[0])
        except (TypeError, ValueError, RecursionError):
            response = None
        if not isinstance(response, dict):
            log.warning("%s: unreadable cached response for key %s; asking again", self.path, key[:12])
            return None
        return response

    def put(self, key: str, response: dict[str, Any]) -> None:
        with self._connect() as db:
            db.execute("INSERT OR REPLACE INTO responses (key, response) VALUES (?, ?)", (key, json.dumps(response)))

    def __len__(self) -> int:
        return self._connect().execute("SELECT COUNT(*) FROM responses").fetchone()[0]


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status_code", None)


def _retryable(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRYABLE_STATUS
    return isinstance(exc, openai.APIConnectionError | openai.APITimeoutError | asyncio.TimeoutError)


def _message_fields(message: Any) -> dict[str, Any]:
    """Content plus the reasoning field thinking models fill (``reasoning`` or older ``reasoning_content``)."""
    extra = getattr(message, "model_extra", None) or {}
    reasoning = getattr(message, "reasoning", None) or extra.get("reasoning") or extra.get("reasoning_content")
    return {"content": message.content or "", "reasoning": reasoning}


async def _one(client: Any, config: EndpointConfig, request: ChatRequest, semaphore: asyncio.Semaphore,
               cache: ResponseCache, key: str) -> dict[str, Any]:
    async with semaphore:
        for attempt in range(config.max_retries + 1):
            try:
                completion = await client.chat.completions.create(
                    model=config.model, messages=list(request.messages), **config.sampling)
                usage = getattr(completion, "usage", None)
                response = _message_fields(completion.choices[0].message) | {
                    "attempts": attempt + 1, "completion_tokens": getattr(usage, "completion_tokens", None)}
                cache.put(key, response)
                return response
            except Exception as exc:  # classified below: retried, or reported as this item's failure
                if attempt == config.max_retries or not _retryable(exc):
                    return {"error": f"{type(exc).__name__} (status {_status(exc)})", "attempts": attempt + 1}
                delay = config.backoff_s * (2**attempt) * (0.5 + random.random())
                log.warning("request failed with %s (status %s); retry %d/%d in %.1fs", type(exc).__name__,
                            _status(exc), attempt + 1, config.max_retries, delay)
                await asyncio.sleep(delay)
    raise AssertionError("unreachable")


async def _run(config: EndpointConfig, requests: Sequence[ChatRequest], cache: ResponseCache,
               on_done: Callable[[int], None] | None) -> list[dict[str, Any]]:
    import openai

    results: list[dict[str, Any] | None] = [None] * len(requests)
    todo = []
    for index, request in enumerate(requests):
        key = request.cache_key(config)
        cached = cache.get(key)
        if cached is not None:
            results[index] = cached | {"cached": True}
        else:
            todo.append((index, request, key))
    if on_done:
        on_done(len(requests) - len(todo))
    if todo:
        client = openai.AsyncOpenAI(base_url=config.base_url, api_key=os.environ.get(config.api_key_env, "EMPTY"),
                                    timeout=config.timeout_s, max_retries=0)
        semaphore = asyncio.Semaphore(config.concurrency)

        async def run(index: int, request: ChatRequest, key: str) -> None:
            results[index] = await _one(client, config, request, semaphore, cache, key)
            if on_done:
                on_done(1)

        try:
            await asyncio.gather(*(run(*item) for item in todo))
        finally:
            await client.close()
    return [r if r is not None else {"error": "not run"} for r in results]


def run_chat_requests(config: EndpointConfig, requests: Sequence[ChatRequest], cache: ResponseCache,
                      on_done: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Answer every request (from cache when possible); failures come back as ``{"error": ...}``, never dropped."""
    return asyncio.run(_run(config, requests, cache, on_done))
