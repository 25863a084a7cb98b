"""A local HTTP server speaking the OpenAI chat-completions protocol, for tests and benchmarks.

Behaviour is scripted per test: fixed latency, a queue of failure statuses to return
before succeeding, and a content function of the request; for hostile-peer tests, a raw body
(e.g. an HTML page or ``choices: []`` with status 200) and a trickle (one byte per ``trickle_s``).
Every request is recorded.
Bound to 127.0.0.1 on a free port; stopped by the test that started it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default backlog of 5 refuses connections from a 32-way concurrent client
    daemon_threads = True


def default_content(request: dict[str, Any]) -> str:
    text = request["messages"][-1]["content"]
    first_line = next((line for line in text.splitlines() if line.strip() and "poem" not in line.lower()), text)
    return f"Write a short poem that begins: {first_line.strip()[:40]}"


class ChatServer:
    def __init__(self, content: Callable[[dict[str, Any]], str] = default_content, latency_s: float = 0.0,
                 failures: list[int] | None = None, reasoning: Callable[[dict[str, Any]], str | None] | None = None,
                 port: int = 0, raw_body: Callable[[dict[str, Any]], tuple[str, bytes] | None] | None = None,
                 trickle_s: float = 0.0, error_headers: dict[str, str] | None = None,
                 finish_reason: Callable[[dict[str, Any]], str] | None = None,
                 body_headers: dict[str, str] | None = None) -> None:
        self.content, self.latency_s, self.reasoning = content, latency_s, reasoning
        self.raw_body, self.trickle_s = raw_body, trickle_s
        self.finish_reason = finish_reason or (lambda request: "stop")
        self.body_headers = dict(body_headers or {})  # sent with every 200 (e.g. Content-Encoding of a raw body)
        self.error_headers = dict(error_headers or {})  # sent with every scripted failure (e.g. Retry-After)
        self.times: list[float] = []  # monotonic arrival time of each POST
        self.failures = list(failures or [])
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as vLLM's server does
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # vLLM's health probe, and a request counter for out-of-process use
                body = json.dumps({"requests": len(server.requests)}).encode() if self.path == "/stats" else b""
                if server.trickle_s:  # the whole answer, status line included, a byte at a time
                    raw = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                    for index in range(len(raw)):
                        self.wfile.write(raw[index:index + 1])
                        self.wfile.flush()
                        time.sleep(server.trickle_s)
                    return
                self.send_response(200 if self.path in ("/health", "/stats") else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(body)
                    server.times.append(time.monotonic())
                    status = server.failures.pop(0) if server.failures else 200
                time.sleep(server.latency_s)
                if status != 200:
                    payload = {"error": {"message": f"scripted {status}", "type": "test"}}
                else:
                    message = {"role": "assistant", "content": server.content(body)}
                    if server.reasoning:
                        message["reasoning"] = server.reasoning(body)
                    payload = {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
                               "model": body.get("model", "test"),
                               "choices": [{"index": 0, "message": message,
                                            "finish_reason": server.finish_reason(body)}],
                               "usage": {"prompt_tokens": 1, "completion_tokens": len(message["content"].split()),
                                         "total_tokens": 1 + len(message["content"].split())}}
                data, content_type = json.dumps(payload).encode(), "application/json"
                raw = server.raw_body(body) if server.raw_body and status == 200 else None
                if raw is not None:
                    content_type, data = raw
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in (server.error_headers if status != 200 else server.body_headers).items():
                        self.send_header(name, value)
                    self.end_headers()
                    if server.trickle_s:  # a slow peer: every read gets a byte before any per-read timeout
                        self.wfile.flush()
                        for index in range(len(data)):
                            self.wfile.write(data[index:index + 1])
                            self.wfile.flush()
                            time.sleep(server.trickle_s)
                    else:
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): nothing to answer

        self.httpd = _Server(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def delimited(prompt: str, field: str) -> str:
    """The text a rendered rubric prompt encloses in ``field``'s tags (``<summary_text-NONCE>`` ... ``</...>``)."""
    import re

    match = re.search(rf"<{field.lower()}-([0-9a-f]+)>\n(.*?)\n</{field.lower()}-\1>", prompt, re.DOTALL)
    if match is None:
        raise ValueError(f"no {field} tags in the prompt")
    return match.group(2)


def meetingbank_verdict(request: dict[str, Any]) -> str:
    """A thinking-style answer whose scores depend on the summary's length (so methods differ), then JSON."""
    summary = delimited(request["messages"][-1]["content"], "SUMMARY_TEXT").strip()
    base = 1 + min(9, len(summary.split()) // 4)
    keys = ("informativeness", "factuality", "fluency", "coherence", "redundancy")
    return "Let me check the facts first.\n```json\n" + json.dumps(dict.fromkeys(keys, base)) + "\n```"


def poetry_pairwise_verdict(request: dict[str, Any], first_bias: int = 0) -> str:
    """A pairwise Poetry answer: each poem's seven scores grow with its word count (so a longer poem wins), the first
    poem's raised by ``first_bias`` (a judge that favours a position), then the JSON of both."""
    prompt = request["messages"][-1]["content"]
    scores = {}
    for side, field in ((1, "FIRST_POEM_TEXT"), (2, "SECOND_POEM_TEXT")):
        words = len(delimited(prompt, field).split())
        value = max(1, min(10, 1 + words // 4 + (first_bias if side == 1 else 0)))
        scores |= {f"{key}{side}": value for key in "ABCDEFG"}
    return "Poem 1 against poem 2, line by line.\n" + json.dumps(scores)


if __name__ == "__main__":  # a stand-in `vllm serve` for the judge-serving tests
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--trickle", type=float, default=0.0, help="seconds between the bytes of each answer")
    args = parser.parse_args()
    server = ChatServer(content=meetingbank_verdict, port=args.port, latency_s=args.latency, trickle_s=args.trickle)
    server.httpd.serve_forever()
