"""The core API: plan a state read, then read partitions into Arrow.

Both fronts (the Spark data source and the Spark-free functions) go through
:func:`plan_state_read`, so they validate, resolve and decode identically.
Planning reads only logs, metadata and schema files; the state files of a
partition are read by :meth:`StateReadPlan.read_partition`, wherever that runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from . import hdfs_provider, operators
from .checkpoint import (
    CONF_CODEC,
    CONF_PROVIDER,
    DEFAULT_STORE,
    HDFS_PROVIDER,
    JOIN_STORES,
    ROCKSDB_PROVIDER,
    Checkpoint,
)
from .errors import (
    InvalidOptionError,
    NoPartitionError,
    RequiredOptionError,
    SchemaReadError,
    UnsupportedOptionError,
)
from .options import StateStoreOptions
from .schema_files import read_schema_v1v2
from .spark_types import INTEGER, StructField, StructType
from .storage import Storage

# Rows per RecordBatch handed to Spark; keeps executor memory per batch bounded.
BATCH_ROWS = 65536


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

    @property
    def version(self) -> int:
        """State store version committed by ``batch_id``."""
        return self.batch_id + 1

    @property
    def output_schema(self) -> StructType:
        return StructType([
            StructField("key", self.key_schema, True),
            StructField("value", self.value_schema, True),
            StructField("partition_id", INTEGER, True),
        ])

    @property
    def arrow_schema(self) -> pa.Schema:
        return self.output_schema.to_arrow_schema()

    def store_dir(self, partition_id: int) -> str:
        return Checkpoint(self.storage).store_dir(self.operator_id, partition_id, self.store_name)

    def decode_partition(self, partition_id: int) -> tuple[pa.StructArray, pa.StructArray]:
        """(keys, values) of one partition's state, decoded by its provider."""
        directory = self.store_dir(partition_id)
        if self.provider == HDFS_PROVIDER:
            return hdfs_provider.read_store(self, directory)
        if self.provider == ROCKSDB_PROVIDER:
            from . import rocksdb_provider

            return rocksdb_provider.read_store(self, directory, partition_id)
        raise UnsupportedOptionError(
            f"state store provider {self.provider} is not supported", path=self.storage.display(directory))

    def read_partition(self, partition_id: int) -> Iterator[pa.RecordBatch]:
        """Record batches of the state of one partition."""
        keys, values = self.decode_partition(partition_id)
        schema = self.arrow_schema
        for lo in range(0, len(keys), BATCH_ROWS):
            n = min(BATCH_ROWS, len(keys) - lo)
            pid = pa.array(np.full(n, partition_id, dtype=np.int32))
            yield pa.RecordBatch.from_arrays([keys.slice(lo, n), values.slice(lo, n), pid], schema=schema)

    def read_table(self) -> pa.Table:
        """The whole state as one table, partitions in ascending order."""
        batches = [b for p in self.partitions for b in self.read_partition(p)]
        return pa.Table.from_batches(batches, schema=self.arrow_schema)


def _detect_provider(cp: Checkpoint, conf: Mapping[str, str], operator_id: int) -> str:
    recorded = conf.get(CONF_PROVIDER)
    if recorded:
        return recorded
    # no conf recorded (very old checkpoints): the file names tell
    for pid in cp.partition_ids(operator_id)[:1]:
        for name in cp.storage.list_names(f"state/{operator_id}/{pid}") or []:
            if name.endswith((".zip", ".changelog")):
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
    storage = Storage(opts.path, opts.storage_options)
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

    if opts.join_side != "none":
        side_store = f"{opts.join_side}-keyToNumValues"
        if not storage.exists(cp.schema_file(opts.operator_id, side_store)):
            raise SchemaReadError(
                f"Failed to read the state schema for joinSide={opts.join_side}: operator "
                f"{opts.operator_id} of {cp.location} holds no stream-stream join state "
                f"({cp.schema_file(opts.operator_id, side_store)} does not exist)",
                path=storage.display(cp.schema_file(opts.operator_id, side_store)))
    key_schema, value_schema = _store_schema(cp, opts.operator_id, opts.store_name)

    unsupported = [name for name, given in (
        ("joinSide", opts.join_side != "none"),
        ("readChangeFeed", opts.read_change_feed),
        ("snapshotStartBatchId", opts.snapshot_start_batch_id is not None),
        ("stateVarName", opts.state_var_name is not None),
        ("readRegisteredTimers", opts.read_registered_timers),
    ) if given]
    if unsupported:
        raise UnsupportedOptionError(
            f"option {', '.join(unsupported)} is not supported by state_reader yet")

    conf = cp.offset_conf(batch_id)
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
    return StateReadPlan(
        storage=storage,
        operator_id=opts.operator_id,
        store_name=opts.store_name,
        batch_id=batch_id,
        provider=_detect_provider(cp, conf, opts.operator_id),
        codec=conf.get(CONF_CODEC),
        partitions=partitions,
        key_schema=key_schema,
        value_schema=value_schema,
        conf=dict(conf),
        num_cols_prefix_key=num_cols_prefix_key,
    )
