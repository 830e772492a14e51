"""transformWithState state variables (Spark 4.0+, RocksDB only).

One store (``default``) holds every state variable of the operator in its own
virtual column family: keys start with the family's int16 id (ids are listed
in each snapshot zip's metadata), followed by the encoded key. Schemas and key
encoders come from the schema v3 files named by operator metadata v2. Families
whose names start with ``$`` are Spark's own indexes, except the timer family
``$procTimers_keyToTimestamp`` / ``$eventTimers_keyToTimestamp``.

Output columns per variable kind, as Spark's reader names them:

==============  ======================================  =====================================
kind            flattenCollectionTypes=true (default)   false
==============  ======================================  =====================================
ValueState      key, value                              (same)
ListState       key, list_element (one row per item)    key, list_value: array
MapState        key, user_map_key, user_map_value       key, map_value: map
timers          key, expiration_timestamp_ms            (same)
==============  ======================================  =====================================
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from state_reader.errors import InvalidOptionError, SchemaReadError
from state_reader.formats.schema_files import ColumnFamilySchema, read_schema_v3
from state_reader.formats.spark_types import LONG, ArrayType, MapType, StructField, StructType
from state_reader.formats.unsaferow import RowBuffer, decode_rows
from state_reader.grouping import dense_ids, group_ids
from state_reader.model.checkpoint import (
    CONF_MERGE_OPERATOR,
    CONF_ROW_CHECKSUM,
    Checkpoint,
    OperatorMetadata,
    StoreInfo,
)

if TYPE_CHECKING:
    from state_reader.core.planner import StateReadPlan

VALUE, LIST, MAP, TIMERS = "ValueState", "ListState", "MapState", "TimerState"
# a family whose values are lists, shown one element per row in a ``value`` column (join state format 4)
MULTI_VALUE = "MultiValue"
_TIMER_FAMILIES = {"ProcessingTime": "$procTimers_keyToTimestamp", "EventTime": "$eventTimers_keyToTimestamp"}


@dataclass(frozen=True)
class StateVariable:
    """The column family of one state variable and how to present it."""

    name: str
    kind: str
    flatten: bool
    family: ColumnFamilySchema
    # value fields left out of the output (the join's internal ``matched`` flag)
    hidden: tuple[str, ...] = ()

    @property
    def shown_value_schema(self) -> StructType:
        """The value schema without the hidden fields."""
        return StructType([f for f in self.family.value_schema.fields if f.name not in self.hidden])

    @property
    def grouping_key(self) -> StructType:
        """The grouping key: the whole family key, or its first (struct) field for map and timer keys."""
        if self.kind in (MAP, TIMERS):
            return self.family.key_schema.fields[0].data_type  # type: ignore[return-value]
        return self.family.key_schema

    def value_columns(self) -> list[StructField]:
        """Output columns between ``key`` and ``partition_id``."""
        value = self.shown_value_schema
        if self.kind == LIST:
            if self.flatten:
                return [StructField("list_element", value)]
            return [StructField("list_value", ArrayType(value, True))]
        if self.kind == MAP:
            user_key = self.family.key_schema.fields[1].data_type
            if self.flatten:
                return [StructField("user_map_key", user_key), StructField("user_map_value", value)]
            return [StructField("map_value", MapType(user_key, value, True))]
        if self.kind == TIMERS:
            return [StructField("expiration_timestamp_ms", LONG)]
        return [StructField("value", value)]

    def change_columns(self) -> list[StructField]:
        """Output columns of a change feed (collections are always one row per item)."""
        return replace(self, flatten=True).value_columns()


def plan_variable(cp: Checkpoint, metadata: OperatorMetadata, store: StoreInfo, state_var_name: str | None,
                  read_timers: bool, flatten: bool) -> StateVariable:
    """Validate stateVarName / readRegisteredTimers and find the variable's schema."""
    properties = metadata.properties
    time_mode = str(properties.get("timeMode", "None"))
    variables = {v.get("stateName"): v for v in properties.get("stateVariables", [])}
    if read_timers:
        if time_mode not in _TIMER_FAMILIES:
            raise InvalidOptionError(
                "Invalid value for option 'readRegisteredTimers': Registered timers are not available in "
                f"TimeMode={time_mode}.")
        name = _TIMER_FAMILIES[time_mode]
    else:
        name = state_var_name or ""
        if name.startswith("$"):
            raise InvalidOptionError(
                f"Invalid value for option 'stateVarName': {name!r} is an internal column family name; "
                "names starting with '$' are reserved")
    if name not in variables:
        defined = ", ".join(sorted(n for n in variables if not str(n).startswith("$"))) or "none"
        raise InvalidOptionError(
            f"Invalid value for option 'stateVarName': State variable {name} is not defined for the "
            f"transformWithState operator {metadata.operator_id} (defined: {defined}).")
    kind = TIMERS if read_timers else str(variables[name].get("stateVariableType", VALUE))
    family = family_schema(cp, metadata.operator_id, store, name)
    return StateVariable(name, kind, flatten, family)


def family_schemas(cp: Checkpoint, operator_id: int, store: StoreInfo) -> dict[str, ColumnFamilySchema]:
    """Every column family's schema, from the schema v3 files operator metadata v2 names."""
    if not store.schema_file_paths:
        raise SchemaReadError(f"operator metadata of operator {operator_id} names no schema file",
                              path=cp.storage.display(f"state/{operator_id}/_metadata"))
    out: dict[str, ColumnFamilySchema] = {}
    # files are listed oldest first: a family's newest schema wins
    for stored in store.schema_file_paths:
        rel = cp.resolve_schema_path(operator_id, stored)
        shown = cp.storage.display(rel)
        try:
            families = read_schema_v3(cp.storage.read_bytes(rel), shown)
        except FileNotFoundError:
            raise SchemaReadError(
                f"Failed to read the state schema of operator {operator_id}: {shown} does not exist "
                f"(operator metadata names {stored})", path=shown) from None
        out.update((family.name, family) for family in families)
    return out


def family_schema(cp: Checkpoint, operator_id: int, store: StoreInfo, name: str) -> ColumnFamilySchema:
    """Schema of column family ``name`` from the schema v3 files operator metadata v2 names."""
    family = family_schemas(cp, operator_id, store).get(name)
    if family is None:
        raise SchemaReadError(f"no schema for state variable {name} in the schema files of operator {operator_id}",
                              path=cp.storage.display(f"state/{operator_id}/_stateSchema"))
    return family


# -- decoding -------------------------------------------------------------------


def _family_rows(plan: StateReadPlan, entries: list[tuple[bytes, bytes | None]], family_id: int,
                 source: str) -> tuple[RowBuffer, RowBuffer, np.ndarray]:
    """Key and value rows of one column family, ids stripped; the mask says which values exist."""
    from state_reader.formats.rocksdb_encoding import column_family_ids, select, strip_column_family

    keys = RowBuffer.from_rows([k for k, _ in entries], source + " key")
    values = RowBuffer.from_rows([v or b"" for _, v in entries], source + " value")
    present = np.array([v is not None for _, v in entries], dtype=bool)
    mask = column_family_ids(keys) == family_id if entries else np.zeros(0, dtype=bool)
    return strip_column_family(select(keys, mask)), select(values, mask), present[mask]


def _elements(plan: StateReadPlan, values: RowBuffer, present: np.ndarray,
              schema: StructType) -> tuple[np.ndarray, pa.StructArray]:
    """Split multi-values into elements: (owning row of each element, decoded elements)."""
    from state_reader.formats.rocksdb_encoding import split_multi_value

    merge_version = int(plan.conf.get(CONF_MERGE_OPERATOR, "1") or 1)
    row_checksum = plan.conf.get(CONF_ROW_CHECKSUM, "false").lower() == "true"
    owners, starts, lengths = [], [], []
    raw = values.buf
    for row in np.flatnonzero(present):
        start, length = int(values.starts[row]), int(values.lengths[row])
        blob = raw[start:start + length].tobytes()
        for offset, size in split_multi_value(blob, merge_version, row_checksum, values.source):
            owners.append(row)
            starts.append(start + offset + 1)  # skip the encoding version byte
            lengths.append(size - 1)
    from state_reader.providers.rocksdb import is_avro

    if is_avro(plan):
        from state_reader.formats.avro_encoding import SCHEMA_ID_BYTES, decode_avro

        payloads = [raw[s + SCHEMA_ID_BYTES:s + n].tobytes() for s, n in zip(starts, lengths, strict=True)]
        return np.array(owners, dtype=np.int64), decode_avro(payloads, schema, values.source)
    rows = RowBuffer(raw[:values.size].tobytes(), np.array(starts, dtype=np.int64),
                     np.array(lengths, dtype=np.int64), values.source)
    return np.array(owners, dtype=np.int64), decode_rows(rows, schema)


def _decode(plan: StateReadPlan, var: StateVariable, keys_rows: RowBuffer, value_rows: RowBuffer,
            present: np.ndarray) -> tuple[pa.StructArray, list[pa.Array], np.ndarray]:
    """(grouping keys, value columns, owning row per output row), collections flattened."""
    from state_reader.formats.rocksdb_encoding import KeyEncoderSpec, decode_keys
    from state_reader.providers.rocksdb import is_avro

    avro = is_avro(plan)
    spec = KeyEncoderSpec.from_plan(var.family.key_encoder, 0)
    keys = decode_keys(keys_rows, var.family.key_schema, spec, avro)
    row_checksum = plan.conf.get(CONF_ROW_CHECKSUM, "false").lower() == "true"
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
    return pa.StructArray.from_arrays([values.field(i) for i in shown], fields=list(var.shown_value_schema.to_arrow()),
                                      mask=values.is_null() if values.null_count else None)


def _values_or_null(rows: RowBuffer, present: np.ndarray, schema: StructType, row_checksum: bool,
                    avro: bool = False) -> pa.StructArray:
    """Decoded values; rows without one (deletes in a change feed) are null."""
    from state_reader.formats.rocksdb_encoding import decode_values, select

    if present.all():
        return decode_values(rows, schema, row_checksum, avro=avro)
    if not present.any():
        return pa.nulls(len(present), schema.to_arrow())
    decoded = decode_values(select(rows, present), schema, row_checksum, avro=avro)
    index = pa.array(np.where(present, np.cumsum(present) - 1, 0))
    return pa.StructArray.from_arrays([decoded.field(i).take(index) for i in range(decoded.type.num_fields)],
                                      fields=list(decoded.type), mask=pa.array(~present))


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


def state_columns(plan: StateReadPlan, var: StateVariable, entries: list[tuple[bytes, bytes]],
                  family_id: int, source: str) -> list[pa.Array]:
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


def change_columns(plan: StateReadPlan, var: StateVariable, records: list[tuple[str, bytes, bytes | None]],
                   family_id: int, source: str) -> tuple[list[str], list[pa.Array]]:
    """Change types and output columns of one changelog's records of this variable."""
    entries = [(k, v) for _, k, v in records]
    kinds_all = [kind for kind, _, _ in records]
    keys_rows, value_rows, present = _family_rows(plan, entries, family_id, source)
    from state_reader.formats.rocksdb_encoding import column_family_ids

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
