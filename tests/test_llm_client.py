"""The shared LLM client: retries, caching, crash + rerun, and a clear error without an endpoint."""

import pytest

from pipeline_lib.llm_client import (
    ChatRequest,
    EndpointConfig,
    EndpointNotConfiguredError,
    ResponseCache,
    run_chat_requests,
)

from .chat_server import ChatServer


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
    assert sum("error" in r for r in first) == 1 and len(cache) == 4
    with ChatServer() as server:  # "after a crash": a new server, the same cache file
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
