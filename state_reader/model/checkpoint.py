"""The checkpoint directory: commit and offset logs, operators, partitions,
stores and operator metadata.

Layout (relative to the checkpoint root)::

    commits/<batch>            committed batches ("v1"/"v2" + JSON)
    offsets/<batch>            planned batches; line 2 holds the pinned SQL confs
    state/<op>/_metadata/metadata      operator metadata v1 (Spark 4.0+)
    state/<op>/_metadata/v2/<batch>    operator metadata v2 (transformWithState, join v3+)
    state/<op>/_stateSchema/<store>/   schema v3 files
    state/<op>/<partition>/[<store>/]  state files of one store

Batch ``b`` commits state store version ``b + 1``; version 0 is empty.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from state_reader.errors import (
    BatchNotRetainedError,
    CommittedBatchUnavailableError,
    CorruptFileError,
    IncompleteRewriteError,
    OffsetLogUnavailableError,
    OffsetMetadataUnavailableError,
    OperatorMetadataReadError,
    StateReaderError,
    UnsupportedOptionError,
)
from state_reader.io.destination import incomplete_rewrite_in
from state_reader.io.storage import Storage
from state_reader.model.conf import CONF_MIN_BATCHES_TO_RETAIN, shuffle_partitions

# the names of stores and of the fields Spark adds live apart (light to import); kept here for their users
from state_reader.model.store_names import (  # noqa: F401
    DEFAULT_STORE,
    EVENT_TIME_FIELD,
    JOIN_SIDES,
    JOIN_STORES,
    JOIN_V4_STORES,
    MATCHED_FIELD,
    WATERMARK_METADATA,
    join_side_stores,
)

# A unique id of checkpoint format 2, as it appears in state file names and the commit log.
UNIQUE_ID_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]*")
_STATE_FILE_RE = re.compile(r"^(\d+)(?:_(" + UNIQUE_ID_RE.pattern + r"))?\.(delta|snapshot|zip|changelog)$")


def is_schema_file(rel: str) -> bool:
    """Whether checkpoint-relative path ``rel`` is a state schema file: v1/v2 (``state/<op>/0/[<store>/]_metadata/
    schema``) or v3 (``state/<op>/_stateSchema/<store>/<batch>_<uuid>``)."""
    parts = rel.split("/")
    return parts[0] == "state" and (parts[-2:] == ["_metadata", "schema"] or "_stateSchema" in parts[:-1])


def state_file_name(version: int, ext: str, unique_id: str | None = None) -> str:
    """The name of a state file: ``<version>.<ext>``, or ``<version>_<unique id>.<ext>`` (checkpoint format 2).

    ``ext`` is ``delta`` / ``snapshot`` (HDFS-backed provider) or ``changelog`` / ``zip`` (RocksDB).
    """
    return f"{version}.{ext}" if unique_id is None else f"{version}_{unique_id}.{ext}"


def parse_state_file_name(name: str) -> tuple[int, str | None, str] | None:
    """(version, unique id or None, ext) of a state file name, None for any other name."""
    m = _STATE_FILE_RE.match(name)
    return (int(m.group(1)), m.group(2), m.group(3)) if m else None


def numeric_names(names: list[str] | None) -> list[int]:
    """Sorted integer values of the names that are plain non-negative integers."""
    return sorted(int(n) for n in (names or []) if n.isdigit())


def first_missing(present: Collection[int], lo: int, hi: int) -> int | None:
    """The smallest of ``lo..hi`` not in ``present``, or None: in time proportional to the
    versions present, however far apart ``lo`` and ``hi`` are (a batch id read from a log
    can be anything, up to 2**63 - 1)."""
    expected = lo
    for v in sorted(v for v in set(present) if lo <= v <= hi):
        if v != expected:
            return expected
        expected += 1
    return expected if expected <= hi else None


def version_ranges(versions: set[int]) -> str:
    """'1..4, 6' style summary of a set of versions, for messages about missing files."""
    runs: list[list[int]] = []
    for v in sorted(versions):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(f"{lo}..{hi}" if lo != hi else f"{lo}" for lo, hi in runs) or "none"


@dataclass(frozen=True)
class StoreInfo:
    """One state store of an operator, as operator metadata describes it."""

    name: str
    num_cols_prefix_key: int
    num_partitions: int
    schema_file_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class OperatorMetadata:
    """``state/<op>/_metadata``: what operator wrote the state, and its stores."""

    version: int  # 1 or 2; 0 = inferred from the layout (no metadata file)
    operator_id: int
    operator_name: str | None
    stores: tuple[StoreInfo, ...]
    properties_json: str | None = None

    def store(self, name: str) -> StoreInfo | None:
        for s in self.stores:
            if s.name == name:
                return s
        return None

    @cached_property
    def properties(self) -> dict[str, Any]:
        return json.loads(self.properties_json) if self.properties_json else {}


@dataclass(frozen=True)
class OffsetEntry:
    """One entry of the offset log: what a batch was planned with."""

    watermark_ms: int  # the event-time watermark the batch ran with (0: none yet)
    timestamp_ms: int  # the batch's processing time
    conf: dict[str, str]  # the SQL confs the query pins
    sources: tuple[str, ...]  # each source's end offset, as the source wrote it


@dataclass
class CheckpointDir:
    """Read-only view of one streaming checkpoint.

    Log entries, operator metadata and schema files are read at most once per
    instance (they do not change once written), so a walk over many batches or
    stores that shares one ``CheckpointDir`` reads each of them once.
    """

    storage: Storage
    # the schemas (key, value as DDL) given for stores without a schema file, by (operator id, store name):
    # read in place of the store's schema file by every plan made over this view (core/planner)
    given_schemas: dict[tuple[int, str], tuple[str, str]] = field(default_factory=dict)
    _offset_cache: dict[int, OffsetEntry] = field(default_factory=dict, repr=False)
    _commit_cache: dict[int, tuple[int, dict[str, Any]]] = field(default_factory=dict, repr=False)
    _metadata_cache: dict[tuple[int, int | None], OperatorMetadata | None] = field(default_factory=dict, repr=False)
    _file_cache: dict[str, bytes] = field(default_factory=dict, repr=False)

    def read_once(self, rel: str) -> bytes:
        """The bytes of a file that never changes once written (log entries, metadata, schemas), read once."""
        if rel not in self._file_cache:
            self._file_cache[rel] = self.storage.read_bytes(rel)
        return self._file_cache[rel]

    @property
    def location(self) -> str:
        return self.storage.display("")

    # -- logs ---------------------------------------------------------------

    @cached_property
    def committed_batches(self) -> list[int]:
        """Batch ids with a commit log entry, ascending."""
        return numeric_names(self.storage.list_names("commits"))

    def latest_committed_batch(self) -> int:
        """The newest committed batch; CommittedBatchUnavailableError if there is none."""
        batches = self.committed_batches
        # Spark walks ids downward and takes the first readable entry
        for batch in reversed(batches):
            if self._readable_log("commits", batch):
                return batch
        self.require_checkpoint()
        raise CommittedBatchUnavailableError(
            f"No committed batch found in {self.storage.display('commits')} "
            f"(checkpoint location {self.location}); has the query completed a batch?",
            path=self.location,
        )

    def require_checkpoint(self) -> None:
        """CommittedBatchUnavailableError unless the location exists and is a streaming checkpoint."""
        if not self.storage.exists(""):
            raise CommittedBatchUnavailableError(
                f"checkpoint location {self.location} does not exist", path=self.location
            )
        if self.storage.list_names("commits") is None and self.storage.list_names("offsets") is None:
            started = incomplete_rewrite_in(self.storage)
            if started is not None:
                raise IncompleteRewriteError(
                    f"{self.location} is an incomplete rewrite from {started}, not a checkpoint: the rewrite "
                    "stopped before it finished. Run the same rewrite into it again (that replaces the "
                    "incomplete attempt), or delete it",
                    path=self.location,
                )
            raise CommittedBatchUnavailableError(
                f"{self.location} is not a streaming checkpoint ({self._what_is_there()})", path=self.location
            )

    def _what_is_there(self) -> str:
        """Why the location is not a checkpoint, for the error message: what it holds instead."""
        if not self.storage.isdir(""):
            return "it is a file, not a directory"
        names = sorted(n for n in self.storage.list_names("") or [] if not n.startswith("."))
        parts = ["it has no commits/ directory"]
        parts.append(f"it holds {', '.join(names[:8])}{', ...' if len(names) > 8 else ''}" if names else "it is empty")
        # a directory inside a checkpoint (state/, state/0, commits/) is a common mistake
        here = self.storage.root.rstrip("/")
        for _ in range(3):
            here = here.rsplit("/", 1)[0] if "/" in here.strip("/") else ""
            if not here:
                break
            parent = Storage(
                here if self.storage.protocol == "file" else f"{self.storage.scheme}://{here}",
                self.storage.storage_options,
                verify_checksums=False,
            )
            if parent.list_names("commits") is not None:
                parts.append(f"its parent {parent.display('')} is a checkpoint: pass that instead")
                break
        return "; ".join(parts)

    def require_committed(self, batch_id: int, option: str = "batchId") -> None:
        """CommittedBatchUnavailableError unless ``batch_id`` (given as ``option``) has a commit log entry;
        BatchNotRetainedError when it is older than the oldest entry (the query's cleanup removed it)."""
        if batch_id not in self.committed_batches:
            have = self.committed_batches
            if have and batch_id < have[0]:
                raise self.not_retained(batch_id, option)
            span = f"{have[0]}..{have[-1]}" if have else "none"
            raise CommittedBatchUnavailableError(
                f"No committed batch found for {option} {batch_id} in "
                f"{self.storage.display('commits')} (committed batches: {span})",
                path=self.location,
            )

    def not_retained(self, batch_id: int, option: str, why: str = "") -> BatchNotRetainedError:
        """The error for a read that starts or ends at ``batch_id`` (given as ``option``), older than the oldest
        batch in the commit log. One rule for every option: such a batch is refused, as Spark's reader refuses
        it, even while state files of its version are still on disk (``why`` may say which)."""
        have = self.committed_batches
        return BatchNotRetainedError(
            f"{option} {batch_id} of {self.location} is no longer retained: the oldest batch in its commit log is "
            f"{have[0]} (committed batches: {have[0]}..{have[-1]}), the query's cleanup "
            f"({CONF_MIN_BATCHES_TO_RETAIN}) removed the older entries{why}. Spark's reader refuses such a batch "
            f"too; read from batch {have[0]} on, or raise {CONF_MIN_BATCHES_TO_RETAIN} on the query",
            path=self.location,
        )

    def _readable_log(self, log: str, batch: int) -> bool:
        try:
            text = self.read_once(f"{log}/{batch}").decode("utf-8")
        except (FileNotFoundError, UnicodeDecodeError):
            return False
        return text.startswith("v")

    def commit_entry(self, batch_id: int) -> tuple[int, dict[str, Any]]:
        """(log version, JSON) of ``commits/<batch_id>``."""
        if batch_id in self._commit_cache:
            return self._commit_cache[batch_id]
        rel = f"commits/{batch_id}"
        try:
            lines = self.read_once(rel).decode("utf-8").split("\n")
            version = int(lines[0].strip().lstrip("v"))
            entry = version, json.loads(lines[1]) if len(lines) > 1 and lines[1].strip() else {}
        except FileNotFoundError:
            raise CommittedBatchUnavailableError(
                f"No committed batch found for batchId {batch_id}: {self.storage.display(rel)} is missing",
                path=self.storage.display(rel),
            ) from None
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise CommittedBatchUnavailableError(
                f"commit log entry {self.storage.display(rel)} is unreadable: {exc}", path=self.storage.display(rel)
            ) from exc
        self._commit_cache[batch_id] = entry
        return entry

    def offset_conf(self, batch_id: int) -> dict[str, str]:
        """SQL confs recorded in ``offsets/<batch_id>`` (line 2, ``conf``)."""
        return self.offset_entry(batch_id).conf

    def offset_entry(self, batch_id: int) -> OffsetEntry:
        """``offsets/<batch_id>``: the batch's watermark, timestamp, confs and source offsets."""
        if batch_id in self._offset_cache:
            return self._offset_cache[batch_id]
        lines, metadata = self.offset_lines(batch_id)

        def millis(name: str) -> int:
            value = metadata.get(name, 0)
            return value if isinstance(value, int) else 0

        entry = OffsetEntry(
            watermark_ms=millis("batchWatermarkMs"),
            timestamp_ms=millis("batchTimestampMs"),
            conf={str(k): str(v) for k, v in (metadata.get("conf") or {}).items()},
            # one line per source, in the query's source order ("-": no offset yet)
            sources=tuple(line.strip() for line in lines[2:] if line.strip()),
        )
        self._offset_cache[batch_id] = entry
        return entry

    def offset_lines(self, batch_id: int) -> tuple[list[str], dict[str, Any]]:
        """``offsets/<batch_id>`` as its lines, and its metadata line (line 2) parsed afresh: what
        :meth:`offset_entry` reads, for a writer that changes part of it and keeps the rest."""
        rel = f"offsets/{batch_id}"
        try:
            # read once: fetched ahead of a plan (fetch_ahead) or of a walk over the logs (fetch_logs_ahead)
            lines = self.read_once(rel).decode("utf-8").split("\n")
        except FileNotFoundError:
            raise OffsetLogUnavailableError(
                f"The offset log for batch {batch_id} does not exist: {self.storage.display(rel)} "
                f"(checkpoint location {self.location})",
                path=self.storage.display(rel),
            ) from None
        except UnicodeDecodeError as exc:
            raise OffsetLogUnavailableError(
                f"The offset log {self.storage.display(rel)} is not text: {exc}", path=self.storage.display(rel)
            ) from exc
        try:
            metadata = json.loads(lines[1]) if len(lines) > 1 and lines[1].strip() else None
        except (ValueError, RecursionError):
            metadata = None
        if not isinstance(metadata, dict) or not isinstance(metadata.get("conf") or {}, dict):
            raise OffsetMetadataUnavailableError(
                f"The offset log {self.storage.display(rel)} holds no metadata line "
                f"(expected JSON with 'conf' on line 2)",
                path=self.storage.display(rel),
            )
        return lines, metadata

    def latest_conf(self) -> dict[str, str]:
        """Confs of the newest offset log entry, or {} when there is none."""
        for batch in reversed(numeric_names(self.storage.list_names("offsets"))):
            try:
                return self.offset_conf(batch)
            except (OffsetLogUnavailableError, OffsetMetadataUnavailableError):
                continue
        return {}

    def names_files_by_unique_id(self, batch_id: int) -> bool:
        """Whether the state of ``batch_id`` is in files named by unique ids (RocksDB checkpoint format 2).

        The offset log does not record the format; the commit entry's ``stateUniqueIds`` tells.
        """
        _, entry = self.commit_entry(batch_id)
        return isinstance(entry, dict) and bool(entry.get("stateUniqueIds"))

    def state_unique_id(self, batch_id: int, operator_id: int, partition_id: int, store_name: str) -> str | None:
        """Unique id of a store's files of version ``batch_id + 1`` (checkpoint format 2), or None (format 1).

        The commit log lists one id per store: the ``default`` store's, or the four join stores' in
        :data:`JOIN_STORES` order.
        """
        _, entry = self.commit_entry(batch_id)
        ids = entry.get("stateUniqueIds") if isinstance(entry, dict) else None
        if not ids:
            return None
        shown = self.storage.display(f"commits/{batch_id}")
        if store_name == DEFAULT_STORE:
            index = 0
        elif store_name in JOIN_STORES:
            index = JOIN_STORES.index(store_name)
        else:
            raise UnsupportedOptionError(
                f"store '{store_name}' has no place in the unique ids of {shown} (known stores: "
                f"{', '.join((DEFAULT_STORE, *JOIN_STORES))})",
                path=shown,
            )
        try:
            partition_ids = ids[str(operator_id)][partition_id]
            unique_id = partition_ids[index]
        except (KeyError, IndexError, TypeError):
            raise CorruptFileError(
                f"{shown} records no unique id for operator {operator_id}, partition {partition_id}, "
                f"store '{store_name}'",
                path=shown,
            ) from None
        if not isinstance(unique_id, str) or not UNIQUE_ID_RE.fullmatch(unique_id):
            raise CorruptFileError(f"{shown}: unique id {unique_id!r} is not a valid file name part", path=shown)
        return unique_id

    # -- state layout -------------------------------------------------------

    @cached_property
    def operator_ids(self) -> list[int]:
        return numeric_names(self.storage.list_names("state"))

    def partition_ids(self, operator_id: int) -> list[int]:
        return numeric_names(self.storage.list_names(f"state/{operator_id}"))

    def num_partitions(self, conf: Mapping[str, str]) -> int:
        """The number of state partitions: ``spark.sql.shuffle.partitions`` as ``conf`` (an offset log
        entry's) records it, else one past the highest partition directory of any operator (0: none).

        Checkpoints too old to record the conf are the only ones that fall back; every operator
        of a query has as many partitions as the shuffle, and a single-partition operator's one
        directory says nothing of the others, hence the highest over all operators.
        """
        recorded = shuffle_partitions(conf)
        if recorded:
            return recorded
        return max((max(self.partition_ids(op), default=-1) + 1 for op in self.operator_ids), default=0)

    def store_dir(self, operator_id: int, partition_id: int, store_name: str) -> str:
        """Relative directory of one store's files."""
        base = f"state/{operator_id}/{partition_id}"
        return base if store_name == DEFAULT_STORE else f"{base}/{store_name}"

    def schema_file(self, operator_id: int, store_name: str) -> str:
        """Relative path of the v1/v2 schema file of a store (partition 0 only)."""
        return posixpath.join(self.store_dir(operator_id, 0, store_name), "_metadata", "schema")

    def fetch_logs_ahead(self, batches: Iterable[int]) -> None:
        """Start fetching, all at once, the offset log entries of ``batches`` and, when the latest commit
        names each version's files (checkpoint format 2, read through :meth:`state_unique_id`), their
        commit log entries: those not read yet (remote only)."""
        if not self.storage.remote:
            return
        logs = ["offsets"]
        committed = self.committed_batches
        try:
            _, entry = self.commit_entry(committed[-1]) if committed else (0, {})
        except StateReaderError:
            entry = {}
        if isinstance(entry, dict) and entry.get("stateUniqueIds"):
            logs.append("commits")
        self.storage.prefetch(r for b in batches for log in logs if (r := f"{log}/{b}") not in self._file_cache)

    def fetch_ahead(self, batch_id: int, operator_id: int) -> None:
        """Start fetching, all at once, the small files a plan of ``batch_id`` reads: its commit and
        offset log entries, the operator's metadata and its schema files (remote only: there each
        would be a round trip of its own; what is found from the listing, so nothing is probed)."""
        storage = self.storage
        if not storage.remote:
            return
        # the log entries first: the operator's listing may still be under way, and a running query
        # purges old log entries
        storage.prefetch(r for r in (f"commits/{batch_id}", f"offsets/{batch_id}") if r not in self._file_cache)
        rels: list[str] = []
        base = f"state/{operator_id}"
        v2 = [b for b in numeric_names(storage.list_names(f"{base}/_metadata/v2")) if b <= batch_id]
        if v2:
            rels.append(f"{base}/_metadata/v2/{v2[-1]}")
        elif storage.exists(f"{base}/_metadata/metadata"):
            rels.append(f"{base}/_metadata/metadata")
        for name in [DEFAULT_STORE, *JOIN_STORES]:
            rel = self.schema_file(operator_id, name)
            if storage.exists(rel):
                rels.append(rel)
        # schema v3 files (one per schema version of each store; few and small)
        todo = [f"{base}/_stateSchema"]
        while todo:
            directory = todo.pop()
            for name, size in (storage.list_entries(directory) or {}).items():
                (todo.append if size is None else rels.append)(f"{directory}/{name}")
        storage.prefetch(r for r in rels if r not in self._file_cache)

    # -- operator metadata --------------------------------------------------

    def operator_metadata(self, operator_id: int, batch_id: int | None) -> OperatorMetadata | None:
        """Metadata of an operator as of ``batch_id`` (v2 wins over v1); None if absent."""
        key = (operator_id, batch_id)
        if key not in self._metadata_cache:
            self._metadata_cache[key] = self._operator_metadata(operator_id, batch_id)
        return self._metadata_cache[key]

    def _operator_metadata(self, operator_id: int, batch_id: int | None) -> OperatorMetadata | None:
        base = f"state/{operator_id}/_metadata"
        v2_batches = numeric_names(self.storage.list_names(f"{base}/v2"))
        if v2_batches:
            eligible = [b for b in v2_batches if batch_id is None or b <= batch_id] or v2_batches[:1]
            return self._parse_metadata(f"{base}/v2/{eligible[-1]}", operator_id)
        if self.storage.exists(f"{base}/metadata"):
            return self._parse_metadata(f"{base}/metadata", operator_id)
        return None

    def operator_metadata_doc(self, rel: str, operator_id: int) -> tuple[str, Any]:
        """Operator metadata file ``rel`` (``state/<op>/_metadata/metadata`` or a v2 batch's) as its
        header line and its JSON body parsed afresh: what :meth:`operator_metadata` reads, for a
        writer that changes part of it and keeps the rest."""
        with self._metadata_errors(rel, operator_id):
            header, _, body = self.read_once(rel).decode("utf-8").partition("\n")
            int(header.strip().lstrip("v"))  # a header that names no version is no metadata file
            return header, json.loads(body)

    def _parse_metadata(self, rel: str, operator_id: int) -> OperatorMetadata:
        with self._metadata_errors(rel, operator_id):
            header, doc = self.operator_metadata_doc(rel, operator_id)
            version = int(header.strip().lstrip("v"))
            info = doc["operatorInfo"]
            stores = tuple(
                StoreInfo(
                    name=s["storeName"],
                    num_cols_prefix_key=int(s.get("numColsPrefixKey", 0)),
                    num_partitions=int(s["numPartitions"]),
                    schema_file_paths=tuple(s.get("stateSchemaFilePaths") or ()),
                )
                for s in doc["stateStoreInfo"]
            )
            return OperatorMetadata(
                version=version,
                operator_id=int(info["operatorId"]),
                operator_name=info.get("operatorName"),
                stores=stores,
                properties_json=doc.get("operatorPropertiesJson"),
            )

    @contextmanager
    def _metadata_errors(self, rel: str, operator_id: int) -> Iterator[None]:
        """What goes wrong reading operator metadata file ``rel``, as an :class:`OperatorMetadataReadError`."""
        shown = self.storage.display(rel)
        try:
            yield
        except OperatorMetadataReadError:
            raise
        except FileNotFoundError:
            raise OperatorMetadataReadError(f"operator metadata {shown} is missing", path=shown) from None
        except (
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
            OverflowError,
            RecursionError,
            UnicodeDecodeError,
        ) as exc:
            raise OperatorMetadataReadError(
                f"operator metadata {shown} of operator {operator_id} cannot be parsed: {exc!r}", path=shown
            ) from exc

    def resolve_schema_path(self, operator_id: int, stored: str) -> str:
        """Relative path of a schema v3 file named by (possibly stale) operator metadata.

        Metadata v2 stores absolute URIs from where the query ran; a moved or
        copied checkpoint keeps the part after ``/state/<op>/_stateSchema/``.
        """
        marker = f"/state/{operator_id}/_stateSchema/"
        idx = stored.rfind(marker)
        if idx >= 0:
            return f"state/{operator_id}/_stateSchema/{stored[idx + len(marker) :]}"
        return f"state/{operator_id}/_stateSchema/{posixpath.basename(stored)}"
