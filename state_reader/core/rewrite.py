"""Rewrite a checkpoint into a new one that the same query resumes from.

The state of every operator and store at one committed batch ``B`` is read
partition by partition (raw key and value bytes, merged as a read merges them),
each row is sent to the partition Spark's shuffle sends its key to,
``pmod(murmur3(partition key), N)`` (:mod:`state_reader.formats.spark_hash`), and
each new partition's rows are written as the snapshot of version ``B + 1``, the
version Spark loads to run batch ``B + 1``. Only keys are decoded, to hash them
and to match ``drop_keys``; rows are moved as bytes, re-framed between the
providers' encodings when the provider changes (UnsafeRows in HDFS-backed
snapshots; a version byte, and for session windows a split prefix key, in RocksDB).

Routed rows wait in local temporary files, one per new partition, so memory holds
one old partition while routing and one new partition while writing.

Everything else Spark reads at restart comes along: ``metadata``, the source
logs, the offset and commit logs up to ``B`` (the offset log's recorded
``spark.sql.shuffle.partitions`` set to ``N`` and, on a move, its provider class),
the state schema files and the operator metadata (its partition counts set to
``N``). Nothing is written inside the source. The destination's ``metadata`` file
is written first with content Spark cannot parse and replaced by the source's only
at the very end, so a rewrite that stops part-way (an error, a killed process)
leaves a directory that Spark refuses to start from.

Every operator on both providers: stores with RocksDB column families
(transformWithState, join formats 3 and 4; :class:`FamilyStoreRows`) and RocksDB
checkpoint format 2 (new unique ids, listed in the rewritten commit entry)
included, and moves between the providers where Spark runs the operator on both.
``transform`` rewrites each row's key and value on the way
(:class:`TransformedStoreRows`) and the schema files with them.
"""

from __future__ import annotations

import json
import os
import posixpath
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from state_reader.core.key_filter import KeyFilter, KeyFilterSpec
from state_reader.core.planner import detect_provider, join_column_families, plan_store_read, store_names_on_disk
from state_reader.core.scan import bind_key_filter
from state_reader.core.size import row_bytes
from state_reader.core.skew import partition_skew
from state_reader.errors import (
    CorruptFileError,
    InvalidOptionError,
    RewriteFailedError,
    SchemaReadError,
    StateReaderError,
    UncommittedBatchError,
    UnsupportedOptionError,
)
from state_reader.formats import snapshot_zip
from state_reader.formats.rocksdb_encoding import (
    KeyEncoderSpec,
    column_family_ids,
    decode_keys,
    encode_keys,
    encode_values,
    rejoin_multi_value,
    strip_column_family,
    unsafe_keys,
    unsafe_values,
)
from state_reader.formats.schema_files import write_schema_v2
from state_reader.formats.spark_hash import partition_ids
from state_reader.formats.spark_types import StructField, StructType, from_arrow
from state_reader.formats.unsaferow import RowBuffer, decode_rows, pack_rows, row_runs
from state_reader.formats.unsaferow_encode import encode_rows
from state_reader.io.destination import Destination
from state_reader.io.memory import release_free_memory
from state_reader.io.storage import Storage
from state_reader.model import operators
from state_reader.model.checkpoint import (
    DEFAULT_STORE,
    JOIN_STORES,
    Checkpoint,
    OperatorMetadata,
    numeric_names,
    parse_state_file_name,
    state_file_name,
)
from state_reader.model.conf import (
    CONF_PROVIDER,
    CONF_ROW_CHECKSUM,
    CONF_SHUFFLE_PARTITIONS,
    PROVIDER_NAMES,
    ROCKSDB_PROVIDER,
    provider_name,
    shuffle_partitions,
)
from state_reader.model.plan import StateReadPlan
from state_reader.model.state_variables import (
    LIST,
    PartitionKeyPath,
    family_partition_key,
    family_schemas,
    user_variables,
    variable_kinds,
)
from state_reader.progress import Progress, progress
from state_reader.providers import rocksdb
from state_reader.providers.hdfs import HDFSStore, frame_records, framed_rows, snapshot_file

# operators whose state lives in one partition whatever the shuffle partitions (their input is one partition)
SINGLE_PARTITION_OPERATORS = ("globalLimit",)


@dataclass
class StoreReport:
    """What a rewrite wrote (or, in a dry run, would write) for one store of one operator.

    Rows and bytes are a state's size as :mod:`state_reader.core.size` defines it (the key and
    value bytes as the store keeps them, uncompressed): in the destination provider's encoding
    (after any transform) for the new partitions, the source's as stored for the old ones.
    """

    operator_id: int
    operator_name: str | None
    store_name: str
    rows: int = 0
    dropped: int = 0
    rows_per_partition: list[int] = field(default_factory=list)
    bytes_per_partition: list[int] = field(default_factory=list)
    old_rows_per_partition: list[int] = field(default_factory=list)
    old_bytes_per_partition: list[int] = field(default_factory=list)

@dataclass
class RewriteReport:
    """What :func:`rewrite_checkpoint` wrote, or would write (``dry_run``)."""

    source: str
    destination: str
    batch_id: int
    provider: str
    old_partitions: int
    new_partitions: int
    source_provider: str = ""
    dry_run: bool = False
    stores: list[StoreReport] = field(default_factory=list)
    files: int = 0
    bytes: int = 0

    def table(self) -> pa.Table:
        """One row per (operator, store, new partition): the rows and bytes written there."""
        rows = [{"operator_id": s.operator_id, "store_name": s.store_name, "partition_id": p, "rows": n,
                 "bytes": s.bytes_per_partition[p]}
                for s in self.stores for p, n in enumerate(s.rows_per_partition)]
        schema = pa.schema([("operator_id", pa.int32()), ("store_name", pa.string()),
                            ("partition_id", pa.int32()), ("rows", pa.int64()), ("bytes", pa.int64())])
        return pa.Table.from_pylist(rows, schema=schema)

    def partition_sizes(self, new: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Rows and bytes of every partition summed over all stores, in the new layout or today's.

        A partition of every store runs in one task, so these are the loads a task gets.
        """
        count = self.new_partitions if new else self.old_partitions
        rows = np.zeros(max(count, 1), dtype=np.int64)
        size = np.zeros(max(count, 1), dtype=np.int64)
        for s in self.stores:
            r = s.rows_per_partition if new else s.old_rows_per_partition
            b = s.bytes_per_partition if new else s.old_bytes_per_partition
            rows[:len(r)] += r
            size[:len(b)] += b
        return rows[:count], size[:count]

    def skew(self, new: bool = True) -> float:
        """Largest partition's bytes over the median partition's (1.0 = even; inf when the median is empty)."""
        return partition_skew(self.partition_sizes(new)[1].tolist())

    def layout(self) -> pa.Table:
        """Today's and the new per-partition rows and bytes (all stores), one row per (layout, partition)."""
        out: dict[str, list[Any]] = {"layout": [], "partition_id": [], "rows": [], "bytes": []}
        for label, new in (("current", False), ("new", True)):
            rows, size = self.partition_sizes(new)
            out["layout"] += [label] * len(rows)
            out["partition_id"] += list(range(len(rows)))
            out["rows"] += rows.tolist()
            out["bytes"] += size.tolist()
        schema = pa.schema([("layout", pa.string()), ("partition_id", pa.int32()), ("rows", pa.int64()),
                            ("bytes", pa.int64())])
        return pa.Table.from_pydict(out, schema=schema)

    def summary(self) -> dict[str, Any]:
        """The report as plain data (the CLI's ``--json``)."""
        def side(new: bool) -> dict[str, Any]:
            rows, size = self.partition_sizes(new)
            return {"partitions": len(rows), "rows": int(rows.sum()), "bytes": int(size.sum()),
                    "rows_per_partition": rows.tolist(), "bytes_per_partition": size.tolist(),
                    "skew": skew if np.isfinite(skew := self.skew(new)) else None}

        return {"source": self.source, "destination": self.destination or None, "batch_id": self.batch_id,
                "dry_run": self.dry_run, "source_provider": self.source_provider, "provider": self.provider,
                "files": self.files, "bytes": self.bytes, "current": side(False), "new": side(True),
                "stores": [{"operator_id": s.operator_id, "operator_name": s.operator_name,
                            "store_name": s.store_name, "rows": s.rows, "dropped": s.dropped,
                            "rows_per_partition": s.rows_per_partition,
                            "bytes_per_partition": s.bytes_per_partition} for s in self.stores]}

    def __str__(self) -> str:
        move = f"{self.source_provider} -> {self.provider}" if self.source_provider != self.provider else self.provider
        if self.dry_run:
            head = (f"dry run: {self.source} at batch {self.batch_id}, {move}, "
                    f"{self.old_partitions} -> {self.new_partitions} partitions (nothing written)")
        else:
            head = (f"rewrote {self.source} at batch {self.batch_id} into {self.destination}: {move}, "
                    f"{self.old_partitions} -> {self.new_partitions} partitions, "
                    f"{self.files} files, {self.bytes:,} bytes")
        lines = [head]
        for label, new in (("today", False), ("new", True)):
            rows, size = self.partition_sizes(new)
            if len(rows):
                skew = self.skew(new)
                # more than half the partitions empty: a ratio to an empty median says nothing
                skew_text = (f"skew (max/median) {skew:.2f}" if np.isfinite(skew) else
                             f"{int((size == 0).sum())} of {len(size)} partitions empty")
                lines.append(f"  {label:>5}: {len(rows)} partitions, {int(rows.sum()):,} rows, {int(size.sum()):,} "
                             f"bytes; per partition {int(size.min()):,} .. median {int(np.median(size)):,} .. "
                             f"max {int(size.max()):,} bytes, {skew_text}")
        for s in self.stores:
            dropped = f", {s.dropped} dropped" if s.dropped else ""
            per = s.rows_per_partition
            shown = (str(per) if len(per) <= 16 else
                     f"{min(per):,} .. median {int(np.median(per)):,} .. max {max(per):,}") if per else "[]"
            lines.append(f"  operator {s.operator_id} ({s.operator_name or 'unknown'}) store {s.store_name}: "
                         f"{s.rows:,} rows{dropped}, per partition {shown}")
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


def _with_confs(text: str, confs: dict[str, str], shown: str) -> str:
    """An offset log entry with ``confs`` set among the confs it records (Spark restores them at restart)."""
    lines = text.split("\n")
    try:
        meta = json.loads(lines[1])
        meta.setdefault("conf", {}).update(confs)
    except (IndexError, ValueError, AttributeError) as exc:
        raise RewriteFailedError(f"{shown} has no offset metadata line to carry the rewritten confs: {exc}",
                                 path=shown) from exc
    lines[1] = json.dumps(meta, separators=(",", ":"))
    return "\n".join(lines)


def _operator_metadata(cp: Checkpoint, text: str, num_partitions: int, dest: Destination) -> str:
    """Operator metadata (v1 or v2) with every store's partition count set and its schema file
    paths (v2 records absolute URIs) pointing into ``dest``, wherever the source was written."""
    header, _, body = text.partition("\n")
    doc = json.loads(body)
    operator_id = int(doc["operatorInfo"]["operatorId"])
    for store in doc.get("stateStoreInfo", []):
        store["numPartitions"] = num_partitions
        paths = store.get("stateSchemaFilePaths")
        if paths:
            store["stateSchemaFilePaths"] = [dest.qualified(cp.resolve_schema_path(operator_id, p)) for p in paths]
    return header + "\n" + json.dumps(doc, separators=(",", ":"))


def _plan(cp: Checkpoint, batch_id: int, operator_id: int, store_name: str = DEFAULT_STORE,
          **options: Any) -> StateReadPlan:
    return plan_store_read(cp, operator_id, store_name, batch_id, **options)


class StoreRows:
    """One store's rows, partition by partition, as its provider stores them: where each row
    goes in the new layout, and how to turn rows into the other provider's encoding."""

    def __init__(self, plan: StateReadPlan, single: bool = False) -> None:
        self.plan = plan
        # a global limit keeps its count in partition 0 whatever the partitions (its key has no fields)
        self.single = single
        self.rocksdb = plan.provider == ROCKSDB_PROVIDER
        self.spec = KeyEncoderSpec.from_plan(plan.key_encoder, plan.num_cols_prefix_key)

    def target_partitions(self, num_partitions: int) -> list[int]:
        """The new partitions this store writes: all of them, or partition 0 alone."""
        return [0] if self.single else list(range(num_partitions))

    def load_sized(self, pid: int) -> tuple[RowBuffer, RowBuffer, np.ndarray]:
        """:meth:`load`, and the state bytes of each row as the source stores it (before any transform)."""
        keys, values = self.load(pid)
        return keys, values, row_bytes(keys, values)

    def load(self, pid: int) -> tuple[RowBuffer, RowBuffer]:
        """Keys and values of old partition ``pid`` at the plan's version, as stored."""
        plan = self.plan
        directory = plan.checkpoint.store_dir(plan.operator_id, pid, plan.store_name)
        if not self.rocksdb:
            return HDFSStore(plan.storage, directory, plan.codec, plan.store_conf.row_checksum).load_rows(plan.version)
        state = rocksdb.load_store(plan, directory, pid)
        if state.uses_column_families:
            # the operator's metadata did not say so (FamilyStoreRows handles the stores it does)
            raise UnsupportedOptionError(
                f"store '{plan.store_name}' of operator {plan.operator_id} of {plan.checkpoint.location} keeps "
                "column families, but its operator metadata does not name them (transformWithState, join state "
                "formats 3 and 4 record them there); it cannot be rewritten", path=plan.storage.display(directory))
        return state.row_buffers(f"{plan.storage.display(directory)} (version {plan.version})")

    def partition_key(self, keys: RowBuffer, drop: KeyFilter | None) -> tuple[list[pa.Array], np.ndarray]:
        """The columns Spark's shuffle hashes to place each row (none for a single-partition store),
        and whether each row is kept (not matched by ``drop``)."""
        plan = self.plan
        decoded = (decode_keys(keys, plan.key_schema, self.spec, plan.store_conf.avro) if self.rocksdb
                   else decode_rows(keys, plan.key_schema))
        keep = np.ones(len(decoded), dtype=bool) if drop is None else _kept(drop, decoded)
        if self.single:
            return [], keep
        width = plan.partition_key_fields
        if width is None:
            raise UnsupportedOptionError(
                f"cannot tell which key fields Spark partitions store '{plan.store_name}' of operator "
                f"{plan.operator_id} by, so its rows cannot be moved to new partitions")
        return [decoded.field(i) for i in range(width)], keep

    def route(self, keys: RowBuffer, num_partitions: int, drop: KeyFilter | None) -> tuple[np.ndarray, np.ndarray]:
        """Each row's new partition (``pmod(murmur3(partition key), num_partitions)``) and whether it is kept."""
        columns, keep = self.partition_key(keys, drop)
        if not columns:
            return np.zeros(len(keep), dtype=np.int32), keep
        return partition_ids(columns, num_partitions), keep

    def convert(self, keys: RowBuffer, values: RowBuffer, to_rocksdb: bool) -> tuple[RowBuffer, RowBuffer]:
        """The rows in the encoding of the target provider."""
        if to_rocksdb == self.rocksdb:
            return keys, values
        if to_rocksdb:
            return encode_keys(keys, self.plan.key_schema, self.spec), encode_values(values)
        return unsafe_keys(keys, self.plan.key_schema, self.spec), unsafe_values(values)


class FamilyStoreRows(StoreRows):
    """A RocksDB store that keeps virtual column families (transformWithState, join formats 3 and 4).

    Every family is rewritten, Spark's internal ones too (TTL indexes, list counters, both timer
    indexes), each row routed by the grouping (or join) key found in its own family's key, so a
    key's variables, TTL entries and timers land in the same new partition. Rows are copied as
    they are, except that family ids are made those of the destination's snapshots where a
    partition numbered them differently, and that list values RocksDB combined at read time get
    the merge delimiter the checkpoint's merge operator writes.
    """

    def __init__(self, plan: StateReadPlan, metadata: OperatorMetadata) -> None:
        super().__init__(plan)
        store = metadata.store(DEFAULT_STORE)
        if store is None:
            raise SchemaReadError(f"operator metadata of operator {plan.operator_id} lists no '{DEFAULT_STORE}' store",
                                  path=plan.storage.display(f"state/{plan.operator_id}/_metadata"))
        self.families = family_schemas(plan.checkpoint, plan.operator_id, store)
        kinds = variable_kinds(metadata)
        self.paths = {name: family_partition_key(name, family, kinds) for name, family in self.families.items()}
        self.specs = {name: KeyEncoderSpec.from_plan(family.key_encoder, 0) for name, family in self.families.items()}
        self.multi_value = {name for name in self.families
                            if kinds.get(name) == LIST or name.endswith(("-keyWithTsToValues", "-tsWithKey"))}
        # the ids the destination's snapshots name (their metadata is the source's): rows are renumbered to them
        self.mapping: dict[str, int] = dict(zip_extra_metadata(plan).get("columnFamilyMapping") or {})
        self.names = {cf_id: name for name, cf_id in self.mapping.items()}
        # the key Spark hashes and drop_keys is matched against: a transformWithState plan's key is the
        # grouping key already; a join family's key is narrowed to the join key
        if operators.is_transform_with_state(metadata.operator_name) or plan.variable is None:
            self.key_schema = plan.key_schema
        else:
            self.key_schema = _struct_at(plan.variable.family.key_schema, self.paths[plan.variable.name])

    def load(self, pid: int) -> tuple[RowBuffer, RowBuffer]:
        plan = self.plan
        directory = plan.checkpoint.store_dir(plan.operator_id, pid, plan.store_name)
        source = f"{plan.storage.display(directory)} (version {plan.version})"
        state = rocksdb.load_store(plan, directory, pid)
        keys, values = state.row_buffers(source)
        if len(keys.starts) == 0:
            return keys, values
        own = rocksdb.store_column_families(plan, directory, state)
        if own != self.mapping:
            keys = self._renumbered(keys, own, source)
        if self.multi_value and plan.store_conf.merge_operator_version != 1:
            values = self._rejoined(keys, values, source)
        return keys, values

    def _renumbered(self, keys: RowBuffer, own: dict[str, int], source: str) -> RowBuffer:
        table = np.full(1 << 16, -1, dtype=np.int32)
        for name, cf_id in own.items():
            if name not in self.mapping:
                raise CorruptFileError(f"{source}: column family {name} is not among those of the store's "
                                       f"other partitions ({', '.join(sorted(self.mapping))})", path=source)
            table[cf_id & 0xFFFF] = self.mapping[name]
        new_ids = table[column_family_ids(keys).astype(np.int64) & 0xFFFF]
        if (new_ids < 0).any():
            raise CorruptFileError(f"{source}: a key names a column family id its snapshot does not list", path=source)
        out = pack_rows([(0, keys)], keys.source)
        out.buf[out.starts[:, None] + np.arange(2, dtype=np.int64)] = \
            new_ids.astype("<i2").view(np.uint8).reshape(-1, 2)
        return out

    def _rejoined(self, keys: RowBuffer, values: RowBuffer, source: str) -> RowBuffer:
        ids = column_family_ids(keys)
        multi = np.isin(ids, [self.mapping[n] for n in self.multi_value if n in self.mapping])
        if not multi.any():
            return values
        conf = self.plan.store_conf
        data = values.buf
        rows = [bytes(data[s:s + n]) for s, n in zip(values.starts.tolist(), values.lengths.tolist(), strict=True)]
        for i in np.flatnonzero(multi).tolist():
            rows[i] = rejoin_multi_value(rows[i], conf.merge_operator_version, conf.row_checksum, source)
        return RowBuffer.from_rows(rows, values.source)

    def partition_key(self, keys: RowBuffer, drop: KeyFilter | None) -> tuple[list[pa.Array], np.ndarray]:
        plan = self.plan
        target_type = self.key_schema.to_arrow()
        ids = column_family_ids(keys) if len(keys.starts) else np.zeros(0, dtype=np.int16)
        parts: list[pa.Array] = []
        order: list[np.ndarray] = []
        for cf_id in np.unique(ids).tolist():
            name = self.names.get(cf_id)
            if name is None or name not in self.families:
                raise CorruptFileError(
                    f"{keys.source}: {len(ids[ids == cf_id])} keys of column family "
                    f"{name or f'id {cf_id}'}, which has no schema to route them by", path=keys.source)
            index = np.flatnonzero(ids == cf_id)
            decoded = decode_keys(strip_column_family(keys.take(index)), self.families[name].key_schema,
                                  self.specs[name], plan.store_conf.avro)
            parts.append(_as_type(_array_at(decoded, self.paths[name]), target_type, name))
            order.append(index)
        if not parts:
            grouping = pa.array([], type=target_type)
        else:
            grouping = pa.concat_arrays(parts).take(pa.array(np.argsort(np.concatenate(order), kind="stable")))
        keep = np.ones(len(grouping), dtype=bool) if drop is None else _kept(drop, grouping)
        return [grouping], keep

    def convert(self, keys: RowBuffer, values: RowBuffer, to_rocksdb: bool) -> tuple[RowBuffer, RowBuffer]:
        return keys, values  # column families exist on RocksDB only; plan_rewrite refuses a move


def _array_at(keys: pa.StructArray, path: PartitionKeyPath) -> pa.StructArray:
    out = keys
    for i in path.path:
        out = out.field(i)
    if path.leading is not None:
        out = pa.StructArray.from_arrays([out.field(i) for i in range(path.leading)],
                                         fields=[out.type.field(i) for i in range(path.leading)])
    return out


def _struct_at(schema: StructType, path: PartitionKeyPath) -> StructType:
    out = schema
    for i in path.path:
        out = out.fields[i].data_type  # type: ignore[assignment]
    return StructType(list(out.fields[:path.leading])) if path.leading is not None else out


def _as_type(arr: pa.StructArray, target: pa.DataType, family: str) -> pa.StructArray:
    """One family's grouping keys as the store's grouping key type (families differ in nullability only)."""
    if arr.type == target:
        return arr
    try:
        return arr.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaReadError(f"the grouping key in column family {family} ({arr.type}) does not match the "
                              f"operator's ({target}): {exc}", path=family) from exc


# a user's function over (key, value) batches that returns the new key and value columns
Transform = Callable[[pa.RecordBatch], pa.RecordBatch]


class TransformedStoreRows(StoreRows):
    """A store whose rows pass through a user's :data:`Transform` on their way to the new layout:
    decoded, transformed, encoded as UnsafeRows of the key and value schemas the transform
    returns (learnt by calling it once on an empty batch). Keys it leaves as they were keep
    their bytes; changed keys are routed by their new value."""

    def __init__(self, inner: StoreRows, transform: Transform) -> None:
        self.inner = inner
        self.transform = transform
        old = inner.plan
        self.where = f"operator {old.operator_id} store {old.store_name}"
        probe = self._apply(pa.RecordBatch.from_arrays(
            [pa.array([], old.key_schema.to_arrow()), pa.array([], old.stored_value_schema.to_arrow())],
            names=["key", "value"]), 0)
        if not all(pa.types.is_struct(probe.column(i).type) for i in (0, 1)):
            raise InvalidOptionError(f"transform of {self.where} must return struct columns key and value")
        new_key = _evolved(old.key_schema, probe.column(0).type)
        new_value = _evolved(old.stored_value_schema, probe.column(1).type)
        self.key_changed = new_key.json() != old.key_schema.json()
        # the transform saw (and returns) long slots as the longs they hold, and they are written back so
        super().__init__(replace(old, key_schema=new_key, value_schema=new_value, value_long_slots=()), inner.single)
        self.rocksdb = False  # rows leave load() as plain UnsafeRows

    def _apply(self, batch: pa.RecordBatch, rows: int) -> pa.RecordBatch:
        try:
            out = self.transform(batch)
        except StateReaderError:
            raise
        except Exception as exc:  # the user's code: say where it failed
            raise RewriteFailedError(f"transform of {self.where} failed: {type(exc).__name__}: {exc}") from exc
        if isinstance(out, pa.Table):
            out = out.combine_chunks().to_batches()[0] if out.num_rows else pa.RecordBatch.from_pylist(
                [], schema=out.schema)
        if not isinstance(out, pa.RecordBatch) or out.schema.names[:2] != ["key", "value"]:
            raise InvalidOptionError(f"transform of {self.where} must return a pyarrow RecordBatch with columns "
                                     f"key and value, got {getattr(out, 'schema', type(out))}")
        if out.num_rows != rows:
            raise InvalidOptionError(f"transform of {self.where} returned {out.num_rows} rows for {rows}; it must "
                                     "return one row per row (leave keys out with drop_keys)")
        return out

    def load(self, pid: int) -> tuple[RowBuffer, RowBuffer]:
        return self.load_sized(pid)[:2]

    def load_sized(self, pid: int) -> tuple[RowBuffer, RowBuffer, np.ndarray]:
        """The transformed rows, and each row's state bytes as the source stores it (the report's "today")."""
        inner = self.inner
        keys, values = inner.load(pid)
        source_sizes = row_bytes(keys, values)
        n = len(keys.starts)
        plain_keys, plain_values = inner.convert(keys, values, to_rocksdb=False)
        old = inner.plan
        batch = pa.RecordBatch.from_arrays([decode_rows(plain_keys, old.key_schema),
                                            decode_rows(plain_values, old.stored_value_schema)],
                                           names=["key", "value"])
        out = self._apply(batch, n)
        source = f"{self.where}, partition {pid}, as transformed"
        new_keys = (encode_rows(out.column(0), self.plan.key_schema, source + " key", normalize_floats=True)
                    if self.key_changed else plain_keys)
        new_values = encode_rows(out.column(1), self.plan.value_schema, source + " value")
        return new_keys, new_values, source_sizes


def _evolved(old: StructType, arrow_type: pa.StructType) -> StructType:
    """The Spark schema of a transform's output: fields it kept (same name and type) as they were,
    with their nullability and metadata (a window's, say); new or changed ones from their Arrow type."""
    if arrow_type == old.to_arrow():
        return old
    kept = {f.name: f for f in old.fields}
    fields = []
    for i in range(arrow_type.num_fields):
        arrow_field = arrow_type.field(i)
        before = kept.get(arrow_field.name)
        if before is not None and before.data_type.to_arrow() == arrow_field.type:
            fields.append(before)
        else:
            fields.append(StructField(arrow_field.name, from_arrow(arrow_field.type, arrow_field.name),
                                      arrow_field.nullable))
    return StructType(fields)


def _kept(drop: KeyFilter, keys: pa.StructArray) -> np.ndarray:
    return ~np.asarray(drop.mask(keys).to_numpy(zero_copy_only=False), dtype=bool)


@dataclass
class RoutedSlice:
    """The kept rows of a run of one old partition's rows, ordered by new partition, in the target encoding."""

    keys: RowBuffer
    values: RowBuffer
    # each kept row's new partition (non-decreasing)
    target: np.ndarray
    dropped: int
    old_rows: int
    old_bytes: int


# An old partition is routed in runs of rows of about 1/16 of its bytes, within these bounds:
# what routing holds beyond the loaded partition (decoded keys, hashes, framed records) follows
# a run, not the partition.
_SLICE_BYTES = (256 << 10, 4 << 20)


def route_partition(rows: StoreRows, pid: int, num_partitions: int, drop: KeyFilter | None,
                    to_rocksdb: bool) -> Iterator[RoutedSlice]:
    """Load old partition ``pid`` of a store and send each row to its new partition, a run of rows at a time."""
    keys, values, source_sizes = rows.load_sized(pid)
    sizes = row_bytes(keys, values)
    low, high = _SLICE_BYTES
    for lo, hi in row_runs(sizes, min(max(int(sizes.sum()) // 16, low), high)):
        part_keys = keys.take(slice(lo, hi))
        target, keep = rows.route(part_keys, num_partitions, drop)
        index = np.flatnonzero(keep)
        index = index[np.argsort(target[index], kind="stable")]
        k, v = rows.convert(part_keys.take(index), values.take(index + lo), to_rocksdb)
        yield RoutedSlice(k, v, target[index], hi - lo - len(index), hi - lo, int(source_sizes[lo:hi].sum()))


class _Spill:
    """The framed records routed to each new partition of one store, in local temporary files
    until that partition is written: memory holds one old partition while routing and a few
    MiB of one new partition while writing, never the whole store."""

    # what a new partition's records are read back in (runs of whole records of about this size)
    CHUNK = 4 << 20

    def __init__(self, workdir: str, num_partitions: int) -> None:
        self.paths = [os.path.join(workdir, f"{p}.records") for p in range(num_partitions)]
        # the size of each run of whole records appended to each file
        self.runs: list[list[int]] = [[] for _ in range(num_partitions)]
        for path in self.paths:
            open(path, "wb").close()

    def add(self, framed: np.ndarray, bounds: np.ndarray, counts: np.ndarray) -> None:
        """Append each new partition's run of ``framed`` (``bounds[p]:bounds[p+1]``)."""
        for pid in np.flatnonzero(counts).tolist():
            with open(self.paths[pid], "ab") as fh:
                fh.write(framed[bounds[pid]:bounds[pid + 1]].data)
            self.runs[pid].append(int(bounds[pid + 1] - bounds[pid]))

    def take(self, pid: int) -> Iterator[bytes]:
        """New partition ``pid``'s records, in chunks of whole records; the file goes once read."""
        try:
            with open(self.paths[pid], "rb") as fh:
                chunk = 0
                for size in self.runs[pid]:
                    if chunk and chunk + size > self.CHUNK:
                        yield fh.read(chunk)
                        chunk = 0
                    chunk += size
                if chunk:
                    yield fh.read(chunk)
        finally:
            os.remove(self.paths[pid])


def _route_store(rows: StoreRows, report: StoreReport, num_partitions: int, drop: KeyFilter | None,
                 to_rocksdb: bool, spill: _Spill | None, bar: Progress) -> None:
    """Send every row of one store to its new partition (into ``spill`` unless a dry run),
    counting rows and bytes per old and per new partition in ``report``."""
    new_rows = np.zeros(num_partitions, dtype=np.int64)
    new_bytes = np.zeros(num_partitions, dtype=np.int64)
    for pid in rows.plan.partitions:
        old_rows = old_bytes = 0
        for routed in route_partition(rows, pid, num_partitions, drop, to_rocksdb):
            old_rows += routed.old_rows
            old_bytes += routed.old_bytes
            report.dropped += routed.dropped
            counts = np.bincount(routed.target, minlength=num_partitions)
            new_rows += counts
            sizes = row_bytes(routed.keys, routed.values)
            new_bytes += np.bincount(routed.target, weights=sizes, minlength=num_partitions).astype(np.int64)
            if spill is not None and len(routed.target):
                framed, lengths = frame_records(routed.keys, routed.values)
                # the records are in partition order: partition p's bytes run between these offsets
                spill.add(framed, np.r_[0, np.cumsum(lengths)][np.r_[0, np.cumsum(counts)]], counts)
            del routed
        report.old_rows_per_partition.append(old_rows)
        report.old_bytes_per_partition.append(old_bytes)
        release_free_memory()  # the next partition starts from what this one used, not on top of it
        bar.advance()
    targets = rows.target_partitions(num_partitions)
    report.rows = int(new_rows.sum())
    report.rows_per_partition = [int(new_rows[p]) for p in targets]
    report.bytes_per_partition = [int(new_bytes[p]) for p in targets]


def zip_extra_metadata(plan: StateReadPlan) -> dict[str, Any]:
    """The fields the source's writer puts in a RocksDB snapshot zip's metadata beyond SSTs and key
    counts (none when the source is HDFS-backed)."""
    if plan.provider != ROCKSDB_PROVIDER:
        return {}
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


@dataclass
class RewritePlan:
    """What a rewrite will do, checked before anything is written."""

    checkpoint: Checkpoint
    batch_id: int
    old_partitions: int
    new_partitions: int
    source_provider: str
    provider: str
    # every store of every stateful operator, with how its rows are found and routed
    stores: list[StoreRows]
    # RocksDB checkpoint format 2: state files named by unique ids that the commit entry of the batch lists
    unique_ids: bool = False
    # seeds the destination's unique ids, so that any process writing a partition names it alike
    rewrite_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def to_rocksdb(self) -> bool:
        return self.provider == "rocksdb"

    def unique_id(self, plan: StateReadPlan, pid: int) -> str | None:
        """The unique id of a new partition's files (checkpoint format 2), None in format 1."""
        if not self.unique_ids:
            return None
        return str(uuid.uuid5(uuid.UUID(self.rewrite_id), f"{plan.operator_id}/{pid}/{plan.store_name}"))

    def schema_files(self) -> dict[str, bytes]:
        """The schema files a transform changes: path -> the bytes of a v2 file with the new schemas."""
        return {self.checkpoint.schema_file(rows.plan.operator_id, rows.plan.store_name):
                write_schema_v2(rows.plan.key_schema, rows.plan.value_schema)
                for rows in self.stores if isinstance(rows, TransformedStoreRows)}

    def commit_entry(self) -> dict[str, Any]:
        """The destination's commit entry of the rewritten batch: the source's, with (format 2) the new
        partitions' unique ids, one list per partition holding each store's id in Spark's store order."""
        _, entry = self.checkpoint.commit_entry(self.batch_id)
        entry = dict(entry)
        if self.unique_ids:
            by_operator: dict[int, list[StoreRows]] = {}
            for rows in self.stores:
                by_operator.setdefault(rows.plan.operator_id, []).append(rows)
            ids: dict[str, list[list[str]]] = {}
            for op, stores in by_operator.items():
                stores = sorted(stores, key=lambda r: JOIN_STORES.index(r.plan.store_name)
                                if r.plan.store_name in JOIN_STORES else 0)
                ids[str(op)] = [[self.unique_id(r.plan, pid) or "" for r in stores]
                                for pid in stores[0].target_partitions(self.new_partitions)]
            entry["stateUniqueIds"] = ids
        return entry

    @property
    def offset_confs(self) -> dict[str, str]:
        """The confs the destination's offset log records differently from the source's."""
        confs = {CONF_SHUFFLE_PARTITIONS: str(self.new_partitions)}
        if self.provider != self.source_provider:
            confs[CONF_PROVIDER] = PROVIDER_NAMES[self.provider]
        return confs

    def report(self, destination: str, dry_run: bool) -> RewriteReport:
        return RewriteReport(self.checkpoint.location, destination, self.batch_id, self.provider,
                             self.old_partitions, self.new_partitions, source_provider=self.source_provider,
                             dry_run=dry_run)


def plan_rewrite(source: Storage, *, num_partitions: int | None = None, provider: str | None = None,
                 batch_id: int | None = None, allow_uncommitted: bool = False,
                 transform: Transform | dict[int, Transform] | None = None) -> RewritePlan:
    """Check that ``source`` can be rewritten as asked and plan every store; reads logs and metadata only."""
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
    # not recorded (very old checkpoints): as many as the partition directories on disk
    old_partitions = shuffle_partitions(conf) or max(
        (max(cp.partition_ids(op), default=-1) + 1 for op in cp.operator_ids), default=0)
    new_partitions = old_partitions if num_partitions is None else num_partitions
    if new_partitions < 1:
        raise InvalidOptionError(f"num_partitions must be at least 1, got {num_partitions}")
    if provider is not None and provider.lower() not in PROVIDER_NAMES:
        raise InvalidOptionError(f"provider must be one of {', '.join(PROVIDER_NAMES)}, got {provider!r}")
    # the provider each read is planned with: recorded, else told by the state files (not assumed HDFS)
    source_class = detect_provider(cp, conf.get(CONF_PROVIDER), cp.operator_ids[0]) if cp.operator_ids else (
        conf.get(CONF_PROVIDER) or PROVIDER_NAMES["hdfs"])
    source_provider = provider_name(source_class) or source_class
    target_provider = source_provider if provider is None else provider.lower()
    moving = target_provider != source_provider

    stores: list[StoreRows] = []
    for op in cp.operator_ids:
        meta = cp.operator_metadata(op, batch)
        name = meta.operator_name if meta is not None else None
        families = operators.is_transform_with_state(name) or operators.join_in_column_families(meta)
        if families and target_provider == "hdfs":
            raise UnsupportedOptionError(
                f"operator {op} ({name}) of {cp.location} keeps its state in RocksDB column families "
                "(transformWithState, join state formats 3 and 4), which Spark runs on the RocksDB provider only; "
                "it cannot move to the HDFS-backed provider", path=cp.location)
        if families:
            assert meta is not None
            plan = _plan(cp, batch, op, **_family_plan_options(cp, meta))
            _require_rewritable(cp, plan, batch, moving)
            stores.append(FamilyStoreRows(plan, meta))
            continue
        for store_name in store_names_on_disk(cp, op):
            plan = _plan(cp, batch, op, store_name)
            _require_rewritable(cp, plan, batch, moving)
            if moving and target_provider == "rocksdb" and meta is None and plan.num_cols_prefix_key:
                # without operator metadata (Spark 3.5) Spark's RocksDB store reads keys with the no-prefix
                # encoder, so the prefix-key layout a session window needs there fails its key validation
                raise UnsupportedOptionError(
                    f"operator {op} of {cp.location} (a session window written by Spark 3.5, without operator "
                    "metadata) cannot move to RocksDB: Spark restarts such a store on RocksDB with the wrong key "
                    "encoder. Rewrite it on the HDFS-backed provider", path=cp.location)
            stores.append(StoreRows(plan, name in SINGLE_PARTITION_OPERATORS or plan.partition_key_fields == 0))
    if transform is not None:
        stores = _transformed(cp, batch, stores, transform)
    return RewritePlan(cp, batch, old_partitions, new_partitions, source_provider, target_provider, stores,
                       unique_ids=cp.names_files_by_unique_id(batch))


def _transformed(cp: Checkpoint, batch: int, stores: list[StoreRows],
                 transform: Transform | dict[int, Transform]) -> list[StoreRows]:
    """``stores`` with the transformed operators' store wrapped in :class:`TransformedStoreRows`."""
    operator_ids = sorted({rows.plan.operator_id for rows in stores})
    if callable(transform):
        if len(operator_ids) != 1:
            raise InvalidOptionError(
                f"{cp.location} has {len(operator_ids)} stateful operators ({operator_ids}); pass transform as "
                "{operator_id: function} to say which one it changes")
        transform = {operator_ids[0]: transform}
    unknown = sorted(set(transform) - set(operator_ids))
    if unknown:
        raise InvalidOptionError(f"transform names operators {unknown}, which {cp.location} does not have "
                                 f"(its stateful operators: {operator_ids})")
    out = []
    for rows in stores:
        fn = transform.get(rows.plan.operator_id)
        if fn is None:
            out.append(rows)
            continue
        plan = rows.plan
        where = f"operator {plan.operator_id} of {cp.location}"
        if isinstance(rows, FamilyStoreRows) or sum(r.plan.operator_id == plan.operator_id for r in stores) != 1:
            raise UnsupportedOptionError(f"{where} keeps several stores (a join, transformWithState); transform "
                                         "supports operators with one store for now", path=cp.location)
        if plan.store_conf.row_checksum or plan.store_conf.avro:
            raise UnsupportedOptionError(f"{where} keeps row checksums or Avro-encoded state; transform does not "
                                         "support those yet", path=cp.location)
        meta = cp.operator_metadata(plan.operator_id, batch)
        store = meta.store(plan.store_name) if meta is not None else None
        if store is not None and store.schema_file_paths:
            raise UnsupportedOptionError(f"{where} keeps its schema in schema v3 files; transform does not "
                                         "support those yet", path=cp.location)
        out.append(TransformedStoreRows(rows, fn))
    return out


def _family_plan_options(cp: Checkpoint, meta: OperatorMetadata) -> dict[str, Any]:
    """Read options that plan a store with column families: its first variable, or its first join family."""
    if operators.is_transform_with_state(meta.operator_name):
        names = user_variables(meta)
        return {"state_var_name": names[0]} if names else {"read_registered_timers": True}
    names = join_column_families(cp, meta)
    return {"store_name": next((n for n in names if n.endswith("-keyToNumValues")), names[0])}


def _require_rewritable(cp: Checkpoint, plan: StateReadPlan, batch: int, moving: bool) -> None:
    """Refuse what the rewrite does not support yet, before anything is written."""
    if moving and cp.names_files_by_unique_id(batch):
        raise UnsupportedOptionError(
            f"{cp.location} uses RocksDB checkpoint format 2, which the HDFS-backed provider does not support "
            "(Spark refuses checkpointFormatVersion 2 with it); it cannot move to the HDFS-backed provider",
            path=cp.location)
    if moving and plan.store_conf.row_checksum:
        raise UnsupportedOptionError(
            f"{cp.location} keeps row checksums ({CONF_ROW_CHECKSUM}); moving it to another provider "
            "is not supported yet", path=cp.location)
    if moving and plan.store_conf.avro:
        raise UnsupportedOptionError(
            f"{cp.location} encodes its state with Avro; moving it to another provider is not supported "
            "yet", path=cp.location)


def _dropped(plan: StateReadPlan, drop_keys: KeyFilterSpec | None) -> KeyFilter | None:
    """``drop_keys`` bound to a store's key; its errors name ``drop_keys``, the argument it came as."""
    return bind_key_filter(plan, drop_keys, "drop_keys")


def rewrite_checkpoint(source: Storage, dest: Destination | None, *, num_partitions: int | None = None,
                       provider: str | None = None, drop_keys: KeyFilterSpec | None = None,
                       batch_id: int | None = None, allow_uncommitted: bool = False,
                       dry_run: bool = False, show_progress: bool | None = None,
                       transform: Transform | dict[int, Transform] | None = None) -> RewriteReport:
    """Write the checkpoint of ``source`` at ``batch_id`` (default: the last committed) into ``dest``.

    ``dry_run`` writes nothing (``dest`` may be None) and reports the rows and bytes each
    new partition would get next to each old partition's. ``transform`` changes each row's
    key and value on the way (:class:`TransformedStoreRows`), and the schema files with them.
    """
    rp = plan_rewrite(source, num_partitions=num_partitions, provider=provider, batch_id=batch_id,
                      allow_uncommitted=allow_uncommitted, transform=transform)
    n = rp.new_partitions
    if dry_run:
        report = rp.report("", dry_run=True)
        for rows in rp.stores:
            store = store_report(rows.plan)
            with progress(f"routing {_label(rows.plan)}", len(rows.plan.partitions), enabled=show_progress) as bar:
                _route_store(rows, store, n, _dropped(rows.plan, drop_keys), rp.to_rocksdb, None, bar)
            report.stores.append(store)
        return report
    if dest is None:
        raise InvalidOptionError("a rewrite needs a destination (or dry_run=True)")
    dropped = {id(rows): _dropped(rows.plan, drop_keys) for rows in rp.stores}  # a bad filter fails before writing
    dest.begin(rp.checkpoint.location)  # marked incomplete: the commit point is the real `metadata`, written last
    report = rp.report(dest.display(), dry_run=False)
    put = counting_writer(dest, report)
    with failure_marked(rp, dest):
        with tempfile.TemporaryDirectory(prefix="state_reader-rewrite-") as workdir:
            for rows in rp.stores:
                store = store_report(rows.plan)
                spill = _Spill(workdir, n)
                targets = rows.target_partitions(n)
                with progress(f"routing {_label(rows.plan)}", len(rows.plan.partitions) + len(targets),
                              enabled=show_progress) as bar:
                    _route_store(rows, store, n, dropped[id(rows)], rp.to_rocksdb, spill, bar)
                    bar.advance(0, f"writing {_label(rows.plan)}")
                    extra = zip_extra_metadata(rows.plan)
                    for pid in targets:
                        write_partition(rows.plan, pid, spill.take(pid), rp.to_rocksdb, extra, put,
                                        rp.unique_id(rows.plan, pid))
                        release_free_memory()
                        bar.advance()
                report.stores.append(store)
        finish_checkpoint(rp, dest, put)
    return report


Put = Callable[[str, bytes | Iterable[bytes]], None]


def counting_writer(dest: Destination, report: RewriteReport) -> Put:
    """A ``put(rel, data)`` that writes ``data`` (bytes, or pieces streamed) into ``dest`` and
    counts the files and bytes in ``report``."""
    def put(rel: str, data: bytes | Iterable[bytes]) -> None:
        report.bytes += dest.write(rel, data)
        report.files += 1

    return put


@contextmanager
def failure_marked(rp: RewritePlan, dest: Destination) -> Iterator[None]:
    """Turn a failure while writing ``dest`` into a :class:`RewriteFailedError` that says the
    destination is marked incomplete (its ``metadata`` still holds the marker
    :meth:`~state_reader.io.destination.Destination.begin` wrote)."""
    try:
        yield
    except (StateReaderError, OSError) as exc:
        raise RewriteFailedError(
            f"rewriting {rp.checkpoint.location} into {dest.display()} stopped: {getattr(exc, 'message', exc)}. "
            f"{dest.display('metadata')} marks the destination incomplete, so Spark will not start from it; "
            "run the rewrite again into it (it replaces the incomplete attempt)", path=dest.display()) from exc


def write_partition(plan: StateReadPlan, pid: int, framed: Iterable[bytes | np.ndarray], to_rocksdb: bool,
                    extra: dict[str, Any], put: Put, unique_id: str | None = None) -> None:
    """New partition ``pid`` of a store: its ``framed`` rows (target encoding, in chunks of whole
    records as :func:`~state_reader.providers.hdfs.frame_records` frames them) streamed into the
    snapshot of version B + 1 (named by ``unique_id`` in checkpoint format 2: :meth:`RewritePlan.unique_id`)."""
    directory = plan.checkpoint.store_dir(plan.operator_id, pid, plan.store_name)
    if not to_rocksdb:
        put(posixpath.join(directory, state_file_name(plan.version, "snapshot")), snapshot_file(framed, plan.codec))
        return
    source = f"rows routed to {directory}"
    for sst, data in rocksdb.snapshot_files((framed_rows(chunk, source) for chunk in framed), extra):
        if sst is None:
            put(posixpath.join(directory, state_file_name(plan.version, "zip", unique_id)), data)
        else:
            put(posixpath.join(directory, snapshot_zip.SST_DIR, sst), data)


def finish_checkpoint(rp: RewritePlan, dest: Destination, put: Put) -> None:
    """Everything but the state: logs, schema files, operator metadata, and last the real ``metadata``
    (the commit point: from then on Spark starts from ``dest``)."""
    _copy_logs(rp.checkpoint, put, rp.batch_id, rp.offset_confs)
    version = "v2" if rp.unique_ids else f"v{rp.checkpoint.commit_entry(rp.batch_id)[0]}"
    put(f"commits/{rp.batch_id}", f"{version}\n{json.dumps(rp.commit_entry(), separators=(',', ':'))}".encode())
    _copy_state_metadata(rp.checkpoint, put, rp.new_partitions, dest, rp.schema_files())
    put("metadata", rp.checkpoint.storage.read_bytes("metadata"))


def _label(plan: StateReadPlan) -> str:
    return f"operator {plan.operator_id} store {plan.store_name}"


def store_report(plan: StateReadPlan) -> StoreReport:
    meta = plan.checkpoint.operator_metadata(plan.operator_id, plan.batch_id)
    return StoreReport(plan.operator_id, meta.operator_name if meta is not None else None, plan.store_name)


def _copy_logs(cp: Checkpoint, put: Any, batch: int, confs: dict[str, str]) -> None:
    """The offset and commit logs up to ``batch`` (offsets with ``confs`` set), and the source logs."""
    storage = cp.storage
    for b in _offset_batches(cp):
        if b <= batch:
            rel = f"offsets/{b}"
            text = storage.read_bytes(rel).decode("utf-8")
            put(rel, _with_confs(text, confs, storage.display(rel)).encode("utf-8"))
    for b in numeric_names(storage.list_names("commits")):
        if b < batch:  # the rewritten batch's own entry names the new files: finish_checkpoint writes it
            put(f"commits/{b}", storage.read_bytes(f"commits/{b}"))
    for rel in _files_under(storage, "sources"):
        name = posixpath.basename(rel)
        if name.isdigit() and int(name) > batch:
            continue  # a source's log of batches after the one rewritten: the resumed query plans them afresh
        put(rel, storage.read_bytes(rel))


def _copy_state_metadata(cp: Checkpoint, put: Any, num_partitions: int, dest: Destination,
                         schema_files: dict[str, bytes]) -> None:
    """Schema files as they are (or as ``schema_files`` gives them: a transform's new schemas);
    operator metadata with the new partition count."""
    storage = cp.storage
    for op in cp.operator_ids:
        for rel in _files_under(storage, f"state/{op}"):
            parts = rel.split("/")
            inside = parts[2]
            if inside.isdigit():
                # a partition directory: only partition 0's schema files (`[store/]_metadata/schema`) come along
                if inside != "0" or "_metadata" not in parts:
                    continue
                put(rel, schema_files[rel] if rel in schema_files else storage.read_bytes(rel))
            elif inside == "_metadata" and (parts[-1] == "metadata" or parts[-2] == "v2"):
                text = storage.read_bytes(rel).decode("utf-8")
                put(rel, _operator_metadata(cp, text, num_partitions, dest).encode("utf-8"))
            else:
                put(rel, storage.read_bytes(rel))
