"""The DataFrame front: ``state_reader.spark.read_statestore`` and ``read_state_metadata``.

For every Spark from 3.4 on, classic or Spark Connect, with or without the Python
Data Source API (pyspark 4.0+). The read is planned on the driver, exactly as
the data source plans it; the state partitions are shared out among tasks of a
``spark.range`` (one row per task), and each task decodes its partitions with
``mapInArrow``. The result has the rows and the schema of ``state_reader.statestore``.

Struct fields whose names repeat (aggregation buffers) travel from Python under
unique names and are cast back to Spark's names by position, so no JVM setting
is needed for them on any Spark.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from state_reader.core import live
from state_reader.core.metadata import metadata_schema, read_metadata_table
from state_reader.core.options import StateMetadataOptions
from state_reader.core.planner import plan_state_read
from state_reader.core.scan import iter_batches
from state_reader.errors import unexpected_errors_as_ours
from state_reader.formats.flatten import renamed_batch, unique_names, unique_schema
from state_reader.fronts.spark_shared import (
    check_arrow_transport,
    group_partitions,
    option_text,
    partitions_per_task,
    python_rows,
    spark_parallelism,
    spark_worker_errors,
)
from state_reader.model.plan import StateReadPlan


def _options(path: str, options: dict[str, Any]) -> dict[str, str]:
    return {"path": str(path), **{name: option_text(value) for name, value in options.items() if value is not None}}


def _spark_type(schema_json: dict) -> Any:
    from pyspark.sql.types import StructType as SparkStructType

    return SparkStructType.fromJson(schema_json)


class _Decoder:
    """The ``mapInArrow`` function: for each task number it gets, the batches of that task's partitions."""

    def __init__(self, plan: StateReadPlan, tasks: list[tuple[int, ...]], transport: pa.Schema) -> None:
        self.plan = plan
        self.tasks = tasks
        self.transport = transport

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column(0).to_pylist():
                yield from self._read(list(self.tasks[task]))

    def _read(self, ids: list[int]) -> Iterator[pa.RecordBatch]:
        what = f"partition{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))} of {self.plan.storage.display('')}"
        with spark_worker_errors(what):
            try:
                # one thread: Spark already runs a task per core
                for batch in iter_batches(self.plan, partitions=ids, show_progress=False, threads=1):
                    yield renamed_batch(batch, self.transport)
            except live.GONE as exc:
                # the driver planned this batch; a running query cleaned it up since (retries cannot help)
                cleaned_up = live.cleaned_up_during_read(self.plan, exc)
                if cleaned_up is None:
                    raise
                raise cleaned_up from exc


def read_statestore(spark: Any, path: str, **options: Any) -> Any:
    """The state of one store as a Spark DataFrame, as ``spark.read.format("state_reader.statestore")``.

    ``options`` are the data source's, by its names (``operatorId=0, batchId=3``,
    ``partitionsPerTask=4``); values may be numbers or booleans. Works on pyspark
    3.4 and later, classic and Spark Connect.
    """
    opts = _options(path, options)
    with unexpected_errors_as_ours(opts["path"]):
        plan = plan_state_read(opts)
        check_arrow_transport(plan.output_schema, plan.storage.display(plan.store_dir(0)))
        exact = plan.arrow_schema
        transport = unique_schema(exact)
        tasks = group_partitions(list(plan.partitions), partitions_per_task(opts), spark_parallelism(spark))
    transport_type = _spark_type(_unique_json(plan.output_schema.to_json()))
    frame = spark.range(0, len(tasks), 1, max(1, len(tasks))).mapInArrow(
        _Decoder(plan, tasks, transport), transport_type
    )
    if transport.equals(exact):
        return frame
    # back to Spark's names, by position (a struct cast matches fields by position); the frame's own
    # columns, as functions.col is classic or Connect by the process, not by the session
    exact_type = _spark_type(plan.output_schema.to_json())
    return frame.select(
        *[
            frame[t.name].cast(e.dataType).alias(e.name)
            for t, e in zip(transport_type.fields, exact_type.fields, strict=True)
        ]
    )


def _unique_json(schema_json: Any) -> Any:
    """A Spark schema's JSON with repeated struct field names renamed as :func:`unique_schema` renames them."""
    if isinstance(schema_json, dict):
        if schema_json.get("type") == "struct":
            names = unique_names([f["name"] for f in schema_json["fields"]])
            return {
                **schema_json,
                "fields": [
                    {**f, "name": n, "type": _unique_json(f["type"])}
                    for f, n in zip(schema_json["fields"], names, strict=True)
                ],
            }
        return {k: _unique_json(v) for k, v in schema_json.items()}
    return schema_json


def read_state_metadata(spark: Any, path: str, **options: Any) -> Any:
    """Operators and stores of a checkpoint as a Spark DataFrame, as ``state_reader.state-metadata``.

    Read on the driver (the metadata is small); ``options`` by the data source's
    names (``batchId``, ``includeHiddenColumns``).
    """
    opts = StateMetadataOptions.parse(_options(path, options))
    with unexpected_errors_as_ours(opts.path):
        table = read_metadata_table(opts)
        schema = _spark_type(metadata_schema(opts).to_json())
    return spark.createDataFrame(python_rows(table), schema)
