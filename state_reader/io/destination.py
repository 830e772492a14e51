"""The one place state_reader writes: a new checkpoint directory, through fsspec.

A destination must not exist or be empty. Local files are written under a
temporary name and renamed into place, each with the hidden Hadoop ``.crc``
sidecar that Spark's local filesystem writes and checks; object stores (whose
puts are atomic) get the bytes alone, as Spark writes them there.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from dataclasses import dataclass, field
from typing import Any

from state_reader.errors import DestinationNotEmptyError, StorageError
from state_reader.io.integrity import hadoop_checksums, hadoop_sidecar
from state_reader.io.storage import Storage


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

    def full(self, rel: str) -> str:
        return self._storage.full(rel)

    def require_empty(self) -> None:
        """DestinationNotEmptyError unless the destination is missing or an empty directory."""
        if not self._storage.exists(""):
            return
        if not self._storage.isdir(""):
            raise DestinationNotEmptyError(
                f"{self.display()} is a file; a rewrite writes a new checkpoint directory", path=self.display())
        names = self._storage.list_names("") or []
        if names:
            shown = ", ".join(sorted(names)[:5])
            raise DestinationNotEmptyError(
                f"{self.display()} is not empty ({shown}{', ...' if len(names) > 5 else ''}); a rewrite only "
                "writes a new checkpoint: give a path that does not exist or an empty directory",
                path=self.display())

    def write(self, rel: str, data: bytes) -> None:
        """Write ``data`` to ``rel`` (replacing it), with its Hadoop checksum sidecar on local disks."""
        path = self.full(rel)
        try:
            if self.local:
                directory = posixpath.dirname(path)
                os.makedirs(directory, exist_ok=True)
                name = posixpath.basename(path)
                self._atomic(path, data)
                self._atomic(posixpath.join(directory, hadoop_sidecar(name)), hadoop_checksums(data))
            else:
                self.fs.pipe_file(path, data)
        except OSError as exc:
            raise StorageError(f"writing {self.display(rel)} failed: {exc}", path=self.display(rel)) from exc
        self.written += len(data)

    @staticmethod
    def _atomic(path: str, data: bytes) -> None:
        directory, name = posixpath.split(path)
        temp = posixpath.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        with open(temp, "wb") as fh:
            fh.write(data)
        os.replace(temp, path)
