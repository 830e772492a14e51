"""All file access goes through here: one fsspec filesystem per checkpoint.

Paths inside the package are always '/'-joined strings relative to a root, so
decoding code never sees a URL scheme. The reader only ever reads: no writes,
no locks, no renames.

With ``verify_checksums`` (the default) every file read is checked against the
checksum sidecars beside it, when there are any (see :mod:`state_reader.io.integrity`).
"""

from __future__ import annotations

import errno
import os
import posixpath
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from state_reader.errors import StateReaderError, StorageError
from state_reader.io.integrity import SIDECAR_SUFFIX, hadoop_sidecar, spark_sidecar, verify_hadoop, verify_spark

# Hadoop's scheme names for S3 that fsspec does not know under those names.
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}


def io_threads() -> int:
    """Files fetched at once by :meth:`Storage.read_many`: STATE_READER_IO_THREADS, else 16 (1: one by one)."""
    setting = os.environ.get("STATE_READER_IO_THREADS", "").strip()
    return int(setting) if setting.isdigit() and int(setting) > 0 else 16


def _split_url(url: str) -> tuple[str, str, str]:
    """Return (fsspec protocol, scheme as given, path without scheme) for a path or URL."""
    if "://" not in url:
        if url.startswith("file:"):  # Hadoop writes file:/abs/path
            return "file", "file", url[len("file:"):]
        return "file", "file", url
    scheme, rest = url.split("://", 1)
    given = scheme.lower()
    return _SCHEME_ALIASES.get(given, given), given, rest


@dataclass
class Storage:
    """Read-only access to the files of one checkpoint.

    ``root`` is the checkpoint root as a path the filesystem understands; every
    method takes paths relative to it.
    """

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    # check files against their .crc sidecars (Hadoop's hidden ones and Spark's) when present
    verify_checksums: bool = True

    def __post_init__(self) -> None:
        protocol, scheme, path = _split_url(self.url)
        self.protocol = protocol
        self.scheme = scheme
        if not isinstance(self.storage_options, dict):
            raise StorageError(
                f"storage options for {self.url!r} must be a mapping of names to values, "
                f"got {type(self.storage_options).__name__}", path=self.url)
        if protocol == "file":
            path = posixpath.abspath(path) if path else path
        self.root = path.rstrip("/") or "/"
        # directory -> names seen by the last listing; tells which sidecars exist without probing
        self._listed: dict[str, set[str]] = {}
        # a local disk needs fsspec only to write or to walk a tree (importing it costs ~60 ms of
        # a command's start); any other filesystem, or options, are opened now so that they fail here
        self._fs: Any = None if protocol == "file" and not self.storage_options else self._open_fs()

    @property
    def fs(self) -> Any:
        """The fsspec filesystem (opened on first use for a local disk)."""
        if self._fs is None:
            self._fs = self._open_fs()
        return self._fs

    def _open_fs(self) -> Any:
        import fsspec

        protocol = self.protocol
        try:
            return fsspec.filesystem(protocol, **self.storage_options)
        except ImportError as exc:
            raise StorageError(
                f"cannot open {self.url!r}: the fsspec implementation of '{protocol}://' is not installed "
                f"({exc}); for s3:// and s3a:// install 's3fs', for gs:// 'gcsfs', for abfs:// 'adlfs'",
                path=self.url) from exc
        except OSError as exc:
            if protocol in ("hdfs", "viewfs") and "libjvm" in str(exc):
                raise StorageError(
                    f"cannot open {self.url!r}: {protocol}:// needs pyarrow's HDFS client, which needs a JVM "
                    "(JAVA_HOME) and the Hadoop libraries (HADOOP_HOME, CLASSPATH from `hadoop classpath --glob`); "
                    "or read the checkpoint through another fsspec protocol (webhdfs://, or a copy)",
                    path=self.url) from exc
            raise StorageError(
                f"cannot open a filesystem for {self.url!r} with storage options "
                f"{sorted(self.storage_options)}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                path=self.url) from exc
        except Exception as exc:  # unknown protocol, or options the filesystem refuses
            raise StorageError(
                f"cannot open a filesystem for {self.url!r} with storage options "
                f"{sorted(self.storage_options)}: {type(exc).__name__}: {exc}", path=self.url) from exc

    def __getstate__(self) -> dict[str, Any]:
        # fsspec filesystems pickle, but rebuilding keeps executors independent
        return {"url": self.url, "storage_options": self.storage_options,
                "verify_checksums": self.verify_checksums}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url = state["url"]
        self.storage_options = state["storage_options"]
        self.verify_checksums = state.get("verify_checksums", True)
        self.__post_init__()

    def full(self, rel: str) -> str:
        """Filesystem path of ``rel`` (relative to the root)."""
        return posixpath.join(self.root, rel) if rel else self.root

    def display(self, rel: str) -> str:
        """Path of ``rel`` as the user would write it, for error messages."""
        if self.protocol == "file":
            return self.full(rel)
        return f"{self.scheme}://{self.full(rel)}"

    def _wrap(self, exc: Exception, rel: str, what: str) -> StateReaderError:
        if isinstance(exc, StateReaderError):
            return exc
        return StorageError(f"{what} {self.display(rel)} failed: {exc}", path=self.display(rel))

    def _fresh(self, rel: str) -> None:
        """Drop what the filesystem cached about ``rel``: a live query keeps adding files."""
        if self._fs is None:
            return
        try:
            self.fs.invalidate_cache(self.full(rel))
        except Exception:  # a cache that cannot be dropped only means an older listing
            pass

    def list_names(self, rel: str) -> list[str] | None:
        """Names of the entries of directory ``rel``, or None if it does not exist."""
        if self.protocol == "file":
            return self._list_local(rel)
        self._fresh(rel)
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
        self._listed[rel] = set(names)
        return names

    def list_sizes(self, rel: str) -> dict[str, int] | None:
        """File name -> size of directory ``rel``, or None if it does not exist."""
        if self.protocol == "file":
            return self._sizes_local(rel)
        self._fresh(rel)
        try:
            entries = self.fs.ls(self.full(rel), detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except Exception as exc:
            raise self._wrap(exc, rel, "listing") from exc
        out = {}
        seen = set()
        for entry in entries:
            name = posixpath.basename(str(entry["name"]).rstrip("/"))
            seen.add(name)
            if name and entry.get("type") != "directory":
                out[name] = int(entry.get("size") or 0)
        self._listed[rel] = seen
        return out

    # A local disk is read with the os module directly: fsspec's local filesystem normalises
    # every path again on each call, which cost about a third of a millisecond per partition.
    def _list_local(self, rel: str) -> list[str] | None:
        try:
            names = os.listdir(self.full(rel))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise self._wrap(exc, rel, "listing") from exc
        self._listed[rel] = set(names)
        return names

    def _sizes_local(self, rel: str) -> dict[str, int] | None:
        out: dict[str, int] = {}
        seen: set[str] = set()
        try:
            with os.scandir(self.full(rel)) as entries:
                for entry in entries:
                    seen.add(entry.name)
                    try:
                        if not entry.is_dir():
                            out[entry.name] = entry.stat().st_size
                    except FileNotFoundError:  # removed since the listing (maintenance)
                        seen.discard(entry.name)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise self._wrap(exc, rel, "listing") from exc
        self._listed[rel] = seen
        return out

    def isdir(self, rel: str) -> bool:
        if self.protocol == "file":
            return os.path.isdir(self.full(rel))
        try:
            return bool(self.fs.isdir(self.full(rel)))
        except Exception as exc:
            raise self._wrap(exc, rel, "checking") from exc

    def exists(self, rel: str) -> bool:
        if self.protocol == "file":
            return os.path.exists(self.full(rel))
        try:
            return bool(self.fs.exists(self.full(rel)))
        except Exception as exc:
            raise self._wrap(exc, rel, "checking") from exc

    def read_bytes(self, rel: str) -> bytes:
        """Whole content of file ``rel``; FileNotFoundError if it is absent.

        With ``verify_checksums`` the bytes are checked against the file's checksum
        sidecars first; a mismatch raises ChecksumMismatchError naming the file.
        """
        data = self._read_raw(rel)
        if self.verify_checksums:
            self._verify(rel, data)
        return data

    def read_many(self, rels: list[str]) -> list[bytes]:
        """:meth:`read_bytes` of each of ``rels``, in order, fetched concurrently.

        On an object store a read is latency-bound; fetching the files one version
        needs at once takes about one round trip instead of one per file, and leaves
        a running query's cleanup less time to delete them under the read. The
        first missing file (in ``rels`` order) raises FileNotFoundError whose
        ``filename`` is its ``rel``.
        """
        def fetch(rel: str) -> bytes:
            try:
                return self.read_bytes(rel)
            except FileNotFoundError as exc:
                raise FileNotFoundError(errno.ENOENT, "no such file", rel) from exc

        threads = min(len(rels), io_threads())
        # a local disk answers at once: threads would only add their start-up (about 2 ms a call)
        if threads <= 1 or self.protocol == "file":
            return [fetch(rel) for rel in rels]
        with ThreadPoolExecutor(threads, thread_name_prefix="state_reader_io") as pool:
            return list(pool.map(fetch, rels))

    def _read_raw(self, rel: str) -> bytes:
        try:
            with (open(self.full(rel), "rb") if self.protocol == "file" else self.fs.open(self.full(rel), "rb")) as fh:
                return fh.read()
        except FileNotFoundError:
            raise
        except IsADirectoryError:
            raise FileNotFoundError(self.display(rel)) from None
        except Exception as exc:
            raise self._wrap(exc, rel, "reading") from exc

    def _names_for_sidecars(self, directory: str, name: str) -> set[str] | None:
        """Names in ``directory`` as recently listed (listing it when ``name`` is not among
        them), or None when it cannot be listed and sidecars must be probed."""
        names = self._listed.get(directory)
        if names is not None and name in names:
            return names
        try:
            self.list_names(directory)
        except StateReaderError:
            return None
        return self._listed.get(directory)

    def _verify(self, rel: str, data: bytes) -> None:
        directory, name = posixpath.split(rel)
        if name.endswith(SIDECAR_SUFFIX):
            return
        names = self._names_for_sidecars(directory, name)
        for sidecar, check in ((hadoop_sidecar(name), verify_hadoop), (spark_sidecar(name), verify_spark)):
            if names is not None and sidecar not in names:
                continue
            sidecar_rel = posixpath.join(directory, sidecar)
            try:
                raw = self._read_raw(sidecar_rel)
            except FileNotFoundError:
                continue  # removed since the listing (maintenance): nothing to check against
            check(data, raw, self.display(rel), self.display(sidecar_rel))

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")
