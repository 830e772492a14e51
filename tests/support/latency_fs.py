"""A filesystem as slow as an object store, for tests and benchmarks: the local disk through
fsspec, with ``latency`` seconds added to every request and every request counted.

Requests are what an object store charges a round trip for: a file opened (a GET),
a directory listed (one call per 1,000 entries of a recursive listing, as S3's
paginated listing), an ``info``/``exists``/``isdir`` (a HEAD). Calls the local
implementation makes inside one request (``ls`` asking ``info``, ``find`` walking
directories) are neither slowed nor counted.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from contextlib import contextmanager
from typing import Any, ClassVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

PROTOCOL = "latencyfile"
PAGE = 1000  # keys per page of a recursive listing (S3's ListObjectsV2)


class LatencyFileSystem(LocalFileSystem):
    """``latencyfile://<absolute path>``: local files, each request ``latency`` seconds late and counted."""

    protocol = PROTOCOL
    latency: ClassVar[float] = 0.0
    calls: ClassVar[Counter] = Counter()
    paths: ClassVar[list[tuple[str, str]]] = []  # (kind, path) of every counted request
    _lock = threading.Lock()
    _inside = threading.local()

    @classmethod
    def reset(cls, latency: float | None = None) -> None:
        with cls._lock:
            cls.calls = Counter()
            cls.paths = []
        if latency is not None:
            cls.latency = latency

    @contextmanager
    def _request(self, kind: str, path: Any, pages: int = 1):
        outer = getattr(self._inside, "depth", 0) == 0
        if outer:
            with self._lock:
                self.calls[kind] += pages
                self.paths.append((kind, str(path)))
            if self.latency:
                time.sleep(self.latency * pages)
        self._inside.depth = getattr(self._inside, "depth", 0) + 1
        try:
            yield
        finally:
            self._inside.depth -= 1

    def _open(self, path, *args, **kwargs):
        with self._request("get", path):
            return super()._open(path, *args, **kwargs)

    def ls(self, path, *args, **kwargs):
        with self._request("list", path):
            return super().ls(path, *args, **kwargs)

    def info(self, path, *args, **kwargs):
        with self._request("info", path):
            return super().info(path, *args, **kwargs)

    def find(self, path, *args, **kwargs):
        # one paginated listing: walked here without counting, then charged per page
        self._inside.depth = getattr(self._inside, "depth", 0) + 1
        try:
            found = super().find(path, *args, **kwargs)
        finally:
            self._inside.depth -= 1
        with self._request("list", path, pages=max(1, -(-len(found) // PAGE))):
            return found


def register(latency: float = 0.0) -> str:
    """Register ``latencyfile://`` with ``latency`` seconds per request; return the URL prefix."""
    fsspec.register_implementation(PROTOCOL, LatencyFileSystem, clobber=True)
    LatencyFileSystem.reset(latency)
    return f"{PROTOCOL}://"
