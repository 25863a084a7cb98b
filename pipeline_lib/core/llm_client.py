"""One client for every OpenAI-compatible endpoint the pipeline calls (instruction synthesis, judges).

* Async (``openai.AsyncOpenAI``) with a concurrency cap.
* Every attempt has a total deadline of ``timeout_s`` (the SDK's own timeout is per read, which a server
  trickling a byte at a time never trips).
* Retries with exponential backoff and jitter on 408/429/5xx, timeouts, dropped connections and a 200 that is
  not a chat completion (an HTML error page, ``choices: []``); other errors fail the item at once.
* A persistent SQLite cache (WAL mode, safe for concurrent writers) keyed by sha256 of everything that can change an
  answer: who answers (the served command for a server the job starts, else the base URL), the model and its
  ``revision``, the sampling, the messages and the request's ``context`` (a judge's rubric): a rerun or a crash
  mid-way never repeats a finished request, and a judge repointed to another server under the same ``model`` name is
  asked again (issue 60). Each stored answer carries ``answered_by`` (:meth:`EndpointConfig.identity`, no secret) and
  is reused only for that endpoint. A cache from before issue 60 (keys without the endpoint) stays readable: its
  answers are never matched (their endpoint is unknown), which is logged once, and are asked again.
  A cache that cannot store an answer (disk full) stops the run with :class:`CacheWriteError`: an answer the
  server gave is never silently dropped. A cache file that is not a readable database is renamed aside (logged)
  and a fresh one is started, so it cannot wedge every rerun.
* A 429/503 ``Retry-After`` (seconds or an HTTP date) is honoured, bounded by ``MAX_RETRY_AFTER_S``: the next
  attempt waits at least that long (a client that ignored it burned every retry in seconds).
* An answer body larger than ``max_response_bytes`` is refused while it is read (Content-Length, the bytes
  received so far, and the bytes it decodes to): a gzip or deflate body is decoded here, as a stream, and stops at
  the cap (a 97 KB gzip of 100 MB is refused after 1 MiB of output, never unpacked whole); an encoding that cannot be
  decoded under a cap (``br``, ``zstd``: only ``gzip, deflate`` are offered in ``Accept-Encoding``) is refused. The
  item fails with :class:`ResponseTooLargeError`'s reason, not retried, not cached.
* An endpoint's health is shared by its requests (:class:`_Breaker`, one per call, locked): ``breaker_failures``
  consecutive transport failures (refused connection, timeout, 408/429/5xx, a 200 that is not a completion), or one
  ``Retry-After`` longer than ``MAX_RETRY_AFTER_S``, open the circuit: no request is sent after that, sleepers wake,
  and the call raises :class:`EndpointUnavailableError` (one sentence) once the requests in flight end, so the job
  fails within ``breaker_failures + concurrency`` attempts whatever the number of items; every answer already given
  is in the cache and a rerun resumes. A ``Retry-After`` within the cap holds every request of the endpoint, not only
  the one that got it.
* ``finish_reason`` is kept with each answer (a verdict cut by ``max_tokens`` is not a verdict).
* The API key is read from the environment variable named in the config and never logged or stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import random
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline_lib.core.env import env, env_text

__all__ = ["ACCEPTED_ENCODINGS", "CACHE_KEY_VERSION", "MAX_RETRY_AFTER_S", "STRUCTURED_OUTPUT_MODES", "CacheWriteError",
           "ChatRequest", "EndpointConfig", "EndpointNotConfiguredError", "EndpointUnavailableError",
           "MalformedResponseError", "ResponseCache", "ResponseTooLargeError", "run_chat_requests"]

log = logging.getLogger("pipeline_lib.core.llm_client")
RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
MAX_RETRY_AFTER_S = 120.0  # a server's Retry-After is honoured up to this (a hostile 1e9 cannot park a job forever)
ACCEPTED_ENCODINGS = ("gzip", "deflate")  # what can be decoded here as a stream with an output cap
# how a JSON schema is asked for: the OpenAI `response_format` (vLLM, OpenAI), vLLM >= 0.12's `structured_outputs`
# extra parameter, or the `guided_json` extra parameter of vLLM < 0.12; "none" = a free-text answer
STRUCTURED_OUTPUT_MODES = ("none", "response_format", "structured_outputs", "guided_json")


class EndpointNotConfiguredError(RuntimeError):
    """No base URL / model was given for a step that needs an LLM endpoint."""


class MalformedResponseError(RuntimeError):
    """A 200 answer that is not a chat completion with a message (a proxy's HTML page, ``choices: []``)."""


class ResponseTooLargeError(RuntimeError):
    """An answer body over ``max_response_bytes``: refused while read, so it is never held in memory or cached."""


class EndpointUnavailableError(RuntimeError):
    """The endpoint's circuit breaker opened: the call stopped asking, answers already given are cached."""

    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts  # requests sent by the call in all (how bounded the failure was)


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
    breaker_failures: int = 10
    structured_output: str = "none"
    revision: str | None = None  # the model's revision (hub commit, weights digest): part of the cache key
    served: tuple[str, ...] = ()  # the command of a server the job starts: it, not the per-run port, keys answers

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
                   max_response_bytes=int(section.get("max_response_bytes", 1 << 20)),
                   breaker_failures=int(section.get("breaker_failures", 10)),
                   structured_output=structured_output_mode(section.get("structured_output", "none"), purpose),
                   revision=section.get("revision"))

    def describe(self) -> dict[str, Any]:
        """What provenance may record: never the key itself."""
        return {"base_url": self.base_url, "model": self.model, "api_key_env": self.api_key_env,
                "sampling": self.sampling, "structured_output": self.structured_output, "revision": self.revision,
                "served": list(self.served)}

    def identity(self) -> dict[str, Any]:
        """Who answers, as far as it can change an answer: the served command (a started server's port changes every
        run) or the base URL (credentials in it removed), the model, its revision and the sampling (which holds a
        structured-output schema). Part of every cache key and stored with every answer (``answered_by``)."""
        who: dict[str, Any] = ({"served": list(self.served)} if self.served
                               else {"base_url": _public_url(self.base_url or "")})
        # as JSON gives it back, so that a stored answer's ``answered_by`` compares equal (tuples become lists)
        return json.loads(json.dumps({**who, "model": self.model, "revision": self.revision,
                                      "sampling": self.sampling}, sort_keys=True))


def _public_url(url: str) -> str:
    """The URL without user:password (never stored or shown) and without a trailing slash (one server, one key)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url.strip())
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme.lower(), host.lower(), parts.path.rstrip("/"), parts.query, parts.fragment))


def structured_output_mode(value: Any, purpose: str) -> str:
    """The endpoint's ``structured_output``, or a ValueError naming the key and the accepted values."""
    if value not in STRUCTURED_OUTPUT_MODES:
        raise ValueError(f"{purpose}: endpoint.structured_output {value!r} is not one of "
                         f"{', '.join(STRUCTURED_OUTPUT_MODES)}")
    return str(value)


#: The cache keys' form: 2 = the endpoint's identity and the request's context in the key (issue 60); a cache file
#: written before holds keys of model, messages and sampling alone, which no request of this form matches.
CACHE_KEY_VERSION = 2


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[dict[str, str], ...]
    context: dict[str, Any] = field(default_factory=dict)  # what else decides how an answer is read (a rubric)

    def cache_key(self, config: EndpointConfig) -> str:
        """sha256 of everything that can change the answer or its reading: the endpoint's identity (who answers,
        model, revision, sampling), the messages and the context."""
        payload = {"version": CACHE_KEY_VERSION, "endpoint": config.identity(), "messages": list(self.messages),
                   "context": self.context}
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
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version < CACHE_KEY_VERSION:
                old = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
                if old:
                    log.warning("%s holds %d answers stored before issue 60, keyed without the endpoint that gave "
                                "them: none is reused (a judge is never taken for another), each is asked again",
                                self.path, old)
                db.execute(f"PRAGMA user_version = {CACHE_KEY_VERSION}")

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

    def get(self, key: str, answered_by: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The stored response, or None (a miss, so it is asked again) when absent, not a readable JSON object, or
        (``answered_by`` given: an endpoint's :meth:`EndpointConfig.identity`) stored for another endpoint."""
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
        if answered_by is not None and response.get("answered_by") != answered_by:
            log.warning("%s: the cached response for key %s was given by another endpoint (%s); asking again",
                        self.path, key[:12], str(response.get("answered_by"))[:200])
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


class _CappedDecoder:
    """Decode one gzip/deflate body as it arrives, never more than ``limit`` bytes of output in all.

    ``decompress(data, max_length)`` stops at ``max_length`` output bytes and keeps the rest of the input as
    ``unconsumed_tail``, so a bomb costs at most ``limit`` bytes of memory before it is refused."""

    def __init__(self, encoding: str, limit: int) -> None:
        self.encoding, self.limit, self.produced = encoding, limit, 0
        self.raw_deflate = False  # "deflate" is zlib-wrapped by the standard, raw by some servers: tried in order
        self.decoder = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
        self.started = False

    def _check(self, out: bytes) -> bytes:
        self.produced += len(out)
        if self.produced > self.limit:
            raise ResponseTooLargeError(f"answer body decodes ({self.encoding}) to over max_response_bytes "
                                        f"({self.limit} bytes); refused while decoding")
        return out

    def feed(self, data: bytes) -> Iterator[bytes]:
        while data and not self.decoder.eof:
            try:
                out = self.decoder.decompress(data, self.limit - self.produced + 1)
            except zlib.error as exc:
                if self.encoding == "deflate" and not self.started and not self.raw_deflate:
                    self.raw_deflate = True
                    self.decoder = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise MalformedResponseError(f"a body that does not decode as {self.encoding}: {exc}") from exc
            self.started = True
            yield self._check(out)
            data = self.decoder.unconsumed_tail

    def flush(self) -> bytes:
        try:
            return self._check(self.decoder.flush())
        except zlib.error as exc:
            raise MalformedResponseError(f"a body that does not decode as {self.encoding}: {exc}") from exc


def _capped_transport(limit: int) -> Any:
    """An httpx transport refusing an answer body over ``limit`` bytes, on the wire or decoded: by its Content-Length,
    as it streams, and as it decodes (the body reaches httpx already decoded, its ``Content-Encoding`` removed)."""
    import httpx

    class CappedStream(httpx.AsyncByteStream):
        def __init__(self, stream: Any, encoding: str | None) -> None:
            self.stream, self.received = stream, 0
            self.decoder = _CappedDecoder(encoding, limit) if encoding else None

        async def __aiter__(self) -> Any:
            async for chunk in self.stream:
                self.received += len(chunk)
                if self.received > limit:
                    raise ResponseTooLargeError(f"answer body over max_response_bytes ({limit} bytes)")
                if self.decoder is None:
                    yield chunk
                    continue
                for out in self.decoder.feed(chunk):
                    if out:
                        yield out
            if self.decoder is not None:
                tail = self.decoder.flush()
                if tail:
                    yield tail

        async def aclose(self) -> None:
            await self.stream.aclose()

    class Transport(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            request.headers["Accept-Encoding"] = ", ".join(ACCEPTED_ENCODINGS)
            response = await super().handle_async_request(request)
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                await response.aclose()
                raise ResponseTooLargeError(f"answer body of {int(declared)} bytes (Content-Length) is over "
                                            f"max_response_bytes ({limit})")
            codings = [c.strip().lower() for c in response.headers.get("content-encoding", "").split(",")]
            codings = [c for c in codings if c and c != "identity"]
            codings = ["gzip" if c == "x-gzip" else c for c in codings]
            if len(codings) > 1 or (codings and codings[0] not in ACCEPTED_ENCODINGS):
                await response.aclose()
                raise ResponseTooLargeError(f"answer body in content-encoding {', '.join(codings)!r}, which cannot "
                                            f"be decoded under max_response_bytes (asked for: "
                                            f"{', '.join(ACCEPTED_ENCODINGS)})")
            if codings:  # decoded here, under the cap: httpx must not decode it again
                del response.headers["content-encoding"]
                if "content-length" in response.headers:
                    del response.headers["content-length"]
            response.stream = CappedStream(response.stream, codings[0] if codings else None)
            return response

    return Transport()


def _retry_after(exc: BaseException) -> float | None:
    """Seconds a 429/503's ``Retry-After`` header asks for (delta seconds or an HTTP date), unbounded; None if absent
    or unreadable (the caller bounds it, and opens the circuit when it is past ``MAX_RETRY_AFTER_S``)."""
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
    return max(seconds, 0.0)


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
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        return f"{type(exc).__name__} ({type(cause).__name__ if cause else 'no answer'})"
    return f"{type(exc).__name__} (status {_status(exc)})"


class _Breaker:
    """One endpoint's health, shared by the concurrent requests of one call (its counts and state change under a lock;
    the requests are tasks of the call's event loop, which the wake-up event belongs to).

    Opens after ``limit`` consecutive transport failures (any success resets the count) or at once on a Retry-After
    past ``MAX_RETRY_AFTER_S``; once open it stays open for the call. A Retry-After within the cap is a hold on every
    request (``not_before``), not on the one that got it."""

    def __init__(self, limit: int) -> None:
        self.limit, self.failures, self.attempts = max(1, limit), 0, 0
        self.reason: str | None = None
        self.not_before = 0.0  # time.monotonic() before which no request is sent
        self._lock = threading.Lock()
        self._opened = asyncio.Event()  # wakes the requests sleeping on a backoff or a hold

    @property
    def open(self) -> bool:
        return self.reason is not None

    def attempt(self) -> None:
        with self._lock:
            self.attempts += 1

    def success(self) -> None:
        with self._lock:
            self.failures = 0

    def failure(self, what: str, retry_after: float | None) -> None:
        with self._lock:
            self.failures += 1
            if self.reason is None and retry_after is not None and retry_after > MAX_RETRY_AFTER_S:
                self.reason = (f"it asked to be retried after {retry_after:.0f} s, past the {MAX_RETRY_AFTER_S:.0f} s "
                               "that a job waits")
            elif self.reason is None and self.failures >= self.limit:
                self.reason = f"{self.failures} requests in a row failed (last: {what})"
            elif retry_after is not None:
                self.not_before = max(self.not_before, time.monotonic() + retry_after)
            if self.reason is not None:
                self._opened.set()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less if the circuit opens meanwhile."""
        if seconds > 0 and not self.open:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._opened.wait(), seconds)

    async def hold(self) -> None:
        """Wait out the endpoint's Retry-After hold, if any."""
        while not self.open and (wait := self.not_before - time.monotonic()) > 0:
            await self.sleep(wait)


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


def _message_fields(completion: Any) -> dict[str, Any]:
    """Content, the reasoning field thinking models fill (``reasoning`` or older ``reasoning_content``), and why the
    answer ended (``finish_reason``: "stop", or "length" for one cut by max_tokens)."""
    message = _message(completion)
    extra = getattr(message, "model_extra", None) or {}
    reasoning = getattr(message, "reasoning", None) or extra.get("reasoning") or extra.get("reasoning_content")
    finish = getattr(completion.choices[0], "finish_reason", None)
    return {"content": message.content or "", "reasoning": reasoning,
            "finish_reason": finish if isinstance(finish, str) else None}


async def _one(client: Any, config: EndpointConfig, request: ChatRequest, semaphore: asyncio.Semaphore,
               cache: ResponseCache, key: str, breaker: _Breaker) -> dict[str, Any]:
    async with semaphore:
        for attempt in range(config.max_retries + 1):
            await breaker.hold()
            if breaker.open:
                return {"error": f"EndpointUnavailableError: not asked, {breaker.reason}", "attempts": attempt}
            breaker.attempt()
            try:
                completion = await asyncio.wait_for(client.chat.completions.create(
                    model=config.model, messages=list(request.messages), **config.sampling), config.timeout_s)
                usage = getattr(completion, "usage", None)
                response = _message_fields(completion) | {
                    "attempts": attempt + 1, "completion_tokens": getattr(usage, "completion_tokens", None),
                    "answered_by": config.identity()}
            except Exception as exc:  # classified below: retried, or reported as this item's failure
                retryable = _retryable(exc)
                asked = _retry_after(exc)
                if retryable:  # an endpoint's failure, not this item's: counts towards opening the circuit
                    breaker.failure(_describe(exc), asked)
                if attempt == config.max_retries or not retryable or breaker.open:
                    return {"error": _describe(exc), "attempts": attempt + 1}
                delay = config.backoff_s * (2**attempt) * (0.5 + random.random())
                if asked is not None:
                    delay = max(delay, asked)
                log.warning("request failed with %s; retry %d/%d in %.1fs", _describe(exc), attempt + 1,
                            config.max_retries, delay)
                await breaker.sleep(delay)
            else:
                breaker.success()
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
        cached = cache.get(key, config.identity())
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
        breaker = _Breaker(config.breaker_failures)

        async def run(index: int, request: ChatRequest, key: str) -> None:
            results[index] = await _one(client, config, request, semaphore, cache, key, breaker)
            if on_done:
                on_done(1)

        try:
            await asyncio.gather(*(run(*item) for item in todo))
        finally:
            await client.close()
        if breaker.open:
            answered = sum(1 for r in results if r is not None and "error" not in r)
            raise EndpointUnavailableError(
                f"endpoint {config.base_url} is unavailable: {breaker.reason}; stopped after {breaker.attempts} "
                f"requests with {len(requests) - answered} of {len(requests)} items unanswered (the {answered} "
                f"answered are cached in {cache.path}, so a rerun asks only the rest)", breaker.attempts)
    return [r if r is not None else {"error": "not run"} for r in results]


def run_chat_requests(config: EndpointConfig, requests: Sequence[ChatRequest], cache: ResponseCache,
                      on_done: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Answer every request (from cache when possible); failures come back as ``{"error": ...}``, never dropped;
    :class:`EndpointUnavailableError` when the endpoint's circuit opened (answers given so far are cached)."""
    return asyncio.run(_run(config, requests, cache, on_done))
