"""A stream-stream join rewritten into state format 3 or 4 (column families of one RocksDB store), from any
of formats 2, 3 and 4: each side's buffered rows taken out of the source's layout and written as Spark's
format-3 or format-4 code writes them.

What a side holds is the same in every format: per join key, its buffered input rows, each with its
``matched`` flag. Only the layout differs:

- formats 2 and 3: ``<side>-keyToNumValues`` (join key -> count) and ``<side>-keyWithIndexToValue``
  ((join key, index 0..n-1) -> row and flag); format 2 as separate stores, format 3 as column families;
- format 4: ``<side>-keyWithTsToValues`` ((join key, event time) -> the list of rows and flags with that event
  time) and its index ``<side>-tsWithKey`` ((event time, join key) -> one placeholder element per row).

A row's event time is what Spark's format-4 code takes from it: the value of the one input column that carries
the watermark (a window's end for a window), in microseconds; a null one reads as 0, as Spark's ``getLong``
reads it. The column family ids are those Spark gives when it creates the families, in its order (the left
side's two, then the right side's, after ``default``); the schema v3 file and operator metadata v2 are the ones
Spark writes when it starts a query in the format.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pyarrow as pa

from state_reader.core.rewrite.rows import FamilyStoreRows, StoreRows
from state_reader.errors import RewriteFailedError, UnsupportedConfChangeError
from state_reader.formats.rocksdb_encoding import (
    NO_PREFIX,
    TIMESTAMP_BYTES,
    TIMESTAMP_POSTFIX,
    TIMESTAMP_PREFIX,
    VIRTUAL_CF_PREFIX_BYTES,
    KeyEncoderSpec,
    column_family_ids,
)
from state_reader.formats.rocksdb_multi_value import encode_multi_values, split_multi_value
from state_reader.formats.schema_files import ColumnFamilySchema, write_schema_v3
from state_reader.formats.spark_types import LONG, DataType, StructField, StructType
from state_reader.formats.unsaferow import PAD, RowBuffer, decode_rows
from state_reader.formats.unsaferow_encode import concat_rows, copy_spans, pack_rows, splice_rows
from state_reader.model.conf import CONF_JOIN_FORMAT, ROCKSDB_PROVIDER
from state_reader.model.plan import StateReadPlan
from state_reader.model.state_variables import family_partition_key
from state_reader.model.store_names import (
    DEFAULT_STORE,
    EVENT_TIME_FIELD,
    JOIN_SIDES,
    JOIN_STORES,
    JOIN_V4_STORES,
    MATCHED_FIELD,
    WATERMARK_METADATA,
)

# the families of each format with column families, in the order Spark creates them (their ids follow it)
FAMILIES = {"3": JOIN_STORES, "4": JOIN_V4_STORES}
# the id Spark gives its own default family; the join's families come after it
_DEFAULT_FAMILY_ID = 1
# the fields of the families' values that hold no row: a count, format 4's placeholder
COUNT_VALUE = StructType([StructField("value", LONG, True)])
DUMMY_VALUE = StructType([StructField("__dummy__", DataType("void", json_name="void"), True)])
INDEX_FIELD = StructField("index", LONG, True)
# the operator properties Spark writes for a join in column families (operator metadata v2)
JOIN_PROPERTIES = {"useVirtualColumnFamilies": True}
# an UnsafeRow of one null field (format 4's placeholder): its null bit set, its slot zero
_NULL_ROW = (1).to_bytes(8, "little") + bytes(8)


def family_ids(fmt: str) -> dict[str, int]:
    """The column family ids of a join in format ``fmt`` (3 or 4) as Spark assigns them, ``default`` included."""
    return {DEFAULT_STORE: _DEFAULT_FAMILY_ID, **{n: _DEFAULT_FAMILY_ID + 1 + i for i, n in enumerate(FAMILIES[fmt])}}


def _internal(name: str) -> bool:
    """Whether Spark marks a join family internal: the counts (format 3), the event-time index (format 4)."""
    return name.endswith(("-keyToNumValues", "-tsWithKey"))


def join_families(fmt: str, key_schema: StructType, value_schema: StructType) -> list[ColumnFamilySchema]:
    """The column families of a join in format ``fmt`` whose join key is ``key_schema`` and whose buffered rows
    (``matched`` last) are ``value_schema``, as Spark's schema v3 file lists them (sorted by name)."""
    with_index = StructType([*key_schema.fields, INDEX_FIELD])
    with_time = StructType([*key_schema.fields, StructField(EVENT_TIME_FIELD, LONG, True)])
    spec = {
        "keyToNumValues": (key_schema, COUNT_VALUE, NO_PREFIX),
        "keyWithIndexToValue": (with_index, value_schema, NO_PREFIX),
        "keyWithTsToValues": (with_time, value_schema, TIMESTAMP_POSTFIX),
        "tsWithKey": (with_time, DUMMY_VALUE, TIMESTAMP_PREFIX),
    }
    out = []
    for name in sorted(FAMILIES[fmt]):
        key, value, encoder = spec[name.partition("-")[2]]
        out.append(ColumnFamilySchema(name, key, value, {"keyStateEncoderType": encoder}, None))
    return out


def event_time_column(value_schema: StructType, where: str) -> int:
    """The one column of a join side's rows that carries the watermark: format 4 keys each row by its value."""
    marked = [i for i, f in enumerate(value_schema.fields) if WATERMARK_METADATA in (f.metadata or {})]
    if len(marked) != 1:
        raise UnsupportedConfChangeError(
            f"{where}: {CONF_JOIN_FORMAT}=4 keys each buffered row by its event time, the one input column that "
            f"carries a watermark ({WATERMARK_METADATA}); the rows have {len(marked)} such columns",
            conf=CONF_JOIN_FORMAT,
            path=where,
        )
    kind = value_schema.fields[marked[0]].data_type.kind
    if kind not in ("timestamp", "timestamp_ntz", "struct"):
        raise UnsupportedConfChangeError(
            f"{where}: the event-time column {value_schema.fields[marked[0]].name} is a {kind}, not a timestamp or "
            "a window",
            conf=CONF_JOIN_FORMAT,
            path=where,
        )
    return marked[0]


def event_times(values: RowBuffer, value_schema: StructType, column: int) -> np.ndarray:
    """Each row's event time in microseconds as Spark's format-4 code reads it: the column's value (a window's
    end), 0 for a null."""
    decoded = decode_rows(values, value_schema).field(column)
    if pa.types.is_struct(decoded.type):
        decoded = decoded.field(1)
    return np.asarray(decoded.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)


# --- one side's rows, out of each layout ------------------------------------------------------------------


class SideRows:
    """One join side's buffered rows in one partition: each row's join key and value (plain UnsafeRows, the
    value with ``matched`` last) and, for rows read from format 4, their event time."""

    def __init__(self, keys: RowBuffer, values: RowBuffer, times: np.ndarray | None = None) -> None:
        self.keys = keys
        self.values = values
        self.times = times


def _key_groups(keys: RowBuffer, extra: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by their key's bytes (and ``extra``, a long per row): each row's group (0..g-1, in order of
    first appearance) and the first row of each group."""
    n = len(keys.starts)
    tail = 0 if extra is None else TIMESTAMP_BYTES
    # each row's key bytes (and the long's 8 bytes after them: same lengths, so no two pairs run together) as one
    # binary value, numbered by Arrow's hash table in order of first appearance
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(keys.lengths + tail, out=offsets[1:])
    data = np.zeros(int(offsets[-1]) + PAD, dtype=np.uint8)
    copy_spans(data, offsets[:-1], keys.buf, keys.starts, keys.lengths)
    if extra is not None:
        longs = np.ascontiguousarray(extra, dtype="<i8").view(np.uint8)
        copy_spans(data, offsets[1:] - tail, longs, np.arange(n, dtype=np.int64) * tail, np.full(n, tail))
    large = offsets[-1] >= 2**31
    binary = pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(),
        n,
        [None, pa.py_buffer(offsets if large else offsets.astype(np.int32)), pa.py_buffer(data)],
    )
    groups = np.asarray(binary.dictionary_encode().indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    # Arrow numbers values in order of first appearance: a group starts where its number is above every number
    # before it, and the numbers met so are 0, 1, 2, ... covering every group
    first = np.flatnonzero(groups > np.maximum.accumulate(np.concatenate([[-1], groups[:-1]])))
    if np.array_equal(groups[first], np.arange(len(first))) and len(first) == (int(groups.max()) + 1 if n else 0):
        return groups, first
    # numbered in another order: renumbered by each group's first row
    numbers, starts = np.unique(groups, return_index=True)
    order = np.argsort(starts)
    rank = np.empty(int(numbers[-1]) + 1, dtype=np.int64)
    rank[numbers[order]] = np.arange(len(order))
    return rank[groups], starts[order]


def from_separate_side(
    counts: RowBuffer, keys: RowBuffer, values: RowBuffer, key_schema: StructType, where: str
) -> SideRows:
    """A side of formats 1-3 (``keyToNumValues`` keys and counts are ``counts``; ``keyWithIndexToValue``'s keys
    and values as plain UnsafeRows): its rows, the index dropped from each key."""
    width = len(key_schema.fields)
    with_index = StructType([*key_schema.fields, INDEX_FIELD])
    total = (
        int(decode_rows(counts, COUNT_VALUE).field(0).fill_null(0).to_numpy(zero_copy_only=False).sum())
        if len(counts.starts)
        else 0
    )
    if total != len(keys.starts):
        raise RewriteFailedError(
            f"{where}: the counts of keyToNumValues add up to {total} rows, keyWithIndexToValue holds "
            f"{len(keys.starts)}; the two stores disagree",
            path=where,
        )
    return SideRows(splice_rows([(keys, with_index, 0, width)], keys.source) if len(keys.starts) else keys, values)


def from_v4_side(keys: RowBuffer, values: RowBuffer, merge_operator_version: int, row_checksum: bool) -> SideRows:
    """A side of format 4 (``keyWithTsToValues``'s keys and values, column family id stripped): its rows, one per
    list element, with the event time from the key."""
    # a list's elements are found by their lengths, one list at a time (as the readers split them)
    starts, lengths, owners = [], [], []
    for i, (s, n) in enumerate(zip(values.starts.tolist(), values.lengths.tolist(), strict=True)):
        for at, size in split_multi_value(
            bytes(values.buf[s : s + n]), merge_operator_version, row_checksum, values.source
        ):
            starts.append(s + at + 1)  # past the element's version byte
            lengths.append(size - 1)
            owners.append(i)
    owner = np.asarray(owners, dtype=np.int64)
    rows = RowBuffer.wrap(
        values.buf, values.size, np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64), values.source
    )
    # the key: version byte, the join key's UnsafeRow, the event time (big-endian, sign bit flipped)
    stamp_at = keys.starts + keys.lengths - TIMESTAMP_BYTES
    raw = np.ascontiguousarray(keys.buf[stamp_at[:, None] + np.arange(TIMESTAMP_BYTES, dtype=np.int64)])
    times = (raw.view(">u8").reshape(-1).astype("<u8") ^ np.uint64(1 << 63)).view("<i8")
    join_keys = RowBuffer.wrap(keys.buf, keys.size, keys.starts + 1, keys.lengths - 1 - TIMESTAMP_BYTES, keys.source)
    return SideRows(join_keys.take(owner), rows, times[owner])


# --- one side's rows, into each layout ---------------------------------------------------------------------


def _family_keys(rows: RowBuffer, cf_id: int, before: int, after: int, source: str) -> RowBuffer:
    """``rows`` behind a column family id, as Spark's virtual column families key them, with ``before`` zero bytes
    between the two (the version byte, a timestamp to fill in) and ``after`` zero bytes after the row (a timestamp
    to fill in): one copy."""
    out = pack_rows([(VIRTUAL_CF_PREFIX_BYTES + before, rows), (after, None)], source)
    out.buf[out.starts[:, None] + np.arange(VIRTUAL_CF_PREFIX_BYTES, dtype=np.int64)] = np.frombuffer(
        int(cf_id).to_bytes(VIRTUAL_CF_PREFIX_BYTES, "little", signed=True), dtype=np.uint8
    )
    return out


def _long_rows(numbers: np.ndarray, source: str) -> RowBuffer:
    """UnsafeRows of one non-null long each."""
    n = len(numbers)
    words = np.zeros((n, 2), dtype="<i8")
    words[:, 1] = numbers
    return RowBuffer.wrap(
        np.concatenate([words.view(np.uint8).reshape(-1), np.zeros(64, dtype=np.uint8)]),
        16 * n,
        np.arange(n, dtype=np.int64) * 16,
        np.full(n, 16, dtype=np.int64),
        source,
    )


def _ts_bytes(times: np.ndarray) -> np.ndarray:
    return (
        np.ascontiguousarray((times.astype(np.int64).view("<u8") ^ np.uint64(1 << 63)).astype(">u8"))
        .view(np.uint8)
        .reshape(-1, TIMESTAMP_BYTES)
    )


def indexed_side(
    side: SideRows, key_schema: StructType, source: str
) -> tuple[RowBuffer, RowBuffer, RowBuffer, RowBuffer]:
    """A side's rows as the two stores of formats 1-3 hold them, plain UnsafeRows: ``keyToNumValues``'s keys and
    counts (each join key once, in order of first appearance) and ``keyWithIndexToValue``'s keys (join key, index
    0..n-1 in the order given) and values."""
    n = len(side.keys.starts)
    if not n:
        empty = RowBuffer(b"", np.zeros(0, np.int64), np.zeros(0, np.int64), source)
        return empty, empty, empty, empty
    groups, first = _key_groups(side.keys)
    counts = np.bincount(groups)
    order = np.argsort(groups, kind="stable")
    index = np.empty(n, dtype=np.int64)
    index[order] = np.arange(n) - (np.cumsum(counts) - counts)[groups[order]]
    width = len(key_schema.fields)
    indexed = splice_rows(
        [(side.keys, key_schema, 0, width), (_long_rows(index, source), StructType([INDEX_FIELD]), 0, 1)], source
    )
    return side.keys.take(first), _long_rows(counts, source), indexed, side.values


def to_v3_side(
    side: SideRows, key_schema: StructType, ids: dict[str, int], side_name: str, source: str
) -> tuple[list[RowBuffer], list[RowBuffer]]:
    """A side's rows as format 3's two families (keys and values RocksDB-encoded, family ids first), family by
    family: each join key's count, and its rows at indices 0..n-1 in the order given."""
    counts_name, rows_name = (f"{side_name}-keyToNumValues", f"{side_name}-keyWithIndexToValue")
    if not len(side.keys.starts):
        return [], []
    count_keys, counts, indexed, values = indexed_side(side, key_schema, source)
    keys = [
        _family_keys(count_keys, ids[counts_name], 1, 0, source),
        _family_keys(indexed, ids[rows_name], 1, 0, source),
    ]
    return keys, [pack_rows([(1, counts)], source), pack_rows([(1, values)], source)]


def to_v4_side(
    side: SideRows, ids: dict[str, int], side_name: str, delimiter: bytes, source: str
) -> tuple[list[RowBuffer], list[RowBuffer]]:
    """A side's rows as format 4's two families, family by family: per (join key, event time) the list of its rows
    in the order given, and the event-time index's list of one placeholder per row."""
    rows_name, index_name = (f"{side_name}-keyWithTsToValues", f"{side_name}-tsWithKey")
    n = len(side.keys.starts)
    if not n:
        return [], []
    assert side.times is not None
    groups, first = _key_groups(side.keys, side.times)
    stamps = _ts_bytes(side.times[first])
    group_keys = side.keys.take(first)
    stamp = np.arange(TIMESTAMP_BYTES, dtype=np.int64)
    # family id, version byte, join key, event time
    postfix = _family_keys(group_keys, ids[rows_name], 1, TIMESTAMP_BYTES, source)
    postfix.buf[(postfix.starts + postfix.lengths - TIMESTAMP_BYTES)[:, None] + stamp] = stamps
    # family id, event time, version byte, join key
    prefix = _family_keys(group_keys, ids[index_name], TIMESTAMP_BYTES + 1, 0, source)
    prefix.buf[(prefix.starts + VIRTUAL_CF_PREFIX_BYTES)[:, None] + stamp] = stamps
    dummy = RowBuffer(bytes(1) + _NULL_ROW, np.zeros(n, np.int64), np.full(n, 1 + len(_NULL_ROW), np.int64), source)
    values = [
        encode_multi_values(side.values, groups, delimiter, version_byte=True),
        encode_multi_values(dummy, groups, delimiter),
    ]
    return [postfix, prefix], values


# --- the source's layout ---------------------------------------------------------------------------------


def _store(sources: Sequence[StoreRows], name: str) -> StoreRows:
    return next(r for r in sources if r.plan.store_name == name)


def side_schemas(sources: Sequence[StoreRows], old: str, side: str, where: str) -> tuple[StructType, StructType]:
    """A side's join key and buffered rows (``matched`` last), as the schemas of the source (format ``old``: its
    four separate stores, or its one store of column families) declare them."""
    if old in FAMILIES:
        (source,) = sources
        assert isinstance(source, FamilyStoreRows)
        rows = source.families[f"{side}-keyWithIndexToValue" if old == "3" else f"{side}-keyWithTsToValues"]
        return StructType(list(rows.key_schema.fields[:-1])), rows.value_schema
    counts = _store(sources, f"{side}-keyToNumValues").plan
    values = _store(sources, f"{side}-keyWithIndexToValue").plan.value_schema
    if not values.fields or values.fields[-1].name != MATCHED_FIELD:
        raise UnsupportedConfChangeError(
            f"{where}: the {side} side's rows do not end with the {MATCHED_FIELD} flag of format 2",
            conf=CONF_JOIN_FORMAT,
            path=where,
        )
    return counts.key_schema, values


def load_sides(
    sources: Sequence[StoreRows],
    old: str,
    pid: int,
    schemas: dict[str, tuple[StructType, StructType]],
    where: str,
    sides: Sequence[str] = JOIN_SIDES,
) -> dict[str, SideRows]:
    """Each of ``sides``' rows in old partition ``pid``, out of the source's layout (format ``old``)."""
    if old not in FAMILIES:
        out = {}
        for side in sides:
            counts_store = _store(sources, f"{side}-keyToNumValues")
            rows_store = _store(sources, f"{side}-keyWithIndexToValue")
            _, counts = counts_store.convert(*counts_store.load(pid), to_rocksdb=False)
            keys, values = rows_store.convert(*rows_store.load(pid), to_rocksdb=False)
            at = f"{where}, {side} side, partition {pid}"
            out[side] = from_separate_side(counts, keys, values, schemas[side][0], at)
        return out
    (store,) = sources
    assert isinstance(store, FamilyStoreRows)
    keys, values = store.load(pid)
    ids = column_family_ids(keys) if len(keys.starts) else np.zeros(0, dtype=np.int16)
    conf = store.plan.store_conf

    def family(name: str) -> tuple[RowBuffer, RowBuffer]:
        index = np.flatnonzero(ids == store.mapping.get(name, -1))
        k, v = keys.take(index), values.take(index)
        # the family id off each key, and (format 3) the version byte off keys and values
        cut = VIRTUAL_CF_PREFIX_BYTES + (1 if old == "3" else 0)
        k = RowBuffer.wrap(k.buf, k.size, k.starts + cut, k.lengths - cut, k.source)
        if old == "3":
            v = RowBuffer.wrap(v.buf, v.size, v.starts + 1, v.lengths - 1, v.source)
        return k, v

    out = {}
    for side in sides:
        at = f"{where}, {side} side, partition {pid}"
        if old == "3":
            _, counts = family(f"{side}-keyToNumValues")
            k, v = family(f"{side}-keyWithIndexToValue")
            out[side] = from_separate_side(counts, k, v, schemas[side][0], at)
        else:
            k, v = family(f"{side}-keyWithTsToValues")
            out[side] = from_v4_side(k, v, conf.merge_operator_version, conf.row_checksum)
    return out


# --- the store a rewrite writes ------------------------------------------------------------------------------


class JoinFamilyRows(FamilyStoreRows):
    """A join's state written in format ``new`` (3 or 4): one store of column families per partition, its rows
    taken from the source's layout (``sources``: the four separate stores of formats 1-2, or the one store of
    formats 3-4) and each routed by its join key, as the rewrite routes a store of column families."""

    writes_schema = False

    def __init__(self, sources: Sequence[StoreRows], old: str, new: str, target: StateReadPlan) -> None:
        StoreRows.__init__(self, target)
        self.sources = list(sources)
        self.old, self.new = old, new
        self.where = f"operator {target.operator_id} of {target.checkpoint.location}"
        self.side_schemas = {side: side_schemas(self.sources, old, side, self.where) for side in JOIN_SIDES}
        key_schema = self.side_schemas[JOIN_SIDES[0]][0]
        self.new_families = {
            f.name: f
            for side in JOIN_SIDES
            for f in join_families(new, *self.side_schemas[side])
            if f.name.startswith(side + "-")
        }
        self.event_columns = (
            {side: event_time_column(self.side_schemas[side][1], f"{self.where}, {side} side") for side in JOIN_SIDES}
            if new == "4"
            else {}
        )
        # what FamilyStoreRows routes the new rows by: the new families, their ids, the join key in each key
        self.families = self.new_families
        self.variable_kinds = None
        self.ttl_variables: set[str] = set()
        self.paths = {name: family_partition_key(name, f, {}) for name, f in self.families.items()}
        self.specs = {name: KeyEncoderSpec.from_plan(f.key_encoder, 0) for name, f in self.families.items()}
        self.multi_value = {name for name in self.families if name in JOIN_V4_STORES}
        self.mapping = family_ids(new)
        self.names = {cf_id: name for name, cf_id in self.mapping.items()}
        self.key_schema = key_schema
        self.rocksdb = True  # load() gives the rows as the new store keeps them

    def zip_metadata(self) -> dict[str, object]:
        """The fields of the new snapshots' ``metadata`` beyond SSTs and key counts: the families as Spark
        creates them."""
        return {
            "columnFamilyMapping": dict(self.mapping),
            "columnFamilyTypeMap": {name: _internal(name) for name in self.mapping},
            "maxColumnFamilyId": max(self.mapping.values()),
        }

    def load(self, pid: int) -> tuple[RowBuffer, RowBuffer]:
        source = f"{self.where}, partition {pid}, in {CONF_JOIN_FORMAT}={self.new}"
        keys: list[RowBuffer] = []
        values: list[RowBuffer] = []
        sides = load_sides(self.sources, self.old, pid, self.side_schemas, self.where)
        conf = self.plan.store_conf
        for side in JOIN_SIDES:
            rows = sides[side]
            key_schema, value_schema = self.side_schemas[side]
            if self.new == "3":
                k, v = to_v3_side(rows, key_schema, self.mapping, side, source)
            else:
                if rows.times is None:
                    rows.times = event_times(rows.values, value_schema, self.event_columns[side])
                k, v = to_v4_side(rows, self.mapping, side, conf.merge_delimiter, source)
            keys.extend(k)
            values.extend(v)
        if not keys:
            empty = RowBuffer(b"", np.zeros(0, np.int64), np.zeros(0, np.int64), source)
            return empty, empty
        # every family of both sides in one copy
        return concat_rows(keys, source), concat_rows(values, source)

    def convert(self, keys: RowBuffer, values: RowBuffer, to_rocksdb: bool) -> tuple[RowBuffer, RowBuffer]:
        return keys, values

    def state_metadata(self, batch: int, num_partitions: int, qualified: Callable[[str], str]) -> dict[str, bytes]:
        """The operator's files beside its partitions, as Spark writes them when it starts the query in the new
        format: the schema v3 file of the families, and operator metadata v2 naming it (both of ``batch``)."""
        op = self.plan.operator_id
        schema_rel = f"state/{op}/_stateSchema/{DEFAULT_STORE}/{batch}_{uuid.uuid4()}"
        families = [self.new_families[name] for name in sorted(self.new_families)]
        doc = {
            "operatorInfo": {"operatorId": op, "operatorName": "symmetricHashJoin"},
            "stateStoreInfo": [
                {
                    "storeName": DEFAULT_STORE,
                    "numColsPrefixKey": 0,
                    "numPartitions": num_partitions,
                    "stateSchemaFilePaths": [qualified(schema_rel)],
                }
            ],
            "operatorPropertiesJson": json.dumps(JOIN_PROPERTIES, separators=(",", ":")),
        }
        return {
            schema_rel: write_schema_v3(families),
            f"state/{op}/_metadata/v2/{batch}": ("v2\n" + json.dumps(doc, separators=(",", ":"))).encode("utf-8"),
        }


def join_family_rows(sources: Sequence[StoreRows], old: str, new: str) -> JoinFamilyRows:
    """The store a join in format ``new`` (3 or 4) is written as, from the operator's ``sources``."""
    base = sources[0].plan
    target = replace(
        base,
        store_name=DEFAULT_STORE,
        provider_class=ROCKSDB_PROVIDER,
        key_encoder=None,
        num_cols_prefix_key=0,
        variable=None,
        join=None,
        value_long_slots=(),
    )
    return JoinFamilyRows(sources, old, new, target)


__all__ = [
    "FAMILIES",
    "JoinFamilyRows",
    "SideRows",
    "event_times",
    "family_ids",
    "indexed_side",
    "join_families",
    "join_family_rows",
    "load_sides",
    "side_schemas",
]
