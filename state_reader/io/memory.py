"""Giving freed memory back to the operating system between large steps.

glibc's allocator keeps the pages of freed blocks that sit below others still in use
(and raises its mmap threshold as large arrays come and go), and Arrow's pool keeps
freed pages for reuse, so a process that routes one partition after another can keep
the high-water mark of all of them. Between partitions a rewrite asks both to return
what is free (``malloc_trim``, as long-running data workers such as Dask's do; Arrow's
``release_unused``). Where the C library has no ``malloc_trim`` (macOS, musl, Windows)
only Arrow's pool is asked.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

import pyarrow as pa


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def release_free_memory() -> None:
    """Return the allocator's free pages to the operating system, where the C library can."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
