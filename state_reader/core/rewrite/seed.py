"""Rows written into a store by a rewrite: ``upsert`` (a key's value replaced, or a key added) and
``delete`` (keys taken out), given as tables in the shape ``read_state`` returns.

The rows are checked against the store's schemas before anything is written: every column and
field where the schema has it (by position; ``read_state``'s ``name#2`` for a repeated name is
taken for the name), each type the schema's or one that widens to it safely (said in the report),
no null where the schema forbids one, no key twice. They are then encoded as the source store keeps
its rows (UnsafeRows, framed for RocksDB), so that the rewrite routes them with the store's own rows:
each to the partition Spark's hash gives its key. A given ``partition_id`` column is checked
against that hash, never used.

A new partition is edited as it is written (:func:`edited`): the old rows whose key is upserted or
deleted are left out, the upserted rows follow. Keys are compared as bytes in the destination's
encoding, which is Spark's own (Spark compares state keys as bytes too).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_reader.core.rewrite import seed_families as fam
from state_reader.core.rewrite.route import Spill
from state_reader.core.rewrite.rows import FamilyStoreRows, StoreRows, TransformedStoreRows, store_label
from state_reader.core.size import row_bytes
from state_reader.errors import (
    DuplicateSeedKeyError,
    InvalidOptionError,
    SeedNullError,
    SeedPartitionError,
    SeedSchemaError,
    UnknownSeedStoreError,
    UnsupportedOptionError,
)
from state_reader.formats.rocksdb_encoding import encode_keys, encode_values
from state_reader.formats.spark_types import LONG, ArrayType, DataType, MapType, StructType, UserDefinedType
from state_reader.formats.unsaferow import PAD, RowBuffer, copy_spans
from state_reader.formats.unsaferow_encode import encode_rows
from state_reader.model.checkpoint import DEFAULT_STORE
from state_reader.model.state_variables import LIST, MAP, MULTI_VALUE, TIMERS
from state_reader.providers.hdfs import frame_records, framed_rows

PARTITION_COLUMN = "partition_id"


@dataclass(frozen=True)
class StoreSeed:
    """What to write into one store, chosen by ``read_state``'s selectors: ``upsert`` rows (columns
    ``key`` and ``value``) and ``delete`` keys (a ``key`` column), each a pyarrow Table or RecordBatch
    or a pandas DataFrame."""

    upsert: Any = None
    delete: Any = None
    operator_id: int | None = None
    store_name: str | None = None
    state_var_name: str | None = None


@dataclass(frozen=True)
class DistributedRows:
    """Rows that stay where they are (a Spark DataFrame), with their Arrow schema: checked and
    written by the Spark row mover, on the executors."""

    schema: pa.Schema
    frame: Any


@dataclass
class StoreEdit:
    """A seed bound to one store of a rewrite: its rows checked and encoded as the source store keeps them."""

    rows: StoreRows
    upsert_keys: RowBuffer | None = None
    upsert_values: RowBuffer | None = None
    delete_keys: RowBuffer | None = None
    # the safe widenings applied to the given types, one sentence each
    widened: list[str] = field(default_factory=list)
    # rows left where they are (``upsert``, ``delete``): only their schema is checked here
    distributed: dict[str, DistributedRows] = field(default_factory=dict)
    # a store with column families: how old entries are matched and which the counts count
    match: fam.FamilyMatch | None = None


@dataclass
class EditCounts:
    """What the edit did to one new partition: keys gained, replaced and lost, and the bytes it moved."""

    gained: int = 0
    replaced: int = 0
    lost: int = 0
    added_bytes: int = 0
    removed_bytes: int = 0
    # rows added less rows taken out, every column family's (the counts above count the user's only)
    row_change: int = 0


def bind_seeds(stores: Sequence[StoreRows], seeds: Sequence[StoreSeed], location: str) -> list[StoreEdit | None]:
    """Each store's edit (None where no seed names it), every seed checked and encoded; refuses
    before anything is written. Seeds for the variables (or join stores) of one store with column
    families make one edit of that store."""
    out: list[StoreEdit | None] = [None] * len(stores)
    by_family: dict[int, dict[str, StoreSeed]] = {}
    for seed in seeds:
        if seed.upsert is None and seed.delete is None:
            continue
        index, family = _find_store(stores, seed, location)
        if family is not None:
            named = by_family.setdefault(index, {})
            if family in named:
                raise InvalidOptionError(
                    f"{family} of {store_label(stores[index].plan)} is given rows twice; give each variable once"
                )
            named[family] = seed
            continue
        if out[index] is not None:
            raise InvalidOptionError(f"{store_label(stores[index].plan)} is given rows twice; give each store once")
        out[index] = _bind(stores[index], seed, location)
    for index, named in by_family.items():
        rows = stores[index]
        assert isinstance(rows, FamilyStoreRows)
        out[index] = _bind_families(rows, named, location)
    return out


def _find_store(stores: Sequence[StoreRows], seed: StoreSeed, location: str) -> tuple[int, str | None]:
    """The store a seed is for, and (a store with column families) the variable or join store it names."""
    operator_ids = sorted({rows.plan.operator_id for rows in stores})
    op = seed.operator_id
    if op is None:
        if len(operator_ids) != 1:
            raise InvalidOptionError(
                f"{location} has {len(operator_ids)} stateful operators ({operator_ids}); pass operator_id to say "
                "which one the rows are for"
            )
        op = operator_ids[0]
    if op not in operator_ids:
        raise UnknownSeedStoreError(
            f"the rows are for operator {op}, which {location} does not have (its stateful operators: {operator_ids})",
            path=location,
        )
    mine = [(i, rows) for i, rows in enumerate(stores) if rows.plan.operator_id == op]
    for i, rows in mine:
        if isinstance(rows, FamilyStoreRows):
            return i, _find_family(rows, seed, location)
    if seed.state_var_name is not None:
        raise UnknownSeedStoreError(
            f"the rows are for state variable {seed.state_var_name!r}, but operator {op} of {location} keeps no "
            "state variables (only transformWithState does)",
            path=location,
        )
    name = seed.store_name or DEFAULT_STORE
    for i, rows in mine:
        if rows.plan.store_name == name:
            return i, None
    names = ", ".join(rows.plan.store_name for _, rows in mine)
    raise UnknownSeedStoreError(
        f"the rows are for store '{name}' of operator {op}, which {location} does not have (its stores: {names})",
        path=location,
    )


def _find_family(rows: FamilyStoreRows, seed: StoreSeed, location: str) -> str:
    """The variable (transformWithState: ``state_var_name``, or a dict's key) or join store (``store_name``)
    a seed names in a store with column families."""
    op = rows.plan.operator_id
    known = fam.targets(rows)
    tws = rows.variable_kinds is not None
    if seed.state_var_name is not None and seed.store_name not in (None, DEFAULT_STORE):
        raise InvalidOptionError("give state_var_name or store_name, not both")
    name = seed.state_var_name if seed.state_var_name is not None else seed.store_name
    what = "state variables" if tws else "join stores"
    listed = ", ".join(f"{n} ({t.kind}{', TTL' if t.ttl else ''})" if tws else n for n, t in known.items())
    if name in (None, DEFAULT_STORE):
        raise InvalidOptionError(
            f"operator {op} of {location} keeps its state in RocksDB column families: name the "
            f"{'state variable (state_var_name, or the key of a dict of rows)' if tws else 'join store (store_name)'}"
            f" the rows are for (its {what}: {listed})"
        )
    assert name is not None
    if name not in known:
        raise UnknownSeedStoreError(
            f"the rows are for {name!r} of operator {op}, which {location} does not have (its {what}: {listed})",
            path=location,
        )
    return name


def _bind(rows: StoreRows, seed: StoreSeed, location: str) -> StoreEdit:
    plan = rows.plan
    where = store_label(plan, located=True)
    if isinstance(rows, TransformedStoreRows):
        raise InvalidOptionError(f"{where} is changed by transform; give it rows or a transform, not both")
    if plan.store_conf.row_checksum or plan.store_conf.avro:
        raise UnsupportedOptionError(
            f"{where} keeps row checksums or Avro-encoded state; writing rows into it is not supported yet",
            path=location,
        )
    if plan.join is not None:
        raise UnsupportedOptionError(f"{where} is a join side; writing rows into it is not supported yet")
    edit = StoreEdit(rows)
    for what, given in (("upsert", seed.upsert), ("delete", seed.delete)):
        if isinstance(given, DistributedRows):
            # the rows are checked where they are (a Spark job); their columns and types are checked here
            encode_table(rows, pa.Table.from_batches([], schema=given.schema), what, edit.widened)
            edit.distributed[what] = given
    upsert, delete = (seed.upsert, seed.delete) if not edit.distributed else (None, None)
    if upsert is not None:
        keys, edit.upsert_keys, edit.upsert_values = encode_table(rows, upsert, "upsert", edit.widened)
        _require_unique(edit.upsert_keys, keys, "upsert")
    if delete is not None:
        keys, edit.delete_keys, _ = encode_table(rows, delete, "delete", edit.widened)
        if edit.upsert_keys is not None:
            both = pc.is_in(key_bytes(edit.delete_keys), value_set=key_bytes(edit.upsert_keys))
            if pc.any(both).as_py():
                first = int(np.flatnonzero(both.to_numpy(zero_copy_only=False))[0])
                raise DuplicateSeedKeyError(
                    f"key {keys[first].as_py()} (delete row {first}) is both upserted and deleted; give it once"
                )
    return edit


# -- stores with column families -------------------------------------------------------------------


def _bind_families(rows: FamilyStoreRows, named: dict[str, StoreSeed], location: str) -> StoreEdit:
    """One edit of a store with column families from the seeds of its variables (or join stores)."""
    plan = rows.plan
    where = store_label(plan, located=True)
    if plan.store_conf.row_checksum:
        raise UnsupportedOptionError(
            f"{where} keeps row checksums; writing rows into it is not supported yet", path=location
        )
    edit = StoreEdit(rows, match=fam.family_match(rows))
    upserts, deletes = fam.FamilyRows(), fam.FamilyRows()
    known = fam.targets(rows)
    for name, seed in named.items():
        target = known[name]
        if any(isinstance(given, DistributedRows) for given in (seed.upsert, seed.delete)):
            raise UnsupportedOptionError(
                f"rows for {name} of {where} are a Spark DataFrame: through Spark, rows are written into stores "
                "without column families only for now; collect them (toArrow) and rewrite without spark="
            )
        if target.kind == LIST and target.ttl:
            raise UnsupportedOptionError(
                f"{name} of {where} is a list variable with TTL; writing rows into it is not supported yet"
            )
        written = None
        if seed.upsert is not None:
            written = _family_upsert(rows, target, seed.upsert, upserts, edit.widened)
        if seed.delete is not None:
            _family_delete(rows, target, seed.delete, deletes, written, edit.widened)
    joined = upserts.joined()
    if joined is not None:
        edit.upsert_keys, edit.upsert_values = joined
    joined = deletes.joined()
    if joined is not None:
        edit.delete_keys = joined[0]
    return edit


def _family_columns(rows: FamilyStoreRows, target: fam.FamilyTarget) -> tuple[list[tuple[str, DataType]], int]:
    """The columns ``read_state`` shows for a variable (flattened) or join store, and how many of them
    make its key (what ``delete`` needs)."""
    family = rows.families[target.name]
    fields = family.key_schema.fields
    if target.kind == MAP:
        return [
            ("key", fields[0].data_type),
            ("user_map_key", fields[1].data_type),
            ("user_map_value", family.value_schema),
        ], 2
    if target.kind == TIMERS:
        return [("key", fields[0].data_type), ("expiration_timestamp_ms", LONG)], 2
    if target.kind == LIST:
        return [("key", family.key_schema), ("list_element", family.value_schema)], 1
    return [("key", family.key_schema), ("value", family.value_schema)], 1


def _family_table(
    rows: FamilyStoreRows, target: fam.FamilyTarget, given: Any, what: str, widened: list[str]
) -> tuple[pa.Table, list[pa.Array]]:
    """The rows for ``what`` checked against the family's schemas: the table, and its columns
    (the key's only, for ``delete``) conformed to their types."""
    columns, key_width = _family_columns(rows, target)
    where = f"{target.name} of {store_label(rows.plan, located=True)}"
    table = _typed_table(given, what, columns)
    needed = tuple(name for name, _ in (columns if what == "upsert" else columns[:key_width]))
    optional = tuple(name for name, _ in columns if name not in needed)
    _require_columns(table, needed, what, where, optional=optional)
    notes: list[str] = []
    out = []
    for name, dt in columns:
        if name not in needed:
            continue
        arr = _conform_column(table.column(name), dt, name, what, notes)  # type: ignore[arg-type]
        if isinstance(dt, StructType):
            _require_non_null(arr, dt, name, what)
        elif arr.null_count:
            first = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
            raise SeedNullError(f"{what} row {first} has a null {name}; a state row's {name} cannot be null")
        out.append(arr)
    widened += [f"{target.name}: {note}" for note in notes if f"{target.name}: {note}" not in widened]
    return table, out


def _family_upsert(
    rows: FamilyStoreRows, target: fam.FamilyTarget, given: Any, out: fam.FamilyRows, widened: list[str]
) -> RowBuffer:
    """A variable's (or join store's) upserted rows encoded into ``out``, with the entries Spark keeps
    beside them; returns its own keys' bytes (to check against its deletes)."""
    name = target.name
    source = f"upsert rows for {name} of {store_label(rows.plan, located=True)}"
    table, columns = _family_table(rows, target, given, "upsert", widened)
    family = rows.families[name]
    if target.kind == TIMERS:
        keys, times = columns
        own = fam.family_keys(rows, name, fam.struct_of([keys, times], family.key_schema.to_arrow()), source)
        _require_unique(own, keys, "upsert")
        _check_partitions(rows, table, own, "upsert")
        index = fam.TIMER_INDEXES[name]
        by_time = fam.struct_of([times, keys], rows.families[index].key_schema.to_arrow())
        out.add(own, fam.empty_family_values(rows, name, len(keys), source))
        out.add(fam.family_keys(rows, index, by_time, source), fam.empty_family_values(rows, index, len(keys), source))
        return own
    if target.kind in (LIST, MULTI_VALUE):
        keys, elements = columns
        each = fam.family_keys(rows, name, keys, source)
        _check_partitions(rows, table, each, "upsert")
        # a list's rows come one per element: each key's elements, in the order given, make its new list
        # (a join format 4 store's too: the rows of one join key and event time)
        groups = np.asarray(pc.dictionary_encode(key_bytes(each)).indices.to_numpy(zero_copy_only=False), np.int64)
        _, first = np.unique(groups, return_index=True)
        own = each.take(first)
        out.add(own, fam.list_values(rows, name, elements, groups, source))
        counter = fam.COUNTER_PREFIX + name
        if counter in rows.families:
            counter_keys = keys.take(pa.array(first)).cast(rows.families[counter].key_schema.to_arrow())
            out.add(
                fam.family_keys(rows, counter, counter_keys, source),
                fam.counter_values(rows, counter, np.bincount(groups), source),
            )
        return own
    if target.kind == MAP:
        keys, user_keys, values = columns
        whole = fam.struct_of([keys, user_keys], family.key_schema.to_arrow())
        own = fam.family_keys(rows, name, whole, source)
        _require_unique(own, whole, "upsert")
    else:
        keys, values = columns
        whole = keys
        own = fam.family_keys(rows, name, keys, source)
        _require_unique(own, keys, "upsert")
    _check_partitions(rows, table, own, "upsert")
    out.add(own, fam.family_values(rows, name, values, source))
    if target.ttl:
        expirations = values.field(values.type.num_fields - 1)
        if expirations.null_count:
            at = int(np.flatnonzero(expirations.is_null().to_numpy(zero_copy_only=False))[0])
            raise SeedNullError(
                f"upsert row {at} of {name} has no expiration ({values.type.field(values.type.num_fields - 1).name}"
                f" is null); {name} has a TTL, so every value of it holds the time it expires"
            )
        ttl = fam.TTL_PREFIX + name
        out.add(
            fam.ttl_index_keys(rows, name, expirations, _element_keys(rows, name, whole), source),
            fam.empty_family_values(rows, ttl, len(keys), source),
        )
    return own


def _family_delete(
    rows: FamilyStoreRows,
    target: fam.FamilyTarget,
    given: Any,
    out: fam.FamilyRows,
    upserted: RowBuffer | None,
    widened: list[str],
) -> None:
    """A variable's (or join store's) deleted keys encoded into ``out``, with the entries Spark keeps beside them."""
    name = target.name
    source = f"delete rows for {name} of {store_label(rows.plan, located=True)}"
    table, columns = _family_table(rows, target, given, "delete", widened)
    family = rows.families[name]
    if target.kind in (MAP, TIMERS):
        whole = fam.struct_of(columns, family.key_schema.to_arrow())
    else:
        whole = columns[0]
    own = fam.family_keys(rows, name, whole, source)
    _check_partitions(rows, table, own, "delete")
    if upserted is not None:
        both = pc.is_in(key_bytes(own), value_set=key_bytes(upserted))
        if pc.any(both).as_py():
            first = int(np.flatnonzero(both.to_numpy(zero_copy_only=False))[0])
            raise DuplicateSeedKeyError(
                f"key {whole[first].as_py()} of {name} (delete row {first}) is both upserted and deleted; give it once"
            )
    n = len(whole)
    out.add(own, own)
    if target.kind == TIMERS:
        index = fam.TIMER_INDEXES[name]
        by_time = fam.struct_of([columns[1], columns[0]], rows.families[index].key_schema.to_arrow())
        out.add(fam.family_keys(rows, index, by_time, source), own)
    elif target.kind == LIST and fam.COUNTER_PREFIX + name in rows.families:
        counter = fam.COUNTER_PREFIX + name
        counter_keys = whole.cast(rows.families[counter].key_schema.to_arrow())
        out.add(fam.family_keys(rows, counter, counter_keys, source), own)
    elif target.ttl:
        # the index entries of a deleted element, whatever their expiration (matched by the element's key)
        zeros = pa.array(np.zeros(n, dtype=np.int64))
        out.add(fam.ttl_index_keys(rows, name, zeros, _element_keys(rows, name, whole), source), own)


def _element_keys(rows: FamilyStoreRows, name: str, whole: pa.StructArray) -> pa.StructArray:
    """The element keys a variable's TTL index names: the grouping key, or (map) grouping and user key."""
    element_type = rows.families[fam.TTL_PREFIX + name].key_schema.to_arrow().field(1).type
    return fam.struct_of([whole.field(i) for i in range(whole.type.num_fields)], element_type)


def encode_table(
    rows: StoreRows, given: Any, what: str, widened: list[str]
) -> tuple[pa.Array, RowBuffer, RowBuffer | None]:
    """Rows for ``what`` (``upsert``: key and value; ``delete``: key) checked against the store's
    schemas and encoded as the store keeps its rows: the keys as given (typed as the store's),
    their bytes, and the values' bytes (None for ``delete``). A ``partition_id`` is checked here.
    The widenings applied are added to ``widened``."""
    plan = rows.plan
    where = store_label(plan, located=True)
    source = f"{what} rows for {where}"
    if what == "upsert":
        table = _as_table(given, what, plan.key_schema, plan.value_schema)
        _require_columns(table, ("key", "value"), what, where)
    else:
        table = _as_table(given, what, plan.key_schema, None)
        _require_columns(table, ("key",), what, where, optional=("value",))
    notes: list[str] = []
    keys = _conform_column(table.column("key"), plan.key_schema, "key", what, notes)
    _require_non_null(keys, plan.key_schema, "key", what)
    encoded_keys = _encode_keys(rows, keys, source)
    encoded_values = None
    if what == "upsert":
        values = _conform_column(table.column("value"), plan.value_schema, "value", what, notes)
        _require_non_null(values, plan.value_schema, "value", what)
        stored = values.cast(plan.stored_value_schema.to_arrow()) if plan.value_long_slots else values
        encoded_values = _encode_values(rows, stored, source)
    _check_partitions(rows, table, encoded_keys, what)
    widened += [note for note in notes if note not in widened]
    return keys, encoded_keys, encoded_values


# -- the rows as a table ---------------------------------------------------------------------------


def _as_table(rows: Any, what: str, key_schema: StructType, value_schema: StructType | None) -> pa.Table:
    """``rows`` as a pyarrow Table: a RecordBatch wrapped, a pandas DataFrame converted with the
    store's types where its values allow (pandas holds ints as int64, structs as dicts)."""
    typed: list[tuple[str, DataType]] = [("key", key_schema)]
    if value_schema is not None:
        typed.append(("value", value_schema))
    return _typed_table(rows, what, typed)


def _typed_table(rows: Any, what: str, typed: Sequence[tuple[str, DataType]]) -> pa.Table:
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


def _require_columns(
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


def _conform_column(column: pa.ChunkedArray, dt: StructType, path: str, what: str, notes: list[str]) -> pa.Array:
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


def _require_non_null(arr: pa.Array, dt: StructType, path: str, what: str) -> None:
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


# -- encoding ----------------------------------------------------------------------------------------


def _encode_keys(rows: StoreRows, keys: pa.Array, source: str) -> RowBuffer:
    """Keys as the source store keeps them (UnsafeRows, floats normalized as Spark's grouping does)."""
    plan = rows.plan
    encoded = encode_rows(keys, plan.key_schema, source + " key", normalize_floats=True)
    return encode_keys(encoded, plan.key_schema, rows.spec) if rows.rocksdb else encoded


def _encode_values(rows: StoreRows, values: pa.Array, source: str) -> RowBuffer:
    encoded = encode_rows(values, rows.plan.stored_value_schema, source + " value")
    return encode_values(encoded) if rows.rocksdb else encoded


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


def _require_unique(encoded: RowBuffer, keys: pa.Array, what: str) -> None:
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


def _check_partitions(rows: StoreRows, table: pa.Table, encoded: RowBuffer, what: str) -> None:
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


# -- routing and editing -------------------------------------------------------------------------------


class EditSpill:
    """A store's upserted rows and deleted keys, each routed to its new partition in the destination's
    encoding and held in local temporary files until that partition is written."""

    def __init__(self, workdir: str, edit: StoreEdit, num_partitions: int, to_rocksdb: bool) -> None:
        rows = edit.rows
        self.upserts = Spill(_subdir(workdir, "upsert"), num_partitions)
        self.deletes = Spill(_subdir(workdir, "delete"), num_partitions)
        if edit.upsert_keys is not None and edit.upsert_values is not None:
            _spill(rows, edit.upsert_keys, edit.upsert_values, num_partitions, to_rocksdb, self.upserts)
        if edit.delete_keys is not None:
            _spill(
                rows,
                edit.delete_keys,
                empty_values(rows, len(edit.delete_keys.starts)),
                num_partitions,
                to_rocksdb,
                self.deletes,
            )

    def take(self, pid: int) -> tuple[bytes, bytes]:
        """New partition ``pid``'s upserted records and deleted keys (framed records), read once."""
        return b"".join(self.upserts.take(pid)), b"".join(self.deletes.take(pid))


def _subdir(workdir: str, name: str) -> str:
    path = os.path.join(workdir, name)
    os.makedirs(path, exist_ok=True)
    return path


def empty_values(rows: StoreRows, n: int) -> RowBuffer:
    """``n`` empty values in the store's encoding (what deleted keys are framed with)."""
    empty = RowBuffer.wrap(np.zeros(PAD, dtype=np.uint8), 0, np.zeros(n, np.int64), np.zeros(n, np.int64), "deleted")
    return encode_values(empty) if rows.rocksdb and n else empty


# seed rows are routed this many at a time: what routing holds beyond the encoded seed follows a run
_SPILL_ROWS = 1 << 16


def _spill(rows: StoreRows, keys: RowBuffer, values: RowBuffer, n: int, to_rocksdb: bool, spill: Spill) -> None:
    for lo in range(0, len(keys.starts), _SPILL_ROWS):
        run = slice(lo, lo + _SPILL_ROWS)
        part_keys, part_values = keys.take(run), values.take(run)
        target = rows.route(part_keys, n, None)[0]
        order = np.argsort(target, kind="stable")
        k, v = rows.convert(part_keys.take(order), part_values.take(order), to_rocksdb)
        counts = np.bincount(target[order], minlength=n)
        framed, lengths = frame_records(k, v)
        spill.add(framed, np.r_[0, np.cumsum(lengths)][np.r_[0, np.cumsum(counts)]], counts)


def edited(
    old: Iterable[bytes | np.ndarray],
    upserts: bytes,
    deletes: bytes,
    source: str,
    counts: EditCounts,
    match: fam.FamilyMatch | None = None,
) -> Iterator[bytes | np.ndarray]:
    """One new partition's records with the edit applied: the old ``old`` records (chunks of whole
    framed records) less those whose key is upserted or deleted, then the upserted records.
    ``counts`` says what changed once the records have been consumed. ``match`` (a store with
    column families) matches TTL index entries by their element and counts the user's entries only."""
    up_keys, up_values = framed_rows(upserts, source + " upserted") if upserts else (None, None)
    up = _match_bytes(up_keys, match) if up_keys is not None else pa.array([], pa.large_binary())
    gone = (
        _match_bytes(framed_rows(deletes, source + " deleted")[0], match)
        if deletes
        else pa.array([], pa.large_binary())
    )
    for chunk in old:
        keys, values = framed_rows(chunk, source)
        as_bytes = _match_bytes(keys, match)
        replaced = pc.is_in(as_bytes, value_set=up).to_numpy(zero_copy_only=False) if len(up) else None
        lost = pc.is_in(as_bytes, value_set=gone).to_numpy(zero_copy_only=False) if len(gone) else None
        out = np.zeros(len(as_bytes), dtype=bool)
        for hit in (replaced, lost):
            if hit is not None:
                out |= hit
        if not out.any():
            yield chunk
            continue
        counted = match.counted_mask(keys) if match is not None else None
        for hit, attr in ((replaced, "replaced"), (lost, "lost")):
            if hit is not None:
                setattr(counts, attr, getattr(counts, attr) + int((hit if counted is None else hit & counted).sum()))
        counts.removed_bytes += int(row_bytes(keys, values)[out].sum())
        counts.row_change -= int(out.sum())
        kept = np.flatnonzero(~out)
        if len(kept):
            yield frame_records(keys.take(kept), values.take(kept))[0]
    if up_keys is not None and up_values is not None:
        counted = match.counted_mask(up_keys) if match is not None else None
        counts.gained += (len(up) if counted is None else int(counted.sum())) - counts.replaced
        counts.added_bytes += int(row_bytes(up_keys, up_values).sum())
        counts.row_change += len(up)
        yield upserts


def _match_bytes(keys: RowBuffer, match: fam.FamilyMatch | None) -> pa.Array:
    """What an edit matches old entries by: each key's bytes, a TTL index entry's element key."""
    as_bytes = key_bytes(keys)
    found = match.element_keys(keys) if match is not None else None
    if found is None:
        return as_bytes
    index, elements = found
    take = np.arange(len(as_bytes))
    take[index] = len(as_bytes) + np.arange(len(index))
    return pa.concat_arrays([as_bytes, key_bytes(elements)]).take(pa.array(take))
