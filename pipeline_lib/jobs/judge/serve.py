"""Run a judge server (e.g. ``vllm serve``) for the length of one scoring job.

The server listens on a free port chosen at start (the OS's pick for a port-0 bind), so two scoring jobs on one node
never collide (a fixed ``serve.port`` did: issue 44); the job's client gets its URL. The port is free when chosen but
not held (the server must bind it itself), so another process may take it first: a server that exits saying its
address is in use is started again on a fresh port, up to :data:`PORT_TRIES` times.

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

__all__ = ["PORT_TRIES", "ServerStartError", "free_port", "served_endpoint"]

log = logging.getLogger("pipeline_lib.jobs.judge.serve")


#: Starts on fresh ports before a server that keeps finding its port taken is an error.
PORT_TRIES = 5
#: What a server (Python's socket, uvicorn, vLLM) writes when its port was taken between the choice and its bind.
_IN_USE = ("Address already in use", "[Errno 98]", "EADDRINUSE")


class ServerStartError(RuntimeError):
    """The judge server exited or did not become healthy in time."""


def free_port() -> int:
    """A local TCP port nothing listens on now (the OS's choice for a port-0 bind on 127.0.0.1)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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


def _command(command: list[str], fields: dict[str, str]) -> list[str]:
    argv = []
    for part in command:
        for name, value in fields.items():
            part = part.replace("{" + name + "}", value)
        argv.append(part)
    return argv


def _start(argv: list[str], port: int, log_path: Path, timeout_s: float) -> subprocess.Popen | None:
    """The server process once healthy on ``port``; None when it exited saying its port is in use (the caller picks
    another). Any other exit, or no health within ``timeout_s``, is a :class:`ServerStartError` (server stopped)."""
    health = f"http://127.0.0.1:{port}/health"
    with open(log_path, "ab") as server_log:
        offset = server_log.tell()
        log.info("starting judge server: %s (log %s)", " ".join(argv), log_path)
        process = subprocess.Popen(argv, stdout=server_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        started = time.monotonic()
        deadline = started + timeout_s
        while True:
            if process.poll() is not None:  # checked before health: another server's answer on this port is not ours
                with open(log_path, "rb") as server_log:
                    server_log.seek(offset)
                    said = server_log.read().decode(errors="replace")
                if any(marker in said for marker in _IN_USE):
                    log.warning("judge server exited: port %d was taken before it bound it; trying another", port)
                    return None
                raise ServerStartError(f"judge server exited with status {process.returncode} before becoming "
                                       f"healthy; see {log_path}")
            if _healthy(port) and process.poll() is None:
                break
            if time.monotonic() > deadline:
                raise ServerStartError(f"judge server not healthy at {health} after {timeout_s:g} s; see {log_path}")
            time.sleep(1.0)
        log.info("judge server (pid %d) healthy at %s after %.1f s", process.pid, health, time.monotonic() - started)
        return process
    except BaseException:
        _stop(process)
        raise


@contextlib.contextmanager
def served_endpoint(endpoint: dict[str, Any], serve: dict[str, Any], log_path: Path,
                    substitutions: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """Yield the endpoint section to use: unchanged without a serve command, else pointing at the started server
    (``base_url`` = ``http://127.0.0.1:<port>/v1``, the port chosen free at start).

    ``{port}`` in the command becomes the port; ``substitutions`` fill other fields (e.g. ``{model}``).
    """
    command = serve.get("command") or []
    if not command:
        yield endpoint
        return
    if "port" in serve:
        raise ValueError(f"serve.port = {serve['port']!r}: removed (issue 44); the server listens on a free port "
                         f"chosen at start, so drop the key")
    timeout_s = float(serve.get("startup_timeout_s", 1800))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(PORT_TRIES):
        port = free_port()
        process = _start(_command(command, {"port": str(port), **(substitutions or {})}), port, log_path, timeout_s)
        if process is not None:
            break
    else:
        raise ServerStartError(f"judge server found its port taken {PORT_TRIES} times in a row; see {log_path}")
    try:
        yield {**endpoint, "base_url": f"http://127.0.0.1:{port}/v1"}
    finally:
        _stop(process)
