"""Hostile endpoints (issue 45, items 2 and 3): a compressed answer is capped by what it unpacks to, and an
endpoint's health is shared by its requests (a circuit breaker), so a down judge fails a job in a bounded number of
requests whatever its number of items, and a rerun resumes from the cache."""

from __future__ import annotations

import gzip
import json
import logging
import socket
import time
import tracemalloc
import zlib

import pytest

from pipeline_lib.core.llm_client import (
    ChatRequest,
    EndpointConfig,
    EndpointUnavailableError,
    ResponseCache,
    run_chat_requests,
)
from pipeline_lib.core.rubrics import RUBRICS
from pipeline_lib.jobs.judge.llm import judge_with_llm
from tests.chat_server import ChatServer, meetingbank_verdict

MEETING = RUBRICS["meetingbank"]


def config(url: str, **kwargs) -> EndpointConfig:
    return EndpointConfig.from_config({"base_url": url, "model": "test-model", "backoff_s": 0.01, **kwargs}, "test")


def requests(n: int) -> list[ChatRequest]:
    return [ChatRequest(({"role": "user", "content": f"poem number {i}"},)) for i in range(n)]


def completion(content: str) -> bytes:
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                    "finish_reason": "stop"}]}).encode()


def _bomb(wbits: int, size: int = 100 * 2**20) -> bytes:
    """``size`` bytes of one JSON string, compressed as a stream (never held whole here either)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    head = b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "'
    parts = [packer.compress(head)]
    chunk = b"a" * 2**20
    for _ in range(size // len(chunk)):
        parts.append(packer.compress(chunk))
    parts.append(packer.compress(b'"}, "finish_reason": "stop"}]}'))
    parts.append(packer.flush())
    return b"".join(parts)


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    return _bomb(16 + zlib.MAX_WBITS)


# --- 2. limits on what is unpacked ---------------------------------------------------------------------------------

def test_a_gzip_bomb_is_refused_at_the_decoded_cap_never_unpacked_or_cached(tmp_path, gzip_bomb):
    assert 90_000 < len(gzip_bomb) < 110_000  # the report's 97 KB on the wire, 100 MB unpacked
    cache = ResponseCache(tmp_path / "c.sqlite")
    with ChatServer(raw_body=lambda body: ("application/json", gzip_bomb),
                    body_headers={"Content-Encoding": "gzip"}) as server:
        # a first request imports the SDK and builds its models (tens of MB of its own); the second is measured
        run_chat_requests(config(server.base_url), requests(1), ResponseCache(tmp_path / "warm.sqlite"))
        tracemalloc.start()
        try:
            (result,) = run_chat_requests(config(server.base_url, max_retries=3), requests(1), cache)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert len(server.requests) == 2  # refused, not retried: the same server sends the same body
    assert result["error"].startswith("ResponseTooLargeError") and "decodes (gzip)" in result["error"]
    assert "1048576" in result["error"]
    assert peak < 8 * 2**20, peak  # a full decode holds 100 MB (and the SDK's copies of it)
    print(f"gzip bomb ({len(gzip_bomb)} bytes -> 100 MiB): refused, traced peak {peak / 2**20:.1f} MiB")
    assert len(cache) == 0


@pytest.mark.parametrize("wbits", [zlib.MAX_WBITS, -zlib.MAX_WBITS], ids=["deflate-zlib", "deflate-raw"])
def test_a_deflate_bomb_is_refused_the_same_way(tmp_path, wbits):
    bomb = _bomb(wbits, 8 * 2**20)
    with ChatServer(raw_body=lambda body: ("application/json", bomb),
                    body_headers={"Content-Encoding": "deflate"}) as server:
        (result,) = run_chat_requests(config(server.base_url, max_response_bytes=2**20), requests(1),
                                      ResponseCache(tmp_path / "c.sqlite"))
    assert "decodes (deflate) to over max_response_bytes" in result["error"]


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_answer_under_the_cap_is_decoded_once(tmp_path, encoding):
    body = completion("a short verdict " * 50)
    packed = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    with ChatServer(raw_body=lambda request: ("application/json", packed),
                    body_headers={"Content-Encoding": encoding}) as server:
        (result,) = run_chat_requests(config(server.base_url), requests(1), ResponseCache(tmp_path / "c.sqlite"))
        asked = server.requests[0]
    assert result["content"] == "a short verdict " * 50 and result["finish_reason"] == "stop"
    assert asked["model"] == "test-model"


@pytest.mark.parametrize("encoding", ["br", "zstd", "gzip, gzip"])
def test_an_encoding_that_cannot_be_decoded_under_a_cap_is_refused(tmp_path, encoding):
    with ChatServer(raw_body=lambda body: ("application/json", b"\x00" * 100),
                    body_headers={"Content-Encoding": encoding}) as server:
        (result,) = run_chat_requests(config(server.base_url), requests(1), ResponseCache(tmp_path / "c.sqlite"))
    assert "cannot be decoded under max_response_bytes" in result["error"] and encoding in result["error"]


# --- 3. an endpoint's health is shared by its requests -------------------------------------------------------------

def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed on exit: connecting is refused


@pytest.mark.parametrize("concurrency", [1, 8, 32])
def test_a_refused_port_with_200_items_fails_in_a_bounded_number_of_attempts(tmp_path, concurrency):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(EndpointUnavailableError) as caught:
        run_chat_requests(config(url, concurrency=concurrency, max_retries=5), requests(200),
                          ResponseCache(tmp_path / "c.sqlite"))
    # 10 failures in a row open the circuit; at most `concurrency` requests were already in flight
    assert 10 <= caught.value.attempts <= 10 + concurrency, caught.value.attempts
    message = str(caught.value)
    assert "\n" not in message and "10 requests in a row failed" in message and "200 of 200 items" in message


def test_a_long_retry_after_opens_the_circuit_at_once(tmp_path):
    with ChatServer(failures=[503] * 1000, error_headers={"Retry-After": "1000000000"}) as server:
        with pytest.raises(EndpointUnavailableError, match="asked to be retried after 1000000000 s, past the 120 s"):
            run_chat_requests(config(server.base_url, concurrency=4), requests(200),
                              ResponseCache(tmp_path / "c.sqlite"))
        assert len(server.requests) <= 4  # the requests in flight when the first answer came; no retry waited


def test_a_retry_after_within_the_cap_holds_every_request_of_the_endpoint(tmp_path):
    with ChatServer(failures=[503], error_headers={"Retry-After": "1"}, latency_s=0.1) as server:
        results = run_chat_requests(config(server.base_url, concurrency=2), requests(20),
                                    ResponseCache(tmp_path / "c.sqlite"))
        since = [t - server.times[0] for t in server.times]  # seconds after the request answered 503
    assert all("error" not in r for r in results)
    # the other worker's request in flight ends at ~0.2 s; without a shared hold it would go on sending every 0.1 s
    assert not [t for t in since if 0.45 < t < 0.95], since
    assert sum(t >= 0.95 for t in since) >= 15


def test_after_the_circuit_opens_a_rerun_resumes_from_the_cache(tmp_path):
    items = [{"MEETING_TITLE": "", "TRANSCRIPT_TEXT": f"segment {i}", "SUMMARY_TEXT": "word " * (i + 1)}
             for i in range(20)]
    cache = tmp_path / "judge.sqlite"
    with ChatServer(content=meetingbank_verdict, failures=[200] * 5 + [503] * 1000) as server:
        with pytest.raises(EndpointUnavailableError, match="the 5 answered are cached"):
            judge_with_llm(MEETING, items, config(server.base_url, concurrency=1), cache)
        assert len(server.requests) == 15  # 5 answered, then 10 failures in a row
        port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    assert len(ResponseCache(cache)) == 5
    with ChatServer(content=meetingbank_verdict, port=port) as server:  # healthy again at the same address
        results = judge_with_llm(MEETING, items, config(server.base_url, concurrency=4), cache)
        asked = [request["messages"][-1]["content"] for request in server.requests]
    assert len(asked) == 15 and all("scores" in result for result in results)
    assert not [prompt for prompt in asked if any(MEETING.render(**item) == prompt for item in items[:5])]


def test_a_down_judge_fails_the_scoring_job_in_one_sentence(tmp_path, caplog):
    from pipeline_lib.jobs.judge import score
    from tests.jobs.judge.test_judge_hostile import _meeting_data

    data = _meeting_data(tmp_path / "data.parquet", 50)
    generations = tmp_path / "generations.jsonl"
    generations.write_text("".join(json.dumps({"prompt_index": i, "mode": "greedy", "sample": 0,
                                               "text": f"summary {i}"}) + "\n" for i in range(50)))
    judge = {"kind": "llm", "label": "down", "endpoint": {"base_url": f"http://127.0.0.1:{_closed_port()}/v1",
                                                          "model": "judge", "backoff_s": 0.01}}
    caplog.set_level(logging.ERROR)
    started = time.monotonic()
    assert score.main(["--judge", json.dumps(judge), "--rubric", "meetingbank", "--generations", str(generations),
                       "--data", str(data), "--cache", str(tmp_path / "c.sqlite"), "--out", str(tmp_path / "out")]) == 1
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None and "\n" not in errors[0].getMessage()
    assert "is unavailable: 10 requests in a row failed" in errors[0].getMessage()
    assert not (tmp_path / "out" / "summary.json").exists()
    print(f"refused judge, 50 items: exit 1 in {time.monotonic() - started:.2f} s")
