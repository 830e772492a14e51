"""Whether rows written into a store fit it: a table in the shape ``read_state`` returns, every
column and field where the schema has it (by position; ``read_state``'s ``name#2`` for a repeated
name is taken for the name), each type the schema's or one that widens to it safely (said in the
report), no null where the schema forbids one, no key twice, a ``partition_id`` where Spark's hash
puts the key."""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_reader.core.rewrite.rows import StoreRows
from state_reader.errors import (
    DuplicateEditKeyError,
    EditNullError,
    EditPartitionError,
    EditSchemaError,
    EditValueError,
    InvalidOptionError,
)
from state_reader.formats.json_values import (
    arrow_type_name,
    map_array,
    objects_to_arrow,
    refuse_value,
    text_to_arrow,
    unique_names,
)
from state_reader.formats.spark_types import ArrayType, DataType, MapType, StructType, UserDefinedType
from state_reader.formats.unsaferow import RowBuffer
from state_reader.formats.unsaferow_encode import copy_spans

PARTITION_COLUMN = "partition_id"


class EditMode(str, enum.Enum):
    """What an edit's rows do to a store: ``upsert`` (a key's value replaced, or a key added) or
    ``delete`` (keys taken out). The value is the word messages say (``upsert row 3: ...``), and the
    keyword and flag the rows come by (``upsert=``, ``--upsert``)."""

    UPSERT = "upsert"
    DELETE = "delete"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


# -- the rows as a table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TextRows:
    """Rows read from a file that carries no types, typed once the store they go into is known:
    JSON (``form="json"``: each column's values as JSON gives them) or CSV (``form="csv"``: each
    column's cells as text, null where a cell is empty, the columns of structs dotted)."""

    columns: dict[str, Any]
    form: str


def as_table(rows: Any, mode: EditMode, key_schema: StructType, value_schema: StructType | None) -> pa.Table:
    """``rows`` as a pyarrow Table whose ``key`` (and ``value``) columns have the store's structure."""
    typed: list[tuple[str, DataType]] = [("key", key_schema)]
    if value_schema is not None:
        typed.append(("value", value_schema))
    return typed_table(rows, mode, typed)


def typed_table(rows: Any, mode: EditMode, typed: Sequence[tuple[str, DataType]]) -> pa.Table:
    """``rows`` in any form a rewrite takes (pyarrow, pandas, or a file's :class:`TextRows`) as a
    pyarrow Table, the same for the same rows in every form. The columns named in ``typed`` get
    their type's structure: given nested (``key`` as a struct, or objects as ``to_pandas()`` and
    JSON give them) or flat (dotted columns such as ``key.user``, as CSV and ``flatten`` give them);
    a field missing or extra is refused here. Plain values keep the types the input gives them
    (pandas' and JSON's numbers, a CSV cell's number) for :func:`conform_column`'s check of every
    value against the store's types; nothing is converted to fit."""
    columns, form = _columns_of(rows, mode)
    if columns is None:
        return rows  # a pyarrow Table with a repeated column name: require_columns names it
    out: dict[str, Any] = {}
    for name, dt in typed:
        target = _plain_type(dt).to_arrow()
        if name in columns:
            out[name] = _typed_column(columns.pop(name), form, target, name, mode)
            continue
        dotted = {c: columns.pop(c) for c in list(columns) if c.startswith(name + ".")}
        if dotted and pa.types.is_struct(target):
            out[name] = _unflatten(dotted, target, name, form, mode, top=True)
        elif dotted:
            columns.update(dotted)
    for name, column in columns.items():  # partition_id, and columns require_columns refuses
        target = pa.int32() if name == PARTITION_COLUMN else pa.string()
        out[name] = _typed_column(column, form, target, name, mode)
    return pa.table({name: _as_array(column) for name, column in out.items()})


def _columns_of(rows: Any, mode: EditMode) -> tuple[dict[str, Any] | None, str]:
    if isinstance(rows, pa.RecordBatch):
        rows = pa.Table.from_batches([rows])
    if isinstance(rows, pa.Table):
        if len(set(rows.column_names)) != rows.num_columns:
            return None, "arrow"
        return dict(zip(rows.column_names, rows.columns, strict=True)), "arrow"
    if isinstance(rows, TextRows):
        return dict(rows.columns), rows.form
    if type(rows).__module__.startswith("pandas"):
        if len(set(rows.columns)) != len(rows.columns):
            raise EditSchemaError(f"{mode} rows name a column twice: {', '.join(map(str, rows.columns))}")
        return {str(name): rows[name] for name in rows.columns}, "pandas"
    raise InvalidOptionError(
        f"{mode} must be a pyarrow Table or RecordBatch, a pandas DataFrame or a Spark DataFrame, "
        f"got {type(rows).__name__}"
    )


def _plain_type(dt: DataType) -> DataType:
    while isinstance(dt, UserDefinedType):
        dt = dt.sql_type
    return dt


def _as_array(column: Any) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _typed_column(column: Any, form: str, target: pa.DataType, path: str, mode: EditMode) -> Any:
    if form == "json":
        return objects_to_arrow(column, target, path, mode, text=True)
    if form == "csv":
        return text_to_arrow(column, target, path, mode)
    if form == "pandas":
        return _from_pandas(column, target, path, mode)
    return column


def _from_pandas(series: Any, target: pa.DataType, path: str, mode: EditMode) -> pa.Array:
    """A pandas column: objects (dicts, lists, as ``to_pandas()`` gives structs, lists and maps) by
    the store's structure; a plain column as pyarrow converts it. A NaN in a float column is pandas'
    missing value (a null) where the store's field is not a float or double (pandas holds an
    integer column with a missing value as floats); where it is one, a NaN could be either, and
    is refused rather than guessed."""
    if series.dtype == object and (pa.types.is_nested(target) or _holds_nested(series)):
        return objects_to_arrow(list(series), target, path, mode, text=False)
    if (
        isinstance(series.dtype, np.dtype)
        and series.dtype.kind == "f"
        and pa.types.is_floating(target)
        and series.isna().any()
    ):
        first = int(np.flatnonzero(series.isna().to_numpy())[0])
        raise EditValueError(
            f"{mode} row {first}: {path} is NaN in a pandas {series.dtype} column, where NaN stands for both a "
            "null and the number NaN: give the column as pandas' nullable Float64 (pd.NA for null), or the rows "
            "nested as read_state(...).to_pandas() gives them (None for null)"
        )
    try:
        return pa.Array.from_pandas(series)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        # values of several kinds in one column: named, row by row
        return objects_to_arrow([None if _pandas_missing(v) else v for v in series], target, path, mode, text=False)


def _holds_nested(series: Any) -> bool:
    return any(isinstance(v, (dict, list, tuple, np.ndarray)) for v in series)


def _pandas_missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v))


def _unflatten(
    dotted: dict[str, Any], target: pa.StructType, prefix: str, form: str, mode: EditMode, *, top: bool = False
) -> pa.Array:
    """Dotted columns (``key.user``, ``key.window.start``) as one struct column of ``target``'s
    fields, every field given once (repeated names as ``name#2``, as export writes them)."""
    names = unique_names(f.name for f in target)
    children = []
    missing = []
    for f, name in zip(target, names, strict=True):
        column = f"{prefix}.{name}"
        if column in dotted:
            children.append(_as_array(_typed_column(dotted.pop(column), form, f.type, column, mode)))
            continue
        below = {c: dotted.pop(c) for c in list(dotted) if c.startswith(column + ".")}
        if below and pa.types.is_struct(f.type):
            children.append(_unflatten(below, f.type, column, form, mode))
        else:
            missing.append(column)
            dotted.update(below)
    if missing or dotted:
        said = [f"missing column {c}" for c in missing] + [f"extra column {c}" for c in dotted]
        raise EditSchemaError(
            f"{mode} rows give {prefix} as dotted columns, which must be {', '.join(_leaf_columns(target, prefix))}: "
            f"{'; '.join(said)}"
        )
    mask = None
    if not top and children:
        # a row with every field null was a null struct when flattened (a CSV cell cannot say which)
        every_null = np.logical_and.reduce([c.is_null().to_numpy(zero_copy_only=False) for c in children])
        mask = pa.array(every_null) if every_null.any() else None
    return pa.StructArray.from_arrays(children, names=names, mask=mask)


def _leaf_columns(target: pa.DataType, prefix: str) -> list[str]:
    if not pa.types.is_struct(target):
        return [prefix]
    names = unique_names(f.name for f in target)
    return [c for f, name in zip(target, names, strict=True) for c in _leaf_columns(f.type, f"{prefix}.{name}")]


def expected_columns(typed: Sequence[tuple[str, DataType]]) -> str:
    """The columns rows for a store take, nested and flat: what an error about missing columns says."""
    nested = ", ".join(name for name, _ in typed)
    flat = ", ".join(c for name, dt in typed for c in _leaf_columns(_plain_type(dt).to_arrow(), name))
    return f"{nested} (nested, as read_state returns them), or the dotted columns {flat}"


def require_columns(
    table: pa.Table,
    needed: tuple[str, ...],
    mode: EditMode,
    where: str,
    optional: tuple[str, ...] = (),
    typed: Sequence[tuple[str, DataType]] = (),
) -> None:
    names = table.column_names
    missing = [c for c in needed if c not in names]
    extra = [c for c in names if c not in (*needed, *optional, PARTITION_COLUMN)]
    if missing or extra or len(set(names)) != len(names):
        said = [f"missing column {c}" for c in missing] + [f"extra column {c}" for c in extra]
        if len(set(names)) != len(names):
            said.append("a column given twice")
        columns = expected_columns([t for t in typed if t[0] in needed]) if typed else ", ".join(needed)
        raise EditSchemaError(
            f"{mode} rows for {where} must have the columns {columns} "
            f"(and optionally {', '.join((*optional, PARTITION_COLUMN))}): {'; '.join(said)}"
        )


# -- types: every value the store's type holds exactly ------------------------------------------------

_INTS = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}


def spark_type_name(dt: DataType) -> str:
    """A Spark type as Spark's ``simpleString`` spells it (``bigint``, ``struct<a:int>``)."""
    return arrow_type_name(_plain_type(dt).to_arrow())


def _same_name(given: str, expected: str) -> bool:
    return given == expected or re.fullmatch(re.escape(expected) + r"#\d+", given) is not None


def conform_column(column: pa.ChunkedArray, dt: DataType, path: str, mode: EditMode, notes: list[str]) -> pa.Array:
    """``column`` as the Arrow type of ``dt``: fields matched by position (``name#2`` for a repeated
    name), every value one the store's type holds exactly (a conversion of type, with every value
    kept, added to ``notes``), anything else refused naming the field, the row and both types."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return _conform(arr, dt, path, mode, notes, None)


def _conform(
    arr: pa.Array, dt: DataType, path: str, mode: EditMode, notes: list[str], rows: np.ndarray | None
) -> pa.Array:
    dt = _plain_type(dt)
    target = dt.to_arrow()
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    given = arr.type
    if given.equals(target):
        # the same type but for field metadata: the same buffers, seen as the store's type
        return arr if given.equals(target, check_metadata=True) else arr.view(target)
    if pa.types.is_null(given):
        return pa.nulls(len(arr), target)
    if isinstance(dt, StructType) and pa.types.is_struct(given):
        return _conform_struct(arr, dt, path, mode, notes, rows)
    if isinstance(dt, ArrayType) and (pa.types.is_list(given) or pa.types.is_large_list(given)):
        values = arr.values.slice(arr.offsets[0].as_py(), arr.offsets[-1].as_py() - arr.offsets[0].as_py())
        at = _element_rows(arr, rows)
        elements = _conform(values, dt.element, f"{path}[]", mode, notes, at)
        offsets = pc.subtract(arr.offsets.cast(pa.int64()), arr.offsets[0].cast(pa.int64())).cast(pa.int32())
        return pa.ListArray.from_arrays(offsets, elements, type=target, mask=arr.is_null() if arr.null_count else None)
    if isinstance(dt, MapType) and pa.types.is_map(given):
        lo, hi = arr.offsets[0].as_py(), arr.offsets[-1].as_py()
        at = _element_rows(arr, rows)
        keys = _conform(arr.keys.slice(lo, hi - lo), dt.key, f"{path}.key", mode, notes, at)
        items = _conform(arr.items.slice(lo, hi - lo), dt.value, f"{path}.value", mode, notes, at)
        offsets = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64) - lo
        valid = ~arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
        return map_array(offsets, keys, items, valid, type=target)
    return _conform_plain(arr, target, path, mode, notes, rows)


def _element_rows(arr: pa.Array, rows: np.ndarray | None) -> np.ndarray:
    """The row (among the rows given) of each element of a list or map array."""
    offsets = arr.offsets.to_numpy(zero_copy_only=False)
    parents = np.repeat(np.arange(len(arr)), np.diff(offsets))
    return parents if rows is None else rows[parents]


def _conform_struct(
    arr: pa.StructArray, dt: StructType, path: str, mode: EditMode, notes: list[str], rows: np.ndarray | None
) -> pa.Array:
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
        raise EditSchemaError(
            f"{mode} column {path} does not have the store's fields ({', '.join(dt.names)}): {'; '.join(said)}"
        )
    flat = arr.flatten()
    children = [
        _conform(child, e.data_type, f"{path}.{name}", mode, notes, rows)
        for child, e, name in zip(flat, expected, unique_names(dt.names), strict=True)
    ]
    mask = arr.is_null() if arr.null_count else None
    return pa.StructArray.from_arrays(children, fields=[e.to_arrow() for e in expected], mask=mask)


def _conform_plain(
    arr: pa.Array, target: pa.DataType, path: str, mode: EditMode, notes: list[str], rows: np.ndarray | None
) -> pa.Array:
    """One plain column as ``target``: kept as it is where only its representation changes; where
    its type does, every value checked to be one ``target`` holds exactly (a double into a
    ``float`` rounded as Spark's cast rounds it)."""
    given = arr.type
    change = f"{mode} field {path}: {arrow_type_name(given)} converted to {arrow_type_name(target)}"

    def refuse(mask: np.ndarray, why: str = "") -> None:
        first = int(np.flatnonzero(mask)[0])
        row = first if rows is None else int(rows[first])
        refuse_value(mode, row, path, arr[first].as_py(), arrow_type_name(given), target, why)

    if _same_kind(given, target):
        try:
            return arr.cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            refuse(_lossy(arr, target), "it has a part the store's type does not keep")
    valid = ~arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else np.ones(len(arr), bool)
    if pa.types.is_integer(target) and (pa.types.is_integer(given) or pa.types.is_floating(given)):
        numbers = _numbers(arr)
        if pa.types.is_floating(given):
            numbers = np.where(valid, numbers, 0)
            whole = np.isfinite(numbers) & (np.floor(numbers) == numbers)
            if not whole[valid].all():
                refuse(valid & ~whole)
        bits = _INTS[target]
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        inside = (numbers >= lo) & (numbers <= hi) if pa.types.is_floating(given) else _int_range(arr, lo, hi)
        if not inside[valid].all():
            refuse(valid & ~inside)
        out = pa.array(np.where(valid, numbers, 0).astype(target.to_pandas_dtype()), target, mask=~valid)
        notes.append(
            change + (", every value whole and in range" if pa.types.is_floating(given) else ", every value fits")
        )
        return out
    if pa.types.is_floating(target) and (pa.types.is_integer(given) or pa.types.is_floating(given)):
        numbers = _numbers(arr)
        numbers = np.where(valid, numbers, 0)
        with np.errstate(over="ignore", invalid="ignore"):
            out = numbers.astype(target.to_pandas_dtype())
        if pa.types.is_integer(given):
            back = out.astype(np.float64)
            exact = np.abs(back) < 2.0**63
            exact[exact] = back[exact].astype(np.int64) == numbers[exact].astype(np.int64)
            if not exact[valid].all():
                refuse(valid & ~exact, "not exactly")
            notes.append(change + ", every value exact")
        elif target.bit_width < given.bit_width:
            overflow = np.isinf(out) & np.isfinite(numbers)
            if overflow[valid].any():
                refuse(valid & overflow, "out of its range")
            notes.append(change + ", rounded as Spark's cast rounds it")
        else:
            notes.append(change + ", every value exact")
        return pa.array(out, target, mask=~valid if not valid.all() else None)
    if pa.types.is_decimal(target) and (
        pa.types.is_integer(given) or pa.types.is_floating(given) or pa.types.is_decimal(given)
    ):
        return _to_decimal(arr, target, valid, change, notes, refuse)
    if len(arr) and arr.null_count == len(arr):
        return pa.nulls(len(arr), target)  # nulls only: no value of the other type to bend
    present = np.flatnonzero(valid)
    if not len(present):  # no rows (a Spark DataFrame's schema is checked before its rows): the types say it
        raise EditValueError(
            f"{mode} field {path} is {arrow_type_name(given)}, which the store's {arrow_type_name(target)} "
            "does not hold"
        )
    refuse(valid)
    raise AssertionError("unreachable")


def _numbers(arr: pa.Array) -> np.ndarray:
    """A numeric column as numpy, a null as 0 (the validity is kept apart): integers stay integers, where
    numpy would turn a column with nulls into floats and round values past 2**53."""
    return (arr.fill_null(0) if arr.null_count else arr).to_numpy(zero_copy_only=False)


def _same_kind(given: pa.DataType, target: pa.DataType) -> bool:
    """Types whose values are the same things in another representation (string kinds, time units
    and zones, date widths)."""
    kinds = (
        lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
        lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t),
        pa.types.is_timestamp,
        pa.types.is_date,
        pa.types.is_duration,
        pa.types.is_time,
        pa.types.is_boolean,
    )
    return any(k(given) and k(target) for k in kinds)


def _lossy(arr: pa.Array, target: pa.DataType) -> np.ndarray:
    """Which values a cast to ``target`` would not keep exactly."""
    out = np.zeros(len(arr), dtype=bool)
    for i in range(len(arr)):
        try:
            arr.slice(i, 1).cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            out[i] = True
    return out


def _int_range(arr: pa.Array, lo: int, hi: int) -> np.ndarray:
    filled = arr.fill_null(0) if arr.null_count else arr
    if pa.types.is_unsigned_integer(filled.type):
        return filled.to_numpy(zero_copy_only=False) <= hi
    ge = pc.greater_equal(filled, pa.scalar(lo, pa.int64()).cast(pa.int64()))
    le = pc.less_equal(filled, pa.scalar(hi, pa.int64()))
    return pc.and_(ge, le).to_numpy(zero_copy_only=False)


def _to_decimal(
    arr: pa.Array, target: pa.DataType, valid: np.ndarray, change: str, notes: list[str], refuse: Any
) -> pa.Array:
    """Numbers as a decimal: each must have no more digits than the store's scale after its point
    and fit its precision (a double is taken as it is written, as Spark's cast takes it)."""
    quantum = Decimal(1).scaleb(-target.scale)
    limit = Decimal(10) ** (target.precision - target.scale)
    out: list[Decimal | None] = []
    bad = np.zeros(len(arr), dtype=bool)
    for i, v in enumerate(arr.to_pylist()):
        if v is None:
            out.append(None)
            continue
        if isinstance(v, float):
            if not np.isfinite(v):
                bad[i] = True
                out.append(None)
                continue
            v = Decimal(repr(v))
        number = Decimal(v)
        exact = number.quantize(quantum) if abs(number) < limit else None
        if exact is None or exact != number:
            bad[i] = True
            out.append(None)
            continue
        out.append(exact)
    if bad.any():
        refuse(bad & valid)
    if not (pa.types.is_decimal(arr.type) and arr.type.scale <= target.scale):
        notes.append(change + ", every value exact")
    elif arr.type.precision - arr.type.scale > target.precision - target.scale:
        notes.append(change + ", every value fits")
    return pa.array(out, target)


# -- nulls -------------------------------------------------------------------------------------------


def require_non_null(arr: pa.Array, dt: StructType, path: str, mode: EditMode) -> None:
    """No null row, and no null in a field the schema declares not nullable (where its parent is set)."""
    if arr.null_count:
        first = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise EditNullError(f"{mode} row {first} has a null {path}; a state row's {path} cannot be null")
    _nulls_in_struct(arr, dt, path, mode, np.ones(len(arr), dtype=bool))


def _nulls_in_struct(arr: pa.StructArray, dt: StructType, path: str, mode: EditMode, present: np.ndarray) -> None:
    for child, f in zip(arr.flatten(), dt.fields, strict=True):
        data_type = _plain_type(f.data_type)
        valid = ~child.is_null().to_numpy(zero_copy_only=False) if child.null_count else np.ones(len(child), bool)
        if not f.nullable and not pa.types.is_null(child.type):
            bad = present & ~valid
            if bad.any():
                first = int(np.flatnonzero(bad)[0])
                raise EditNullError(
                    f"{mode} row {first} has a null {path}.{f.name}, which the store's schema declares not nullable "
                    f"({spark_type_name(data_type)} NOT NULL); {int(bad.sum())} rows do"
                )
        if isinstance(data_type, StructType):
            _nulls_in_struct(child, data_type, f"{path}.{f.name}", mode, present & valid)


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


def require_unique(encoded: RowBuffer, keys: pa.Array, mode: EditMode) -> None:
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
    raise DuplicateEditKeyError(
        f"{mode} rows {rows_of[0]} and {rows_of[1]} have the same key {keys[rows_of[0]].as_py()} "
        f"({len(twice)} keys are given more than once); give each key once"
    )


def check_partitions(rows: StoreRows, table: pa.Table, encoded: RowBuffer, mode: EditMode) -> None:
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
        raise EditPartitionError(
            f"{mode} row {first} says partition_id {values[first]}, but Spark's hash puts its key in partition "
            f"{int(expected[first])} of the source's {old} ({int(wrong.sum())} rows differ): rows edited after "
            "read_state? Leave the partition_id column out; each row goes to the partition of its key"
        )
