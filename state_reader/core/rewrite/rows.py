"""One store's rows in a rewrite: how they are loaded, where each goes, and how they change encoding
(between the providers, or through a user's transform)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from state_reader.core.key_filter import KeyFilter
from state_reader.core.planner import plan_store_read
from state_reader.core.size import row_bytes
from state_reader.errors import (
    CorruptFileError,
    InvalidOptionError,
    RewriteFailedError,
    SchemaReadError,
    StateReaderError,
    UnsupportedOptionError,
)
from state_reader.formats import snapshot_zip
from state_reader.formats.rocksdb_encode import encode_keys, encode_values
from state_reader.formats.rocksdb_encoding import (
    PREFIX_SCAN,
    KeyEncoderSpec,
    column_family_ids,
    decode_key_prefixes,
    decode_keys,
    strip_column_family,
    unsafe_keys,
    unsafe_values,
)
from state_reader.formats.rocksdb_multi_value import rejoin_multi_value
from state_reader.formats.spark_hash import partition_ids
from state_reader.formats.spark_types import StructField, StructType, from_arrow
from state_reader.formats.unsaferow import RowBuffer, decode_rows
from state_reader.formats.unsaferow_encode import encode_rows, pack_rows
from state_reader.model import operators
from state_reader.model.checkpoint import (
    DEFAULT_STORE,
    JOIN_V4_STORES,
    CheckpointDir,
    OperatorMetadata,
    parse_state_file_name,
)
from state_reader.model.conf import ROCKSDB_PROVIDER
from state_reader.model.plan import StateReadPlan
from state_reader.model.state_variables import (
    LIST,
    PartitionKeyPath,
    family_partition_key,
    family_schemas,
    variable_kinds,
)
from state_reader.providers import rocksdb
from state_reader.providers.hdfs import HDFSStore


def store_plan(
    cp: CheckpointDir, batch_id: int, operator_id: int, store_name: str = DEFAULT_STORE, **options: Any
) -> StateReadPlan:
    return plan_store_read(cp, operator_id, store_name, batch_id, **options)


def store_label(plan: StateReadPlan, located: bool = False) -> str:
    """A store as a rewrite's progress and messages name it (``located``: with its checkpoint)."""
    label = f"operator {plan.operator_id} store {plan.store_name}"
    return f"{label} of {plan.checkpoint.location}" if located else label


class StoreRows:
    """One store's rows, partition by partition, as its provider stores them: where each row
    goes in the new layout, and how to turn rows into the other provider's encoding."""

    # whether the store is written under new schemas (a transform, a format change): its schema files are rewritten
    writes_schema = False

    def __init__(self, plan: StateReadPlan, single: bool = False) -> None:
        self.plan = plan
        # a global limit keeps its count in partition 0 whatever the partitions (its key has no fields)
        self.single = single
        self.rocksdb = plan.provider_class == ROCKSDB_PROVIDER
        self.spec = KeyEncoderSpec.from_plan(plan.key_encoder, plan.num_cols_prefix_key)

    def zip_metadata(self) -> dict[str, Any]:
        """The fields of the new snapshots' ``metadata`` beyond SSTs and key counts (RocksDB): the source's."""
        return zip_extra_metadata(self.plan)

    def state_metadata(
        self, batch: int, num_partitions: int, qualified: Callable[[str], str]
    ) -> dict[str, bytes] | None:
        """The operator's files beside its partitions (schema files, operator metadata) when the store writes its
        own, path -> bytes; None: the source's are carried over."""
        return None

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
                "formats 3 and 4 record them there); it cannot be rewritten",
                path=plan.storage.display(directory),
            )
        return state.row_buffers(f"{plan.storage.display(directory)} (version {plan.version})")

    def partition_key(self, keys: RowBuffer, drop: KeyFilter | None) -> tuple[list[pa.Array], np.ndarray]:
        """The columns Spark's shuffle hashes to place each row (none for a single-partition store),
        and whether each row is kept (not matched by ``drop``)."""
        plan = self.plan
        decoded = (
            decode_keys(keys, plan.key_schema, self.spec, plan.store_conf.avro)
            if self.rocksdb
            else decode_rows(keys, plan.key_schema)
        )
        keep = np.ones(len(decoded), dtype=bool) if drop is None else _kept(drop, decoded)
        if self.single:
            return [], keep
        width = plan.partition_key_fields
        if width is None:
            raise UnsupportedOptionError(
                f"cannot tell which key fields Spark partitions store '{plan.store_name}' of operator "
                f"{plan.operator_id} by, so its rows cannot be moved to new partitions"
            )
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
            raise SchemaReadError(
                f"operator metadata of operator {plan.operator_id} lists no '{DEFAULT_STORE}' store",
                path=plan.storage.display(f"state/{plan.operator_id}/_metadata"),
            )
        self.families = family_schemas(plan.checkpoint, plan.operator_id, store)
        kinds = variable_kinds(metadata)
        tws = operators.is_transform_with_state(metadata.operator_name)
        # what rows written into the store name (a join's four stores are families of no variable kind)
        self.variable_kinds: dict[str, str] | None = kinds if tws else None
        self.ttl_variables = {
            str(v.get("stateName")) for v in metadata.properties.get("stateVariables", []) if v.get("ttlEnabled")
        }
        self.paths = {name: family_partition_key(name, family, kinds) for name, family in self.families.items()}
        self.specs = {name: KeyEncoderSpec.from_plan(family.key_encoder, 0) for name, family in self.families.items()}
        self.multi_value = {name for name in self.families if kinds.get(name) == LIST or name in JOIN_V4_STORES}
        # the ids the destination's snapshots name (their metadata is the source's): rows are renumbered to them
        self.mapping: dict[str, int] = dict(zip_extra_metadata(plan).get("columnFamilyMapping") or {})
        self.names = {cf_id: name for name, cf_id in self.mapping.items()}
        # the key Spark hashes and drop_keys is matched against: a transformWithState plan's key is the
        # grouping key already; a join family's key is narrowed to the join key
        if tws or plan.variable is None:
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
                raise CorruptFileError(
                    f"{source}: column family {name} is not among those of the store's "
                    f"other partitions ({', '.join(sorted(self.mapping))})",
                    path=source,
                )
            table[cf_id & 0xFFFF] = self.mapping[name]
        new_ids = table[column_family_ids(keys).astype(np.int64) & 0xFFFF]
        if (new_ids < 0).any():
            raise CorruptFileError(f"{source}: a key names a column family id its snapshot does not list", path=source)
        out = pack_rows([(0, keys)], keys.source)
        out.buf[out.starts[:, None] + np.arange(2, dtype=np.int64)] = (
            new_ids.astype("<i2").view(np.uint8).reshape(-1, 2)
        )
        return out

    def _rejoined(self, keys: RowBuffer, values: RowBuffer, source: str) -> RowBuffer:
        ids = column_family_ids(keys)
        multi = np.isin(ids, [self.mapping[n] for n in self.multi_value if n in self.mapping])
        if not multi.any():
            return values
        conf = self.plan.store_conf
        data = values.buf
        rows = [bytes(data[s : s + n]) for s, n in zip(values.starts.tolist(), values.lengths.tolist(), strict=True)]
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
                    f"{name or f'id {cf_id}'}, which has no schema to route them by",
                    path=keys.source,
                )
            index = np.flatnonzero(ids == cf_id)
            spec, path = self.specs[name], self.paths[name]
            # a prefix-scan key (a map's) holds the grouping key in its prefix: read that alone, so that a
            # key that is its prefix alone (a map's grouping key deleted whole) is routed too
            decode = (
                decode_key_prefixes
                if spec.kind == PREFIX_SCAN and path.path and path.path[0] < spec.num_prefix_cols
                else decode_keys
            )
            decoded = decode(
                strip_column_family(keys.take(index)), self.families[name].key_schema, spec, plan.store_conf.avro
            )
            parts.append(_as_type(_array_at(decoded, path), target_type, name))
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
        out = pa.StructArray.from_arrays(
            [out.field(i) for i in range(path.leading)], fields=[out.type.field(i) for i in range(path.leading)]
        )
    return out


def _struct_at(schema: StructType, path: PartitionKeyPath) -> StructType:
    out = schema
    for i in path.path:
        out = out.fields[i].data_type  # type: ignore[assignment]
    return StructType(list(out.fields[: path.leading])) if path.leading is not None else out


def _as_type(arr: pa.StructArray, target: pa.DataType, family: str) -> pa.StructArray:
    """One family's grouping keys as the store's grouping key type (families differ in nullability only)."""
    if arr.type == target:
        return arr
    try:
        return arr.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaReadError(
            f"the grouping key in column family {family} ({arr.type}) does not match the operator's ({target}): {exc}",
            path=family,
        ) from exc


# a user's function over (key, value) batches that returns the new key and value columns
Transform = Callable[[pa.RecordBatch], pa.RecordBatch]


class TransformedStoreRows(StoreRows):
    """A store whose rows pass through a user's :data:`Transform` on their way to the new layout:
    decoded, transformed, encoded as UnsafeRows of the key and value schemas the transform
    returns (learnt by calling it once on an empty batch). Keys it leaves as they were keep
    their bytes; changed keys are routed by their new value."""

    writes_schema = True

    def __init__(self, inner: StoreRows, transform: Transform) -> None:
        self.inner = inner
        self.transform = transform
        old = inner.plan
        self.where = store_label(old)
        probe = self._apply(
            pa.RecordBatch.from_arrays(
                [pa.array([], old.key_schema.to_arrow()), pa.array([], old.stored_value_schema.to_arrow())],
                names=["key", "value"],
            ),
            0,
        )
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
            out = (
                out.combine_chunks().to_batches()[0]
                if out.num_rows
                else pa.RecordBatch.from_pylist([], schema=out.schema)
            )
        if not isinstance(out, pa.RecordBatch) or out.schema.names[:2] != ["key", "value"]:
            raise InvalidOptionError(
                f"transform of {self.where} must return a pyarrow RecordBatch with columns "
                f"key and value, got {getattr(out, 'schema', type(out))}"
            )
        if out.num_rows != rows:
            raise InvalidOptionError(
                f"transform of {self.where} returned {out.num_rows} rows for {rows}; it must "
                "return one row per row (leave keys out with drop_keys)"
            )
        return out

    def load(self, pid: int) -> tuple[RowBuffer, RowBuffer]:
        return self.load_sized(pid)[:2]

    def load_sized(self, pid: int) -> tuple[RowBuffer, RowBuffer, np.ndarray]:
        """The transformed rows, and each row's state bytes as the source stores it (the report's current layout)."""
        inner = self.inner
        keys, values = inner.load(pid)
        source_sizes = row_bytes(keys, values)
        n = len(keys.starts)
        plain_keys, plain_values = inner.convert(keys, values, to_rocksdb=False)
        old = inner.plan
        batch = pa.RecordBatch.from_arrays(
            [decode_rows(plain_keys, old.key_schema), decode_rows(plain_values, old.stored_value_schema)],
            names=["key", "value"],
        )
        out = self._apply(batch, n)
        source = f"{self.where}, partition {pid}, as transformed"
        new_keys = (
            encode_rows(out.column(0), self.plan.key_schema, source + " key", normalize_floats=True)
            if self.key_changed
            else plain_keys
        )
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
            fields.append(
                StructField(arrow_field.name, from_arrow(arrow_field.type, arrow_field.name), arrow_field.nullable)
            )
    return StructType(fields)


def _kept(drop: KeyFilter, keys: pa.StructArray) -> np.ndarray:
    return ~np.asarray(drop.mask(keys).to_numpy(zero_copy_only=False), dtype=bool)


def zip_extra_metadata(plan: StateReadPlan) -> dict[str, Any]:
    """The fields the source's writer puts in a RocksDB snapshot zip's metadata beyond SSTs and key
    counts (none when the source is HDFS-backed)."""
    if plan.provider_class != ROCKSDB_PROVIDER:
        return {}
    for pid in plan.partitions:
        directory = plan.checkpoint.store_dir(plan.operator_id, pid, plan.store_name)
        zips = [
            (parsed[0], name)
            for name in plan.storage.list_names(directory) or []
            if (parsed := parse_state_file_name(name)) is not None and parsed[2] == "zip" and parsed[0] <= plan.version
        ]
        if zips:
            name = max(zips)[1]
            shown = plan.storage.display(f"{directory}/{name}")
            raw, _ = snapshot_zip.read_metadata_entry(plan.storage.read_bytes(f"{directory}/{name}"), shown)
            doc = json.loads(raw.decode("utf-8").partition("\n")[2])
            return {k: v for k, v in doc.items() if k not in ("sstFiles", "logFiles", "numKeys")}
    return {}
