"""Rows written into a store that keeps RocksDB column families (transformWithState variables and
timers, join state formats 3 and 4), encoded as Spark keeps them: each family's key encoder, its
column family id before every key, and the entries Spark keeps beside a variable's own.

A variable's entries do not stand alone. A variable with TTL has an index (``$ttl_<name>``:
expiration time, then the element's key) that Spark scans to expire elements: one entry per value
or map entry, one per list at its earliest expiration (``$min_<name>``). A list keeps a count of
its elements per grouping key (``$rowCounter_<name>``, with TTL ``$count_<name>``); each timer is
kept twice (key to time, time to key). Rows written here bring those entries along, and the index
entries of a replaced or deleted element are found by the element's key alone (whatever expiration
they hold), so no stale index entry outlives its element.

The rows' columns, types and nulls are checked as every edit's are
(:mod:`~state_reader.core.rewrite.edit_fit`), against the columns ``read_state`` shows for the
variable; :mod:`~state_reader.core.rewrite.edit` binds the result to the store's edit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_reader.core.rewrite.edit_fit import (
    EditMode,
    check_partitions,
    conform_column,
    key_bytes,
    require_columns,
    require_non_null,
    require_unique,
    typed_table,
)
from state_reader.core.rewrite.rows import FamilyStoreRows, store_label
from state_reader.errors import DuplicateEditKeyError, EditNullError, UnsupportedOptionError
from state_reader.formats.avro_encoding import SCHEMA_ID_BYTES, encode_avro_rows
from state_reader.formats.rocksdb_encode import (
    encode_keys,
    encode_range_scan_keys,
    encode_timestamp_keys,
    encode_values,
    with_row_checksums,
)
from state_reader.formats.rocksdb_encoding import (
    LENGTH_BYTES,
    MERGE_DELIMITERS,
    NO_PREFIX,
    PREFIX_SCAN,
    RANGE_SCAN,
    STATE_ENCODING_VERSION,
    TIMESTAMP_POSTFIX,
    TIMESTAMP_PREFIX,
    VIRTUAL_CF_PREFIX_BYTES,
    column_family_ids,
    with_spans,
)
from state_reader.formats.rocksdb_multi_value import encode_multi_values
from state_reader.formats.schema_files import ColumnFamilySchema
from state_reader.formats.spark_types import LONG, DataType, StructType
from state_reader.formats.unsaferow import RowBuffer
from state_reader.formats.unsaferow_encode import concat_rows, encode_rows, pack_rows
from state_reader.model.state_variables import (
    COUNT_PREFIX,
    COUNTER_PREFIX,
    LIST,
    MAP,
    MIN_PREFIX,
    MULTI_VALUE,
    TIMER_INDEXES,
    TIMERS,
    TTL_PREFIX,
    VALUE,
)

# the column of a map variable's rows that names an entry's key: a delete without it takes out whole maps
USER_MAP_KEY = "user_map_key"


@dataclass(frozen=True)
class FamilyTarget:
    """One family an edit writes into (a variable, its timers, or one join store)."""

    name: str
    kind: str  # ValueState, ListState, MapState, TimerState, or MultiValue (a join format 4 store)
    ttl: bool


@dataclass
class FamilyRows:
    """Encoded entries of one store (column family id first), as the edit applies them: keys with their
    values (upserts), or keys alone (deletes). With ``checksum`` (row checksums on) each single value
    is framed with the checksum of its key and value as it is added."""

    checksum: bool = False
    keys: list[RowBuffer] = field(default_factory=list)
    values: list[RowBuffer] = field(default_factory=list)

    def add(self, keys: RowBuffer, values: RowBuffer | None = None, framed: bool = False) -> None:
        """Entries of ``keys`` (and ``values``); ``framed``: the values carry their checksums already
        (multi values, framed element by element)."""
        if len(keys.starts):
            self.keys.append(keys)
            if values is not None:
                if self.checksum and not framed:
                    values = with_row_checksums(keys, values, with_length=True)
                self.values.append(values)

    def joined(self) -> tuple[RowBuffer | None, RowBuffer | None]:
        """All keys, and all values (None where there are none), each in one buffer."""
        keys = concat_rows(self.keys, "edit keys") if self.keys else None
        return keys, concat_rows(self.values, "edit values") if self.values else None


@dataclass(frozen=True)
class FamilyMatch:
    """How an edit of a store with column families matches old entries: the families whose entries
    are matched by their element's key (TTL indexes), and those whose entries the counts count."""

    by_element: frozenset[int]
    counted: frozenset[int]
    # map variables' family ids, and each one's TTL index family id (None without TTL): a deleted key that is a
    # map's grouping key alone takes out every entry of it and their index entries
    maps: dict[int, int | None] = field(default_factory=dict)
    # the store, to find the grouping key of a map's TTL index entries
    rows: FamilyStoreRows | None = field(default=None, compare=False, repr=False)

    def group_deletes(self, keys: RowBuffer) -> np.ndarray | None:
        """Which of the deleted ``keys`` name a map's grouping key alone (no user key after the prefix);
        None when none do."""
        if not self.maps or not len(keys.starts):
            return None
        ids = column_family_ids(keys)
        mine = np.isin(ids, list(self.maps))
        if not mine.any():
            return None
        mask = np.zeros(len(ids), dtype=bool)
        mask[mine] = keys.lengths[mine] == VIRTUAL_CF_PREFIX_BYTES + LENGTH_BYTES + _prefix_lengths(keys, mine)
        return mask if mask.any() else None

    def group_bytes(self, keys: RowBuffer) -> pa.Array:
        """Each entry's map grouping key as a deletion names it (:func:`map_group_keys`): a map entry's leading
        bytes, a map's TTL index entry's grouping key encoded so; null for every other entry."""
        out = pa.nulls(len(keys.starts), pa.large_binary())
        if not self.maps or not len(keys.starts):
            return out
        ids = column_family_ids(keys)
        found: list[tuple[np.ndarray, pa.Array]] = []
        entries = np.flatnonzero(np.isin(ids, list(self.maps)))
        if len(entries):
            picked = keys.take(entries)
            every = np.ones(len(entries), dtype=bool)
            lengths = np.clip(
                VIRTUAL_CF_PREFIX_BYTES + LENGTH_BYTES + _prefix_lengths(picked, every), 0, picked.lengths
            )
            found.append((entries, key_bytes(with_spans(picked, picked.starts, lengths))))
        rows = self.rows
        for map_id, ttl_id in self.maps.items():
            index = np.flatnonzero(ids == ttl_id) if ttl_id is not None else np.zeros(0, np.int64)
            if not len(index) or rows is None:
                continue
            picked = keys.take(index)
            grouping = rows.partition_key(picked, None)[0][0]
            found.append((index, key_bytes(map_group_keys(rows, rows.names[map_id], grouping, picked.source))))
        if not found:
            return out
        positions = np.concatenate([index for index, _ in found])
        values = pa.concat_arrays([out.slice(0, 0), *(v for _, v in found)])
        take = np.full(len(ids), len(values), dtype=np.int64)  # past the end: null
        take[positions] = np.arange(len(positions))
        return pa.concat_arrays([values, pa.nulls(1, pa.large_binary())]).take(pa.array(take))

    def element_keys(self, keys: RowBuffer) -> tuple[np.ndarray, RowBuffer] | None:
        """The TTL index entries among ``keys`` (their positions) as their family id and element key,
        which is what they are matched by; None when there are none."""
        if not self.by_element or not len(keys.starts):
            return None
        ids = column_family_ids(keys)
        index = np.flatnonzero(np.isin(ids, list(self.by_element)))
        if not len(index):
            return None
        picked = keys.take(index)
        at = picked.starts + VIRTUAL_CF_PREFIX_BYTES
        # a range-scan key: int32 L, the ordering prefix (L bytes), then the element's encoded key
        width = np.arange(LENGTH_BYTES, dtype=np.int64)
        prefix = np.ascontiguousarray(picked.buf[at[:, None] + width]).view("<i4").reshape(-1).astype(np.int64)
        skip = VIRTUAL_CF_PREFIX_BYTES + LENGTH_BYTES + prefix
        tails = with_spans(picked, picked.starts + skip, picked.lengths - skip)
        return index, _with_family_id(tails, ids[index])

    def counted_mask(self, keys: RowBuffer) -> np.ndarray | None:
        """Which keys the counts count (None: all)."""
        if not len(keys.starts):
            return None
        return np.isin(column_family_ids(keys), list(self.counted))


def family_match(rows: FamilyStoreRows) -> FamilyMatch:
    """The match of a store's edits: TTL indexes by element, maps' entries and TTL index entries also by
    grouping key; the user's families (and the timers) counted."""
    by_element = frozenset(cf for name, cf in rows.mapping.items() if name.startswith(TTL_PREFIX))
    counted = frozenset(cf for name, cf in rows.mapping.items() if not name.startswith("$") or name in TIMER_INDEXES)
    maps = {
        rows.mapping[name]: rows.mapping.get(TTL_PREFIX + name)
        for name, kind in (rows.variable_kinds or {}).items()
        if kind == MAP and name in rows.mapping
    }
    return FamilyMatch(by_element, counted, maps, rows if maps else None)


def _prefix_lengths(keys: RowBuffer, mask: np.ndarray) -> np.ndarray:
    """The int32 LE prefix length after the family id of the ``mask``ed prefix-scan keys."""
    at = keys.starts[mask] + VIRTUAL_CF_PREFIX_BYTES
    raw = keys.buf[at[:, None] + np.arange(LENGTH_BYTES, dtype=np.int64)]
    return np.ascontiguousarray(raw).view("<i4").reshape(-1).astype(np.int64)


def family_targets(rows: FamilyStoreRows) -> dict[str, FamilyTarget]:
    """The families an edit can name: transformWithState variables and timers, or join stores."""
    if rows.variable_kinds is None:  # a join: its four stores (format 4 keeps lists of rows, one row per element)
        return {
            name: FamilyTarget(name, MULTI_VALUE if name in rows.multi_value else VALUE, False)
            for name in rows.families
            if not name.startswith("$")
        }
    out = {
        name: FamilyTarget(name, kind, name in rows.ttl_variables)
        for name, kind in rows.variable_kinds.items()
        if not name.startswith("$") and name in rows.families
    }
    out.update((name, FamilyTarget(name, TIMERS, False)) for name in TIMER_INDEXES if name in rows.families)
    return out


# -- binding: the rows checked and encoded -------------------------------------------------------------------


@dataclass
class FamilyEdit:
    """The rows written into a store with column families, every variable's (or join store's) together:
    the upserted entries and deleted keys, encoded, with Spark's entries beside them."""

    match: FamilyMatch
    upsert_keys: RowBuffer | None = None
    upsert_values: RowBuffer | None = None
    delete_keys: RowBuffer | None = None
    # the safe widenings applied to the given types, one sentence each
    widened: list[str] = field(default_factory=list)


def bind_families(rows: FamilyStoreRows, named: dict[str, tuple[Any, Any]]) -> FamilyEdit:
    """The rows (``upsert``, ``delete``) for each variable or join store ``named``, checked and encoded."""
    edit = FamilyEdit(family_match(rows))
    # Spark frames every value of every column family with its row checksum when they are on
    upserts, deletes = FamilyRows(rows.plan.store_conf.row_checksum), FamilyRows()
    known = family_targets(rows)
    for name, (upsert, delete) in named.items():
        target = known[name]
        written = None
        if upsert is not None:
            written = _family_upsert(rows, target, upsert, upserts, edit.widened)
        if delete is not None:
            _family_delete(rows, target, delete, deletes, written, edit.widened)
    edit.upsert_keys, edit.upsert_values = upserts.joined()
    edit.delete_keys, _ = deletes.joined()
    return edit


def _family_columns(rows: FamilyStoreRows, target: FamilyTarget) -> tuple[list[tuple[str, DataType]], int]:
    """The columns ``read_state`` shows for a variable (flattened) or join store, and how many of them
    make its key (what ``delete`` needs)."""
    family = rows.families[target.name]
    fields = family.key_schema.fields
    if target.kind == MAP:
        return [
            ("key", fields[0].data_type),
            (USER_MAP_KEY, fields[1].data_type),
            ("user_map_value", family.value_schema),
        ], 2
    if target.kind == TIMERS:
        return [("key", fields[0].data_type), ("expiration_timestamp_ms", LONG)], 2
    if target.kind == LIST:
        return [("key", family.key_schema), ("list_element", family.value_schema)], 1
    return [("key", family.key_schema), ("value", family.value_schema)], 1


def _family_table(
    rows: FamilyStoreRows, target: FamilyTarget, given: Any, mode: EditMode, widened: list[str]
) -> tuple[pa.Table, list[pa.Array]]:
    """The rows for ``mode`` checked against the family's schemas: the table, and its columns
    (the key's only, for ``delete``) conformed to their types."""
    columns, key_width = _family_columns(rows, target)
    where = f"{target.name} of {store_label(rows.plan, located=True)}"
    table = typed_table(given, mode, columns)
    if mode == EditMode.DELETE and target.kind == MAP and USER_MAP_KEY not in table.column_names:
        key_width = 1  # a grouping key alone: every entry of the map under it
    needed = tuple(name for name, _ in (columns if mode == EditMode.UPSERT else columns[:key_width]))
    optional = tuple(name for name, _ in columns if name not in needed)
    require_columns(table, needed, mode, where, optional=optional, typed=columns)
    notes: list[str] = []
    out = []
    for name, dt in columns:
        if name not in needed:
            continue
        arr = conform_column(table.column(name), dt, name, mode, notes)
        if isinstance(dt, StructType):
            require_non_null(arr, dt, name, mode)
        elif arr.null_count:
            first = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
            raise EditNullError(f"{mode} row {first} has a null {name}; a state row's {name} cannot be null")
        out.append(arr)
    widened += [f"{target.name}: {note}" for note in notes if f"{target.name}: {note}" not in widened]
    return table, out


def _family_upsert(
    rows: FamilyStoreRows, target: FamilyTarget, given: Any, out: FamilyRows, widened: list[str]
) -> RowBuffer:
    """A variable's (or join store's) upserted rows encoded into ``out``, with the entries Spark keeps
    beside them; returns its own keys' bytes (to check against its deletes)."""
    name = target.name
    source = f"upsert rows for {name} of {store_label(rows.plan, located=True)}"
    table, columns = _family_table(rows, target, given, EditMode.UPSERT, widened)
    family = rows.families[name]
    if target.kind == TIMERS:
        keys, times = columns
        own = family_keys(rows, name, struct_of([keys, times], family.key_schema.to_arrow()), source)
        require_unique(own, keys, EditMode.UPSERT)
        check_partitions(rows, table, own, EditMode.UPSERT)
        index = TIMER_INDEXES[name]
        by_time = struct_of([times, keys], rows.families[index].key_schema.to_arrow())
        out.add(own, empty_family_values(rows, name, len(keys), source))
        out.add(family_keys(rows, index, by_time, source), empty_family_values(rows, index, len(keys), source))
        return own
    if target.kind in (LIST, MULTI_VALUE):
        keys, elements = columns
        each = family_keys(rows, name, keys, source)
        check_partitions(rows, table, each, EditMode.UPSERT)
        # a list's rows come one per element: each key's elements, in the order given, make its new list
        # (a join format 4 store's too: the rows of one join key and event time)
        groups = np.asarray(pc.dictionary_encode(key_bytes(each)).indices.to_numpy(zero_copy_only=False), np.int64)
        _, first = np.unique(groups, return_index=True)
        own = each.take(first)
        out.add(own, list_values(rows, name, elements, groups, own, source), framed=True)
        owners = keys.take(pa.array(first))
        for counter in (COUNTER_PREFIX + name, COUNT_PREFIX + name):
            _add_long(rows, counter, owners, np.bincount(groups), out, source)
        if target.ttl:
            # the list expires element by element: Spark indexes each key once, at its earliest expiration
            expirations = np.asarray(_expirations(elements, name).to_numpy(zero_copy_only=False), np.int64)
            earliest = np.full(len(first), np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(earliest, groups, expirations)
            _add_long(rows, MIN_PREFIX + name, owners, earliest, out, source)
            out.add(
                ttl_index_keys(rows, name, pa.array(earliest), _element_keys(rows, name, owners), source),
                empty_family_values(rows, TTL_PREFIX + name, len(first), source),
            )
        return own
    if target.kind == MAP:
        keys, user_keys, values = columns
        whole = struct_of([keys, user_keys], family.key_schema.to_arrow())
        own = family_keys(rows, name, whole, source)
        require_unique(own, whole, EditMode.UPSERT)
    else:
        keys, values = columns
        whole = keys
        own = family_keys(rows, name, keys, source)
        require_unique(own, keys, EditMode.UPSERT)
    check_partitions(rows, table, own, EditMode.UPSERT)
    out.add(own, family_values(rows, name, values, source))
    if target.ttl:
        out.add(
            ttl_index_keys(rows, name, _expirations(values, name), _element_keys(rows, name, whole), source),
            empty_family_values(rows, TTL_PREFIX + name, len(keys), source),
        )
    return own


def _expirations(values: pa.StructArray, name: str) -> pa.Array:
    """When each value of a variable with TTL expires (its value's last field), none missing."""
    last = values.type.num_fields - 1
    expirations = values.field(last)
    if expirations.null_count:
        at = int(np.flatnonzero(expirations.is_null().to_numpy(zero_copy_only=False))[0])
        raise EditNullError(
            f"upsert row {at} of {name} has no expiration ({values.type.field(last).name} is null); {name} has a "
            "TTL, so every value of it holds the time it expires"
        )
    return expirations


def _add_long(
    rows: FamilyStoreRows, name: str, owners: pa.StructArray, numbers: np.ndarray, out: FamilyRows, source: str
) -> None:
    """One number per grouping key into family ``name`` (a list's count, earliest expiration), if the store has it."""
    if name in rows.families and name in rows.mapping:
        keys = owners.cast(rows.families[name].key_schema.to_arrow())
        out.add(family_keys(rows, name, keys, source), long_values(rows, name, numbers, source))


def _family_delete(
    rows: FamilyStoreRows,
    target: FamilyTarget,
    given: Any,
    out: FamilyRows,
    upserted: RowBuffer | None,
    widened: list[str],
) -> None:
    """A variable's (or join store's) deleted keys encoded into ``out``, with the entries Spark keeps beside them."""
    name = target.name
    source = f"delete rows for {name} of {store_label(rows.plan, located=True)}"
    table, columns = _family_table(rows, target, given, EditMode.DELETE, widened)
    family = rows.families[name]
    if target.kind == MAP and len(columns) == 1:
        # every entry under a grouping key: its map's entries start with these bytes, and the edit takes them
        # out with their TTL index entries (FamilyMatch.group_bytes); an entry of it upserted as well is the
        # map's new content
        own = map_group_keys(rows, name, columns[0], source)
        check_partitions(rows, table, own, EditMode.DELETE)
        out.add(own)
        return
    if target.kind in (MAP, TIMERS):
        whole = struct_of(columns, family.key_schema.to_arrow())
    else:
        whole = columns[0]
    own = family_keys(rows, name, whole, source)
    check_partitions(rows, table, own, EditMode.DELETE)
    if upserted is not None:
        both = pc.is_in(key_bytes(own), value_set=key_bytes(upserted))
        if pc.any(both).as_py():
            first = int(np.flatnonzero(both.to_numpy(zero_copy_only=False))[0])
            raise DuplicateEditKeyError(
                f"key {whole[first].as_py()} of {name} (delete row {first}) is both upserted and deleted; give it once"
            )
    n = len(whole)
    out.add(own)
    if target.kind == TIMERS:
        index = TIMER_INDEXES[name]
        by_time = struct_of([columns[1], columns[0]], rows.families[index].key_schema.to_arrow())
        out.add(family_keys(rows, index, by_time, source))
    elif target.kind == LIST:
        for beside in (COUNTER_PREFIX + name, COUNT_PREFIX + name, MIN_PREFIX + name):
            if beside in rows.families and beside in rows.mapping:
                keys = whole.cast(rows.families[beside].key_schema.to_arrow())
                out.add(family_keys(rows, beside, keys, source))
    if target.ttl:
        # the index entries of a deleted element, whatever their expiration (matched by the element's key)
        zeros = pa.array(np.zeros(n, dtype=np.int64))
        out.add(ttl_index_keys(rows, name, zeros, _element_keys(rows, name, whole), source))


def _element_keys(rows: FamilyStoreRows, name: str, whole: pa.StructArray) -> pa.StructArray:
    """The element keys a variable's TTL index names: the grouping key, or (map) grouping and user key."""
    element_type = rows.families[TTL_PREFIX + name].key_schema.to_arrow().field(1).type
    return struct_of([whole.field(i) for i in range(whole.type.num_fields)], element_type)


# -- encoding ------------------------------------------------------------------------------------------


def family_keys(rows: FamilyStoreRows, name: str, keys: pa.StructArray, source: str) -> RowBuffer:
    """Keys of family ``name`` (its key schema's fields) as Spark writes them, family id first."""
    family = _family(rows, name)
    spec = rows.specs[name]
    avro = rows.plan.store_conf.avro
    schema = family.key_schema
    if spec.kind == RANGE_SCAN:
        encoded = encode_range_scan_keys(
            keys, schema, spec.ordering_ordinals, avro=avro, schema_id=family.key_schema_id, source=source
        )
    elif spec.kind in (TIMESTAMP_PREFIX, TIMESTAMP_POSTFIX) and not avro:
        encoded = encode_timestamp_keys(keys, schema, spec.kind == TIMESTAMP_PREFIX, source)
    elif spec.kind == NO_PREFIX and avro:
        encoded = _avro_payloads(keys, schema, family.key_schema_id, source)
    elif spec.kind == PREFIX_SCAN and avro:
        n, fields = spec.num_prefix_cols, schema.fields
        # the prefix without a schema id, its length (version byte included) before it
        head = _avro_payloads(_fields(keys, schema, 0, n), StructType(fields[:n]), None, source)
        rest = _avro_payloads(
            _fields(keys, schema, n, len(fields)), StructType(fields[n:]), family.key_schema_id, source
        )
        encoded = pack_rows([(LENGTH_BYTES, head), (0, rest)], source)
        length = head.lengths.astype("<i4").view(np.uint8).reshape(-1, LENGTH_BYTES)
        encoded.buf[encoded.starts[:, None] + np.arange(LENGTH_BYTES, dtype=np.int64)] = length
    elif spec.kind in (NO_PREFIX, PREFIX_SCAN):
        plain = encode_rows(keys, schema, source, normalize_floats=True)
        encoded = encode_keys(plain, schema, spec)
    else:
        raise UnsupportedOptionError(
            f"{source}: writing keys of the RocksDB key encoder {spec.kind} in the Avro encoding is not supported yet"
        )
    return _with_family_id(encoded, np.full(len(encoded.starts), rows.mapping[name], dtype=np.int16))


def map_group_keys(rows: FamilyStoreRows, name: str, keys: pa.StructArray, source: str) -> RowBuffer:
    """What every entry of map variable ``name`` under each grouping key of ``keys`` starts with, as Spark
    writes its prefix-scan keys: the family id, the prefix's length, the encoded grouping key (a version
    byte, then its UnsafeRow, or the Avro record without a schema id)."""
    family = _family(rows, name)
    spec = rows.specs[name]
    head_schema = StructType(family.key_schema.fields[: spec.num_prefix_cols])
    grouping = struct_of([keys], head_schema.to_arrow())
    if rows.plan.store_conf.avro:
        head = _avro_payloads(grouping, head_schema, None, source)
    else:
        head = encode_values(encode_rows(grouping, head_schema, source, normalize_floats=True))
    encoded = pack_rows([(LENGTH_BYTES, head)], source)
    length = head.lengths.astype("<i4").view(np.uint8).reshape(-1, LENGTH_BYTES)
    encoded.buf[encoded.starts[:, None] + np.arange(LENGTH_BYTES, dtype=np.int64)] = length
    return _with_family_id(encoded, np.full(len(encoded.starts), rows.mapping[name], dtype=np.int16))


def family_values(rows: FamilyStoreRows, name: str, values: pa.StructArray, source: str) -> RowBuffer:
    """Single values of family ``name`` as Spark writes them (a version byte, then the UnsafeRow, or the
    value schema's id and the Avro record)."""
    family = _family(rows, name)
    if rows.plan.store_conf.avro:
        return _avro_payloads(values, family.value_schema, family.value_schema_id, source)
    return encode_values(encode_rows(values, family.value_schema, source))


def empty_family_values(rows: FamilyStoreRows, name: str, n: int, source: str) -> RowBuffer:
    """``n`` values of a family that keeps none (TTL indexes, timers): its one void field, null."""
    arrow = _family(rows, name).value_schema.to_arrow()
    nulls = pa.StructArray.from_arrays([pa.nulls(n, f.type) for f in arrow], fields=list(arrow))
    return family_values(rows, name, nulls, source)


def list_values(
    rows: FamilyStoreRows, name: str, elements: pa.StructArray, groups: np.ndarray, keys: RowBuffer, source: str
) -> RowBuffer:
    """One multi value per group (``groups``: each element's group, 0..n-1, in the order given; ``keys``:
    each group's key as stored): each element framed by its length (and its row checksum, when the
    store keeps them), joined by the merge operator's delimiter."""
    conf = rows.plan.store_conf
    encoded = family_values(rows, name, elements, source)
    delimiter = MERGE_DELIMITERS[conf.merge_operator_version]
    return encode_multi_values(encoded, groups, delimiter, keys if conf.row_checksum else None)


def long_values(rows: FamilyStoreRows, name: str, numbers: np.ndarray, source: str) -> RowBuffer:
    """Values of a family that keeps one number per key (a list's count, its earliest expiration)."""
    schema = _family(rows, name).value_schema
    arrow = schema.to_arrow()
    column = pa.array(numbers.astype(np.int64)).cast(arrow.field(0).type)
    return family_values(rows, name, pa.StructArray.from_arrays([column], fields=list(arrow)), source)


def ttl_index_keys(
    rows: FamilyStoreRows, variable: str, expirations: pa.Array, elements: pa.StructArray, source: str
) -> RowBuffer:
    """The TTL index keys of a variable's elements: (expiration, element key)."""
    name = TTL_PREFIX + variable
    arrow = _family(rows, name).key_schema.to_arrow()
    key = pa.StructArray.from_arrays(
        [expirations.cast(arrow.field(0).type), elements.cast(arrow.field(1).type)], fields=list(arrow)
    )
    return family_keys(rows, name, key, source)


def struct_of(arrays: Sequence[pa.Array], schema_type: pa.StructType) -> pa.StructArray:
    """The arrays as one struct of ``schema_type``'s fields (cast to their types)."""
    return pa.StructArray.from_arrays(
        [a.cast(schema_type.field(i).type) for i, a in enumerate(arrays)], fields=list(schema_type)
    )


def _avro_payloads(values: pa.StructArray, schema: StructType, schema_id: int | None, source: str) -> RowBuffer:
    """Avro records as Spark's state store frames them: a version byte, the schema's id (where it is
    written), then the record."""
    head = bytes([STATE_ENCODING_VERSION]) + (
        b"" if schema_id is None else schema_id.to_bytes(SCHEMA_ID_BYTES, "little")
    )
    return encode_avro_rows(values, schema, head, source)


def _fields(keys: pa.StructArray, schema: StructType, lo: int, hi: int) -> pa.StructArray:
    """Fields ``lo:hi`` of ``keys`` as a struct of their own."""
    arrow = StructType(schema.fields[lo:hi]).to_arrow()
    return pa.StructArray.from_arrays([keys.field(i) for i in range(lo, hi)], fields=list(arrow))


def _family(rows: FamilyStoreRows, name: str) -> ColumnFamilySchema:
    family = rows.families.get(name)
    if family is None or name not in rows.mapping:
        raise UnsupportedOptionError(
            f"column family {name} of {rows.plan.checkpoint.location} has no schema or id to write it with",
            path=rows.plan.checkpoint.location,
        )
    return family


def _with_family_id(rows: RowBuffer, ids: np.ndarray) -> RowBuffer:
    out = pack_rows([(VIRTUAL_CF_PREFIX_BYTES, rows)], rows.source)
    out.buf[out.starts[:, None] + np.arange(VIRTUAL_CF_PREFIX_BYTES, dtype=np.int64)] = (
        np.asarray(ids, dtype="<i2").view(np.uint8).reshape(-1, VIRTUAL_CF_PREFIX_BYTES)
    )
    return out
