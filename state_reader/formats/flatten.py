"""Nested Arrow state -> flat columns and plain JSON values, for people and files.

* :func:`flatten_table` turns struct columns into dotted columns
  (``key.window.start``) and, when asked, lists/maps/binary/intervals into
  compact strings (for CSV and terminal tables).
* :func:`json_rows` / :func:`json_values` turn Arrow data into JSON-ready Python
  values without going through ``to_pylist``, which refuses the duplicate field
  names of aggregation buffers (two ``sum`` fields); duplicates get ``#2``,
  ``#3``… suffixes.

The JSON conventions (and reading them back) are :mod:`state_reader.formats.json_values`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from state_reader.formats.json_values import json_values, render_compact, unique_names

__all__ = [
    "display_rows",
    "flatten_table",
    "is_plain",
    "json_rows",
    "json_values",
    "renamed_batch",
    "render_cell",
    "render_compact",
    "unique_names",
    "unique_schema",
    "with_unique_field_names",
]

# Types a CSV writer and a terminal show well as they are.
_PLAIN = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_boolean,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_date,
    pa.types.is_timestamp,
    pa.types.is_decimal,
    pa.types.is_null,
)


def is_plain(typ: pa.DataType) -> bool:
    """True for types that need no rendering to be shown or written to CSV."""
    return any(check(typ) for check in _PLAIN)


def _unique_type(typ: pa.DataType) -> pa.DataType:
    """``typ`` with repeated struct field names renamed, at every depth."""
    if pa.types.is_struct(typ):
        fields = [typ.field(i) for i in range(typ.num_fields)]
        names = unique_names(f.name for f in fields)
        return pa.struct([f.with_name(n).with_type(_unique_type(f.type)) for f, n in zip(fields, names, strict=True)])
    if pa.types.is_map(typ):
        return pa.map_(
            typ.key_field.with_type(_unique_type(typ.key_type)),
            typ.item_field.with_type(_unique_type(typ.item_type)),
            keys_sorted=typ.keys_sorted,
        )
    if pa.types.is_list(typ):
        return pa.list_(typ.value_field.with_type(_unique_type(typ.value_type)))
    return typ


def _retyped(array: pa.Array, typ: pa.DataType) -> pa.Array:
    """``array`` rebuilt as ``typ``, which differs from its type in field names only."""
    if array.type == typ:
        return array
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(typ):
        # field(i) is the child as seen through this (possibly sliced) array
        children = [_retyped(array.field(i), typ.field(i).type) for i in range(typ.num_fields)]
        return pa.StructArray.from_arrays(children, fields=[typ.field(i) for i in range(typ.num_fields)], mask=mask)
    if pa.types.is_map(typ):
        return pa.MapArray.from_arrays(
            array.offsets, _retyped(array.keys, typ.key_type), _retyped(array.items, typ.item_type), type=typ, mask=mask
        )
    # a list: its offsets index the whole child, also for a sliced array
    return pa.ListArray.from_arrays(array.offsets, _retyped(array.values, typ.value_type), type=typ, mask=mask)


def unique_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with repeated struct field names renamed, as :func:`with_unique_field_names` does."""
    return pa.schema([f.with_type(_unique_type(f.type)) for f in schema], metadata=schema.metadata)


def renamed_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` as ``schema``, which differs from its schema in struct field names only."""
    if batch.schema.equals(schema):
        return batch
    columns = [_retyped(column, f.type) for column, f in zip(batch.columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def with_unique_field_names(table: pa.Table) -> pa.Table:
    """``table`` with repeated struct field names renamed ``name#2``, ``name#3``… at every depth.

    Spark's aggregation buffers repeat names (``count, sum, sum, count``);
    ``to_pandas()`` and ``to_pylist()`` of such a struct keep one field per
    name (or refuse), so a table meant for them gets unique names first. The
    table is returned as it is when no name repeats.
    """
    schema = unique_schema(table.schema)
    if schema.equals(table.schema):
        return table
    columns = [
        pa.chunked_array([_retyped(chunk, f.type) for chunk in column.chunks], type=f.type)
        for column, f in zip(table.columns, schema, strict=True)
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def flatten_table(table: pa.Table | pa.RecordBatch, *, render_nested: bool = False) -> pa.Table:
    """Struct columns become ``parent.child`` columns, recursively.

    With ``render_nested`` every remaining non-plain column (lists, maps,
    binary, intervals, times) becomes a string column of compact JSON.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    while any(pa.types.is_struct(t) for t in table.schema.types):
        table = table.flatten()
    if render_nested:
        for i, field in enumerate(table.schema):
            if not is_plain(field.type):
                rendered = pa.array(
                    [None if v is None else render_compact(v) for v in json_values(table.column(i))], type=pa.string()
                )
                table = table.set_column(i, field.name, rendered)
    return table


def json_rows(table: pa.Table | pa.RecordBatch) -> list[dict[str, Any]]:
    """Rows of ``table`` as dicts of JSON-ready values (nested structure kept)."""
    names = unique_names(table.schema.names)
    columns = [json_values(table.column(i)) for i in range(table.num_columns)]
    return [dict(zip(names, (c[i] for c in columns), strict=True)) for i in range(table.num_rows)]


def render_cell(value: Any) -> str:
    """A JSON value as a terminal table cell; null is ``null``, the empty string ``""``."""
    if value is None:
        return "null"
    if value == "":
        return '""'
    if isinstance(value, str):
        return value
    return render_compact(value)


def display_rows(table: pa.Table | pa.RecordBatch) -> tuple[list[str], list[list[Any]]]:
    """(column names, rows of JSON values) of ``table`` with structs flattened, for showing."""
    flat = flatten_table(table)
    names = unique_names(flat.schema.names)
    columns = [json_values(flat.column(i)) for i in range(flat.num_columns)]
    for i, field in enumerate(flat.schema):
        if pa.types.is_timestamp(field.type):
            columns[i] = [_short_timestamp(v) for v in columns[i]]
    return names, [[c[i] for c in columns] for i in range(flat.num_rows)]


def _short_timestamp(v: Any) -> Any:
    # "2023-11-14T22:13:20+00:00" -> "2023-11-14 22:13:20" (UTC is the reader's zone)
    if isinstance(v, str):
        return v.replace("T", " ").removesuffix("+00:00")
    return v
