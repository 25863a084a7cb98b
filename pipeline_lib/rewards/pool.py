"""A process pool whose workers enforce a hard per-item wall-clock limit.

Math-Verify's own timeouts use ``signal.alarm`` (main thread only, raising in
threads) and turn a timeout into a silent ``False``. Here each item runs in a
worker process; an item still running at its deadline gets its worker killed and
replaced, and the item is reported as timed out, never silently as wrong.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import multiprocessing as mp
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

__all__ = ["ItemResult", "TimeoutPool"]

#: How long a fresh worker may take to import its target (not counted against any item's limit).
STARTUP_SECONDS = 300.0


@dataclass(frozen=True)
class ItemResult:
    value: Any  # the function's return value (None when timed out or failed)
    timed_out: bool = False
    error: str | None = None
    seconds: float = 0.0


def _worker_main(conn: Connection, target: str) -> None:
    module_name, function_name = target.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    conn.send("ready")  # start-up (which may re-import the parent's __main__) is not charged to an item
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        index, args = message
        try:
            conn.send((index, function(*args), None))
        except Exception as exc:
            conn.send((index, None, f"{type(exc).__name__}: {exc}"))


class _Worker:
    def __init__(self, context: Any, target: str) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, target), daemon=True)
        self.process.start()
        child.close()
        # Block until the worker has imported its target: on a busy machine that can take longer than an
        # item's limit, and a deadline that counted it would kill every fresh worker before its first item.
        if not self.conn.poll(STARTUP_SECONDS) or self.conn.recv() != "ready":
            self.kill()
            raise RuntimeError(f"pool worker for {target} did not start within {STARTUP_SECONDS:.0f} s")
        self.item: int | None = None
        self.started = 0.0

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


class TimeoutPool:
    """Run ``module:function`` over argument tuples with ``processes`` workers and a per-item limit."""

    def __init__(self, target: str, processes: int = 2, timeout: float = 5.0) -> None:
        if processes < 1 or timeout <= 0:
            raise ValueError(f"need processes >= 1 and timeout > 0, got {processes}, {timeout}")
        methods = mp.get_all_start_methods()
        self._context = mp.get_context("forkserver" if "forkserver" in methods else "spawn")
        if "forkserver" in methods:
            self._context.set_forkserver_preload([target.split(":")[0]])
        self.target, self.timeout = target, float(timeout)
        self._workers = [_Worker(self._context, target) for _ in range(processes)]
        self.timeouts = 0
        atexit.register(self.close)

    def map(self, items: Sequence[tuple[Any, ...]]) -> list[ItemResult]:
        results: list[ItemResult | None] = [None] * len(items)
        pending = deque(enumerate(items))
        idle = list(self._workers)
        busy: dict[Connection, _Worker] = {}
        while pending or busy:
            while pending and idle:
                worker = idle.pop()
                index, args = pending.popleft()
                worker.item, worker.started = index, time.monotonic()
                worker.conn.send((index, args))
                busy[worker.conn] = worker
            now = time.monotonic()
            next_deadline = min(w.started + self.timeout for w in busy.values())
            for conn in wait(list(busy), timeout=max(0.0, next_deadline - now)):
                worker = busy.pop(conn)
                try:
                    index, value, error = conn.recv()
                except (EOFError, OSError):  # the worker died (e.g. out of memory)
                    results[worker.item] = ItemResult(None, error="worker died",
                                                      seconds=time.monotonic() - worker.started)
                    idle.append(self._replace(worker))
                    continue
                results[index] = ItemResult(value, error=error, seconds=time.monotonic() - worker.started)
                idle.append(worker)
            now = time.monotonic()
            for conn, worker in list(busy.items()):
                if now - worker.started >= self.timeout:
                    del busy[conn]
                    results[worker.item] = ItemResult(None, timed_out=True, seconds=now - worker.started)
                    self.timeouts += 1
                    idle.append(self._replace(worker))
        return [r for r in results if r is not None]

    def _replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        fresh = _Worker(self._context, self.target)
        self._workers[self._workers.index(worker)] = fresh
        return fresh

    def close(self) -> None:
        for worker in self._workers:
            if worker.process.is_alive():
                with contextlib.suppress(BrokenPipeError, OSError):
                    worker.conn.send(None)
                worker.process.join(timeout=1)
                if worker.process.is_alive():
                    worker.process.kill()
        self._workers = []
