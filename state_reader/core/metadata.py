"""``state-metadata``: one row per (operator, store) of a checkpoint.

Columns as Spark's built-in reader: operatorId, operatorName, stateStoreName,
numPartitions, minBatchId, maxBatchId, operatorProperties; the built-in's hidden
``_numColsPrefixKey`` column is appended when ``includeHiddenColumns`` is set.
minBatchId/maxBatchId span the commit log (-1 when empty), as in Spark.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from state_reader.core.options import StateMetadataOptions
from state_reader.core.planner import store_names_on_disk
from state_reader.errors import SchemaReadError, StateReaderError
from state_reader.formats.schema_files import read_schema_v1v2
from state_reader.formats.spark_types import INTEGER, LONG, STRING, StructField, StructType
from state_reader.io.storage import Storage
from state_reader.model import operators
from state_reader.model.checkpoint import CheckpointDir, OperatorMetadata, StoreInfo

HIDDEN_COLUMN = "_numColsPrefixKey"

METADATA_SCHEMA = StructType(
    [
        StructField("operatorId", LONG),
        StructField("operatorName", STRING),
        StructField("stateStoreName", STRING),
        StructField("numPartitions", INTEGER),
        StructField("minBatchId", LONG),
        StructField("maxBatchId", LONG),
        StructField("operatorProperties", STRING),
    ]
)
METADATA_SCHEMA_WITH_HIDDEN = StructType([*METADATA_SCHEMA.fields, StructField(HIDDEN_COLUMN, INTEGER)])


def metadata_schema(opts: StateMetadataOptions) -> StructType:
    return METADATA_SCHEMA_WITH_HIDDEN if opts.include_hidden_columns else METADATA_SCHEMA


def infer_operator_metadata(cp: CheckpointDir, operator_id: int) -> OperatorMetadata | None:
    """Describe an operator from its files, for checkpoints written before Spark 4.0."""
    partitions = cp.partition_ids(operator_id)
    if not partitions:
        return None
    num_partitions = cp.num_partitions(cp.latest_conf())
    stores = store_names_on_disk(cp, operator_id)
    schemas: dict[str, tuple[StructType | None, StructType | None]] = {}
    for store in stores:
        try:
            schemas[store] = read_schema_v1v2(
                cp.read_once(cp.schema_file(operator_id, store)), cp.schema_file(operator_id, store)
            )
        except (FileNotFoundError, SchemaReadError):
            schemas[store] = (None, None)
    first = schemas.get(stores[0], (None, None)) if stores else (None, None)
    name = operators.infer_operator_name(stores, first[1])
    return OperatorMetadata(
        version=0,
        operator_id=operator_id,
        operator_name=name,
        stores=tuple(
            StoreInfo(s, operators.infer_num_cols_prefix_key(name, schemas[s][0]), num_partitions) for s in stores
        ),
    )


def read_metadata_table(options: Mapping[str, Any] | StateMetadataOptions) -> pa.Table:
    """The ``state-metadata`` rows of a checkpoint as an Arrow table."""
    opts = options if isinstance(options, StateMetadataOptions) else StateMetadataOptions.parse(options)
    schema = metadata_schema(opts).to_arrow_schema()
    return pa.Table.from_pylist([{k: r[k] for k in schema.names} for r in metadata_rows(opts)], schema=schema)


def metadata_rows(
    options: Mapping[str, Any] | StateMetadataOptions, checkpoint: CheckpointDir | None = None
) -> list[dict[str, Any]]:
    """The ``state-metadata`` rows of a checkpoint as dicts, hidden column included.

    ``checkpoint``: an open view of the checkpoint the options name, shared by a caller that
    reads more of it (its logs and metadata files, and those fetched ahead, read once).

    (Building an Arrow table from Python values makes pyarrow import pandas, a
    quarter of a second that the command line's ``metadata`` need not pay.)
    """
    opts = options if isinstance(options, StateMetadataOptions) else StateMetadataOptions.parse(options)
    cp = checkpoint or CheckpointDir(Storage(opts.path, opts.storage_options, verify_checksums=opts.verify_checksums))
    batches = cp.committed_batches
    min_batch, max_batch = (batches[0], batches[-1]) if batches else (-1, -1)
    batch_id = opts.batch_id if opts.batch_id is not None else (max_batch if batches else None)
    rows: list[dict[str, Any]] = []
    for op in cp.operator_ids:
        try:
            meta = cp.operator_metadata(op, batch_id)
        except StateReaderError:
            meta = None  # like Spark: an unreadable operator contributes no rows
        if meta is None and opts.infer_missing_metadata:
            meta = infer_operator_metadata(cp, op)
        if meta is None:
            continue
        for store in meta.stores:
            rows.append(
                {
                    "operatorId": op,
                    "operatorName": meta.operator_name,
                    "stateStoreName": store.name,
                    "numPartitions": store.num_partitions,
                    "minBatchId": min_batch,
                    "maxBatchId": max_batch,
                    "operatorProperties": meta.properties_json if meta.version == 2 else None,
                    HIDDEN_COLUMN: -1 if meta.version == 2 else store.num_cols_prefix_key,
                }
            )
    return rows
