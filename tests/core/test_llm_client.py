"""The shared LLM client: retries, caching, crash + rerun, and a clear error without an endpoint."""

import pytest

from pipeline_lib.core.llm_client import (
    ChatRequest,
    EndpointConfig,
    EndpointNotConfiguredError,
    ResponseCache,
    run_chat_requests,
)
from tests.chat_server import ChatServer


def config(url: str, **kwargs) -> EndpointConfig:
    return EndpointConfig.from_config({"base_url": url, "model": "test-model", "backoff_s": 0.01, **kwargs}, "test")


def requests(n: int) -> list[ChatRequest]:
    return [ChatRequest(({"role": "user", "content": f"poem number {i}"},)) for i in range(n)]


def test_retries_429_and_500_then_succeeds(tmp_path):
    with ChatServer(failures=[429, 500, 503]) as server:
        results = run_chat_requests(config(server.base_url, concurrency=1), requests(2), ResponseCache(tmp_path / "c"))
    assert all("error" not in r for r in results)
    assert results[0]["attempts"] == 4 and len(server.requests) == 5


def test_non_retryable_error_is_reported_not_dropped(tmp_path):
    with ChatServer(failures=[400]) as server:
        results = run_chat_requests(config(server.base_url, concurrency=1), requests(2), ResponseCache(tmp_path / "c"))
    assert results[0]["error"].startswith("BadRequestError") and "content" in results[1]


def test_gives_up_after_max_retries(tmp_path):
    with ChatServer(failures=[500] * 10) as server:
        results = run_chat_requests(config(server.base_url, max_retries=2, concurrency=1), requests(1),
                                    ResponseCache(tmp_path / "c"))
    assert "error" in results[0] and results[0]["attempts"] == 3


def test_rerun_hits_the_cache_and_failed_items_are_retried(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    with ChatServer(failures=[400]) as server:
        first = run_chat_requests(config(server.base_url, concurrency=1), requests(5), cache)
        port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    assert sum("error" in r for r in first) == 1 and len(cache) == 4
    # "after a crash": a new server at the same address (the address is part of the key: issue 60), the same cache
    with ChatServer(port=port) as server:
        second = run_chat_requests(config(server.base_url), requests(5), ResponseCache(tmp_path / "cache.sqlite"))
    assert len(server.requests) == 1  # only the failed item is asked again
    assert all("error" not in r for r in second)
    assert sum(bool(r.get("cached")) for r in second) == 4


def test_reasoning_field_is_kept(tmp_path):
    with ChatServer(reasoning=lambda body: "let me think") as server:
        (result,) = run_chat_requests(config(server.base_url), requests(1), ResponseCache(tmp_path / "c"))
    assert result["reasoning"] == "let me think"


def test_missing_endpoint_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(EndpointNotConfiguredError, match="base_url"):
        EndpointConfig.from_config({"model": None}, "Poetry instruction synthesis")


def test_key_is_never_described(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-secret")
    described = config("http://127.0.0.1:1/v1", api_key_env="MY_KEY").describe()
    assert "sk-secret" not in str(described)


# --- hostile peers and broken caches (issue "Nothing silent, round two") -------------------------------------------

def test_a_server_trickling_one_byte_at_a_time_is_cut_at_timeout_s_per_attempt(tmp_path):
    """The SDK's timeout is per read: a byte every half second never trips it. Each attempt has a total deadline."""
    import time

    with ChatServer(trickle_s=0.5) as server:  # a ~300-byte answer: about 150 s if allowed to finish
        started = time.monotonic()
        (result,) = run_chat_requests(config(server.base_url, timeout_s=1, max_retries=1), requests(1),
                                      ResponseCache(tmp_path / "c"))
        elapsed = time.monotonic() - started
    assert result["error"].startswith("TimeoutError") and result["attempts"] == 2
    assert elapsed < 2 * 1 + 8  # two attempts of 1 s, a short backoff, slack for a contended machine


@pytest.mark.parametrize(("body", "says"), [
    (("text/html", b"<html><body><h1>502 Bad Gateway</h1></body></html>"), "not a chat completion"),
    (("application/json", b'{"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": []}'),
     "no choices"),
    (("application/json", b'{"id": "x", "object": "chat.completion", "created": 1, "model": "m", '
                          b'"choices": [{"index": 0, "finish_reason": "stop"}]}'), "no message"),
])
def test_a_200_that_is_not_a_completion_is_retried_then_a_clear_failure(tmp_path, body, says):
    always = ChatServer(raw_body=lambda request: body)
    with always as server:
        (result,) = run_chat_requests(config(server.base_url, max_retries=2), requests(1),
                                      ResponseCache(tmp_path / "c"))
    assert result["error"].startswith("MalformedResponseError") and says in result["error"]
    assert result["attempts"] == 3 and len(server.requests) == 3  # retried, like a 502

    calls = []

    def once(request):  # a proxy's error page once, then the real server answers
        calls.append(1)
        return body if len(calls) == 1 else None

    with ChatServer(raw_body=once) as server:
        (result,) = run_chat_requests(config(server.base_url), requests(1), ResponseCache(tmp_path / "d"))
    assert "error" not in result and result["attempts"] == 2


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_cache_is_named_set_aside_and_recomputed(tmp_path, caplog, damage):
    path = tmp_path / "cache.sqlite"
    if damage == "garbage":
        path.write_bytes(b"this is not a database\n" * 400)
    else:  # a real cache cut short (a copy killed mid-way, a full disk)
        cache = ResponseCache(path)
        for index in range(400):
            cache.put(f"key{index}", {"content": "x" * 500})
        cache._connect().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        cache._connect().close()
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    with caplog.at_level("WARNING", logger="pipeline_lib.core.llm_client"), ChatServer() as server:
        results = run_chat_requests(config(server.base_url), requests(3), ResponseCache(path))
    assert all("content" in r for r in results) and len(server.requests) == 3
    aside = [p for p in tmp_path.iterdir() if ".corrupt-" in p.name and not p.name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1 and str(path) in caplog.text and aside[0].name in caplog.text
    assert len(ResponseCache(path)) == 3  # the fresh cache holds the recomputed answers


def test_a_cache_write_that_fails_stops_the_run_instead_of_failing_items(tmp_path):
    """A database too full to take an answer (SQLite's own SQLITE_FULL, via its page limit) is an error naming the
    cache, never ``OperationalError`` recorded per item while the run goes on."""
    import sqlite3

    from pipeline_lib.core.llm_client import CacheWriteError

    cache = ResponseCache(tmp_path / "cache.sqlite")
    pages = cache._connect().execute("PRAGMA page_count").fetchone()[0]
    cache._connect().execute(f"PRAGMA max_page_count = {pages + 1}")  # room for about one answer
    with ChatServer(content=lambda request: "y" * 5000) as server, \
            pytest.raises(CacheWriteError, match=r"cache\.sqlite: cannot store") as error:
        run_chat_requests(config(server.base_url, concurrency=1), requests(4), cache)
    assert isinstance(error.value.__cause__, sqlite3.OperationalError)
    assert "full" in str(error.value)


def test_environment_variables_the_client_reads_are_checked_and_named(monkeypatch, tmp_path):
    from pipeline_lib.core.env import EnvironmentVariableError

    monkeypatch.setenv("OPENAI_BASE_URL", "127.0.0.1:8000/v1")  # no scheme
    with pytest.raises(EnvironmentVariableError, match="OPENAI_BASE_URL"):
        EndpointConfig.from_config({"model": "m"}, "judge")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    assert EndpointConfig.from_config({"model": "m"}, "judge").base_url == "http://127.0.0.1:1/v1"

    monkeypatch.setenv("MY_KEY", "sk-secret\nX-Injected: 1")
    with pytest.raises(EnvironmentVariableError, match="MY_KEY") as error:
        run_chat_requests(config("http://127.0.0.1:1/v1", api_key_env="MY_KEY"), requests(1),
                          ResponseCache(tmp_path / "c"))
    assert "sk-secret" not in str(error.value)
