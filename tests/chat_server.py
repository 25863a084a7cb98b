"""A local HTTP server speaking the OpenAI chat-completions protocol, for tests and benchmarks.

Behaviour is scripted per test: fixed latency, a queue of failure statuses to return
before succeeding, and a content function of the request. Every request is recorded.
Bound to 127.0.0.1 on a free port; stopped by the test that started it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def default_content(request: dict[str, Any]) -> str:
    text = request["messages"][-1]["content"]
    first_line = next((line for line in text.splitlines() if line.strip() and "poem" not in line.lower()), text)
    return f"Write a short poem that begins: {first_line.strip()[:40]}"


class ChatServer:
    def __init__(self, content: Callable[[dict[str, Any]], str] = default_content, latency_s: float = 0.0,
                 failures: list[int] | None = None, reasoning: Callable[[dict[str, Any]], str | None] | None = None
                 ) -> None:
        self.content, self.latency_s, self.reasoning = content, latency_s, reasoning
        self.failures = list(failures or [])
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(body)
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
                               "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                               "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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
