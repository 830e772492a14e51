"""The PySpark Python Data Source front: ``state_reader.statestore`` and
``state_reader.state-metadata``.

A thin adapter over :mod:`state_reader.core.planner` and :mod:`state_reader.core.metadata`:
options arrive as Spark passes them, planning happens on the driver, and the
state partitions are shared out among Spark input partitions (as many as Spark
has cores, see :func:`group_partitions`) whose executors read and decode their
files and yield Arrow record batches.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pyarrow as pa
import pyspark.sql.datasource as _spark_datasource
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType as SparkStructType

from state_reader.core import live
from state_reader.core.key_filter import And, Comparison, InList, KeyFilter, Not, NullCheck, Predicate, evaluate
from state_reader.core.metadata import metadata_schema, read_metadata_table
from state_reader.core.options import PARTITIONS_PER_TASK, StateMetadataOptions
from state_reader.core.planner import plan_state_read
from state_reader.core.scan import iter_batches
from state_reader.errors import InvalidOptionError, UnsupportedTypeError, unexpected_errors_as_ours
from state_reader.formats.spark_types import StructType
from state_reader.model.plan import StateReadPlan

STATESTORE = "state_reader.statestore"
STATE_METADATA = "state_reader.state-metadata"


# Data source option (ours): state partitions read by one Spark input partition.


class _StatePartition(InputPartition):
    """One Spark input partition: the state partitions it reads, in ascending order."""

    def __init__(self, partition_ids: tuple[int, ...]) -> None:
        super().__init__(partition_ids)
        self.partition_ids = partition_ids


def group_partitions(ids: list[int], per_task: int | None, cores: int | None) -> list[_StatePartition]:
    """Share state partitions out among Spark input partitions, contiguous and evenly sized.

    Each Spark task of a Python data source costs a Python worker round trip
    (tens to hundreds of milliseconds), much more than reading a small state
    partition, so by default there are as many input partitions as Spark has
    cores (``cores``), never fewer. ``per_task`` (the ``partitionsPerTask``
    option) sets how many state partitions one input partition reads at most
    instead; 1 gives one input partition per state partition, as does an
    unknown core count.
    """
    if not ids:
        return []
    if per_task is not None:
        tasks = -(-len(ids) // per_task)
    elif cores:
        tasks = min(len(ids), cores)
    else:
        tasks = len(ids)
    size, extra = divmod(len(ids), tasks)
    groups, lo = [], 0
    for i in range(tasks):
        hi = lo + size + (1 if i < extra else 0)
        groups.append(_StatePartition(tuple(ids[lo:hi])))
        lo = hi
    return groups


def _partitions_per_task(options: dict[str, str]) -> int | None:
    """The ``partitionsPerTask`` option (case-insensitive name): a positive integer, or None for automatic."""
    text = next((str(v) for k, v in options.items() if k.lower() == PARTITIONS_PER_TASK.lower()), None)
    if text is None or text.strip().lower() in ("", "auto"):
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidOptionError(
            f"Invalid value for option '{PARTITIONS_PER_TASK}': {text!r}; a positive integer or 'auto' is expected")
    return value


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

    # Spark's default parallelism when register() made this class (PySpark plans a
    # Python data source in a Python worker, which has no SparkSession to ask); None: unknown
    spark_cores: int | None = None

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

    def _grouping(self) -> tuple[int | None, int | None]:
        """(``partitionsPerTask``, Spark's cores) for :func:`group_partitions`."""
        return _partitions_per_task(dict(self.options)), self.spark_cores

    def reader(self, schema: SparkStructType) -> StateStoreReader:
        return StateStoreReader(self._plan(), *self._grouping())


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
        ids = list(partition.partition_ids)  # type: ignore[attr-defined]
        what = f"partition{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))} of {self.plan.storage.display('')}"
        with unexpected_errors_as_ours(what):
            try:
                # one thread: Spark already runs a task per core
                yield from iter_batches(self.plan, partitions=ids, key_filter=self.key_filter(),
                                        show_progress=False, threads=1)
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


def _spark_parallelism(spark) -> int | None:
    """Spark's default parallelism (its cores, or ``spark.default.parallelism``); None when unknown."""
    try:
        context = getattr(spark, "sparkContext", None)  # Spark Connect sessions raise here
        if context is not None:
            return max(1, int(context.defaultParallelism))
    except Exception:  # no SparkContext here (Spark Connect): the confs below may still tell
        pass
    try:
        setting = spark.conf.get("spark.default.parallelism", None)
        if setting:
            return max(1, int(setting))
        master = str(spark.conf.get("spark.master", ""))
    except Exception:  # a conf this session cannot read: unknown
        return None
    match = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master.strip())
    if match:
        return os.cpu_count() if match.group(1) == "*" else max(1, int(match.group(1)))
    return 1 if master.strip() == "local" else None


def _with_cores(base: type[StateStoreDataSource], cores: int | None) -> type[StateStoreDataSource]:
    """A subclass of ``base`` that knows Spark's cores.

    Made at run time, so cloudpickle ships it to the planning worker by value,
    class attribute included (a module-level class would travel by name only).
    """
    return type(base.__name__, (base,), {"spark_cores": cores, "__module__": __name__,
                                         "__qualname__": f"{base.__qualname__}.with_cores",
                                         "__doc__": base.__doc__})


def register(spark) -> None:
    """Register both data sources with a SparkSession.

    With ``spark.sql.python.filterPushdown.enabled=true`` (pyspark 4.1+) set
    before this call, ``statestore`` takes filters on ``key.<field>`` and
    ``partition_id`` (see :func:`spark_filter_to_predicate`); call it again after
    changing that conf. Spark's default parallelism at this call sets how many
    Spark input partitions a read has (see :func:`group_partitions`); call it
    again after the cluster grew, or set ``partitionsPerTask``.
    """
    _allow_duplicate_struct_fields(spark)
    base = PushdownStateStoreDataSource if _pushdown_enabled(spark) else StateStoreDataSource
    spark.dataSource.register(_with_cores(base, _spark_parallelism(spark)))
    spark.dataSource.register(StateMetadataDataSource)
