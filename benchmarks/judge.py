"""Judge client throughput against a local endpoint of fixed latency, measured side by side in one run.

Run: python benchmarks/judge.py
* items/s at concurrency 1 (serial) and at concurrency 32 through the real judge path (rubric render, async
  client, SQLite cache, verdict parsing) against the test chat server, in its own process, answering every
  request after 200 ms; target: concurrent >= 0.8 x 32 x serial;
* a rerun of the concurrent batch: requests the server received (target 0, every item from the cache).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline_lib.core.llm_client import EndpointConfig  # noqa: E402
from pipeline_lib.core.rubrics import RUBRICS  # noqa: E402
from pipeline_lib.jobs.judge.llm import judge_with_llm  # noqa: E402

LATENCY_S = 0.2
CONCURRENCY = 32


def items(n: int, tag: str) -> list[dict[str, str]]:
    return [{"MEETING_TITLE": tag, "TRANSCRIPT_TEXT": f"segment {i}", "SUMMARY_TEXT": "word " * (i % 37)}
            for i in range(n)]


def requests_served(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as response:
        return json.loads(response.read())["requests"]


def timed(port: int, batch: list[dict[str, str]], concurrency: int, cache: Path) -> tuple[float, int]:
    endpoint = EndpointConfig.from_config({"base_url": f"http://127.0.0.1:{port}/v1", "model": "judge",
                                           "concurrency": concurrency}, "benchmark judge")
    asked = requests_served(port)
    start = time.perf_counter()
    results = judge_with_llm(RUBRICS["meetingbank"], batch, endpoint, cache)
    elapsed = time.perf_counter() - start
    assert all("score_100" in r for r in results), "a benchmark item failed to score"
    return elapsed, requests_served(port) - asked


def main() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "chat_server.py"), "--port", str(port),
                               "--latency", str(LATENCY_S)])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                requests_served(port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with tempfile.TemporaryDirectory() as tmp:
            timed(port, items(4, "warm-up"), 4, Path(tmp) / "warmup.sqlite")  # imports and first connections
            serial_items = items(16, "serial")
            serial_s, _ = timed(port, serial_items, 1, Path(tmp) / "serial.sqlite")
            concurrent_items = items(20 * CONCURRENCY, "concurrent")
            concurrent_s, _ = timed(port, concurrent_items, CONCURRENCY, Path(tmp) / "concurrent.sqlite")
            rerun_s, rerun_requests = timed(port, concurrent_items, CONCURRENCY, Path(tmp) / "concurrent.sqlite")
    finally:
        server.terminate()
        server.wait()
    serial_rate = len(serial_items) / serial_s
    concurrent_rate = len(concurrent_items) / concurrent_s
    ratio = concurrent_rate / serial_rate
    target = 0.8 * CONCURRENCY
    print(f"endpoint latency {1000 * LATENCY_S:.0f} ms (server in its own process)")
    print(f"serial (concurrency 1): {len(serial_items)} items in {serial_s:.2f} s = {serial_rate:.2f} items/s")
    print(f"concurrency {CONCURRENCY}: {len(concurrent_items)} items in {concurrent_s:.2f} s = "
          f"{concurrent_rate:.1f} items/s")
    print(f"concurrent / serial = {ratio:.1f}x (target >= {target:.1f}x): {'PASS' if ratio >= target else 'FAIL'}")
    print(f"rerun of the concurrent batch: {rerun_requests} requests in {rerun_s:.2f} s (target 0): "
          f"{'PASS' if rerun_requests == 0 else 'FAIL'}")


if __name__ == "__main__":
    main()
