"""Run a judge server (e.g. ``vllm serve``) for the length of one scoring job.

The server is started in its own process group, polled on ``/health`` until it answers
(each probe, and the whole wait, with a total deadline that a slow or trickling server cannot stretch),
and stopped (SIGTERM, then SIGKILL) when the job ends, also on failure, so a GPU job
never leaves a server behind. An empty command means the endpoint is external.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["ServerStartError", "served_endpoint"]

log = logging.getLogger("pipeline_lib.jobs.judge.serve")


class ServerStartError(RuntimeError):
    """The judge server exited or did not become healthy in time."""


def _healthy(port: int, deadline_s: float = 5.0) -> bool:
    """Whether ``GET /health`` on the local port answers 200, decided within ``deadline_s`` in total.

    A socket timeout bounds each read only, so a server trickling its answer a byte at a time would hold a
    per-read-timeout probe (``urlopen``) for as long as it likes, past ``startup_timeout_s``.
    """
    end = time.monotonic() + deadline_s
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=deadline_s) as sock:
            sock.sendall(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            status_line = b""
            while b"\r\n" not in status_line and len(status_line) < 256:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return False
                sock.settimeout(remaining)
                chunk = sock.recv(256)
                if not chunk:
                    break
                status_line += chunk
    except OSError:  # refused, reset, timed out
        return False
    return status_line.split(b"\r\n", 1)[0].split()[1:2] == [b"200"]


def _stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM to the server's process group (vLLM's engine and workers are its children), SIGKILL after
    ``grace_s``."""
    if process.poll() is not None:
        return
    started = time.monotonic()
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    log.info("judge server (pid %d) stopped in %.1f s", process.pid, time.monotonic() - started)


@contextlib.contextmanager
def served_endpoint(endpoint: dict[str, Any], serve: dict[str, Any], log_path: Path,
                    substitutions: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """Yield the endpoint section to use: unchanged without a serve command, else pointing at the started server.

    ``{port}`` in the command becomes the port; ``substitutions`` fill other fields (e.g. ``{model}``).
    """
    command = serve.get("command") or []
    if not command:
        yield endpoint
        return
    port = int(serve.get("port", 8000))
    fields = {"port": str(port), **(substitutions or {})}
    argv = []
    for part in command:
        for name, value in fields.items():
            part = part.replace("{" + name + "}", value)
        argv.append(part)
    health = f"http://127.0.0.1:{port}/health"
    if _healthy(port):
        raise ServerStartError(f"port {port} already serves {health}; choose another `serve.port`")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as server_log:
        log.info("starting judge server: %s (log %s)", " ".join(argv), log_path)
        process = subprocess.Popen(argv, stdout=server_log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            started = time.monotonic()
            deadline = started + float(serve.get("startup_timeout_s", 1800))
            while not _healthy(port):
                if process.poll() is not None:
                    raise ServerStartError(f"judge server exited with status {process.returncode} before becoming "
                                           f"healthy; see {log_path}")
                if time.monotonic() > deadline:
                    raise ServerStartError(f"judge server not healthy at {health} after "
                                           f"{serve.get('startup_timeout_s')} s; see {log_path}")
                time.sleep(1.0)
            log.info("judge server (pid %d) healthy at %s after %.1f s", process.pid, health,
                     time.monotonic() - started)
            yield {**endpoint, "base_url": f"http://127.0.0.1:{port}/v1"}
        finally:
            _stop(process)
