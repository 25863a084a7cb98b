"""A process pool whose workers enforce a hard per-item wall-clock limit, safe to call from many threads.

Math-Verify's own timeouts use ``signal.alarm`` (main thread only, raising in threads) and turn a timeout into a
silent ``False``. Here each item runs in a pebble ``ProcessPool`` worker: pebble kills the worker of an item still
running at its deadline and starts a fresh one, and takes submissions from any number of threads (verl's reward
loop calls ``compute_score`` from a thread pool, see ``tests/core/rewards/test_reward_concurrency.py``). Every item
comes back as its value, a timeout or a failure (the worker died or the function raised), never silently as a wrong
answer.

Workers are forked from a forkserver and never re-import the caller's ``__main__``: a user's plain script that
scores at top level (no ``if __name__ == "__main__":`` guard) would otherwise be re-run by every worker, which then
dies in multiprocessing's bootstrapping check.

Fair across callers: pebble's limit counts from when a worker starts an item, but its queue is one FIFO, so
8 hostile items at a 2 s limit on 2 workers made an easy item of another thread wait 8 s in the queue. Here each
``map`` call has its own queue and at most ``processes`` items are handed to pebble at once, taken round-robin
across the calls waiting. The guarantee: an item starts within about ``ceil(C / processes)`` limits, where C is the
number of other ``map`` calls with items waiting or running when it is queued (one item of each goes first), however
many items those calls hold; then it runs for at most one limit. A call's own items run in its order. Pools are per
process: callers in other processes never queue here (they share only the CPUs).

Usable from any process: a daemonic worker of another pool (``multiprocessing.Pool``; our workers are the fork
server's children, not the daemon's, so the no-children rule's reason does not apply), and a child forked after
the parent used a pool (the child gets its own fork server; the inherited pool is left alone, never closed there).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import importlib
import itertools
import multiprocessing as mp
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import forkserver, popen_forkserver, spawn
from multiprocessing.context import ForkServerContext, ForkServerProcess
from typing import Any

import pebble

__all__ = ["ItemResult", "TimeoutPool"]


@dataclass(frozen=True)
class ItemResult:
    value: Any  # the function's return value (None when timed out or failed)
    timed_out: bool = False
    error: str | None = None  # set when the item failed: its worker died or the function raised
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.error is not None


# --- forkserver workers that do not re-import __main__ -----------------------------------------------------------

_launching = threading.local()
_original_preparation_data = spawn.get_preparation_data


def _preparation_data(name: str) -> dict[str, Any]:
    """multiprocessing's child preparation data, minus the main module for our workers (only they set the flag)."""
    data = _original_preparation_data(name)
    if getattr(_launching, "hide_main", False):
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
    return data


spawn.get_preparation_data = _preparation_data  # a pass-through for every process but ours


class _NoMainPopen(popen_forkserver.Popen):
    def _launch(self, process_obj: Any) -> None:
        _launching.hide_main = True
        try:
            super()._launch(process_obj)
        finally:
            _launching.hide_main = False


_start_lock = threading.Lock()


def _own_fork_server_in_child() -> None:
    """A forked child inherits the parent's fork server state, but ``waitpid`` on it fails there (not its child):
    forget it, so the child's first worker starts the child's own server."""
    global _start_lock
    _start_lock = threading.Lock()
    server = forkserver._forkserver
    if getattr(server, "_forkserver_pid", None) is not None:
        if server._forkserver_alive_fd is not None:
            os.close(server._forkserver_alive_fd)
        server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None
        server._lock = threading.Lock()


os.register_at_fork(after_in_child=_own_fork_server_in_child)


class _NoMainProcess(ForkServerProcess):
    """Always daemonic (pebble starts its workers non-daemonic): a multiprocessing child that scores (verl's or a
    user's process pool) exits with ``os._exit`` after joining its non-daemonic children, so it would wait forever
    on workers that only an atexit handler stops; daemonic workers are terminated instead."""

    @property
    def daemon(self) -> bool:
        return True

    @daemon.setter
    def daemon(self, value: bool) -> None:
        pass

    def start(self) -> None:
        """Start even from a daemonic process (multiprocessing refuses a daemon children it could orphan; a fork
        server's child is not the daemon's)."""
        config = mp.current_process()._config
        with _start_lock:
            daemonic = config.get("daemon", False)
            config["daemon"] = False
            try:
                super().start()
            finally:
                if daemonic:
                    config["daemon"] = daemonic

    @staticmethod
    def _Popen(process_obj: Any) -> _NoMainPopen:  # noqa: N802 (multiprocessing's name)
        return _NoMainPopen(process_obj)


class _NoMainContext(ForkServerContext):
    Process = _NoMainProcess


def _context(preload: Sequence[str]) -> Any:
    if "forkserver" in mp.get_all_start_methods():
        context = _NoMainContext()
        context.set_forkserver_preload(list(preload))
        return context
    # No forkserver (not Linux/macOS): spawn re-imports __main__, so a top-level script must use a main guard there.
    return mp.get_context("spawn")


def _resolve(target: str) -> Callable[..., Any]:
    module_name, function_name = target.split(":")
    return getattr(importlib.import_module(module_name), function_name)


class TimeoutPool:
    """Run ``module:function`` over argument tuples with ``processes`` workers and a per-item limit.

    ``map`` may be called from many threads at once (served round-robin, see the module docstring); ``timeouts``
    and ``failures`` count this pool's items.
    """

    def __init__(self, target: str, processes: int = 2, timeout: float = 5.0, preload: Sequence[str] = ()) -> None:
        if processes < 1 or timeout <= 0:
            raise ValueError(f"need processes >= 1 and timeout > 0, got {processes}, {timeout}")
        self.target, self.timeout, self.processes = target, float(timeout), processes
        self._function = _resolve(target)
        self._mp_context = _context([target.split(":")[0], *preload])
        self._pool = pebble.ProcessPool(max_workers=processes, context=self._mp_context)
        self._lock = threading.Lock()
        self._queue_lock = threading.Lock()
        self._waiting: OrderedDict[int, deque[tuple[tuple[Any, ...], concurrent.futures.Future]]] = OrderedDict()
        self._calls = itertools.count()
        self._running = 0
        self._pid = os.getpid()
        self.timeouts = 0
        self.failures = 0
        atexit.register(self.close)

    def map(self, items: Sequence[tuple[Any, ...]]) -> list[ItemResult]:
        started = time.monotonic()
        futures: list[concurrent.futures.Future] = [concurrent.futures.Future() for _ in items]
        if futures:
            with self._queue_lock:
                self._waiting[next(self._calls)] = deque(zip((tuple(a) for a in items), futures, strict=True))
            self._dispatch()
        results = [self._result(future, started) for future in futures]
        with self._lock:
            self.timeouts += sum(r.timed_out for r in results)
            self.failures += sum(r.failed for r in results)
        return results

    def _dispatch(self) -> None:
        """Hand pebble items while fewer than ``processes`` run: one from the call at the head, which then goes to
        the back of the rotation."""
        while True:
            with self._queue_lock:
                if self._running >= self.processes or not self._waiting:
                    return
                call, queue = self._waiting.popitem(last=False)
                args, outer = queue.popleft()
                if queue:
                    self._waiting[call] = queue  # to the back: the other calls go first
                self._running += 1
            try:
                inner = self._schedule(args)
            except Exception as exc:  # the pool could not be restarted: this item fails, the others go on
                outer.set_exception(exc)
                self._release()
                continue
            inner.add_done_callback(lambda done, outer=outer: self._finished(done, outer))

    def _release(self) -> None:
        with self._queue_lock:
            self._running -= 1

    def _finished(self, inner: concurrent.futures.Future, outer: concurrent.futures.Future) -> None:
        try:
            if inner.cancelled():
                outer.set_exception(RuntimeError("cancelled (the pool was stopped)"))
            elif inner.exception() is not None:
                outer.set_exception(inner.exception())
            else:
                outer.set_result(inner.result())
        finally:
            self._release()
            self._dispatch()

    def _schedule(self, args: tuple[Any, ...]) -> concurrent.futures.Future:
        pool = self._pool
        try:
            return pool.schedule(self._function, args=args, timeout=self.timeout)
        except RuntimeError:  # pebble stopped the pool (its manager hit an error): start a fresh one, once
            with self._lock:
                if self._pool is pool:
                    self._pool = pebble.ProcessPool(max_workers=self.processes, context=self._mp_context)
            return self._pool.schedule(self._function, args=args, timeout=self.timeout)

    @staticmethod
    def _result(future: concurrent.futures.Future, started: float) -> ItemResult:
        try:
            value = future.result()
        except concurrent.futures.TimeoutError:
            return ItemResult(None, timed_out=True, seconds=time.monotonic() - started)
        except pebble.ProcessExpired as exc:  # the worker died (crash, out of memory)
            return ItemResult(None, error=f"worker died (exit code {exc.exitcode})",
                              seconds=time.monotonic() - started)
        except Exception as exc:
            return ItemResult(None, error=f"{type(exc).__name__}: {exc}", seconds=time.monotonic() - started)
        return ItemResult(value, seconds=time.monotonic() - started)

    def close(self) -> None:
        if os.getpid() != self._pid:  # a forked child's copy: the pool's threads and workers are the parent's
            return
        with self._queue_lock:  # items not yet handed to pebble fail now rather than restart a pool
            waiting, self._waiting = list(self._waiting.values()), OrderedDict()
        for queue in waiting:
            for _args, outer in queue:
                outer.set_exception(RuntimeError("the verifier pool was closed"))
        self._pool.stop()
        self._pool.join(timeout=5)
