"""The core API: plan a state read, then read partitions into Arrow.

Both fronts (the Spark data source and the Spark-free functions) go through
:func:`plan_state_read`, so they validate, resolve and decode identically.
Planning reads only logs, metadata and schema files; the state files of a
partition are read by :meth:`StateReadPlan.read_partition`, wherever that runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from state_reader.core.options import StateStoreOptions
from state_reader.errors import (
    InvalidOptionError,
    NoPartitionError,
    RequiredOptionError,
    SchemaReadError,
    UnsupportedOptionError,
)
from state_reader.formats.schema_files import ColumnFamilySchema, read_schema_v1v2
from state_reader.formats.spark_types import INTEGER, LONG, STRING, StructField, StructType
from state_reader.grouping import group_ids
from state_reader.io.storage import Storage
from state_reader.model import operators
from state_reader.model.checkpoint import (
    CONF_CODEC,
    CONF_PROVIDER,
    DEFAULT_STORE,
    HDFS_PROVIDER,
    JOIN_STORES,
    JOIN_V4_STORES,
    ROCKSDB_PROVIDER,
    Checkpoint,
    OperatorMetadata,
)
from state_reader.providers import hdfs as hdfs_provider
from state_reader.providers.rocksdb_variables import MULTI_VALUE, StateVariable, family_schemas, plan_variable
from state_reader.providers.rocksdb_variables import VALUE as VALUE_STATE

# Rows per RecordBatch handed to Spark; keeps executor memory per batch bounded.
BATCH_ROWS = 65536


def _constant_int32(n: int, value: int) -> pa.Array:
    # from_buffers, not pa.array(ndarray): the latter imports pandas on first use (slow cold start)
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(np.full(n, value, dtype=np.int32))])


def _constant_int64(n: int, value: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(np.full(n, value, dtype=np.int64))])


@dataclass
class JoinSidePlan:
    """joinSide=left|right of a stream-stream join (state formats 1 to 3).

    The buffered input rows of one side live in two stores: ``<side>-keyToNumValues``
    (join key -> number of rows) and ``<side>-keyWithIndexToValue`` (join key +
    index -> row, plus a ``matched`` flag from format 2 on). A row is live when its
    index is below its key's count; the output hides the flag and the index.
    Formats 1 and 2 keep the stores in sub-directories; format 3 keeps them as
    virtual column families of the ``default`` store (``families`` set).
    """

    side: str
    count_key_schema: StructType
    count_value_schema: StructType
    row_key_schema: StructType
    row_value_schema: StructType
    families: tuple[StateVariable, StateVariable] | None = None

    def _sub_plan(self, plan: StateReadPlan, index: int) -> StateReadPlan:
        store = f"{self.side}-{('keyToNumValues', 'keyWithIndexToValue')[index]}"
        key_schema = (self.count_key_schema, self.row_key_schema)[index]
        value_schema = (self.count_value_schema, self.row_value_schema)[index]
        if self.families is not None:
            return replace(plan, join=None, variable=self.families[index], key_schema=key_schema,
                           value_schema=value_schema)
        return replace(plan, join=None, store_name=store, key_schema=key_schema, value_schema=value_schema)

    def decode_partition(self, plan: StateReadPlan, partition_id: int) -> tuple[pa.StructArray, pa.StructArray]:
        count_keys, count_values = self._sub_plan(plan, 0).decode_columns(partition_id)
        row_keys, row_values = self._sub_plan(plan, 1).decode_columns(partition_id)
        n_key = len(self.count_key_schema.fields)
        # a row is live when its index is below its join key's count
        join_keys = [pa.StructArray.from_arrays([keys.field(i) for i in range(n_key)],
                                                fields=list(self.count_key_schema.to_arrow()))
                     for keys in (count_keys, row_keys)]
        ids = group_ids(pa.concat_arrays(join_keys))
        count_ids, row_ids = ids[:len(count_keys)], ids[len(count_keys):]
        count_of = np.zeros(int(ids.max(initial=-1)) + 1, dtype=np.int64)
        count_of[count_ids] = count_values.field(0).fill_null(0).to_numpy(zero_copy_only=False)
        index = row_keys.field(n_key).fill_null(-1).to_numpy(zero_copy_only=False)
        live = (index >= 0) & (index < count_of[row_ids])
        keys = pa.StructArray.from_arrays([row_keys.field(i) for i in range(n_key)],
                                          fields=list(plan.key_schema.to_arrow()))
        shown = [i for i, f in enumerate(self.row_value_schema.fields) if f.name != "matched"]
        values = pa.StructArray.from_arrays([row_values.field(i) for i in shown],
                                            fields=list(plan.value_schema.to_arrow()))
        mask = pa.array(live)
        return keys.filter(mask), values.filter(mask)


@dataclass
class StateReadPlan:
    """Everything needed to read one store of one operator at one batch."""

    storage: Storage
    operator_id: int
    store_name: str
    batch_id: int
    provider: str
    codec: str | None
    partitions: list[int]
    key_schema: StructType
    value_schema: StructType
    conf: dict[str, str]
    # columns of the key a RocksDB prefix-scan encoder puts first (session windows)
    num_cols_prefix_key: int = 0
    # key encoder spec from a schema v3 file, when there is one
    key_encoder: dict[str, Any] | None = None
    # replay from the snapshot of this version instead of the newest one (snapshotStartBatchId + 1)
    snapshot_start_version: int | None = None
    # change feed: batches change_start_batch_id..batch_id, one row per change
    change_start_batch_id: int | None = None
    # joinSide=left|right: the two stores of that side, combined into the buffered input rows
    join: JoinSidePlan | None = None
    # transformWithState: the state variable (column family) to read
    variable: StateVariable | None = None
    # RocksDB without changelogs: derive the change feed by comparing snapshots (not in Spark)
    change_feed_from_snapshots: bool = False

    @property
    def version(self) -> int:
        """State store version committed by ``batch_id``."""
        return self.batch_id + 1

    @property
    def is_change_feed(self) -> bool:
        return self.change_start_batch_id is not None

    @property
    def output_schema(self) -> StructType:
        if self.variable is not None:
            middle = self.variable.change_columns() if self.is_change_feed else self.variable.value_columns()
        else:
            middle = [StructField("value", self.value_schema, True)]
        columns = [
            StructField("key", self.key_schema, True),
            *middle,
            StructField("partition_id", INTEGER, True),
        ]
        if self.is_change_feed:
            columns = [StructField("batch_id", LONG, True), StructField("change_type", STRING, True), *columns]
        return StructType(columns)

    @property
    def arrow_schema(self) -> pa.Schema:
        return self.output_schema.to_arrow_schema()

    def store_dir(self, partition_id: int) -> str:
        return Checkpoint(self.storage).store_dir(self.operator_id, partition_id, self.store_name)

    def decode_partition(self, partition_id: int) -> tuple[pa.StructArray, pa.StructArray]:
        """(keys, values) of one partition's state, decoded by its provider."""
        if self.join is not None:
            return self.join.decode_partition(self, partition_id)
        directory = self.store_dir(partition_id)
        if self.provider == HDFS_PROVIDER:
            return hdfs_provider.read_store(self, directory)
        if self.provider == ROCKSDB_PROVIDER:
            from state_reader.providers import rocksdb as rocksdb_provider

            return rocksdb_provider.read_store(self, directory, partition_id)
        raise UnsupportedOptionError(
            f"state store provider {self.provider} is not supported", path=self.storage.display(directory))

    def decode_columns(self, partition_id: int) -> list[pa.Array]:
        """The output columns of one partition, ``partition_id`` excluded."""
        if self.variable is not None:
            from state_reader.providers import rocksdb as rocksdb_provider

            return rocksdb_provider.read_variable(self, self.store_dir(partition_id), partition_id)
        return list(self.decode_partition(partition_id))

    def decode_change_columns(self, partition_id: int, version: int) -> tuple[list[str], list[pa.Array]]:
        """Change types and output columns (``key`` first) of the changes ``version`` made."""
        if self.variable is not None:
            from state_reader.providers import rocksdb as rocksdb_provider

            return rocksdb_provider.read_variable_changes(self, self.store_dir(partition_id), partition_id,
                                                          version)
        kinds, keys, values = self.decode_changes(partition_id, version)
        return kinds, [keys, values]

    def decode_changes(self, partition_id: int, version: int) -> tuple[list[str], pa.StructArray, pa.StructArray]:
        """(change types, keys, values) that ``version`` made in one partition."""
        directory = self.store_dir(partition_id)
        if self.provider == HDFS_PROVIDER:
            return hdfs_provider.read_changes(self, directory, version)
        if self.provider == ROCKSDB_PROVIDER:
            from state_reader.providers import rocksdb as rocksdb_provider

            return rocksdb_provider.read_changes(self, directory, partition_id, version)
        raise UnsupportedOptionError(
            f"state store provider {self.provider} is not supported", path=self.storage.display(directory))

    def read_partition(self, partition_id: int) -> Iterator[pa.RecordBatch]:
        """Record batches of the state (or the changes) of one partition."""
        if self.is_change_feed:
            yield from self._read_partition_changes(partition_id)
            return
        columns = self.decode_columns(partition_id)
        schema = self.arrow_schema
        rows = len(columns[0])
        for lo in range(0, rows, BATCH_ROWS):
            n = min(BATCH_ROWS, rows - lo)
            pid = _constant_int32(n, partition_id)
            yield pa.RecordBatch.from_arrays([c.slice(lo, n) for c in columns] + [pid], schema=schema)

    def _read_partition_changes(self, partition_id: int) -> Iterator[pa.RecordBatch]:
        schema = self.arrow_schema
        assert self.change_start_batch_id is not None
        for batch_id in range(self.change_start_batch_id, self.batch_id + 1):
            kinds, columns = self.decode_change_columns(partition_id, batch_id + 1)
            rows = len(kinds)
            for lo in range(0, rows, BATCH_ROWS):
                n = min(BATCH_ROWS, rows - lo)
                yield pa.RecordBatch.from_arrays([
                    _constant_int64(n, batch_id),
                    pa.array(kinds[lo:lo + n], pa.string()),
                    *(c.slice(lo, n) for c in columns),
                    _constant_int32(n, partition_id),
                ], schema=schema)

    def read_table(self) -> pa.Table:
        """The whole state as one table, partitions in ascending order.

        Partitions are read on a few threads at once: decompression, numpy,
        Arrow and the compiled record walk release the GIL, so they overlap.
        """
        workers = min(len(self.partitions), _read_threads())
        if workers <= 1:
            parts = [list(self.read_partition(p)) for p in self.partitions]
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="state_reader") as pool:
                # map keeps partition order and re-raises the first failing partition's error
                parts = list(pool.map(lambda p: list(self.read_partition(p)), self.partitions))
        return pa.Table.from_batches([b for part in parts for b in part], schema=self.arrow_schema)


def _read_threads() -> int:
    """Threads for read_table: STATE_READER_THREADS, else the CPUs this process may use."""
    setting = os.environ.get("STATE_READER_THREADS", "").strip()
    if setting.isdigit() and int(setting) > 0:
        return int(setting)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _detect_provider(cp: Checkpoint, conf: Mapping[str, str], operator_id: int) -> str:
    recorded = conf.get(CONF_PROVIDER)
    if recorded:
        return recorded
    # no conf recorded (very old checkpoints): the file names tell
    for pid in cp.partition_ids(operator_id)[:1]:
        base = f"state/{operator_id}/{pid}"
        names = cp.storage.list_names(base) or []
        # join formats 1/2 keep their files in one sub-directory per store
        for store in [n for n in names if n in JOIN_STORES]:
            names += cp.storage.list_names(f"{base}/{store}") or []
        if any(name.endswith((".zip", ".changelog")) for name in names):
            return ROCKSDB_PROVIDER
    return HDFS_PROVIDER


def _store_schema(cp: Checkpoint, operator_id: int, store_name: str) -> tuple[StructType, StructType]:
    rel = cp.schema_file(operator_id, store_name)
    shown = cp.storage.display(rel)
    try:
        data = cp.storage.read_bytes(rel)
    except FileNotFoundError:
        if operator_id not in cp.operator_ids:
            known = ", ".join(map(str, cp.operator_ids)) or "none"
            raise SchemaReadError(
                f"Failed to read the state schema of operator {operator_id}, store '{store_name}': "
                f"the checkpoint {cp.location} has no state for operator {operator_id} "
                f"(operators: {known})", path=shown) from None
        stores = _store_names_on_disk(cp, operator_id)
        raise SchemaReadError(
            f"Failed to read the state schema of operator {operator_id}, store '{store_name}': "
            f"{shown} does not exist (stores of this operator: {', '.join(stores) or 'none'})",
            path=shown) from None
    return read_schema_v1v2(data, shown)


def _store_names_on_disk(cp: Checkpoint, operator_id: int) -> list[str]:
    names = cp.storage.list_names(f"state/{operator_id}/0") or []
    stores = [n for n in names if n in JOIN_STORES]
    if "_metadata" in names or any(n.endswith((".delta", ".snapshot", ".zip", ".changelog")) for n in names):
        stores.insert(0, DEFAULT_STORE)
    return stores


def plan_state_read(options: Mapping[str, Any] | StateStoreOptions) -> StateReadPlan:
    """Validate ``statestore`` options against a checkpoint and plan the read."""
    opts = options if isinstance(options, StateStoreOptions) else StateStoreOptions.parse(options)
    storage = Storage(opts.path, opts.storage_options, verify_checksums=opts.verify_checksums)
    cp = Checkpoint(storage)
    if opts.read_change_feed:
        batch_id = opts.change_end_batch_id
        if batch_id is None:
            batch_id = cp.latest_committed_batch()
    else:
        batch_id = opts.batch_id if opts.batch_id is not None else cp.latest_committed_batch()
    cp.require_committed(batch_id)
    if opts.snapshot_start_batch_id is not None and opts.snapshot_start_batch_id > batch_id:
        raise InvalidOptionError(
            f"Invalid value for option 'snapshotStartBatchId': value should be less than or equal to {batch_id}")

    metadata = cp.operator_metadata(opts.operator_id, batch_id)
    store_meta = metadata.store(opts.store_name) if metadata else None
    operator_name = metadata.operator_name if metadata and store_meta else None
    if opts.state_var_name is not None or opts.read_registered_timers:
        if not operators.is_transform_with_state(operator_name):
            raise InvalidOptionError(
                "Invalid value for option 'stateVarName': Providing state variable names is only supported "
                f"with the transformWithState operator. Found operator={operator_name} "
                f"(operator {opts.operator_id} of {cp.location}).")
    elif operators.is_transform_with_state(operator_name):
        raise RequiredOptionError(
            f"'stateVarName' must be specified to read operator {opts.operator_id} ({operator_name}) "
            f"of {cp.location}.")

    join = None
    variable = None
    join_families = _join_families(cp, metadata)
    store_name = opts.store_name
    if operators.is_transform_with_state(operator_name) and metadata is not None and store_meta is not None:
        variable = plan_variable(cp, metadata, store_meta, opts.state_var_name, opts.read_registered_timers,
                                 opts.flatten_collection_types)
        key_schema, value_schema = variable.grouping_key, variable.family.value_schema
    elif join_families is not None:
        # join formats 3 and 4: the stores are column families of the default store
        store_name = DEFAULT_STORE
        if opts.join_side != "none" and f"{opts.join_side}-keyWithTsToValues" in join_families.names:
            # format 4: the side's rows are the values of keyWithTsToValues, one element per row
            variable = replace(join_families(f"{opts.join_side}-keyWithTsToValues"), hidden=("matched",))
            key_schema, value_schema = variable.grouping_key, variable.shown_value_schema
        elif opts.join_side != "none":
            count, rows = (join_families(f"{opts.join_side}-{s}") for s in ("keyToNumValues", "keyWithIndexToValue"))
            join = JoinSidePlan(opts.join_side, count.family.key_schema, count.family.value_schema,
                                rows.family.key_schema, rows.family.value_schema, (count, rows))
            key_schema = join.count_key_schema
            value_schema = StructType([f for f in join.row_value_schema.fields if f.name != "matched"])
        else:
            variable = join_families(opts.store_name)
            key_schema, value_schema = variable.family.key_schema, variable.family.value_schema
    elif opts.join_side != "none":
        join = _join_side_plan(cp, opts.operator_id, opts.join_side)
        key_schema = join.count_key_schema
        value_schema = StructType([f for f in join.row_value_schema.fields if f.name != "matched"])
    else:
        key_schema, value_schema = _store_schema(cp, opts.operator_id, opts.store_name)

    conf = cp.offset_conf(batch_id)
    if variable is None and join is None:
        value_schema = operators.fmgws_value_schema(operator_name, conf, value_schema)
    if store_meta is not None and metadata.version == 1:
        num_cols_prefix_key = store_meta.num_cols_prefix_key
    else:  # no metadata (written before Spark 4.0): recognise session windows by their schema
        inferred = operators.infer_operator_name([opts.store_name], value_schema)
        num_cols_prefix_key = operators.infer_num_cols_prefix_key(inferred, key_schema)
    partitions = cp.partition_ids(opts.operator_id)
    if not partitions:
        raise NoPartitionError(
            f"No partition directory found under {storage.display(f'state/{opts.operator_id}')}",
            path=storage.display(f"state/{opts.operator_id}"))
    snapshot_start_version = None
    if opts.snapshot_start_batch_id is not None:
        if opts.snapshot_partition_id not in partitions:
            raise InvalidOptionError(
                f"Invalid value for option 'snapshotPartitionId': partition {opts.snapshot_partition_id} "
                f"does not exist under {storage.display(f'state/{opts.operator_id}')} "
                f"(partitions: {', '.join(map(str, partitions))})")
        partitions = [opts.snapshot_partition_id]  # type: ignore[list-item]
        snapshot_start_version = opts.snapshot_start_batch_id + 1
    return StateReadPlan(
        storage=storage,
        operator_id=opts.operator_id,
        store_name=store_name,
        batch_id=batch_id,
        provider=_detect_provider(cp, conf, opts.operator_id),
        codec=conf.get(CONF_CODEC),
        partitions=partitions,
        key_schema=key_schema,
        value_schema=value_schema,
        conf=dict(conf),
        num_cols_prefix_key=num_cols_prefix_key,
        snapshot_start_version=snapshot_start_version,
        change_start_batch_id=opts.change_start_batch_id if opts.read_change_feed else None,
        join=join,
        variable=variable,
        change_feed_from_snapshots=opts.change_feed_from_snapshots,
    )


@dataclass
class _JoinFamilies:
    """The join stores of format 3 or 4, kept as column families of the default store."""

    operator_id: int
    schemas: dict[str, ColumnFamilySchema]

    @property
    def names(self) -> list[str]:
        return [n for n in (*JOIN_STORES, *JOIN_V4_STORES) if n in self.schemas]

    def __call__(self, name: str) -> StateVariable:
        if name not in self.names:
            raise SchemaReadError(
                f"Failed to read the state schema of store '{name}': join operator {self.operator_id} keeps "
                f"its state in column families {', '.join(self.names)}; read one with storeName, or use joinSide",
                path=f"state/{self.operator_id}/_stateSchema")
        # format 4 values are lists of rows (several input rows can share a key and event time)
        kind = MULTI_VALUE if name in JOIN_V4_STORES else VALUE_STATE
        return StateVariable(name, kind, True, self.schemas[name])


def join_column_families(cp: Checkpoint, metadata: OperatorMetadata | None) -> list[str]:
    """The join stores kept as column families (join formats 3 and 4), else an empty list."""
    families = _join_families(cp, metadata)
    return families.names if families is not None else []


def _join_families(cp: Checkpoint, metadata: OperatorMetadata | None) -> _JoinFamilies | None:
    """For join formats 3 and 4 (stores as column families): the families, else None."""
    if (metadata is None or metadata.operator_name != operators.JOIN
            or not metadata.properties.get("useVirtualColumnFamilies")):
        return None
    default = metadata.store(DEFAULT_STORE)
    if default is None:
        return None
    return _JoinFamilies(metadata.operator_id, family_schemas(cp, metadata.operator_id, default))


def _join_side_plan(cp: Checkpoint, operator_id: int, side: str) -> JoinSidePlan:
    count_store, row_store = f"{side}-keyToNumValues", f"{side}-keyWithIndexToValue"
    if not cp.storage.exists(cp.schema_file(operator_id, count_store)):
        rel = cp.schema_file(operator_id, count_store)
        raise SchemaReadError(
            f"Failed to read the state schema for joinSide={side}: operator {operator_id} of "
            f"{cp.location} holds no stream-stream join state ({cp.storage.display(rel)} does not exist)",
            path=cp.storage.display(rel))
    count_key, count_value = _store_schema(cp, operator_id, count_store)
    row_key, row_value = _store_schema(cp, operator_id, row_store)
    return JoinSidePlan(side, count_key, count_value, row_key, row_value)
