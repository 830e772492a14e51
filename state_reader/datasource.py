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
import pyspark.sql.datasource as _spark_datasource
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType as SparkStructType

from .errors import UnsupportedTypeError, unexpected_errors_as_ours
from .key_filter import And, Comparison, InList, KeyFilter, Not, NullCheck, Predicate, evaluate
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
            options = dict(self.options)
            with unexpected_errors_as_ours(str(options.get("path"))):
                self._cached_plan = plan_state_read(options)
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
        with unexpected_errors_as_ours(f"partition {partition.value} of {self.plan.storage.display('')}"):
            yield from self.plan.read_partition(partition.value)


# --- filter pushdown (pyspark 4.1+) ------------------------------------------
#
# Spark does not re-apply a filter the reader accepts, so only filters applied
# exactly are accepted: comparisons, IN and null checks on `key.<field>` of
# integer, string, boolean and date fields (no floating point: NaN and -0.0
# compare differently in Arrow), and on `partition_id`, which prunes partitions.
# Everything else is handed back to Spark.

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
_FILTER_OPS = {"EqualTo": "=", "GreaterThan": ">", "GreaterThanOrEqual": ">=", "LessThan": "<",
               "LessThanOrEqual": "<="}


def _exact_type(typ: pa.DataType, value: object) -> bool:
    """Whether comparing a field of ``typ`` with ``value`` in Arrow gives exactly Spark's answer."""
    import datetime

    if pa.types.is_integer(typ):
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        bits = typ.bit_width - 1
        return -(1 << bits) <= value < (1 << bits)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return isinstance(value, str)
    if pa.types.is_boolean(typ):
        return isinstance(value, bool)
    if pa.types.is_date32(typ):
        return isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
    return False


def _key_field_type(path: tuple[str, ...], key_type: pa.StructType) -> pa.DataType | None:
    """Type of ``key.<path>`` with Spark's exact names, or None if not a single plain field."""
    typ: pa.DataType = key_type
    for name in path:
        if not pa.types.is_struct(typ):
            return None
        matches = [f for f in typ if f.name == name]
        if len(matches) != 1:
            return None
        typ = matches[0].type
    return typ


def spark_filter_to_predicate(flt: object, key_type: pa.StructType) -> tuple[str, Predicate] | None:
    """(``"key"`` or ``"partition"``, predicate) for a Spark filter applied exactly; else None."""
    kind = type(flt).__name__
    if kind == "Not":
        inner = spark_filter_to_predicate(flt.child, key_type)  # type: ignore[attr-defined]
        return (inner[0], Not(inner[1])) if inner else None
    attribute = tuple(getattr(flt, "attribute", ()))
    if attribute == ("partition_id",):
        scope, path, typ = "partition", ("partition_id",), pa.int32()
    elif len(attribute) >= 1 and attribute[0] == "key":
        scope, path = "key", attribute[1:]
        typ = _key_field_type(path, key_type)
        if typ is None:
            return None
    else:
        return None
    if kind in ("IsNull", "IsNotNull"):
        return scope, NullCheck(path, negated=(kind == "IsNotNull"))
    value = getattr(flt, "value", None)
    if kind in _FILTER_OPS and _exact_type(typ, value):
        return scope, Comparison(path, _FILTER_OPS[kind], value)
    if kind == "In" and value and all(v is not None and _exact_type(typ, v) for v in value):
        return scope, InList(path, tuple(value))
    return None


class PushdownStateStoreReader(StateStoreReader):
    """:class:`StateStoreReader` that takes the filters it can apply exactly (see above)."""

    def __init__(self, plan: StateReadPlan) -> None:
        super().__init__(plan)
        self.key_predicates: list[Predicate] = []
        self.partition_predicates: list[Predicate] = []

    def pushFilters(self, filters: list) -> Iterator:  # noqa: N802 (PySpark names it)
        key_type = self.plan.arrow_schema.field("key").type
        for flt in filters:
            converted = spark_filter_to_predicate(flt, key_type)
            if converted is None:
                yield flt
            elif converted[0] == "key":
                self.key_predicates.append(converted[1])
            else:
                self.partition_predicates.append(converted[1])

    def partitions(self) -> list[InputPartition]:
        ids = list(self.plan.partitions)
        if self.partition_predicates and ids:
            column = pa.StructArray.from_arrays([pa.array(ids, pa.int32())], names=["partition_id"])
            keep = evaluate(And(tuple(self.partition_predicates)), column).to_pylist()
            ids = [p for p, k in zip(ids, keep, strict=True) if k]
        return [_StatePartition(p) for p in ids]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not self.key_predicates:
            yield from super().read(partition)
            return
        key_filter = KeyFilter(And(tuple(self.key_predicates)))
        for batch in super().read(partition):
            batch = key_filter.apply(batch)
            if batch.num_rows:
                yield batch


class PushdownStateStoreDataSource(StateStoreDataSource):
    """``state_reader.statestore`` with filter pushdown, registered when Spark has it enabled."""

    def reader(self, schema: SparkStructType) -> StateStoreReader:
        return PushdownStateStoreReader(self._plan())


def _pushdown_enabled(spark) -> bool:
    # PySpark fails every read of a reader defining pushFilters while the conf is off,
    # so the pushdown reader is only registered when Spark will call it
    if not hasattr(_spark_datasource, "Filter"):  # pyspark < 4.1
        return False
    try:
        return str(spark.conf.get(PUSHDOWN_CONF, "false")).strip().lower() == "true"
    except Exception:  # a conf this Spark does not know: no pushdown
        return False


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
        with unexpected_errors_as_ours(self.opts.path):
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
    """Register both data sources with a SparkSession.

    With ``spark.sql.python.filterPushdown.enabled=true`` (pyspark 4.1+) set
    before this call, ``statestore`` takes filters on ``key.<field>`` and
    ``partition_id`` (see :func:`spark_filter_to_predicate`); call it again after
    changing that conf.
    """
    _allow_duplicate_struct_fields(spark)
    spark.dataSource.register(PushdownStateStoreDataSource if _pushdown_enabled(spark) else StateStoreDataSource)
    spark.dataSource.register(StateMetadataDataSource)
