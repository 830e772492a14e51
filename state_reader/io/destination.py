"""The one place state_reader writes: a new checkpoint directory, through fsspec.

A destination must not exist or be empty. Local files are written under a
temporary name and renamed into place, each with the hidden Hadoop ``.crc``
sidecar that Spark's local filesystem writes and checks; object stores (whose
puts are atomic) get the bytes alone, as Spark writes them there.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import posixpath
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from state_reader.errors import DestinationNotEmptyError, StateReaderError, StorageError
from state_reader.io.integrity import HadoopChecksums, hadoop_sidecar
from state_reader.io.storage import Storage

# what a destination's ``metadata`` holds until its rewrite is complete: not JSON, so Spark refuses to start
INCOMPLETE_PREFIX = b"state_reader: incomplete rewrite"


def incomplete_marker(source: str, now: datetime.datetime | None = None) -> bytes:
    """The ``metadata`` of a destination being written: what it is, from which source and since when."""
    when = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%d %H:%M:%S UTC")
    return INCOMPLETE_PREFIX + f" of {source} started {when}; do not start a query from this directory\n".encode()


def incomplete_rewrite_started(metadata: bytes) -> str | None:
    """When the incomplete rewrite that wrote ``metadata`` started (as its marker says), or None
    when ``metadata`` is no such marker."""
    if not metadata.startswith(INCOMPLETE_PREFIX):
        return None
    text = metadata.decode("utf-8", "replace")
    _, found, rest = text.rpartition(" started ")
    return rest.split(";", 1)[0].strip() if found else "an unknown time"


def incomplete_rewrite_in(storage: Storage) -> str | None:
    """When the incomplete rewrite that left ``storage``'s ``metadata`` started, or None when that
    file is missing, unreadable or no such marker: what the reader and a new rewrite both ask."""
    try:
        return incomplete_rewrite_started(storage.read_bytes("metadata"))
    except (StateReaderError, OSError):
        return None


@dataclass
class Destination:
    """Write access to the checkpoint at ``url`` (a local path or an fsspec URL)."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # the same URL handling and filesystem as reading
        self._storage = Storage(self.url, dict(self.storage_options), verify_checksums=False)
        self.fs = self._storage.fs
        self.root = self._storage.root
        self.local = self._storage.protocol == "file"
        self.written = 0

    def display(self, rel: str = "") -> str:
        return self._storage.display(rel)

    def qualified(self, rel: str) -> str:
        """The URI Spark records for ``rel`` of this destination (see :meth:`Storage.qualified`)."""
        return self._storage.qualified(rel)

    def full(self, rel: str) -> str:
        return self._storage.full(rel)

    def _leftovers(self) -> list[str]:
        """The names in the destination that an earlier, incomplete rewrite left (empty when there
        are none); DestinationNotEmptyError when it holds anything else."""
        if not self._storage.exists(""):
            return []
        if not self._storage.isdir(""):
            raise DestinationNotEmptyError(
                f"{self.display()} is a file; a rewrite writes a new checkpoint directory", path=self.display()
            )
        names = self._storage.list_names("") or []
        if not names:
            return []
        if "metadata" in names and incomplete_rewrite_in(self._storage) is not None:
            return names
        shown = ", ".join(sorted(names)[:5])
        raise DestinationNotEmptyError(
            f"{self.display()} is not empty ({shown}{', ...' if len(names) > 5 else ''}); a rewrite only "
            "writes a new checkpoint: give a path that does not exist or an empty directory",
            path=self.display(),
        )

    def begin(self, source: str) -> None:
        """Start a rewrite of ``source`` here: refuse a destination holding anything but an incomplete
        rewrite of ours, remove such an attempt (nothing ever started from it), and mark the
        destination incomplete until its real ``metadata`` is written last."""
        for name in self._leftovers():
            if name != "metadata":
                self.fs.rm(self.full(name), recursive=True)
        self.write("metadata", incomplete_marker(source))

    def write(self, rel: str, data: bytes | Iterable[bytes | memoryview]) -> int:
        """Write ``data`` (bytes, or pieces streamed one after another) to ``rel``, replacing it,
        with its Hadoop checksum sidecar on local disks; the number of bytes written.

        A file is whole or absent: written under a temporary name and renamed (local), or
        uploaded and committed only when every piece is in (object stores)."""
        pieces = (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data
        path = self.full(rel)
        try:
            if self.local:
                directory, name = posixpath.split(path)
                os.makedirs(directory, exist_ok=True)
                sums = HadoopChecksums()
                size = self._atomic(path, _fed(pieces, sums.update))
                self._atomic(posixpath.join(directory, hadoop_sidecar(name)), (sums.sidecar(),))
            elif isinstance(data, (bytes, bytearray, memoryview)):
                self.fs.pipe_file(path, bytes(data))
                size = len(data)
            else:
                size = self._upload(path, pieces)
        except OSError as exc:
            raise StorageError(f"writing {self.display(rel)} failed: {exc}", path=self.display(rel)) from exc
        self.written += size
        return size

    @staticmethod
    def _atomic(path: str, pieces: Iterable[bytes | memoryview]) -> int:
        directory, name = posixpath.split(path)
        temp = posixpath.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        size = 0
        try:
            with open(temp, "wb") as fh:
                for piece in pieces:
                    size += fh.write(piece)
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(temp)
            raise
        return size

    def _upload(self, path: str, pieces: Iterable[bytes | memoryview]) -> int:
        size = 0
        fh = self.fs.open(path, "wb")
        try:
            for piece in pieces:
                size += fh.write(piece)
        except BaseException:
            # an abandoned multipart upload leaves no object behind
            discard = getattr(fh, "discard", None)
            if discard is not None:
                discard()
                fh.closed = True  # so that nothing commits what is left of it later
            else:
                with contextlib.suppress(Exception):
                    fh.close()
                    self.fs.rm_file(path)
            raise
        fh.close()
        return size


def _fed(
    pieces: Iterable[bytes | memoryview], see: Callable[[bytes | memoryview], None]
) -> Iterator[bytes | memoryview]:
    """``pieces``, each shown to ``see`` on its way (a file checksummed as it is written)."""
    for piece in pieces:
        see(piece)
        yield piece
