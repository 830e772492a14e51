"""Streaming queries run side by side in one JVM, and checkpoints written once each, ahead of their use.

A small streaming query spends much of its time waiting (planning, scheduling, file system calls), not on
the cores: two queries in one JVM take little more than one (33 s one after another against 18 s two at a
time, for six of the suite's queries). So the checkpoints that the collected tests name in their
parameters are written two at a time in the background, while the tests run, and a test that asks for one
not yet started writes it at once itself. A test that restarts two checkpoints runs both at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")


def side_by_side(*calls: Callable[[], T]) -> list[T]:
    """Each call at once in a thread of its own; their results in order (the first failure is raised).
    Calls that run queries give each its own session (``spark.newSession()``): confs are per session."""
    with ThreadPoolExecutor(len(calls), thread_name_prefix="side-by-side") as pool:
        futures = [pool.submit(call) for call in calls]
        return [future.result() for future in futures]


class OnceEach(Generic[T]):
    """``build(key)`` run once per key: on the first ``self(key)``, or earlier in the background through
    :meth:`prefetch`. The first failure of a key is raised to every test that asks for it."""

    def __init__(
        self, build: Callable[[Hashable], T], workers: int = 2, pool: ThreadPoolExecutor | None = None
    ) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._futures: dict[Hashable, Future] = {}
        # a pool given is shared (its work runs one piece after another beside the tests) and not shut down here
        self._own = pool is None
        self._pool = pool or ThreadPoolExecutor(workers, thread_name_prefix="prefetch")

    def prefetch(self, keys: Iterable[Hashable]) -> None:
        """Start building ``keys`` in this order, beside whatever runs meanwhile."""
        with self._lock:
            for key in keys:
                if key not in self._futures:
                    self._futures[key] = self._pool.submit(self._build, key)

    def __call__(self, key: Hashable) -> T:
        with self._lock:
            future = self._futures.get(key)
            here = future is None or future.cancel()  # not started yet: the test builds it now
            if here:
                future = self._futures[key] = Future()
        if here:
            try:
                future.set_result(self._build(key))
            except BaseException as exc:  # kept for every later test that asks
                future.set_exception(exc)
        return future.result()

    def close(self) -> None:
        if self._own:
            self._pool.shutdown(wait=True, cancel_futures=True)
