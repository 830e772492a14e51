"""The PySpark Python Data Source front: ``state_reader.statestore`` and
``state_reader.state-metadata``.

A thin adapter over :mod:`state_reader.core.planner` and :mod:`state_reader.core.metadata`:
options arrive as Spark passes them, planning happens on the driver, and the
state partitions are shared out among Spark input partitions (as many as Spark
has cores, see :func:`group_partitions`) whose executors read and decode their
files and yield Arrow record batches.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyspark.sql.datasource as _spark_datasource
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType as SparkStructType

from state_reader.core import follow, live
from state_reader.core.key_filter import And, Comparison, InList, KeyFilter, Not, NullCheck, Predicate, evaluate
from state_reader.core.metadata import metadata_schema, read_metadata_table
from state_reader.core.options import StateMetadataOptions
from state_reader.core.planner import plan_state_read
from state_reader.core.scan import iter_batches, partitions_to_read
from state_reader.errors import BatchNotRetainedError, InvalidOptionError, StateReaderError
from state_reader.formats.flatten import unique_schema
from state_reader.fronts import spark_shared as shared
from state_reader.fronts.sql import register_functions
from state_reader.model.plan import StateReadPlan

STATESTORE = "state_reader.statestore"
STATE_METADATA = "state_reader.state-metadata"


class _StatePartition(InputPartition):
    """One Spark input partition: the state partitions it reads, in ascending order."""

    def __init__(self, partition_ids: tuple[int, ...]) -> None:
        super().__init__(partition_ids)
        self.partition_ids = partition_ids


def group_partitions(ids: list[int], per_task: int | None, cores: int | None) -> list[_StatePartition]:
    """:func:`state_reader.fronts.spark_shared.group_partitions`, as Spark input partitions.

    No state partition to read (a lookup of keys no partition can hold) is one
    input partition that reads nothing, since Spark plans at least one.
    """
    return [_StatePartition(group) for group in shared.group_partitions(ids, per_task, cores)] or [_StatePartition(())]


class StateStoreDataSource(DataSource):
    """``spark.read.format("state_reader.statestore")``: the state of one store."""

    # Spark's default parallelism when register() made this class (PySpark plans a
    # Python data source in a Python worker, which has no SparkSession to ask); None: unknown
    spark_cores: int | None = None
    # whether that Spark takes structs that repeat a field name from Python (None: unknown), and
    # whether its JVM is in another process (a Spark Connect server), for the error that says how to fix it
    repeated_names: bool | None = None
    remote_jvm: bool = False

    @classmethod
    def name(cls) -> str:
        return STATESTORE

    def _plan(self) -> StateReadPlan:
        if not hasattr(self, "_cached_plan"):
            options = dict(self.options)
            with shared.spark_worker_errors(str(options.get("path"))):
                self._cached_plan = plan_state_read(options)
        return self._cached_plan

    def _schema_plan(self) -> StateReadPlan:
        options = dict(self.options)
        if not follow.is_follow(options):
            try:
                return self._plan()
            except BatchNotRetainedError:
                if not follow.may_follow(options):
                    raise
                # perhaps a stream that skips lost batches (failOnDataLoss=false); a batch read raises this
                # again when it plans its read, a stream when it reads the lost batches
        # a stream of changes (no start, or a follow option): the change feed of the latest batch
        with shared.spark_worker_errors(str(options.get("path"))):
            return follow.Follow.parse(options).schema_plan()

    def schema(self) -> SparkStructType:
        plan = self._schema_plan()
        where = plan.storage.display(plan.store_dir(0))
        with shared.spark_worker_errors(where):
            shared.check_arrow_transport(plan.output_schema, where)
            if self.repeated_names is False and not unique_schema(plan.arrow_schema).equals(plan.arrow_schema):
                raise shared.repeated_names_error(where, self.remote_jvm)
        return SparkStructType.fromJson(plan.output_schema.to_json())

    def _grouping(self) -> tuple[int | None, int | None]:
        """(``partitionsPerTask``, Spark's cores) for :func:`group_partitions`."""
        options = dict(self.options)
        with shared.spark_worker_errors(str(options.get("path"))):
            return shared.partitions_per_task(options), self.spark_cores

    def reader(self, schema: SparkStructType) -> StateStoreReader:
        return StateStoreReader(self._plan(), *self._grouping())

    def streamReader(self, schema: SparkStructType):  # noqa: N802 (PySpark's name)
        """``spark.readStream``: the changes of a running query (:mod:`state_reader.fronts.stream_source`)."""
        from state_reader.fronts.stream_source import FailedStreamReader, StateChangeStreamReader

        options = dict(self.options)
        try:
            feed = {str(k).lower(): v for k, v in options.items()}.get("readchangefeed")
            if str(feed).strip().lower() != "true":
                raise InvalidOptionError(
                    "Invalid value for option 'readChangeFeed': a stream of state reads the change feed of a "
                    "running query; set readChangeFeed=true (spark.read reads the state at one batch)"
                )
            return StateChangeStreamReader(follow.Follow.parse(options), *self._grouping())
        except StateReaderError as exc:
            # pyspark hides an error raised here behind one of its own: raised by the first offset instead
            return FailedStreamReader(exc, str(options.get("path")))


class StateStoreReader(DataSourceReader):
    def __init__(self, plan: StateReadPlan, per_task: int | None = None, cores: int | None = None) -> None:
        self.plan = plan
        self.per_task = per_task
        self.cores = cores

    def partitions(self) -> list[InputPartition]:
        return list(group_partitions(self.plan.partitions, self.per_task, self.cores))

    def key_filter(self) -> KeyFilter | None:
        """The key filter this reader applies (none unless Spark pushed one)."""
        return None

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        ids = list(partition.partition_ids)
        what = f"partition{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))} of {self.plan.storage.display('')}"
        with shared.spark_worker_errors(what):
            try:
                # one thread: Spark already runs a task per core
                yield from iter_batches(
                    self.plan, partitions=ids, key_filter=self.key_filter(), show_progress=False, threads=1
                )
            except live.GONE as exc:
                # the driver planned this batch; a running query cleaned it up since (retries cannot help)
                cleaned_up = live.cleaned_up_during_read(self.plan, exc)
                if cleaned_up is None:
                    raise
                raise cleaned_up from exc


# --- filter pushdown (pyspark 4.1+) ------------------------------------------
#
# Spark does not re-apply a filter the reader accepts, so only filters applied
# exactly are accepted: comparisons, IN and null checks on `key.<field>` of
# integer, string, boolean and date fields (no floating point: NaN and -0.0
# compare differently in Arrow), and on `partition_id`, which prunes partitions.
# Everything else is handed back to Spark.

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
_FILTER_OPS = {"EqualTo": "=", "GreaterThan": ">", "GreaterThanOrEqual": ">=", "LessThan": "<", "LessThanOrEqual": "<="}


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

    def __init__(self, plan: StateReadPlan, per_task: int | None = None, cores: int | None = None) -> None:
        super().__init__(plan, per_task, cores)
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
        # key filters that pin the partition key: only the partitions Spark put those keys in
        ids = partitions_to_read(self.plan, self.key_filter(), ids)
        return list(group_partitions(ids, self.per_task, self.cores))

    def key_filter(self) -> KeyFilter | None:
        return KeyFilter(And(tuple(self.key_predicates))) if self.key_predicates else None


class PushdownStateStoreDataSource(StateStoreDataSource):
    """``state_reader.statestore`` with filter pushdown, registered when Spark has it enabled."""

    def reader(self, schema: SparkStructType) -> StateStoreReader:
        return PushdownStateStoreReader(self._plan(), *self._grouping())


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
        options = dict(self.options)
        with shared.spark_worker_errors(str(options.get("path"))):
            return StateMetadataOptions.parse(options)

    def schema(self) -> SparkStructType:
        return SparkStructType.fromJson(metadata_schema(self._opts()).to_json())

    def reader(self, schema: SparkStructType) -> StateMetadataReader:
        return StateMetadataReader(self._opts())


class StateMetadataReader(DataSourceReader):
    def __init__(self, opts: StateMetadataOptions) -> None:
        self.opts = opts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        with shared.spark_worker_errors(self.opts.path):
            yield from read_metadata_table(self.opts).to_batches()


def _with_setup(
    base: type[StateStoreDataSource], cores: int | None, repeated_names: bool | None, remote: bool
) -> type[StateStoreDataSource]:
    """A subclass of ``base`` that knows Spark's cores and whether it keeps repeated struct field names.

    Made at run time, so cloudpickle ships it to the planning worker by value,
    class attributes included (a module-level class would travel by name only).
    """
    return type(
        base.__name__,
        (base,),
        {
            "spark_cores": cores,
            "repeated_names": repeated_names,
            "remote_jvm": remote,
            "__module__": __name__,
            "__qualname__": f"{base.__qualname__}.with_setup",
            "__doc__": base.__doc__,
        },
    )


def register(spark) -> None:
    """Register both data sources and the SQL functions ``read_statestore`` and
    ``read_state_metadata`` (:mod:`state_reader.fronts.sql`) with a SparkSession.

    With ``spark.sql.python.filterPushdown.enabled=true`` (pyspark 4.1+) set
    before this call, ``statestore`` takes filters on ``key.<field>`` and
    ``partition_id`` (see :func:`spark_filter_to_predicate`); call it again after
    changing that conf. Spark's default parallelism at this call sets how many
    Spark input partitions a read has (see :func:`group_partitions`); call it
    again after the cluster grew, or set ``partitionsPerTask``.
    """
    base = PushdownStateStoreDataSource if _pushdown_enabled(spark) else StateStoreDataSource
    repeated_ok = shared.repeated_names_supported(spark)
    spark.dataSource.register(
        _with_setup(base, shared.spark_parallelism(spark), repeated_ok, remote=shared.session_jvm(spark) is None)
    )
    spark.dataSource.register(StateMetadataDataSource)
    register_functions(spark)
