"""All file access goes through here: one fsspec filesystem per checkpoint.

Paths inside the package are always '/'-joined strings relative to a root, so
decoding code never sees a URL scheme. The reader only ever reads: no writes,
no locks, no renames.

With ``verify_checksums`` (the default) every file read is checked against the
checksum sidecars beside it, when there are any (see :mod:`state_reader.io.integrity`).
A sidecar that is not a checksum file at all (a Git LFS pointer in its place) says
nothing about the file: that file is read unverified, and one warning on the
``state_reader.io`` logger names such sidecars when the read ends
(``MalformedChecksums``, ``checksum_report`` in :mod:`state_reader.io.integrity`).

On anything but a local disk every call is a round trip (tens of milliseconds on
an object store), so a remote ``Storage`` lists each operator's state directory
once, recursively (one paginated listing on S3, ADLS and GCS: names and sizes),
and answers every later question about a directory, a file's existence or size
from that listing for as long as it lives (one plan and its read); and files are
fetched concurrently (:meth:`Storage.prefetch`, :meth:`Storage.read_many`).
Calls and bytes are counted (``io_counts`` in :mod:`state_reader.io.calls`, which also holds
the pools fetches run on) and logged at debug level on the ``state_reader.io`` logger.
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import re
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from state_reader.errors import StateReaderError, StorageError
from state_reader.io.calls import count_call, fetch_pool, io_threads, shared_listings

# the names docs/reading.md gave these counters before they moved: user scripts keep working
from state_reader.io.calls import io_counts as io_counts
from state_reader.io.calls import io_counts_since as io_counts_since
from state_reader.io.filesystems import open_filesystem, split_url
from state_reader.io.integrity import (
    SIDECAR_SUFFIX,
    MalformedChecksum,
    MalformedChecksums,
    NotAChecksumFileError,
    current_report,
    hadoop_sidecar,
    spark_sidecar,
    verify_hadoop,
    verify_spark,
)

log = logging.getLogger("state_reader.io")

# A directory listed recursively in one call: an operator's state (its partitions, stores, SSTs,
# metadata and schemas), everything a plan, a read, the display and the doctor ask about.
_RECURSIVE_ROOT = re.compile(r"^state/\d+(?=/|$)")


def _recursive_root(rel: str) -> str | None:
    """The directory listed recursively that holds ``rel`` (``state/<op>``), or None."""
    m = _RECURSIVE_ROOT.match(rel)
    return m.group(0) if m else None


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
        protocol, scheme, path = split_url(self.url)
        self.protocol = protocol
        self.scheme = scheme
        if not isinstance(self.storage_options, dict):
            raise StorageError(
                f"storage options for {self.url!r} must be a mapping of names to values, "
                f"got {type(self.storage_options).__name__}",
                path=self.url,
            )
        if protocol == "file":
            path = posixpath.abspath(path) if path else path
        self.root = path.rstrip("/") or "/"
        # directory -> names seen by the last listing; tells which sidecars exist without probing
        self._listed: dict[str, set[str]] = {}
        # remote only: directory -> {name: size, or None for a sub-directory}, None for no such directory;
        # every directory under a prefix of _recursive is in it (one listing answered them all)
        self._tree: dict[str, dict[str, int | None] | None] = {}
        self._recursive: set[str] = set()
        self._tree_lock = threading.RLock()
        self._inflight: dict[str, Future[None]] = {}  # listings under way, by what they list
        # rel -> what a file that never changes once written says, parsed by whichever reader read it
        # (a snapshot zip's list of SSTs, a changelog's lineage): kept within one operation made of
        # several reads (one_listing) and shared as its listings are, so that it reads such a file once;
        # a storage made outside one keeps nothing (a long change feed would hold every file's)
        self._said: dict[str, Any] | None = {} if shared_listings() is not None else None
        # remote only: files being fetched ahead of their read (rel -> its bytes, or the error)
        self._pending: dict[str, Future[bytes]] = {}
        self._pending_lock = threading.Lock()
        # the sidecars met that are not checksum files: the operation's, or this storage's own
        record = current_report()
        self.malformed: MalformedChecksums = record if record is not None else MalformedChecksums()
        shared = shared_listings()
        if shared is not None and protocol != "file":
            key = (protocol, self.root, repr(sorted(self.storage_options.items())))
            self._tree, self._recursive, self._tree_lock, self._inflight, self._said = shared.setdefault(
                key, (self._tree, self._recursive, self._tree_lock, self._inflight, self._said)
            )
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
        return open_filesystem(self.url, self.protocol, self.storage_options)

    def __getstate__(self) -> dict[str, Any]:
        # fsspec filesystems pickle, but rebuilding keeps executors independent; the listing goes
        # along, so that Spark tasks read what the driver planned from without listing again
        with self._tree_lock:
            return {
                "url": self.url,
                "storage_options": self.storage_options,
                "verify_checksums": self.verify_checksums,
                "tree": dict(self._tree),
                "recursive": set(self._recursive),
            }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url = state["url"]
        self.storage_options = state["storage_options"]
        self.verify_checksums = state.get("verify_checksums", True)
        self.__post_init__()
        self._tree.update(state.get("tree") or {})
        self._recursive.update(state.get("recursive") or ())

    @property
    def remote(self) -> bool:
        """Whether each call is a round trip worth saving (anything but a local disk)."""
        return self.protocol != "file"

    def forget(self, rel: str | None = None) -> None:
        """Drop what this storage has listed (of ``rel`` and below, or all): the next question
        lists again. A running query's commit log is read afresh this way."""
        with self._tree_lock:
            if not rel or not rel.strip("/"):
                self._tree.clear()
                self._recursive.clear()
                self._listed.clear()
                if self._said is not None:
                    self._said.clear()
                return
            rel = rel.strip("/")
            for key in [k for k in self._tree if k == rel or k.startswith(rel + "/")]:
                del self._tree[key]
            said = self._said if self._said is not None else {}
            for key in [k for k in said if k.startswith(rel + "/")]:
                del said[key]
            for key in [k for k in self._recursive if k == rel or k.startswith(rel + "/")]:
                self._recursive.discard(key)
            self._listed.pop(rel, None)

    def remember(self, rel: str, said: Any) -> None:
        """Keep what file ``rel`` says, as its reader parsed it, for the other readers of the same
        operation (within :func:`~state_reader.io.calls.one_listing`; outside one, nothing is kept):
        only for a file that never changes once written and was read checked against its sidecars."""
        if self._said is None:
            return
        with self._tree_lock:
            self._said[rel] = said

    def recall(self, rel: str) -> Any | None:
        """What :meth:`remember` kept of ``rel``, or None: its readers need not fetch it again."""
        if self._said is None:
            return None
        with self._tree_lock:
            return self._said.get(rel)

    def full(self, rel: str) -> str:
        """Filesystem path of ``rel`` (relative to the root)."""
        return posixpath.join(self.root, rel) if rel else self.root

    def qualified(self, rel: str) -> str:
        """``rel`` as the fully qualified URI Hadoop makes of it (``file:/abs/path`` on a local
        disk), the form Spark records in operator metadata."""
        if self.protocol == "file":
            return "file:" + self.full(rel)
        return f"{self.scheme}://{self.full(rel)}"

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
        entries = self._entries(rel)
        return None if entries is None else list(entries)

    def list_sizes(self, rel: str) -> dict[str, int] | None:
        """File name -> size of directory ``rel``, or None if it does not exist."""
        if self.protocol == "file":
            return self._sizes_local(rel)
        entries = self._entries(rel)
        return None if entries is None else {n: s for n, s in entries.items() if s is not None}

    def list_entries(self, rel: str) -> dict[str, int | None] | None:
        """Name -> size (None for a sub-directory) of directory ``rel``, or None if it does not exist."""
        if self.protocol == "file":
            sizes = self._sizes_local(rel)
            return None if sizes is None else {n: sizes.get(n) for n in self._listed.get(rel, sizes)}
        entries = self._entries(rel)
        return None if entries is None else dict(entries)

    def files_under(self, rel: str) -> list[str]:
        """Paths (relative to the root, sorted) of every file below directory ``rel``, at any depth;
        none when there is no such directory. Remote, the whole tree is one listing call."""
        rel = rel.strip("/")
        self.list_tree(rel)
        found: list[str] = []
        todo = [rel]
        while todo:
            directory = todo.pop()
            for name, size in (self.list_entries(directory) or {}).items():
                path = posixpath.join(directory, name) if directory else name
                (todo if size is None else found).append(path)
        return sorted(found)

    def size(self, rel: str) -> int | None:
        """Size of file ``rel`` as listed, None when it is not there (no call beyond the listing)."""
        directory, name = posixpath.split(rel.strip("/"))
        return (self.list_sizes(directory) or {}).get(name)

    def list_tree(self, rel: str) -> None:
        """List directory ``rel`` and everything below it in one call (remote only; a local disk
        is listed directory by directory as asked), so that no later question about it costs a call."""
        if self.protocol == "file":
            return
        rel = rel.strip("/")
        if not self._covered(rel):
            self._once(f"tree:{rel}", lambda: self._list_tree(rel))

    def list_ahead(self, rels: Iterable[str]) -> None:
        """Start listing directories ``rels`` (``state/<op>`` recursively) in the background, while
        other calls go on; a question about one of them then waits for its listing (remote only)."""
        if self.protocol == "file" or io_threads() <= 1:
            return
        for rel in rels:
            rel = rel.strip("/")
            if self._covered(rel) or rel in self._tree:
                continue
            top = _recursive_root(rel)
            key, call = (
                (f"tree:{top}", lambda top=top: self._list_tree(top))
                if top is not None
                else (f"ls:{rel}", lambda rel=rel: self._list_one(rel))
            )
            fetch_pool().submit(self._quietly, key, call)

    def _quietly(self, key: str, call: Callable[[], None]) -> None:
        try:
            self._once(key, call)
        except Exception:  # the question that needs this listing lists again and reports the error
            pass

    def _covered(self, rel: str) -> bool:
        with self._tree_lock:
            return any(rel == p or rel.startswith(p + "/") for p in self._recursive)

    def _once(self, key: str, call: Callable[[], None]) -> None:
        """``call()`` (a listing), made once however many threads ask for ``key`` at the same time."""
        with self._tree_lock:
            running = self._inflight.get(key)
            if running is None:
                mine: Future[None] = Future()
                self._inflight[key] = mine
        if running is not None:
            running.result()
            return
        try:
            call()
            mine.set_result(None)
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        finally:
            with self._tree_lock:
                self._inflight.pop(key, None)

    def _list_tree(self, rel: str) -> None:
        if self._covered(rel):
            return
        self._fresh(rel)
        full = self.full(rel)
        try:
            found = self.fs.find(full, withdirs=True, detail=True)
        except FileNotFoundError:
            found = {}
        except Exception as exc:
            raise self._wrap(exc, rel, "listing") from exc
        count_call("list")
        tree: dict[str, dict[str, int | None] | None] = {}
        prefix = full.rstrip("/") + "/"
        for path, info in found.items():
            path = str(path).rstrip("/")
            if path == full.rstrip("/"):
                if info.get("type") == "directory":
                    tree.setdefault(rel, {})
                continue
            if not path.startswith(prefix):
                continue
            sub = posixpath.join(rel, path[len(prefix) :]) if rel else path[len(prefix) :]
            is_dir = info.get("type") == "directory"
            # every ancestor up to ``rel`` is a directory, whether or not the store lists it
            child, parent = sub, posixpath.dirname(sub)
            entries = tree.setdefault(parent, {})
            entries[posixpath.basename(child)] = None if is_dir else int(info.get("size") or 0)  # type: ignore[index]
            if is_dir:
                tree.setdefault(sub, {})
            while parent != rel and parent:
                child, parent = parent, posixpath.dirname(parent)
                up = tree.setdefault(parent, {})
                up.setdefault(posixpath.basename(child), None)  # type: ignore[union-attr]
        with self._tree_lock:
            self._tree.update(tree)
            self._tree.setdefault(rel, None)
            self._recursive.add(rel)
        log.debug("listed %s recursively: %d entries", self.display(rel), len(found))

    def _list_one(self, rel: str) -> None:
        self._fresh(rel)
        try:
            listed = self.fs.ls(self.full(rel), detail=True)
        except (FileNotFoundError, NotADirectoryError):
            listed = None
        except Exception as exc:
            raise self._wrap(exc, rel, "listing") from exc
        count_call("list")
        entries: dict[str, int | None] | None = None
        if listed is not None:
            entries = {}
            own = self.full(rel).rstrip("/")
            for entry in listed:
                path = str(entry["name"]).rstrip("/")
                name = posixpath.basename(path)
                if not name or (path == own and entry.get("type") != "directory"):
                    continue  # listing a file returns the file itself
                entries[name] = None if entry.get("type") == "directory" else int(entry.get("size") or 0)
            if not entries and any(str(e["name"]).rstrip("/") == own for e in listed):
                entries = None  # ``rel`` is a file
        with self._tree_lock:
            self._tree[rel] = entries
        log.debug("listed %s: %s entries", self.display(rel), "no such directory" if entries is None else len(entries))

    def _entries(self, rel: str) -> dict[str, int | None] | None:
        """The entries of directory ``rel`` (name -> size, None for a directory), or None when there
        is no such directory: from what was listed, else listed now (``state/<op>`` recursively)."""
        rel = rel.strip("/")
        for _ in range(2):
            with self._tree_lock:
                if rel in self._tree:
                    return self._tree[rel]
                if any(rel == p or rel.startswith(p + "/") for p in self._recursive):
                    return None  # under a recursive listing, yet not a directory in it
            top = _recursive_root(rel)
            if top is not None:
                self._once(f"tree:{top}", partial(self._list_tree, top))
            else:
                self._once(f"ls:{rel}", lambda: self._list_one(rel))
        with self._tree_lock:
            return self._tree.get(rel)

    # A local disk is read with the os module directly: fsspec's local filesystem normalises
    # every path again on each call, which cost about a third of a millisecond per partition.
    def _list_local(self, rel: str) -> list[str] | None:
        count_call("list")
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
        count_call("list")
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
        """Whether ``rel`` is a directory (remote: from the listing of its parent)."""
        if self.protocol == "file":
            return os.path.isdir(self.full(rel))
        rel = rel.strip("/")
        if rel:
            return self._entries(rel) is not None
        count_call("info")
        try:
            return bool(self.fs.isdir(self.full(rel)))
        except Exception as exc:
            raise self._wrap(exc, rel, "checking") from exc

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` exists (remote: from the listing of its parent)."""
        if self.protocol == "file":
            return os.path.exists(self.full(rel))
        rel = rel.strip("/")
        if rel:
            directory, name = posixpath.split(rel)
            return name in (self._entries(directory) or {})
        count_call("info")
        try:
            return bool(self.fs.exists(self.full(rel)))
        except Exception as exc:
            raise self._wrap(exc, rel, "checking") from exc

    def read_bytes(self, rel: str) -> bytes:
        """Whole content of file ``rel``; FileNotFoundError if it is absent.

        With ``verify_checksums`` the bytes are checked against the file's checksum
        sidecars first; a mismatch raises ChecksumMismatchError naming the file.
        """
        if self.verify_checksums and self.protocol != "file":
            self.prefetch([rel])  # the file and its sidecars at once
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
        self.prefetch(rels)
        out = []
        for rel in rels:
            try:
                out.append(self.read_bytes(rel))
            except FileNotFoundError as exc:
                self.discard(rels)
                raise FileNotFoundError(errno.ENOENT, "no such file", rel) from exc
        return out

    def _with_sidecars(self, rels: Iterable[str]) -> list[str]:
        """``rels`` and, when checksums are verified, the sidecars the listing shows beside them."""
        out = []
        for rel in rels:
            out.append(rel)
            directory, name = posixpath.split(rel)
            if not self.verify_checksums or name.endswith(SIDECAR_SUFFIX):
                continue
            names = self._entries(directory) or {}
            out.extend(
                posixpath.join(directory, sidecar)
                for sidecar in (hadoop_sidecar(name), spark_sidecar(name))
                if sidecar in names
            )
        return out

    def prefetch(self, rels: Iterable[str], *, sidecars: bool = True, small: bool = False) -> None:
        """Start fetching ``rels`` (and their checksum sidecars) concurrently; the next read of
        each takes its bytes, or the error its fetch met (a file gone since the listing is
        FileNotFoundError then, as it would have been). ``small``: small files looked into for what
        they name, ``calls.SMALL_FETCHES_PER_FETCH`` times as many at once. A local disk is read when
        asked instead, as is everything with STATE_READER_IO_THREADS=1."""
        if self.protocol == "file" or io_threads() <= 1:
            return
        wanted = self._with_sidecars(rels) if sidecars else list(rels)
        pool = fetch_pool(small)
        with self._pending_lock:
            for rel in wanted:
                if rel not in self._pending:
                    self._pending[rel] = pool.submit(self._get, rel)

    def peek_bytes(self, rel: str) -> bytes:
        """The bytes of ``rel`` unchecked, kept (with its sidecars) for the read that follows:
        for looking into a file (a snapshot's list of SSTs) ahead of its read, at no second fetch."""
        if self.protocol == "file" or io_threads() <= 1:
            return self._read_raw(rel)
        self.prefetch([rel])
        with self._pending_lock:
            future = self._pending.get(rel)
        return future.result() if future is not None else self._read_raw(rel)

    def read_unchecked(self, rel: str) -> bytes:
        """The bytes of ``rel`` without its checksum sidecars: for looking into a file for what it
        names (a snapshot's SSTs, to size them), where nothing read is returned as state."""
        return self._read_raw(rel)

    def discard(self, rels: Iterable[str]) -> None:
        """Let go of what was fetched ahead for ``rels`` (and their sidecars) and not read."""
        if self.protocol == "file":
            return
        with self._pending_lock:
            for rel in list(rels):
                for key in (
                    rel,
                    *(
                        posixpath.join(posixpath.dirname(rel), s(posixpath.basename(rel)))
                        for s in (hadoop_sidecar, spark_sidecar)
                    ),
                ):
                    future = self._pending.pop(key, None)
                    if future is not None:
                        future.cancel()

    def _get(self, rel: str) -> bytes:
        """One fetch of a whole file: a single GET on an object store (``cat_file``; ``open``
        would ask for the size first)."""
        try:
            data = self._get_s3(self.full(rel)) if self._s3_get else self.fs.cat_file(self.full(rel))
        except FileNotFoundError:
            count_call("get")
            log.debug("fetch %s: gone", self.display(rel))
            raise
        except IsADirectoryError:
            count_call("get")
            raise FileNotFoundError(self.display(rel)) from None
        except Exception as exc:
            count_call("get")
            log.debug("fetch %s failed: %s", self.display(rel), exc)
            raise self._wrap(exc, rel, "reading") from exc
        count_call("get", nbytes=len(data))
        log.debug("fetched %s: %d bytes", self.display(rel), len(data))
        return bytes(data)

    @property
    def _s3_get(self) -> bool:
        """Whether files are fetched with one ``get_object`` call of s3fs (see :meth:`_get_s3`)."""
        fs = self.fs
        return type(fs).__module__.startswith("s3fs") and hasattr(fs, "_call_s3") and hasattr(fs, "loop")

    def _get_s3(self, full: str) -> bytes:
        """One GET through s3fs. Its ``cat_file`` asks the size first (a HEAD: a second round
        trip per file) and wraps its retried call in a second retry loop, so a server that stops
        answering costs retries squared (five by five) timeouts before the error comes; here
        the call is retried as s3fs retries any call, once over."""
        from fsspec.asyn import sync

        fs = self.fs
        bucket, key, version = fs.split_path(full)

        async def call() -> bytes:
            resp = await fs._call_s3(
                "get_object", Bucket=bucket, Key=key, **({"VersionId": version} if version else {})
            )
            try:
                return await resp["Body"].read()
            finally:
                resp["Body"].close()

        return sync(fs.loop, call)

    def _read_raw(self, rel: str) -> bytes:
        if self.protocol != "file":
            with self._pending_lock:
                future = self._pending.pop(rel, None)
            return future.result() if future is not None else self._get(rel)
        try:
            with open(self.full(rel), "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            raise
        except IsADirectoryError:
            raise FileNotFoundError(self.display(rel)) from None
        except Exception as exc:
            raise self._wrap(exc, rel, "reading") from exc
        count_call("get", nbytes=len(data))
        return data

    def _names_for_sidecars(self, directory: str, name: str) -> set[str] | None:
        """Names in ``directory`` as recently listed (listing it when ``name`` is not among
        them), or None when it cannot be listed and sidecars must be probed."""
        if self.protocol != "file":
            try:
                return set(self._entries(directory) or ())
            except StateReaderError:
                return None
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
        for kind, sidecar, check in (
            ("hadoop", hadoop_sidecar(name), verify_hadoop),
            ("spark", spark_sidecar(name), verify_spark),
        ):
            if names is not None and sidecar not in names:
                continue
            sidecar_rel = posixpath.join(directory, sidecar)
            try:
                raw = self._read_raw(sidecar_rel)
            except FileNotFoundError:
                continue  # removed since the listing (maintenance): nothing to check against
            try:
                check(data, raw, self.display(rel), self.display(sidecar_rel))
            except NotAChecksumFileError as exc:
                # no evidence against the file (Hadoop's reader, too, reads on without such a
                # sidecar): it is read unverified, and a warning names the sidecar once
                log.debug("%s: %s; %s read unverified", self.display(sidecar_rel), exc.reason, self.display(rel))
                self.malformed.add(MalformedChecksum(self.display(sidecar_rel), self.display(rel), kind, exc.reason))

    def warn_malformed_checksums(self) -> None:
        """One warning naming the sidecars met that are not checksum files and that no warning has
        named yet; none while a ``checksum_report`` (in :mod:`state_reader.io.integrity`) that names
        them at its end is under way."""
        if not self.malformed.deferred:
            self.malformed.warn()

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")
