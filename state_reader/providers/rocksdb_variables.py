"""Decode transformWithState variables (and join format 3/4 column families) into output columns.

Which variable and how it is shown is planned in :mod:`state_reader.model.state_variables`;
this module turns one partition's encoded entries of its column family into Arrow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pyarrow as pa

from state_reader.formats.avro_encoding import SCHEMA_ID_BYTES, decode_avro_rows
from state_reader.formats.rocksdb_encoding import (
    KeyEncoderSpec,
    column_family_ids,
    decode_keys,
    decode_values,
    select,
    strip_column_family,
)
from state_reader.formats.rocksdb_multi_value import split_multi_value
from state_reader.formats.spark_types import StructType
from state_reader.formats.unsaferow import RowBuffer, decode_rows
from state_reader.grouping import dense_ids, group_ids
from state_reader.model.plan import StateReadPlan
from state_reader.model.state_variables import LIST, MAP, MULTI_VALUE, TIMERS, VALUE, StateVariable


def _family_rows(
    plan: StateReadPlan, entries: Sequence[tuple[bytes, bytes | None]], family_id: int, source: str
) -> tuple[RowBuffer, RowBuffer, np.ndarray]:
    """Key and value rows of one column family, ids stripped; the mask says which values exist."""

    keys = RowBuffer.from_rows([k for k, _ in entries], source + " key")
    values = RowBuffer.from_rows([v or b"" for _, v in entries], source + " value")
    present = np.array([v is not None for _, v in entries], dtype=bool)
    mask = column_family_ids(keys) == family_id if entries else np.zeros(0, dtype=bool)
    return strip_column_family(select(keys, mask)), select(values, mask), present[mask]


def _elements(
    plan: StateReadPlan, values: RowBuffer, present: np.ndarray, schema: StructType
) -> tuple[np.ndarray, pa.StructArray]:
    """Split multi-values into elements: (owning row of each element, decoded elements)."""

    conf = plan.store_conf
    owners, starts, lengths = [], [], []
    raw = values.buf
    for row in np.flatnonzero(present):
        start, length = int(values.starts[row]), int(values.lengths[row])
        blob = raw[start : start + length].tobytes()
        for offset, size in split_multi_value(blob, conf.merge_operator_version, conf.row_checksum, values.source):
            owners.append(row)
            starts.append(start + offset + 1)  # skip the encoding version byte
            lengths.append(size - 1)
    if conf.avro:
        elements = RowBuffer.wrap(
            raw, values.size, np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64), values.source
        )
        return np.array(owners, dtype=np.int64), decode_avro_rows(elements, schema, values.source, SCHEMA_ID_BYTES)
    rows = RowBuffer(
        raw[: values.size].tobytes(), np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64), values.source
    )
    return np.array(owners, dtype=np.int64), decode_rows(rows, schema)


def _decode(
    plan: StateReadPlan, var: StateVariable, keys_rows: RowBuffer, value_rows: RowBuffer, present: np.ndarray
) -> tuple[pa.StructArray, list[pa.Array], np.ndarray]:
    """(grouping keys, value columns, owning row per output row), collections flattened."""

    avro = plan.store_conf.avro
    spec = KeyEncoderSpec.from_plan(var.family.key_encoder, 0)
    keys = decode_keys(keys_rows, var.family.key_schema, spec, avro)
    row_checksum = plan.store_conf.row_checksum
    n = len(keys)
    if var.kind in (LIST, MULTI_VALUE):
        owners, elements = _elements(plan, value_rows, present, var.family.value_schema)
        elements = _hide(elements, var)
        absent = np.flatnonzero(~present)  # deletes in a change feed: one row, no element
        if len(absent):
            owners = np.concatenate([owners, absent])
            elements = pa.concat_arrays([elements, pa.nulls(len(absent), elements.type)])
        return keys, [elements], owners
    if var.kind == TIMERS:
        return keys.field(0), [keys.field(1)], np.arange(n)
    values = _hide(_values_or_null(value_rows, present, var.family.value_schema, row_checksum, avro), var)
    if var.kind == MAP:
        return keys.field(0), [keys.field(1), values], np.arange(n)
    return keys, [values], np.arange(n)


def _hide(values: pa.StructArray, var: StateVariable) -> pa.StructArray:
    """``values`` without the variable's hidden fields."""
    if not var.hidden:
        return values
    shown = [i for i, f in enumerate(var.family.value_schema.fields) if f.name not in var.hidden]
    return pa.StructArray.from_arrays(
        [values.field(i) for i in shown],
        fields=list(var.shown_value_schema.to_arrow()),
        mask=values.is_null() if values.null_count else None,
    )


def _values_or_null(
    rows: RowBuffer, present: np.ndarray, schema: StructType, row_checksum: bool, avro: bool = False
) -> pa.StructArray:
    """Decoded values; rows without one (deletes in a change feed) are null."""

    if present.all():
        return decode_values(rows, schema, row_checksum, avro=avro)
    if not present.any():
        return pa.nulls(len(present), schema.to_arrow())
    decoded = decode_values(select(rows, present), schema, row_checksum, avro=avro)
    index = pa.array(np.where(present, np.cumsum(present) - 1, 0))
    return pa.StructArray.from_arrays(
        [decoded.field(i).take(index) for i in range(decoded.type.num_fields)],
        fields=list(decoded.type),
        mask=pa.array(~present),
    )


def _group(keys: pa.StructArray, owners: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order output rows by grouping key: (permutation, list offsets per distinct key)."""
    of_owner = group_ids(keys)
    if not len(owners):
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    # groups numbered in order of first appearance among the output rows
    group = dense_ids(of_owner[owners])
    order = np.argsort(group, kind="stable")
    counts = np.bincount(group)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return order, offsets


def state_columns(
    plan: StateReadPlan, var: StateVariable, entries: list[tuple[bytes, bytes]], family_id: int, source: str
) -> list[pa.Array]:
    """The output columns (key first, partition_id excluded) of one partition's state."""
    keys_rows, value_rows, present = _family_rows(plan, entries, family_id, source)
    keys, columns, owners = _decode(plan, var, keys_rows, value_rows, present)
    if var.flatten or var.kind in (VALUE, TIMERS, MULTI_VALUE):
        return [keys.take(pa.array(owners)), *columns]
    order, offsets = _group(keys, owners)
    group_keys = keys.take(pa.array(owners[order][offsets[:-1]])) if len(order) else keys.slice(0, 0)
    arrow_offsets = pa.array(offsets.astype(np.int32))
    if var.kind == LIST:
        elements = columns[0].take(pa.array(order))
        out_type = var.value_columns()[0].data_type.to_arrow()
        return [group_keys, pa.ListArray.from_arrays(arrow_offsets, elements, type=out_type)]
    user_keys = columns[0].take(pa.array(order))
    user_values = columns[1].take(pa.array(order))
    out_type = var.value_columns()[0].data_type.to_arrow()
    return [group_keys, pa.MapArray.from_arrays(arrow_offsets, user_keys, user_values, type=out_type)]


def change_columns(
    plan: StateReadPlan, var: StateVariable, records: list[tuple[str, bytes, bytes | None]], family_id: int, source: str
) -> tuple[list[str], list[pa.Array]]:
    """Change types and output columns of one changelog's records of this variable."""
    entries = [(k, v) for _, k, v in records]
    kinds_all = [kind for kind, _, _ in records]
    keys_rows, value_rows, present = _family_rows(plan, entries, family_id, source)

    all_keys = RowBuffer.from_rows([k for k, _ in entries], source + " key")
    in_family = column_family_ids(all_keys) == family_id if entries else np.zeros(0, dtype=bool)
    kinds = [k for k, keep in zip(kinds_all, in_family, strict=True) if keep]
    keys, columns, owners = _decode(plan, replace(var, flatten=True), keys_rows, value_rows, present)
    out_kinds = [kinds[o] for o in owners]
    if var.kind in (LIST, MULTI_VALUE):
        # a put replaces the list: Spark reports its first element as the update and the rest as appends
        for i in range(1, len(owners)):
            if owners[i] == owners[i - 1] and out_kinds[i] == "update":
                out_kinds[i] = "append"
    return out_kinds, [keys.take(pa.array(owners)), *columns]
