"""What every Spark front shares, on any pyspark from 3.4 on: how state partitions are
shared out among tasks, what Arrow can carry into Spark, and whether the JVM keeps
struct fields whose names repeat.

Nothing here imports ``pyspark.sql.datasource`` (pyspark 4.0+), so the DataFrame
front (:mod:`state_reader.fronts.frame`) runs on Spark 3.4 and 3.5 as well.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pyarrow as pa

from state_reader.core.options import PARTITIONS_PER_TASK
from state_reader.errors import (
    InvalidOptionError,
    SparkSetupError,
    UnsupportedTypeError,
)

# the Spark fronts' error boundary in a worker, shared with the rewrite's Spark row mover below them
from state_reader.errors import spark_worker_errors as spark_worker_errors
from state_reader.formats.spark_types import StructType


def group_partitions(ids: list[int], per_task: int | None, cores: int | None) -> list[tuple[int, ...]]:
    """Share state partitions out among Spark tasks (input partitions), contiguous and evenly sized.

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
        groups.append(tuple(ids[lo:hi]))
        lo = hi
    return groups


def partitions_per_task(options: dict[str, str]) -> int | None:
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
            f"Invalid value for option '{PARTITIONS_PER_TASK}': {text!r}; a positive integer or 'auto' is expected"
        )
    return value


def check_arrow_transport(schema: StructType, where: str) -> None:
    """PySpark moves data source output through Arrow, which has no type for these two."""
    kinds = set(schema.kinds())
    blocked = kinds & {"year_month_interval", "interval"}
    if blocked:
        names = {"year_month_interval": "year-month interval", "interval": "calendar interval"}
        raise UnsupportedTypeError(
            f"the state of {where} holds {' and '.join(names[k] for k in sorted(blocked))} fields, which "
            "PySpark cannot carry from a Python data source; read it with state_reader.read_state instead",
            path=where,
        )


# Arrow Java keeps one child per name in a struct unless told otherwise, and
# aggregation buffers have repeated names (two `sum` fields). Spark builds its
# vectors from our batches' schema, so the JVM must append repeated names. Arrow
# reads the setting once, when its struct vector class is first loaded.
ARROW_CONFLICT_PROPERTY = "arrow.struct.conflict.policy"
ARROW_CONFLICT_APPEND = "CONFLICT_APPEND"
_ARROW_STRUCT_CLASS = "org.apache.arrow.vector.complex.AbstractStructVector"
JAVA_OPTION_FIX = f"-D{ARROW_CONFLICT_PROPERTY}={ARROW_CONFLICT_APPEND}"


def session_jvm(spark):
    """The JVM that runs ``spark``'s queries when this process holds it (classic, or a Connect server
    started in this process by ``SparkSession.builder.remote("local")``); else None."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is not None:
        return jvm
    try:
        from pyspark import SparkContext

        context = SparkContext._active_spark_context
        if context is not None and str(spark.conf.get("spark.app.id", "")) == context.applicationId:
            return context._jvm
    except Exception:  # no classic pyspark here, or a server that does not say its app id
        pass
    return None


def _jvm_keeps_repeated_names(jvm) -> bool | None:
    """Set the policy if nothing has yet; whether it is in force (None: cannot tell)."""
    system = jvm.java.lang.System
    if system.getProperty(ARROW_CONFLICT_PROPERTY) is None:
        system.setProperty(ARROW_CONFLICT_PROPERTY, ARROW_CONFLICT_APPEND)
    try:
        # loading the class fixes the policy now, while the property holds ours
        field = jvm.java.lang.Class.forName(_ARROW_STRUCT_CLASS).getDeclaredField("DEFAULT_CONFLICT_POLICY")
        field.setAccessible(True)
        return str(field.get(None)) == ARROW_CONFLICT_APPEND
    except Exception:  # an Arrow without that field: assume the property worked
        return None


def _probe_repeated_names(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    pair = pa.StructArray.from_arrays([pa.array([1], pa.int32()), pa.array([2], pa.int32())], names=["x", "x"])
    yield pa.RecordBatch.from_arrays([pair], names=["s"])


def _server_keeps_repeated_names(spark) -> bool | None:
    """Ask a Spark whose JVM is elsewhere (a Spark Connect server) by having it take one such row from Python."""
    try:
        rows = spark.range(1, numPartitions=1).mapInArrow(_probe_repeated_names, "s struct<x int, x int>").collect()
        return len(rows[0][0]) == 2
    except Exception as exc:
        if "were consumed" in str(exc):  # Arrow's VectorLoader: the struct lost its repeated child
            return False
        return None


def repeated_names_supported(spark) -> bool | None:
    """Whether Spark can take rows whose structs repeat a field name from Python (None: unknown).

    Sets the JVM property where this process holds the JVM, which works only until
    Arrow's struct vector class is loaded; otherwise (a remote Spark Connect server)
    asks the server with a one-row probe.
    """
    jvm = session_jvm(spark)
    return _jvm_keeps_repeated_names(jvm) if jvm is not None else _server_keeps_repeated_names(spark)


def repeated_names_error(where: str, remote: bool) -> SparkSetupError:
    """The error for a store with repeated struct field names on a Spark that drops them."""
    if remote:
        why = "the Spark Connect server drops repeated struct field names in data it takes from Python"
        fix = (
            f"start the server with --conf spark.driver.extraJavaOptions={JAVA_OPTION_FIX} (on a cluster "
            f"also spark.executor.extraJavaOptions={JAVA_OPTION_FIX})"
        )
    else:
        why = (
            "this Spark's JVM had loaded Arrow's struct vectors before state_reader.register() could tell it to "
            "keep repeated field names"
        )
        fix = (
            f"call state_reader.register(spark) right after creating the session, or start Spark with "
            f"--conf spark.driver.extraJavaOptions={JAVA_OPTION_FIX}"
        )
    return SparkSetupError(
        f"the state of {where} has structs that repeat a field name (an aggregation buffer), and {why}: {fix}. "
        "state_reader.spark.read_statestore(spark, path) reads it without any setting.",
        path=where,
    )


def spark_parallelism(spark) -> int | None:
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


def option_text(value: object) -> str:
    """An option value as Spark passes data source options: text, booleans as ``true``/``false``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def python_values(array: pa.Array | pa.ChunkedArray) -> list:
    """The values of an Arrow column as Spark's row-based Python APIs take them.

    Structs become tuples (by position: aggregation buffers repeat field names, which
    dicts would merge), maps become dicts; other values as ``to_pylist()`` gives them.
    """
    if isinstance(array, pa.ChunkedArray):
        return [value for chunk in array.chunks for value in python_values(chunk)]
    typ = array.type
    if pa.types.is_struct(typ):
        fields = [python_values(child) for child in array.flatten()]
        valid = array.is_valid().to_pylist()
        return [tuple(f[i] for f in fields) if ok else None for i, ok in enumerate(valid)]
    if pa.types.is_map(typ):
        keys, items = python_values(array.keys), python_values(array.items)
        offsets = array.offsets.to_pylist()
        valid = array.is_valid().to_pylist()
        return [
            dict(zip(keys[offsets[i] : offsets[i + 1]], items[offsets[i] : offsets[i + 1]], strict=True))
            if ok
            else None
            for i, ok in enumerate(valid)
        ]
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        values = python_values(array.values)
        offsets = array.offsets.to_pylist()
        valid = array.is_valid().to_pylist()
        return [values[offsets[i] : offsets[i + 1]] if ok else None for i, ok in enumerate(valid)]
    return array.to_pylist()


def python_rows(table: pa.Table) -> list[tuple]:
    """``table``'s rows as tuples of :func:`python_values`."""
    return list(zip(*(python_values(column) for column in table.columns), strict=True))
