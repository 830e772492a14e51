"""The calls this process makes to filesystems: how many run at once and on which pools of
threads (:func:`io_threads`), how many were made and what they fetched (:func:`io_counts`), and
the listings that the storages of one operation share (:func:`one_listing`).

:mod:`state_reader.io.storage` makes the calls; everything here is shared by all its storages.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import wraps
from typing import Any, TypeVar

from state_reader.units import human_bytes

F = TypeVar("F", bound=Callable[..., Any])


def io_threads() -> int:
    """Files fetched at once from a remote filesystem: STATE_READER_IO_THREADS, else 64 (1: one by one)."""
    setting = os.environ.get("STATE_READER_IO_THREADS", "").strip()
    return int(setting) if setting.isdigit() and int(setting) > 0 else 64


class _Counts:
    """Calls made to filesystems and bytes fetched, in this process (all threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values = {"list": 0, "get": 0, "info": 0, "bytes": 0}

    def add(self, kind: str, n: int = 1, nbytes: int = 0) -> None:
        with self._lock:
            self.values[kind] += n
            self.values["bytes"] += nbytes


_COUNTS = _Counts()


def count_call(kind: str, n: int = 1, nbytes: int = 0) -> None:
    """Count ``n`` calls of ``kind`` (``list``, ``get``, ``info``) and the ``nbytes`` they fetched."""
    _COUNTS.add(kind, n, nbytes)


def io_counts() -> dict[str, int]:
    """Calls made so far by this process: listings (``list``), file fetches (``get``), existence
    or type checks (``info``), and the ``bytes`` fetched. A local disk's calls are counted too."""
    with _COUNTS._lock:
        return dict(_COUNTS.values)


def io_counts_since(before: dict[str, int]) -> dict[str, int]:
    """What :func:`io_counts` grew by since ``before`` (an earlier :func:`io_counts`)."""
    now = io_counts()
    return {k: now[k] - before.get(k, 0) for k in now}


def describe_counts(counts: dict[str, int]) -> str:
    """'12 listings, 410 fetches (3.1 MiB), 0 info calls' for a log line or ``--verbose``."""
    return (
        f"{counts.get('list', 0)} listings, {counts.get('get', 0)} fetches ({human_bytes(counts.get('bytes', 0))}), "
        f"{counts.get('info', 0)} info calls"
    )


_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None
_SMALL_POOL: ThreadPoolExecutor | None = None
# small files looked into for what they name (snapshot zips, to size a display) are fetched with
# a wider bound than state: nothing decodes them in the pool, so more at once costs no CPU
SMALL_FETCHES_PER_FETCH = 4


def fetch_pool(small: bool = False) -> ThreadPoolExecutor:
    """The process's pool of file fetches (``small``: of small files looked into, a wider one).
    Its tasks are single fetches that never wait on each other, so any thread (but its own) may
    wait on them without a deadlock."""
    global _POOL, _SMALL_POOL
    with _POOL_LOCK:
        if small:
            if _SMALL_POOL is None:
                _SMALL_POOL = ThreadPoolExecutor(
                    io_threads() * SMALL_FETCHES_PER_FETCH, thread_name_prefix="state_reader_io_small"
                )
            return _SMALL_POOL
        if _POOL is None:
            _POOL = ThreadPoolExecutor(io_threads(), thread_name_prefix="state_reader_io")
        return _POOL


# this thread's listings shared within one_listing() (``.listings``: a dict, else None)
_LISTINGS = threading.local()


@contextmanager
def one_listing() -> Iterator[None]:
    """Within it, the storages made (on this thread) for the same remote location share what
    they list: one operation made of several reads (the notebook's display, the doctor) lists
    each directory once. Nested uses share the outermost one's."""
    if getattr(_LISTINGS, "listings", None) is not None:
        yield
        return
    _LISTINGS.listings = {}
    try:
        yield
    finally:
        _LISTINGS.listings = None


def with_one_listing(func: F) -> F:
    """``func`` run within :func:`one_listing`."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with one_listing():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def shared_listings() -> dict[Any, Any] | None:
    """What the storages made on this thread within :func:`one_listing` share (by location), or
    None outside one: each storage keeps what it lists in the entry of its location."""
    return getattr(_LISTINGS, "listings", None)
