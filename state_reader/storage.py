"""All file access goes through here: one fsspec filesystem per checkpoint.

Paths inside the package are always '/'-joined strings relative to a root, so
decoding code never sees a URL scheme. The reader only ever reads: no writes,
no locks, no renames.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

import fsspec

from .errors import StateReaderError, StorageError

# Hadoop's scheme names for S3 that fsspec does not know under those names.
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}


def _split_url(url: str) -> tuple[str, str]:
    """Return (fsspec protocol, path without scheme) for a path or URL."""
    if "://" not in url:
        if url.startswith("file:"):  # Hadoop writes file:/abs/path
            return "file", url[len("file:"):]
        return "file", url
    scheme, rest = url.split("://", 1)
    scheme = _SCHEME_ALIASES.get(scheme.lower(), scheme.lower())
    if scheme == "file":
        return "file", rest
    return scheme, rest


@dataclass
class Storage:
    """Read-only access to the files of one checkpoint.

    ``root`` is the checkpoint root as a path the filesystem understands; every
    method takes paths relative to it.
    """

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        protocol, path = _split_url(self.url)
        self.protocol = protocol
        try:
            self.fs = fsspec.filesystem(protocol, **self.storage_options)
        except (ImportError, ValueError) as exc:
            raise StorageError(
                f"cannot open a filesystem for {self.url!r}: {exc}", path=self.url
            ) from exc
        if protocol == "file":
            path = posixpath.abspath(path) if path else path
        self.root = path.rstrip("/") or "/"

    def __getstate__(self) -> dict[str, Any]:
        # fsspec filesystems pickle, but rebuilding keeps executors independent
        return {"url": self.url, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url = state["url"]
        self.storage_options = state["storage_options"]
        self.__post_init__()

    def full(self, rel: str) -> str:
        """Filesystem path of ``rel`` (relative to the root)."""
        return posixpath.join(self.root, rel) if rel else self.root

    def display(self, rel: str) -> str:
        """Path of ``rel`` as the user would write it, for error messages."""
        if self.protocol == "file":
            return self.full(rel)
        return f"{self.protocol}://{self.full(rel)}"

    def _wrap(self, exc: Exception, rel: str, what: str) -> StateReaderError:
        if isinstance(exc, StateReaderError):
            return exc
        return StorageError(f"{what} {self.display(rel)} failed: {exc}", path=self.display(rel))

    def list_names(self, rel: str) -> list[str] | None:
        """Names of the entries of directory ``rel``, or None if it does not exist."""
        try:
            entries = self.fs.ls(self.full(rel), detail=False)
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            return None
        except Exception as exc:
            raise self._wrap(exc, rel, "listing") from exc
        names = []
        for entry in entries:
            name = posixpath.basename(str(entry).rstrip("/"))
            if name:
                names.append(name)
        return names

    def list_sizes(self, rel: str) -> dict[str, int] | None:
        """File name -> size of directory ``rel``, or None if it does not exist."""
        try:
            entries = self.fs.ls(self.full(rel), detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except Exception as exc:
            raise self._wrap(exc, rel, "listing") from exc
        out = {}
        for entry in entries:
            name = posixpath.basename(str(entry["name"]).rstrip("/"))
            if name and entry.get("type") != "directory":
                out[name] = int(entry.get("size") or 0)
        return out

    def isdir(self, rel: str) -> bool:
        try:
            return bool(self.fs.isdir(self.full(rel)))
        except Exception as exc:
            raise self._wrap(exc, rel, "checking") from exc

    def exists(self, rel: str) -> bool:
        try:
            return bool(self.fs.exists(self.full(rel)))
        except Exception as exc:
            raise self._wrap(exc, rel, "checking") from exc

    def read_bytes(self, rel: str) -> bytes:
        """Whole content of file ``rel``; FileNotFoundError if it is absent."""
        try:
            with self.fs.open(self.full(rel), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            raise
        except IsADirectoryError:
            raise FileNotFoundError(self.display(rel)) from None
        except Exception as exc:
            raise self._wrap(exc, rel, "reading") from exc

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")
