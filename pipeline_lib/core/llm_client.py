"""One client for every OpenAI-compatible endpoint the pipeline calls (instruction synthesis, judges).

* Async (``openai.AsyncOpenAI``) with a concurrency cap.
* Every attempt has a total deadline of ``timeout_s`` (the SDK's own timeout is per read, which a server
  trickling a byte at a time never trips).
* Retries with exponential backoff and jitter on 408/429/5xx, timeouts, dropped connections and a 200 that is
  not a chat completion (an HTML error page, ``choices: []``); other errors fail the item at once.
* A persistent SQLite cache (WAL mode, safe for concurrent writers) keyed by
  sha256(model, messages, sampling params): a rerun or a crash mid-way never repeats a finished request.
  A cache that cannot store an answer (disk full) stops the run with :class:`CacheWriteError`: an answer the
  server gave is never silently dropped. A cache file that is not a readable database is renamed aside (logged)
  and a fresh one is started, so it cannot wedge every rerun.
* A 429/503 ``Retry-After`` (seconds or an HTTP date) is honoured, bounded by ``MAX_RETRY_AFTER_S``: the next
  attempt waits at least that long (a client that ignored it burned every retry in seconds).
* An answer body larger than ``max_response_bytes`` is refused while it is read (Content-Length or the bytes
  received so far), never buffered whole: the item fails with :class:`ResponseTooLargeError`'s reason, not retried.
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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline_lib.core.env import env, env_text

__all__ = ["MAX_RETRY_AFTER_S", "CacheWriteError", "ChatRequest", "EndpointConfig", "EndpointNotConfiguredError",
           "MalformedResponseError", "ResponseCache", "ResponseTooLargeError", "run_chat_requests"]

log = logging.getLogger("pipeline_lib.core.llm_client")
RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
MAX_RETRY_AFTER_S = 120.0  # a server's Retry-After is honoured up to this (a hostile 1e9 cannot park a job forever)


class EndpointNotConfiguredError(RuntimeError):
    """No base URL / model was given for a step that needs an LLM endpoint."""


class MalformedResponseError(RuntimeError):
    """A 200 answer that is not a chat completion with a message (a proxy's HTML page, ``choices: []``)."""


class ResponseTooLargeError(RuntimeError):
    """An answer body over ``max_response_bytes``: refused while read, so it is never held in memory or cached."""


class CacheWriteError(RuntimeError):
    """An answer could not be stored in the response cache: the run stops rather than lose it silently."""


_API_KEY = r"[\x21-\x7e]+"  # what an HTTP Authorization header can carry: printable ASCII, no spaces


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
    max_response_bytes: int = 1 << 20

    @classmethod
    def from_config(cls, section: dict[str, Any], purpose: str) -> EndpointConfig:
        base_url = section.get("base_url") or env("OPENAI_BASE_URL")
        if not base_url or not section.get("model"):
            raise EndpointNotConfiguredError(
                f"{purpose} needs an OpenAI-compatible endpoint: set `base_url` (or OPENAI_BASE_URL) and `model` "
                "in the config (e.g. a local `vllm serve` at http://127.0.0.1:8000/v1)"
            )
        return cls(base_url=base_url, model=section["model"], api_key_env=section.get("api_key_env", "OPENAI_API_KEY"),
                   concurrency=int(section.get("concurrency", 8)), timeout_s=float(section.get("timeout_s", 120)),
                   max_retries=int(section.get("max_retries", 5)), backoff_s=float(section.get("backoff_s", 1.0)),
                   sampling=dict(section.get("sampling", {})),
                   max_response_bytes=int(section.get("max_response_bytes", 1 << 20)))

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
        try:
            self._open()
        except sqlite3.OperationalError as exc:  # disk full, I/O error, locked: the file may be fine, keep it
            raise CacheWriteError(f"{self.path}: cannot open the response cache ({exc})") from exc
        except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
            aside = self._set_aside()
            log.warning("%s is not a readable response cache (%s); moved it to %s and starting an empty one "
                        "(its answers are asked again)", self.path, exc, aside)
            self._open()

    def _open(self) -> None:
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, response TEXT NOT NULL)")
            problems = [row[0] for row in db.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise sqlite3.DatabaseError(f"integrity check: {'; '.join(problems)[:300]}")

    def _set_aside(self) -> str:
        """Rename the unreadable file (and its WAL and shared-memory files) to ``<name>.corrupt-<time>``."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None
        aside = f"{self.path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                os.replace(self.path + suffix, aside + suffix)
        return aside

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
        """Store an answer; :class:`CacheWriteError` (naming the file) when it cannot be stored."""
        try:
            with self._connect() as db:
                db.execute("INSERT OR REPLACE INTO responses (key, response) VALUES (?, ?)",
                           (key, json.dumps(response)))
        except sqlite3.Error as exc:
            raise CacheWriteError(f"{self.path}: cannot store a server's answer ({type(exc).__name__}: {exc}); "
                                  "stopping so that no answer is lost silently (free space and rerun: answers "
                                  "already stored are not asked again)") from exc

    def discard(self, key: str) -> None:
        """Forget a stored answer its user could not use (an unparseable verdict), so a rerun asks again."""
        with self._connect() as db:
            db.execute("DELETE FROM responses WHERE key = ?", (key,))

    def __len__(self) -> int:
        return self._connect().execute("SELECT COUNT(*) FROM responses").fetchone()[0]


def _too_large(exc: BaseException) -> ResponseTooLargeError | None:
    """The size refusal behind an exception (the SDK wraps a transport's error in ``APIConnectionError``)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ResponseTooLargeError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _capped_transport(limit: int) -> Any:
    """An httpx transport refusing an answer body over ``limit`` bytes by its Content-Length or as it streams."""
    import httpx

    class CappedStream(httpx.AsyncByteStream):
        def __init__(self, stream: Any) -> None:
            self.stream, self.received = stream, 0

        async def __aiter__(self) -> Any:
            async for chunk in self.stream:
                self.received += len(chunk)
                if self.received > limit:
                    raise ResponseTooLargeError(f"answer body over max_response_bytes ({limit} bytes)")
                yield chunk

        async def aclose(self) -> None:
            await self.stream.aclose()

    class Transport(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            response = await super().handle_async_request(request)
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                await response.aclose()
                raise ResponseTooLargeError(f"answer body of {int(declared)} bytes (Content-Length) is over "
                                            f"max_response_bytes ({limit})")
            response.stream = CappedStream(response.stream)
            return response

    return Transport()


def _retry_after(exc: BaseException) -> float | None:
    """Seconds a 429/503's ``Retry-After`` header asks for (delta seconds or an HTTP date), bounded; None if absent."""
    response = getattr(exc, "response", None)
    value = getattr(response, "headers", {}).get("retry-after") if response is not None else None
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, OverflowError):
            return None
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status_code", None)


def _retryable(exc: BaseException) -> bool:
    import openai

    if _too_large(exc) is not None:  # the same server would send the same answer again
        return False
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRYABLE_STATUS
    return isinstance(exc, openai.APIConnectionError | openai.APITimeoutError | asyncio.TimeoutError
                      | MalformedResponseError)


def _describe(exc: BaseException) -> str:
    """The item's failure reason: one wording for a timeout, whether the SDK's per-read limit or the total deadline
    tripped first."""
    import openai

    if isinstance(exc, MalformedResponseError):
        return f"{type(exc).__name__}: {exc}"
    too_large = _too_large(exc)
    if too_large is not None:
        return f"ResponseTooLargeError: {too_large}"
    if isinstance(exc, asyncio.TimeoutError | openai.APITimeoutError):
        return "TimeoutError: no complete answer within timeout_s"
    return f"{type(exc).__name__} (status {_status(exc)})"


def _message(completion: Any) -> Any:
    """The first choice's message, or :class:`MalformedResponseError` saying what the 200 held instead."""
    choices = getattr(completion, "choices", None)
    if choices is None:
        raise MalformedResponseError(f"a 200 that is not a chat completion: {str(completion)[:120]!r}")
    if not choices:
        raise MalformedResponseError("a 200 with no choices")
    message = getattr(choices[0], "message", None)
    if message is None or not isinstance(getattr(message, "content", None), str | None):
        raise MalformedResponseError(f"a 200 whose first choice has no message: {str(choices[0])[:120]!r}")
    return message


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
                completion = await asyncio.wait_for(client.chat.completions.create(
                    model=config.model, messages=list(request.messages), **config.sampling), config.timeout_s)
                usage = getattr(completion, "usage", None)
                response = _message_fields(_message(completion)) | {
                    "attempts": attempt + 1, "completion_tokens": getattr(usage, "completion_tokens", None)}
            except Exception as exc:  # classified below: retried, or reported as this item's failure
                if attempt == config.max_retries or not _retryable(exc):
                    return {"error": _describe(exc), "attempts": attempt + 1}
                delay = config.backoff_s * (2**attempt) * (0.5 + random.random())
                asked = _retry_after(exc)
                if asked is not None:
                    delay = max(delay, asked)
                log.warning("request failed with %s; retry %d/%d in %.1fs", _describe(exc), attempt + 1,
                            config.max_retries, delay)
                await asyncio.sleep(delay)
            else:
                cache.put(key, response)  # CacheWriteError stops the run: the answer must not be dropped
                return response
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
        api_key = env_text(config.api_key_env, _API_KEY, "an API key (printable ASCII, no spaces)", secret=True)
        import httpx

        http_client = httpx.AsyncClient(transport=_capped_transport(config.max_response_bytes),
                                        timeout=config.timeout_s, follow_redirects=True)
        client = openai.AsyncOpenAI(base_url=config.base_url, api_key=api_key or "EMPTY", timeout=config.timeout_s,
                                    max_retries=0, http_client=http_client)
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
