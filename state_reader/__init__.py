"""state_reader: read Spark Structured Streaming state from checkpoints.

Spark-free::

    import state_reader
    table = state_reader.read_state(cp, operator_id=0, batch_id=3)   # pyarrow.Table
    meta = state_reader.read_metadata(cp)

With Spark (4.0+)::

    state_reader.register(spark)
    spark.read.format("state_reader.statestore").option("batchId", 3).load(cp)
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .errors import (
    ChecksumMismatchError,
    CodecUnavailableError,
    CommittedBatchUnavailableError,
    ConflictingOptionsError,
    CorruptFileError,
    EmptyOptionError,
    InvalidOptionError,
    MissingStateFileError,
    NegativeOptionError,
    NoPartitionError,
    OffsetLogUnavailableError,
    OffsetMetadataUnavailableError,
    OperatorMetadataReadError,
    RequiredOptionError,
    RowDecodeError,
    SchemaReadError,
    StateReaderError,
    StorageError,
    TruncatedFileError,
    UnsupportedOptionError,
)
from .metadata import read_metadata_table
from .options import from_kwargs
from .reader import plan_state_read

__version__ = "0.1.0"

__all__ = [
    "ChecksumMismatchError",
    "CodecUnavailableError",
    "CommittedBatchUnavailableError",
    "ConflictingOptionsError",
    "CorruptFileError",
    "EmptyOptionError",
    "InvalidOptionError",
    "MissingStateFileError",
    "NegativeOptionError",
    "NoPartitionError",
    "OffsetLogUnavailableError",
    "OffsetMetadataUnavailableError",
    "OperatorMetadataReadError",
    "RequiredOptionError",
    "RowDecodeError",
    "SchemaReadError",
    "StateReaderError",
    "StorageError",
    "TruncatedFileError",
    "UnsupportedOptionError",
    "read_metadata",
    "read_state",
    "register",
]


def read_state(
    checkpoint: str,
    *,
    batch_id: int | None = None,
    operator_id: int | None = None,
    store_name: str | None = None,
    join_side: str | None = None,
    read_change_feed: bool | None = None,
    change_start_batch_id: int | None = None,
    change_end_batch_id: int | None = None,
    snapshot_start_batch_id: int | None = None,
    snapshot_partition_id: int | None = None,
    state_var_name: str | None = None,
    read_registered_timers: bool | None = None,
    flatten_collection_types: bool | None = None,
    storage_options: dict[str, Any] | None = None,
) -> pa.Table:
    """The state of one store as a ``pyarrow.Table``: columns ``key``, ``value``, ``partition_id``.

    The options are those of ``spark.read.format("statestore")`` in snake_case,
    with the same defaults (None = not given): the latest committed batch,
    operator 0, store ``default``. ``checkpoint`` is a local path or an fsspec
    URL (``s3://``, ``s3a://``, ``gs://``, ``abfs://``, ``file://``);
    ``storage_options`` go to fsspec.
    """
    options = dict(locals())
    path = options.pop("checkpoint")
    return plan_state_read(from_kwargs(path, options)).read_table()


def read_metadata(
    checkpoint: str,
    *,
    batch_id: int | None = None,
    infer_missing_metadata: bool | None = None,
    include_hidden_columns: bool | None = None,
    storage_options: dict[str, Any] | None = None,
) -> pa.Table:
    """Operators and stores of a checkpoint, as ``spark.read.format("state-metadata")``.

    Checkpoints written before Spark 4.0 have no operator metadata and give no
    rows, as in Spark, unless ``infer_missing_metadata`` describes them from
    their files. ``include_hidden_columns`` adds the built-in's hidden
    ``_numColsPrefixKey`` column.
    """
    options = dict(locals())
    path = options.pop("checkpoint")
    return read_metadata_table(from_kwargs(path, options))


def register(spark: Any) -> None:
    """Register ``state_reader.statestore`` and ``state_reader.state-metadata`` with ``spark``."""
    from .datasource import register as _register

    _register(spark)
