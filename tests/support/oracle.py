"""Compare our readers with Spark's built-in ``statestore`` / ``state-metadata``.

Rows are turned into canonical JSON so Spark rows and Arrow tables compare
as multisets. Structs are read by position (aggregation buffers repeat field
names), and a repeated name is written ``name#position``.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
from collections import Counter
from typing import Any

import pyarrow as pa


def _keys(names: list[str]) -> list[str]:
    return [n if names.count(n) == 1 else f"{n}#{i}" for i, n in enumerate(names)]


def _scalar(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return v.isoformat(timespec="microseconds")
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, datetime.timedelta):
        return v.total_seconds()
    return str(v)


def _map(pairs: list[tuple[Any, Any]]) -> Any:
    if all(isinstance(k, str) for k, _ in pairs):
        return {k: v for k, v in pairs}
    return sorted(([k, v] for k, v in pairs), key=canon)


def canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


# -- Spark rows ---------------------------------------------------------------


def _spark_value(dt, v):
    from pyspark.sql import types as T

    if v is None:
        return None
    if isinstance(dt, T.StructType):
        return {k: _spark_value(f.dataType, x) for k, f, x in zip(_keys(dt.names), dt.fields, list(v), strict=True)}
    if isinstance(dt, T.ArrayType):
        return [_spark_value(dt.elementType, x) for x in v]
    if isinstance(dt, T.MapType):
        return _map([(_spark_value(dt.keyType, k), _spark_value(dt.valueType, x)) for k, x in v.items()])
    if isinstance(dt, T.FloatType):
        return _scalar(float(v))
    if isinstance(dt, T.DecimalType):
        return _decimal(v, dt.scale)
    return _scalar(v)


def _decimal(v: decimal.Decimal, scale: int) -> str:
    # exactly `scale` digits: Spark may hand back e.g. Decimal('-1.00E-10') for decimal(38,10)
    with decimal.localcontext(decimal.Context(prec=80)):
        return format(decimal.Decimal(v).quantize(decimal.Decimal(1).scaleb(-scale)), "f")


def spark_rows(df) -> list[str]:
    """Sorted canonical JSON of a DataFrame's rows."""
    schema = df.schema
    return sorted(canon(_spark_value(schema, row)) for row in df.collect())


# -- Arrow --------------------------------------------------------------------


def _arrow_values(arr: pa.Array) -> list[Any]:
    t = arr.type
    if isinstance(arr, pa.ChunkedArray):
        return [v for chunk in arr.chunks for v in _arrow_values(chunk)]
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        cols = [_arrow_values(arr.field(i)) for i in range(t.num_fields)]
        valid = arr.is_valid().to_pylist()
        return [
            dict(zip(_keys(names), [c[r] for c in cols], strict=True)) if valid[r] else None for r in range(len(arr))
        ]
    if pa.types.is_map(t):
        keys = _arrow_values(arr.keys)
        items = _arrow_values(arr.items)
        offsets = arr.offsets.to_pylist()
        valid = arr.is_valid().to_pylist()
        return [
            _map(list(zip(keys[offsets[r] : offsets[r + 1]], items[offsets[r] : offsets[r + 1]], strict=True)))
            if valid[r]
            else None
            for r in range(len(arr))
        ]
    if pa.types.is_list(t):
        flat = _arrow_values(arr.values)
        offsets = arr.offsets.to_pylist()
        valid = arr.is_valid().to_pylist()
        return [flat[offsets[r] : offsets[r + 1]] if valid[r] else None for r in range(len(arr))]
    if pa.types.is_decimal(t):
        return [None if v is None else _decimal(v, t.scale) for v in arr.to_pylist()]
    if pa.types.is_float32(t):
        return [None if v is None else _scalar(float(v)) for v in arr.to_pylist()]
    return [_scalar(v) for v in arr.to_pylist()]


def arrow_rows(table: pa.Table) -> list[str]:
    """Sorted canonical JSON of an Arrow table's rows (same form as :func:`spark_rows`)."""
    cols = [_arrow_values(table.column(i)) for i in range(table.num_columns)]
    keys = _keys(table.schema.names)
    return sorted(canon(dict(zip(keys, [c[r] for c in cols], strict=True))) for r in range(table.num_rows))


def expected_arrow_schema(spark_schema) -> pa.Schema:
    """The Arrow schema PySpark derives from a Spark schema (what a Python data source must yield)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema, timezone="UTC")


def _field_metadata(t: pa.DataType | pa.Schema, path: str = "") -> dict[str, dict]:
    """Spark field metadata of every (nested) field, parsed: key order is not significant."""
    out: dict[str, dict] = {}
    fields = (
        list(t)
        if isinstance(t, pa.Schema)
        else ([t.field(i) for i in range(t.num_fields)] if pa.types.is_struct(t) else [])
    )
    for i, f in enumerate(fields):
        where = f"{path}/{i}:{f.name}"
        if f.metadata:
            out[where] = {k: json.loads(v) if k == b"SPARK::metadata::json" else v for k, v in f.metadata.items()}
        child = f.type
        while pa.types.is_list(child) or pa.types.is_map(child):
            child = child.value_type if pa.types.is_list(child) else child.item_type
        out.update(_field_metadata(child, where))
    return out


def assert_arrow_schema(actual: pa.Schema, expected: pa.Schema) -> None:
    """Types, names, nullability and field metadata equal."""
    assert actual.equals(expected), f"Arrow schema differs:\n{actual}\nvs\n{expected}"
    assert _field_metadata(actual) == _field_metadata(expected)


def diff(expected: list[str], actual: list[str]) -> str:
    ce, ca = Counter(expected), Counter(actual)
    missing = list((ce - ca).elements())[:3]
    extra = list((ca - ce).elements())[:3]
    return f"{len(expected)} expected, {len(actual)} got; missing {missing}; unexpected {extra}"


def assert_same_as_builtin(spark, path: str, options: dict[str, str], fmt: str = "statestore") -> int:
    """Read with the built-in reader, our data source and our Spark-free API; all must agree.

    Returns the number of rows, so callers can check the read was not vacuous.
    """
    import state_reader
    from state_reader.core.options import snake_case

    builtin = spark.read.format(fmt).options(**options).load(path)
    ours = spark.read.format(f"state_reader.{fmt}").options(**options).load(path)
    assert ours.schema.json() == builtin.schema.json(), f"schema differs for {options}"
    expected = spark_rows(builtin)
    actual = spark_rows(ours)
    assert actual == expected, f"data source rows differ for {options}: {diff(expected, actual)}"

    kwargs = {snake_case(k): v for k, v in options.items()}
    for key in (
        "batch_id",
        "operator_id",
        "change_start_batch_id",
        "change_end_batch_id",
        "snapshot_start_batch_id",
        "snapshot_partition_id",
    ):
        if key in kwargs:
            kwargs[key] = int(kwargs[key])
    if fmt == "statestore":
        table = state_reader.read_state(path, **kwargs, exact_schema=True)
    else:
        table = state_reader.read_metadata(path, **kwargs)
    assert_arrow_schema(table.schema, expected_arrow_schema(builtin.schema))
    api_rows = arrow_rows(table)
    assert api_rows == expected, f"Spark-free rows differ for {options}: {diff(expected, api_rows)}"
    return len(expected)
