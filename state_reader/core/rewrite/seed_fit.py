"""Whether rows written into a store fit it: a table in the shape ``read_state`` returns, every
column and field where the schema has it (by position; ``read_state``'s ``name#2`` for a repeated
name is taken for the name), each type the schema's or one that widens to it safely (said in the
report), no null where the schema forbids one, no key twice, a ``partition_id`` where Spark's hash
puts the key."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_reader.core.rewrite.rows import StoreRows
from state_reader.errors import (
    DuplicateSeedKeyError,
    InvalidOptionError,
    SeedNullError,
    SeedPartitionError,
    SeedSchemaError,
)
from state_reader.formats.spark_types import ArrayType, DataType, MapType, StructType, UserDefinedType
from state_reader.formats.unsaferow import RowBuffer, copy_spans

PARTITION_COLUMN = "partition_id"


# -- the rows as a table ---------------------------------------------------------------------------


def as_table(rows: Any, what: str, key_schema: StructType, value_schema: StructType | None) -> pa.Table:
    """``rows`` as a pyarrow Table: a RecordBatch wrapped, a pandas DataFrame converted with the
    store's types where its values allow (pandas holds ints as int64, structs as dicts)."""
    typed: list[tuple[str, DataType]] = [("key", key_schema)]
    if value_schema is not None:
        typed.append(("value", value_schema))
    return typed_table(rows, what, typed)


def typed_table(rows: Any, what: str, typed: Sequence[tuple[str, DataType]]) -> pa.Table:
    """``rows`` as a pyarrow Table, a pandas DataFrame's columns named in ``typed`` converted to their types."""
    if isinstance(rows, pa.Table):
        return rows
    if isinstance(rows, pa.RecordBatch):
        return pa.Table.from_batches([rows])
    if type(rows).__module__.startswith("pandas"):
        fields = [pa.field(name, dt.to_arrow()) for name, dt in typed if name in rows.columns]
        extra = [c for c in rows.columns if c not in {f.name for f in fields}]
        try:
            table = pa.Table.from_pandas(rows[[f.name for f in fields]], schema=pa.schema(fields), preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError):
            return pa.Table.from_pandas(rows, preserve_index=False)  # the checks below name what does not fit
        for name in extra:
            table = table.append_column(name, pa.Array.from_pandas(rows[name]))
        return table
    raise InvalidOptionError(
        f"{what} must be a pyarrow Table or RecordBatch, a pandas DataFrame or a Spark DataFrame, "
        f"got {type(rows).__name__}"
    )


def require_columns(
    table: pa.Table, needed: tuple[str, ...], what: str, where: str, optional: tuple[str, ...] = ()
) -> None:
    names = table.column_names
    missing = [c for c in needed if c not in names]
    extra = [c for c in names if c not in (*needed, *optional, PARTITION_COLUMN)]
    if missing or extra or len(set(names)) != len(names):
        said = [f"missing column {c}" for c in missing] + [f"extra column {c}" for c in extra]
        if len(set(names)) != len(names):
            said.append("a column given twice")
        raise SeedSchemaError(
            f"{what} rows for {where} must have the columns {', '.join(needed)} "
            f"(and optionally {', '.join((*optional, PARTITION_COLUMN))}), as read_state returns them: "
            f"{'; '.join(said)}"
        )


# -- types -------------------------------------------------------------------------------------------

_INTS = {pa.int8(): 1, pa.int16(): 2, pa.int32(): 4, pa.int64(): 8}
_UINTS = {pa.uint8(): 1, pa.uint16(): 2, pa.uint32(): 4}


def spark_type_name(dt: DataType) -> str:
    """A Spark type as Spark's ``simpleString`` spells it (``bigint``, ``struct<a:int>``)."""
    while isinstance(dt, UserDefinedType):
        dt = dt.sql_type
    if isinstance(dt, StructType):
        return "struct<" + ",".join(f"{f.name}:{spark_type_name(f.data_type)}" for f in dt.fields) + ">"
    if isinstance(dt, ArrayType):
        return f"array<{spark_type_name(dt.element)}>"
    if isinstance(dt, MapType):
        return f"map<{spark_type_name(dt.key)},{spark_type_name(dt.value)}>"
    if dt.kind == "decimal":
        return f"decimal({dt.precision},{dt.scale})"
    return {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}.get(dt.kind, dt.kind)


def _same_name(given: str, expected: str) -> bool:
    return given == expected or re.fullmatch(re.escape(expected) + r"#\d+", given) is not None


def conform_column(column: pa.ChunkedArray, dt: StructType, path: str, what: str, notes: list[str]) -> pa.Array:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return _conform(arr, dt, path, what, notes)


def _conform(arr: pa.Array, dt: DataType, path: str, what: str, notes: list[str]) -> pa.Array:
    """``arr`` as the Arrow type of ``dt``: fields matched by position, safe widenings applied (and
    noted), anything else refused naming the field and both types."""
    while isinstance(dt, UserDefinedType):
        dt = dt.sql_type
    target = dt.to_arrow()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    given = arr.type
    if given.equals(target):
        return arr if given.equals(target, check_metadata=True) else arr.cast(target)
    if pa.types.is_null(given):
        return pa.nulls(len(arr), target)
    if isinstance(dt, StructType) and pa.types.is_struct(given):
        return _conform_struct(arr, dt, path, what, notes)
    widening = _widening(given, target)
    if widening is None:
        raise SeedSchemaError(
            f"{what} field {path} is {given} ({_arrow_as_spark(given)}), which does not fit the store's "
            f"{spark_type_name(dt)} ({target})"
        )
    try:
        out = arr.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SeedSchemaError(
            f"{what} field {path} is {given}, which does not fit the store's {spark_type_name(dt)} ({target}): {exc}"
        ) from exc
    if widening:
        notes.append(f"{what} field {path}: {given} widened to {spark_type_name(dt)}")
    return out


def _conform_struct(arr: pa.StructArray, dt: StructType, path: str, what: str, notes: list[str]) -> pa.Array:
    given = [arr.type.field(i) for i in range(arr.type.num_fields)]
    expected = list(dt.fields)
    names_fit = len(given) == len(expected) and all(
        _same_name(g.name, e.name) for g, e in zip(given, expected, strict=True)
    )
    if not names_fit:
        by_name = {g.name: g for g in given}
        missing = [e for e in expected if not any(_same_name(g.name, e.name) for g in given)]
        extra = [g for g in given if not any(_same_name(g.name, e.name) for e in expected)]
        said = [f"missing field {path}.{e.name} ({spark_type_name(e.data_type)})" for e in missing]
        said += [f"extra field {path}.{g.name} ({by_name[g.name].type})" for g in extra]
        if not said:
            said = [f"fields in the order {', '.join(g.name for g in given)}, not {', '.join(dt.names)}"]
        raise SeedSchemaError(
            f"{what} column {path} does not have the store's fields ({', '.join(dt.names)}): {'; '.join(said)}"
        )
    flat = arr.flatten()
    children = [
        _conform(child, e.data_type, f"{path}.{e.name}", what, notes) for child, e in zip(flat, expected, strict=True)
    ]
    mask = arr.is_null() if arr.null_count else None
    return pa.StructArray.from_arrays(children, fields=[e.to_arrow() for e in expected], mask=mask)


def _widening(given: pa.DataType, target: pa.DataType) -> bool | None:
    """Whether ``given`` converts to ``target`` without loss: True for a widening worth saying
    (int to long), False for a change of representation only (string kinds, time zones), None if not."""
    if given in _INTS and target in _INTS:
        return True if _INTS[given] < _INTS[target] else None
    if given in _UINTS and target in _INTS:
        return True if _UINTS[given] < _INTS[target] else None
    if pa.types.is_float32(given) and pa.types.is_float64(target):
        return True
    if pa.types.is_decimal(given) and pa.types.is_decimal(target):
        fits = given.scale <= target.scale and given.precision - given.scale <= target.precision - target.scale
        return True if fits else None
    if (pa.types.is_large_string(given) and pa.types.is_string(target)) or (
        pa.types.is_large_binary(given) and pa.types.is_binary(target)
    ):
        return False
    if pa.types.is_timestamp(given) and pa.types.is_timestamp(target):
        return False  # another unit or time zone: the same instants (a cast that would lose precision fails)
    if pa.types.is_date(given) and pa.types.is_date(target):
        return False
    nested = (pa.types.is_list, pa.types.is_large_list, pa.types.is_map)
    if any(k(given) for k in nested) and any(k(target) for k in nested):
        return _nested_widening(given, target)
    return None


def _nested_widening(given: pa.DataType, target: pa.DataType) -> bool | None:
    if pa.types.is_map(given) != pa.types.is_map(target):
        return None
    if pa.types.is_map(given):
        parts = [
            _widening_or_same(given.key_type, target.key_type),
            _widening_or_same(given.item_type, target.item_type),
        ]
    else:
        parts = [_widening_or_same(given.value_type, target.value_type)]
    if any(p is None for p in parts):
        return None
    return any(parts)


def _widening_or_same(given: pa.DataType, target: pa.DataType) -> bool | None:
    if given.equals(target):
        return False
    if pa.types.is_struct(given) and pa.types.is_struct(target):
        if given.num_fields != target.num_fields:
            return None
        parts = [_widening_or_same(given.field(i).type, target.field(i).type) for i in range(given.num_fields)]
        return None if any(p is None for p in parts) else any(parts)
    return _widening(given, target)


def _arrow_as_spark(t: pa.DataType) -> str:
    names = {
        pa.int8(): "tinyint",
        pa.int16(): "smallint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.string(): "string",
        pa.large_string(): "string",
        pa.bool_(): "boolean",
        pa.binary(): "binary",
        pa.date32(): "date",
    }
    if t in names:
        return names[t]
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz else "timestamp_ntz"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    return str(t)


# -- nulls -------------------------------------------------------------------------------------------


def require_non_null(arr: pa.Array, dt: StructType, path: str, what: str) -> None:
    """No null row, and no null in a field the schema declares not nullable (where its parent is set)."""
    if arr.null_count:
        first = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise SeedNullError(f"{what} row {first} has a null {path}; a state row's {path} cannot be null")
    _nulls_in_struct(arr, dt, path, what, np.ones(len(arr), dtype=bool))


def _nulls_in_struct(arr: pa.StructArray, dt: StructType, path: str, what: str, present: np.ndarray) -> None:
    for child, f in zip(arr.flatten(), dt.fields, strict=True):
        data_type: DataType = f.data_type
        while isinstance(data_type, UserDefinedType):
            data_type = data_type.sql_type
        valid = ~child.is_null().to_numpy(zero_copy_only=False) if child.null_count else np.ones(len(child), bool)
        if not f.nullable and not pa.types.is_null(child.type):
            bad = present & ~valid
            if bad.any():
                first = int(np.flatnonzero(bad)[0])
                raise SeedNullError(
                    f"{what} row {first} has a null {path}.{f.name}, which the store's schema declares not nullable "
                    f"({spark_type_name(data_type)} NOT NULL); {int(bad.sum())} rows do"
                )
        if isinstance(data_type, StructType):
            _nulls_in_struct(child, data_type, f"{path}.{f.name}", what, present & valid)


# -- keys ----------------------------------------------------------------------------------------


def key_bytes(keys: RowBuffer) -> pa.Array:
    """Each key's bytes as one binary value (what keys are compared by)."""
    lengths = keys.lengths
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    first = int(keys.starts[0]) if len(lengths) else 0
    if np.array_equal(keys.starts - first, offsets[:-1]):
        data = keys.buf[first : first + int(offsets[-1])]  # the keys lie one after another already: no copy
    else:
        data = np.empty(int(offsets[-1]), dtype=np.uint8)
        copy_spans(data, offsets[:-1], keys.buf, keys.starts, lengths)
    return pa.Array.from_buffers(pa.large_binary(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def require_unique(encoded: RowBuffer, keys: pa.Array, what: str) -> None:
    as_bytes = key_bytes(encoded)
    if len(pc.unique(as_bytes)) == len(as_bytes):
        return
    counts = (
        pa.table({"k": as_bytes, "i": pa.array(np.arange(len(as_bytes)))})
        .group_by("k")
        .aggregate([("i", "list"), ("i", "count")])
    )
    twice = counts.filter(pc.greater(counts["i_count"], 1))
    rows_of = sorted(twice["i_list"][0].as_py())
    raise DuplicateSeedKeyError(
        f"{what} rows {rows_of[0]} and {rows_of[1]} have the same key {keys[rows_of[0]].as_py()} "
        f"({len(twice)} keys are given more than once); give each key once"
    )


def check_partitions(rows: StoreRows, table: pa.Table, encoded: RowBuffer, what: str) -> None:
    """A ``partition_id`` column (as ``read_state`` returns it) must be the partition Spark's hash
    gives each key in the source's layout; rows are routed by their key whatever it says."""
    if PARTITION_COLUMN not in table.column_names:
        return
    given = table.column(PARTITION_COLUMN).combine_chunks()
    if given.null_count == len(given):
        return
    old = rows.plan.num_partitions or len(rows.plan.partitions) or 1
    expected = np.zeros(len(given), dtype=np.int64) if rows.single else rows.route(encoded, old, None)[0]
    values = given.to_numpy(zero_copy_only=False)
    valid = ~given.is_null().to_numpy(zero_copy_only=False)
    wrong = valid & (values.astype(np.float64) != expected)
    if wrong.any():
        first = int(np.flatnonzero(wrong)[0])
        raise SeedPartitionError(
            f"{what} row {first} says partition_id {values[first]}, but Spark's hash puts its key in partition "
            f"{int(expected[first])} of the source's {old} ({int(wrong.sum())} rows differ): rows edited after "
            "read_state? Leave the partition_id column out; each row goes to the partition of its key"
        )
