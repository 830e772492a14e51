"""The PySpark Python Data Source front: ``state_reader.statestore`` and
``state_reader.state-metadata``.

A thin adapter over :mod:`state_reader.reader` and :mod:`state_reader.metadata`:
options arrive as Spark passes them, planning happens on the driver, and each
state partition becomes one Spark input partition whose executor reads and
decodes its files and yields Arrow record batches.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType as SparkStructType

from .errors import UnsupportedTypeError
from .metadata import metadata_schema, read_metadata_table
from .options import StateMetadataOptions
from .reader import StateReadPlan, plan_state_read
from .spark_types import StructType

STATESTORE = "state_reader.statestore"
STATE_METADATA = "state_reader.state-metadata"


class _StatePartition(InputPartition):
    def __init__(self, partition_id: int) -> None:
        super().__init__(partition_id)
        self.partition_id = partition_id


def _check_arrow_transport(schema: StructType, where: str) -> None:
    """PySpark moves data source output through Arrow, which has no type for these two."""
    kinds = set(schema.kinds())
    blocked = kinds & {"year_month_interval", "interval"}
    if blocked:
        names = {"year_month_interval": "year-month interval", "interval": "calendar interval"}
        raise UnsupportedTypeError(
            f"the state of {where} holds {' and '.join(names[k] for k in sorted(blocked))} fields, which "
            "PySpark cannot carry from a Python data source; read it with state_reader.read_state instead",
            path=where)


class StateStoreDataSource(DataSource):
    """``spark.read.format("state_reader.statestore")``: the state of one store."""

    @classmethod
    def name(cls) -> str:
        return STATESTORE

    def _plan(self) -> StateReadPlan:
        if not hasattr(self, "_cached_plan"):
            self._cached_plan = plan_state_read(dict(self.options))
        return self._cached_plan

    def schema(self) -> SparkStructType:
        plan = self._plan()
        _check_arrow_transport(plan.output_schema, plan.storage.display(plan.store_dir(0)))
        return SparkStructType.fromJson(plan.output_schema.to_json())

    def reader(self, schema: SparkStructType) -> StateStoreReader:
        return StateStoreReader(self._plan())


class StateStoreReader(DataSourceReader):
    def __init__(self, plan: StateReadPlan) -> None:
        self.plan = plan

    def partitions(self) -> list[InputPartition]:
        return [_StatePartition(p) for p in self.plan.partitions]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from self.plan.read_partition(partition.value)


class StateMetadataDataSource(DataSource):
    """``spark.read.format("state_reader.state-metadata")``: operators and stores."""

    @classmethod
    def name(cls) -> str:
        return STATE_METADATA

    def _opts(self) -> StateMetadataOptions:
        return StateMetadataOptions.parse(dict(self.options))

    def schema(self) -> SparkStructType:
        return SparkStructType.fromJson(metadata_schema(self._opts()).to_json())

    def reader(self, schema: SparkStructType) -> StateMetadataReader:
        return StateMetadataReader(self._opts())


class StateMetadataReader(DataSourceReader):
    def __init__(self, opts: StateMetadataOptions) -> None:
        self.opts = opts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_metadata_table(self.opts).to_batches()


# Arrow Java keeps one child per name in a struct unless told otherwise, and
# aggregation buffers have duplicate names (two `sum` fields). Spark builds its
# vectors from our batches' schema, so the JVM must append duplicates.
ARROW_CONFLICT_PROPERTY = "arrow.struct.conflict.policy"
ARROW_CONFLICT_ENV = "ARROW_STRUCT_CONFLICT_POLICY"
ARROW_CONFLICT_APPEND = "CONFLICT_APPEND"


def _allow_duplicate_struct_fields(spark) -> None:
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: the server's JVM must be started with the setting
        return
    system = jvm.java.lang.System
    if system.getProperty(ARROW_CONFLICT_PROPERTY) is None:
        system.setProperty(ARROW_CONFLICT_PROPERTY, ARROW_CONFLICT_APPEND)


def register(spark) -> None:
    """Register both data sources with a SparkSession."""
    _allow_duplicate_struct_fields(spark)
    spark.dataSource.register(StateStoreDataSource)
    spark.dataSource.register(StateMetadataDataSource)
