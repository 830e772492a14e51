"""Rewrite a checkpoint into a new one that the same query resumes from.

The state of every operator and store at one committed batch ``B`` is read
partition by partition (raw key and value bytes, merged as a read merges them),
each row is sent to the partition Spark's shuffle sends its key to,
``pmod(murmur3(partition key), N)`` (:mod:`state_reader.formats.spark_hash`), and
each new partition's rows are written as the snapshot of version ``B + 1``, the
version Spark loads to run batch ``B + 1``. Keys and values are copied byte for
byte; only keys are decoded, to hash them and to match ``drop_keys``.

Everything else Spark reads at restart comes along: ``metadata``, the source
logs, the offset and commit logs up to ``B`` (the offset log's recorded
``spark.sql.shuffle.partitions`` set to ``N``), the state schema files and the
operator metadata (its partition counts set to ``N``). Nothing is written inside
the source. The destination's ``metadata`` file is written first with content
Spark cannot parse and replaced by the source's only at the very end, so a
rewrite that stops part-way (an error, a killed process) leaves a directory that
Spark refuses to start from.

Supported now: the HDFS-backed provider (every operator it runs), and RocksDB
checkpoints of format 1 without column families (aggregations, deduplication,
session windows, flatMapGroupsWithState), whose new snapshots are RocksDB
databases built with rocksdict and packed as Spark packs its own. Moves between
providers, RocksDB column families (transformWithState, join formats 3 and 4) and
checkpoint format 2 are refused with a clear error.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from state_reader.core.key_filter import KeyFilter, KeyFilterSpec
from state_reader.core.planner import plan_state_read, store_names_on_disk
from state_reader.core.scan import bind_key_filter
from state_reader.errors import (
    InvalidOptionError,
    RewriteFailedError,
    StateReaderError,
    UncommittedBatchError,
    UnsupportedOptionError,
)
from state_reader.formats import snapshot_zip
from state_reader.formats.rocksdb_encoding import KeyEncoderSpec, decode_keys
from state_reader.formats.spark_hash import partition_ids
from state_reader.formats.unsaferow import RowBuffer, decode_rows
from state_reader.io.destination import Destination
from state_reader.io.storage import Storage
from state_reader.model import operators
from state_reader.model.checkpoint import Checkpoint, numeric_names, parse_state_file_name, state_file_name
from state_reader.model.conf import CONF_JOIN_FORMAT, CONF_SHUFFLE_PARTITIONS, HDFS_PROVIDER, ROCKSDB_PROVIDER
from state_reader.model.plan import StateReadPlan
from state_reader.providers import rocksdb
from state_reader.providers.hdfs import HDFSStore, framed_records, snapshot_file

PROVIDER_CLASSES = {"hdfs": HDFS_PROVIDER, "rocksdb": ROCKSDB_PROVIDER}
# what the destination's `metadata` holds until the rewrite is complete: not JSON, so Spark refuses to start
INCOMPLETE = b"state_reader: incomplete rewrite, do not start a query from this directory\n"
# operators whose state lives in one partition whatever the shuffle partitions (their input is one partition)
SINGLE_PARTITION_OPERATORS = ("globalLimit",)


@dataclass
class StoreReport:
    """What a rewrite wrote for one store of one operator."""

    operator_id: int
    operator_name: str | None
    store_name: str
    rows: int
    dropped: int
    rows_per_partition: list[int]


@dataclass
class RewriteReport:
    """What :func:`rewrite_checkpoint` wrote."""

    source: str
    destination: str
    batch_id: int
    provider: str
    old_partitions: int
    new_partitions: int
    stores: list[StoreReport] = field(default_factory=list)
    files: int = 0
    bytes: int = 0

    def table(self) -> pa.Table:
        """One row per (operator, store, new partition): the rows written there."""
        rows = [{"operator_id": s.operator_id, "store_name": s.store_name, "partition_id": p, "rows": n}
                for s in self.stores for p, n in enumerate(s.rows_per_partition)]
        schema = pa.schema([("operator_id", pa.int32()), ("store_name", pa.string()),
                            ("partition_id", pa.int32()), ("rows", pa.int64())])
        return pa.Table.from_pylist(rows, schema=schema)

    def __str__(self) -> str:
        lines = [f"rewrote {self.source} at batch {self.batch_id} into {self.destination}: "
                 f"{self.provider}, {self.old_partitions} -> {self.new_partitions} partitions, "
                 f"{self.files} files, {self.bytes:,} bytes"]
        for s in self.stores:
            dropped = f", {s.dropped} dropped" if s.dropped else ""
            lines.append(f"  operator {s.operator_id} ({s.operator_name or 'unknown'}) store {s.store_name}: "
                         f"{s.rows} rows{dropped}, per partition {s.rows_per_partition}")
        return "\n".join(lines)


def _offset_batches(cp: Checkpoint) -> list[int]:
    return numeric_names(cp.storage.list_names("offsets"))


def _files_under(storage: Storage, rel: str) -> list[str]:
    """Paths (relative to the checkpoint root) of the data files under ``rel``; no sidecars or temp files."""
    base = storage.full(rel)
    if not storage.isdir(rel):
        return []
    out = []
    for path in sorted(storage.fs.find(base)):
        name = posixpath.basename(path)
        if name.startswith(".") or name.endswith((".crc", ".tmp")):
            continue
        out.append(posixpath.relpath(path, storage.root))
    return out


def _with_partitions(text: str, num_partitions: int, shown: str) -> str:
    """An offset log entry with its recorded shuffle partitions set to ``num_partitions``."""
    lines = text.split("\n")
    try:
        meta = json.loads(lines[1])
        meta.setdefault("conf", {})[CONF_SHUFFLE_PARTITIONS] = str(num_partitions)
    except (IndexError, ValueError, AttributeError) as exc:
        raise RewriteFailedError(f"{shown} has no offset metadata line to carry the new partition count: {exc}",
                                 path=shown) from exc
    lines[1] = json.dumps(meta, separators=(",", ":"))
    return "\n".join(lines)


def _operator_metadata(text: str, num_partitions: int, src_root: str, dst_root: str) -> str:
    """Operator metadata (v1 or v2) with every store's partition count set, schema paths moved to ``dst``."""
    header, _, body = text.partition("\n")
    doc = json.loads(body)
    for store in doc.get("stateStoreInfo", []):
        store["numPartitions"] = num_partitions
        paths = store.get("stateSchemaFilePaths")
        if paths:
            store["stateSchemaFilePaths"] = [p.replace(src_root, dst_root, 1) for p in paths]
    return header + "\n" + json.dumps(doc, separators=(",", ":"))


def _plan(cp: Checkpoint, batch_id: int, operator_id: int, store_name: str) -> StateReadPlan:
    return plan_state_read({"path": cp.storage.url, "storageOptions": cp.storage.storage_options,
                            "batchId": batch_id, "operatorId": operator_id, "storeName": store_name}, cp)


def _targets(plan: StateReadPlan, keys: pa.StructArray, num_partitions: int, drop: KeyFilter | None,
             single: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """The rows to keep, ordered by new partition, each one's new partition, and how many are dropped."""
    n = len(keys)
    keep = np.ones(n, dtype=bool)
    if drop is not None:
        keep = ~np.asarray(drop.mask(keys).to_numpy(zero_copy_only=False), dtype=bool)
    if single:
        target = np.zeros(n, dtype=np.int32)
    else:
        width = plan.partition_key_fields
        if width is None:
            raise UnsupportedOptionError(
                f"cannot tell which key fields Spark partitions store '{plan.store_name}' of operator "
                f"{plan.operator_id} by, so its rows cannot be moved to new partitions")
        target = partition_ids([keys.field(i) for i in range(width)], num_partitions)
    index = np.flatnonzero(keep)
    index = index[np.argsort(target[index], kind="stable")]
    return index, target[index], n - len(index)


def _route_hdfs_store(plan: StateReadPlan, num_partitions: int, drop: KeyFilter | None,
                      single: bool) -> tuple[list[list[np.ndarray]], np.ndarray, int]:
    """Every row of one HDFS store, framed, in the new partition its key hashes to: the framed
    records of each new partition, the rows of each, and the rows dropped."""
    out: list[list[np.ndarray]] = [[] for _ in range(num_partitions)]
    rows = np.zeros(num_partitions, dtype=np.int64)
    dropped_total = 0
    skip = 4 if plan.store_conf.row_checksum else 0
    for pid in plan.partitions:
        directory = plan.checkpoint.store_dir(plan.operator_id, pid, plan.store_name)
        store = HDFSStore(plan.storage, directory, plan.codec, plan.store_conf.row_checksum)
        buf, size, live = store.load_records(plan.version)
        if len(live.key_len) == 0:
            continue
        source = f"{plan.storage.display(directory)} (version {plan.version})"
        keys = decode_rows(RowBuffer.wrap(buf, size, live.key_start, live.key_len, source + " key"), plan.key_schema)
        index, target, dropped = _targets(plan, keys, num_partitions, drop, single)
        dropped_total += dropped
        framed, lengths = framed_records(buf, live.take(index), skip)
        counts = np.bincount(target, minlength=num_partitions)
        # the records are in partition order: partition p's bytes run between these offsets
        bounds = np.r_[0, np.cumsum(lengths)][np.r_[0, np.cumsum(counts)]]
        for new_pid in np.flatnonzero(counts).tolist():
            out[new_pid].append(framed[bounds[new_pid]:bounds[new_pid + 1]])
        rows += counts
        del buf, live, keys, framed
    return out, rows, dropped_total


def _route_rocksdb_store(plan: StateReadPlan, num_partitions: int, drop: KeyFilter | None,
                         single: bool) -> tuple[list[tuple[list[bytes], list[bytes]]], np.ndarray, int]:
    """Every entry of one RocksDB store in the new partition its key hashes to, as encoded bytes."""
    out: list[tuple[list[bytes], list[bytes]]] = [([], []) for _ in range(num_partitions)]
    rows = np.zeros(num_partitions, dtype=np.int64)
    dropped_total = 0
    spec = KeyEncoderSpec.from_plan(plan.key_encoder, plan.num_cols_prefix_key)
    for pid in plan.partitions:
        directory = plan.checkpoint.store_dir(plan.operator_id, pid, plan.store_name)
        state = rocksdb.load_store(plan, directory, pid)
        if state.uses_column_families:
            raise UnsupportedOptionError(
                f"operator {plan.operator_id} of {plan.checkpoint.location} keeps column families "
                "(transformWithState, join state formats 3 and 4); rewriting those is not supported yet",
                path=plan.checkpoint.location)
        source = f"{plan.storage.display(directory)} (version {plan.version})"
        key_rows, value_rows = state.row_buffers(source)
        if len(key_rows.starts) == 0:
            continue
        keys = decode_keys(key_rows, plan.key_schema, spec, plan.store_conf.avro)
        index, target, dropped = _targets(plan, keys, num_partitions, drop, single)
        dropped_total += dropped
        for i, new_pid in zip(index.tolist(), target.tolist(), strict=True):
            ks, vs = int(key_rows.starts[i]), int(value_rows.starts[i])
            out[new_pid][0].append(key_rows.buf[ks:ks + int(key_rows.lengths[i])].tobytes())
            out[new_pid][1].append(value_rows.buf[vs:vs + int(value_rows.lengths[i])].tobytes())
        rows += np.bincount(target, minlength=num_partitions)
    return out, rows, dropped_total


def _zip_extra_metadata(plan: StateReadPlan) -> dict[str, Any]:
    """The fields the source's writer puts in a snapshot zip's metadata beyond SSTs and key counts."""
    for pid in plan.partitions:
        directory = plan.checkpoint.store_dir(plan.operator_id, pid, plan.store_name)
        zips = [(parsed[0], name) for name in plan.storage.list_names(directory) or []
                if (parsed := parse_state_file_name(name)) is not None and parsed[2] == "zip"
                and parsed[0] <= plan.version]
        if zips:
            name = max(zips)[1]
            shown = plan.storage.display(f"{directory}/{name}")
            raw, _ = snapshot_zip.read_metadata_entry(plan.storage.read_bytes(f"{directory}/{name}"), shown)
            doc = json.loads(raw.decode("utf-8").partition("\n")[2])
            return {k: v for k, v in doc.items() if k not in ("sstFiles", "logFiles", "numKeys")}
    return {}


def rewrite_checkpoint(source: Storage, dest: Destination, *, num_partitions: int | None = None,
                       provider: str | None = None, drop_keys: KeyFilterSpec | None = None,
                       batch_id: int | None = None, allow_uncommitted: bool = False) -> RewriteReport:
    """Write the checkpoint of ``source`` at ``batch_id`` (default: the last committed) into ``dest``."""
    cp = Checkpoint(source)
    cp.require_checkpoint()
    committed = cp.committed_batches
    latest = cp.latest_committed_batch()
    planned = _offset_batches(cp)
    if planned and planned[-1] > latest and not allow_uncommitted:
        raise UncommittedBatchError(
            f"batch {planned[-1]} of {cp.location} was planned (offsets/{planned[-1]}) but never committed: its "
            "query is running or stopped in the middle of it. A query resumed from a rewrite would plan that batch "
            "again, which can duplicate or lose output in exactly-once sinks. Stop the query cleanly (or let it "
            "finish the batch) and rewrite again, or pass allow_uncommitted=True to rewrite the last committed "
            f"batch ({latest}) anyway", path=cp.location)
    batch = latest if batch_id is None else batch_id
    if batch not in committed:
        cp.require_committed(batch)
    conf = cp.offset_conf(batch)
    old_partitions = int(conf.get(CONF_SHUFFLE_PARTITIONS) or 0)
    new_partitions = old_partitions if num_partitions is None else num_partitions
    if new_partitions < 1:
        raise InvalidOptionError(f"num_partitions must be at least 1, got {num_partitions}")
    if provider is not None and provider.lower() not in PROVIDER_CLASSES:
        raise InvalidOptionError(f"provider must be one of {', '.join(PROVIDER_CLASSES)}, got {provider!r}")

    plans: list[tuple[StateReadPlan, bool]] = []
    join_format = int(conf.get(CONF_JOIN_FORMAT) or 0) if str(conf.get(CONF_JOIN_FORMAT, "")).isdigit() else 0
    for op in cp.operator_ids:
        meta = cp.operator_metadata(op, batch)
        name = meta.operator_name if meta is not None else None
        if operators.is_transform_with_state(name) or (name == operators.JOIN and join_format >= 3):
            raise UnsupportedOptionError(
                f"operator {op} ({name}) of {cp.location} keeps its state in column families (transformWithState, "
                "join state formats 3 and 4); rewriting those is not supported yet", path=cp.location)
        for store_name in store_names_on_disk(cp, op):
            plan = _plan(cp, batch, op, store_name)
            if plan.provider == ROCKSDB_PROVIDER and cp.names_files_by_unique_id(batch):
                raise UnsupportedOptionError(
                    f"{cp.location} uses RocksDB checkpoint format 2 (state files named by the unique ids in its "
                    "commit log); rewriting it is not supported yet", path=cp.location)
            if provider is not None and PROVIDER_CLASSES[provider.lower()] != plan.provider:
                raise UnsupportedOptionError(
                    f"moving {cp.location} to the {provider} provider is not supported yet; rewrite it with its "
                    "own provider", path=cp.location)
            # a global limit keeps its count in partition 0 whatever the partitions (its key has no fields)
            single = name in SINGLE_PARTITION_OPERATORS or plan.partition_key_fields == 0
            plans.append((plan, single))

    dest.require_empty()
    source_provider = "rocksdb" if plans and plans[0][0].provider == ROCKSDB_PROVIDER else "hdfs"
    report = RewriteReport(cp.location, dest.display(), batch, source_provider, old_partitions, new_partitions)

    def put(rel: str, data: bytes) -> None:
        dest.write(rel, data)
        report.files += 1
        report.bytes += len(data)

    dest.write("metadata", INCOMPLETE)  # the commit point is the real `metadata`, written last
    try:
        for plan, single in plans:
            drop = bind_key_filter(plan, drop_keys)
            targets = [0] if single else range(new_partitions)
            if plan.provider == ROCKSDB_PROVIDER:
                entries, rows, dropped = _route_rocksdb_store(plan, new_partitions, drop, single)
                extra = _zip_extra_metadata(plan)
                for pid in targets:
                    directory = cp.store_dir(plan.operator_id, pid, plan.store_name)
                    archive, ssts = rocksdb.snapshot_files(*entries[pid], extra)
                    for name, data in ssts:
                        put(posixpath.join(directory, snapshot_zip.SST_DIR, name), data)
                    put(posixpath.join(directory, state_file_name(batch + 1, "zip")), archive)
                del entries
            else:
                routed, rows, dropped = _route_hdfs_store(plan, new_partitions, drop, single)
                for pid in targets:
                    rel = posixpath.join(cp.store_dir(plan.operator_id, pid, plan.store_name),
                                         state_file_name(batch + 1, "snapshot"))
                    put(rel, snapshot_file(routed[pid], plan.codec))
                del routed
            meta = plan.checkpoint.operator_metadata(plan.operator_id, batch)
            report.stores.append(StoreReport(
                plan.operator_id, meta.operator_name if meta is not None else None, plan.store_name,
                int(rows.sum()), dropped, [int(rows[p]) for p in targets]))
        _copy_logs(cp, put, batch, new_partitions)
        _copy_state_metadata(cp, put, new_partitions, dest)
        put("metadata", cp.storage.read_bytes("metadata"))
    except StateReaderError as exc:
        raise RewriteFailedError(
            f"rewriting {cp.location} into {dest.display()} stopped: {exc.message}. {dest.display('metadata')} "
            "marks the destination incomplete, so Spark will not start from it; delete it and rewrite again",
            path=dest.display()) from exc
    return report


def _copy_logs(cp: Checkpoint, put: Any, batch: int, num_partitions: int) -> None:
    """The offset and commit logs up to ``batch`` (offsets with the new partition count), and the source logs."""
    storage = cp.storage
    for b in _offset_batches(cp):
        if b <= batch:
            rel = f"offsets/{b}"
            text = storage.read_bytes(rel).decode("utf-8")
            put(rel, _with_partitions(text, num_partitions, storage.display(rel)).encode("utf-8"))
    for b in numeric_names(storage.list_names("commits")):
        if b <= batch:
            put(f"commits/{b}", storage.read_bytes(f"commits/{b}"))
    for rel in _files_under(storage, "sources"):
        name = posixpath.basename(rel)
        if name.isdigit() and int(name) > batch:
            continue  # a source's log of batches after the one rewritten: the resumed query plans them afresh
        put(rel, storage.read_bytes(rel))


def _copy_state_metadata(cp: Checkpoint, put: Any, num_partitions: int, dest: Destination) -> None:
    """Schema files as they are; operator metadata with the new partition count."""
    storage = cp.storage
    for op in cp.operator_ids:
        for rel in _files_under(storage, f"state/{op}"):
            parts = rel.split("/")
            inside = parts[2]
            if inside.isdigit():
                # a partition directory: only partition 0's schema files (`[store/]_metadata/schema`) come along
                if inside != "0" or "_metadata" not in parts:
                    continue
                put(rel, storage.read_bytes(rel))
            elif inside == "_metadata" and (parts[-1] == "metadata" or parts[-2] == "v2"):
                text = storage.read_bytes(rel).decode("utf-8")
                put(rel, _operator_metadata(text, num_partitions, storage.root, dest.root).encode("utf-8"))
            else:
                put(rel, storage.read_bytes(rel))
