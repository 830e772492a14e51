"""What one read of one store needs: the plan the planner makes and the decoders follow.

A :class:`StateReadPlan` is data only (options resolved against the checkpoint,
schemas found, confs parsed); :mod:`state_reader.core.decode` carries it out, on
the driver or on a Spark executor, so it stays small and picklable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from state_reader.formats.spark_types import INTEGER, LONG, STRING, StructField, StructType
from state_reader.formats.unsaferow import narrow_long_slots
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import EVENT_TIME_FIELD, MATCHED_FIELD, CheckpointDir, join_side_stores
from state_reader.model.conf import StoreConf
from state_reader.model.operators import widened
from state_reader.model.state_variables import StateVariable


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

    def store_name(self, index: int) -> str:
        """The store (formats 1 and 2: its sub-directory) of the counts (0) or the rows (1) of this side."""
        return join_side_stores(self.side)[index]

    @property
    def shown_value_schema(self) -> StructType:
        """The buffered row without the internal ``matched`` flag."""
        return StructType([f for f in self.row_value_schema.fields if f.name != MATCHED_FIELD])


@dataclass
class StateReadPlan:
    """Everything needed to read one store of one operator at one batch."""

    # the checkpoint, with the log entries and schema files planning has read
    checkpoint: CheckpointDir
    operator_id: int
    store_name: str
    batch_id: int
    # the provider class that wrote the store (``...HDFSBackedStateStoreProvider``), not its short name
    provider_class: str
    partitions: list[int]
    key_schema: StructType
    value_schema: StructType
    conf: dict[str, str]
    # the storage confs of ``conf``, parsed once by the planner
    store_conf: StoreConf
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
    # the operator's number of state partitions: its operator metadata's, else CheckpointDir.num_partitions
    num_partitions: int | None = None
    # value fields ``value_schema`` declares int whose slots hold longs (flatMapGroupsWithState format 1)
    value_long_slots: tuple[str, ...] = ()
    # the key and value schemas as the read options gave them (DDL), when they stand in for the schema file
    schemas_given: tuple[str, str] | None = None

    @property
    def stored_value_schema(self) -> StructType:
        """The value schema the rows are decoded with: ``value_schema`` with the long slots as longs."""
        return widened(self.value_schema, self.value_long_slots)

    def declared_values(self, values: pa.StructArray, source: str) -> pa.StructArray:
        """Values decoded with :attr:`stored_value_schema`, typed as ``value_schema`` declares."""
        return narrow_long_slots(values, self.value_schema, self.value_long_slots, source)

    @property
    def storage(self) -> Storage:
        return self.checkpoint.storage

    @property
    def provider(self) -> str:
        """The provider class, under its former name (:attr:`provider_class`)."""
        return self.provider_class

    @property
    def version(self) -> int:
        """State store version committed by ``batch_id``."""
        return self.batch_id + 1

    @property
    def codec(self) -> str | None:
        """The compression codec recorded for the state files (None: Spark's default, lz4)."""
        return self.store_conf.codec

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

    @property
    def partition_key_fields(self) -> int | None:
        """How many leading fields of the ``key`` column Spark's shuffle hashes to place a row.

        A stateful operator's input is hash-partitioned by its grouping (or
        deduplication, or join) key, so a row's partition is
        ``pmod(hash(those fields), num_partitions)``. Session windows partition
        by the grouping key without the window (the prefix-key columns); a join's
        ``keyWithIndexToValue`` key ends with the row's index, and format 4's keys
        with the row's event time. None where the shown key is not led by the
        partitioning key.
        """
        fields = len(self.key_schema.fields)
        if self.join is not None:
            return fields  # a join side (formats 1 to 3): the join key
        name = self.variable.name if self.variable is not None else self.store_name
        if name.endswith("-keyWithIndexToValue"):
            return fields - 1
        if name.endswith(("-keyWithTsToValues", "-tsWithKey")):
            # join state format 4: the join key, then the row's event time
            return fields - 1 if self.key_schema.fields[-1].name == EVENT_TIME_FIELD else None
        if self.variable is None and self.num_cols_prefix_key:
            return self.num_cols_prefix_key
        return fields

    def store_dir(self, partition_id: int) -> str:
        """The store's directory for one partition, relative to the checkpoint."""
        return self.checkpoint.store_dir(self.operator_id, partition_id, self.store_name)
