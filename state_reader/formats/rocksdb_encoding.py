"""How the RocksDB provider encodes state rows into RocksDB keys and values.

Layout (``encodingFormat=unsaferow``; all lengths and ids little-endian)::

    encoded row   = 0x00 (encoding version) | UnsafeRow
    key           = [cf id: int16]  key body            cf id only in stores with
                                                        virtual column families
    key body, by key encoder spec:
      NoPrefix         encoded row of the key
      PrefixKeyScan(n) int32 L | encoded row of the first n key columns (L bytes)
                             | encoded row of the other key columns
      RangeKeyScan(o)  int32 L | encoded row of one binary field per ordering column (L bytes)
                             | encoded row of the other key columns, in key order
                               (absent when every key column is an ordering column)
                       Avro: int32 L | 0x00 | Avro record of two bytes fields per ordering
                             column, marker and value, each a union [null, bytes]
                             (L bytes, no schema id) | 0x00 | int16 schema id | Avro
                             record of the other key columns
      TimestampAsPrefix  int64 BE t | encoded row of the key columns but the last
      TimestampAsPostfix encoded row of the key columns but the last | int64 BE t
                         (join state format 4; the last key column is __event_time, a
                         long stored with its sign bit flipped so that bytes sort by time)
    ordering column   = marker (0x00 negative, 0x01 zero/positive, 0x02 null then zero
                        bytes) | value big-endian, defaultSize bytes; negative
                        float/double have all bits flipped
    single value  = encoded row of the value
    multi value   = element (delimiter element)*, element = int32 L | encoded row (L bytes)
    row checksum  (spark.sql.streaming.stateStore.rowChecksum.enabled), in every column
                  family: the CRC-32C of the key as stored (column family id included),
                  then of the L bytes the checksum frames
        single value   = int32 CRC-32C | int32 L | encoded value (L bytes)
        multi value element = int32 CRC-32C | int32 L | element as without checksums
                         (int32 L-4 | encoded row), elements joined by the delimiter
        changelog key of a delete = int32 CRC-32C | key
        changelog end key of a delete range = framed as a single value, the CRC-32C of
                      the range's first key then its end key
    merge         = existing value | delimiter | operand, where the delimiter is ','
                    for mergeOperatorVersion 1 (and every checkpoint that does not
                    record it) and nothing for version 2

The delimiter RocksDB itself inserts when rocksdict combines merge operands at
read time is always ',' (it cannot know Spark's), so multi values are split by
their lengths and a ',' between elements is accepted whatever the version.

Decoding is columnar: every key or value of a store is in one
:class:`~state_reader.unsaferow.RowBuffer`; the framing above only moves row start
offsets and lengths, so no row bytes are copied.

This module reads those bytes. The writer beside it, :mod:`state_reader.formats.rocksdb_encode`,
writes them byte for byte; the ordering columns and timestamps both share are in
:mod:`state_reader.formats.rocksdb_ordering`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from state_reader.errors import CorruptFileError, RowDecodeError, UnsupportedOptionError
from state_reader.formats.rocksdb_ordering import (
    AVRO_FIELD_BYTES,
    AVRO_PRESENT,
    SIGN_BIT,
    check_ordinals,
    ordering_column,
    ordering_values,
    ordering_widths,
    prefix_schema,
)
from state_reader.formats.spark_types import StructType
from state_reader.formats.unsaferow import RowBuffer, decode_rows
from state_reader.formats.unsaferow_encode import pack_rows, splice_rows

STATE_ENCODING_VERSION = 0
VIRTUAL_CF_PREFIX_BYTES = 2
CHECKSUM_BYTES = 4
LENGTH_BYTES = 4

# mergeOperatorVersion -> delimiter of RocksDB's StringAppendOperator as Spark configures it
MERGE_DELIMITERS = {1: b",", 2: b""}
DEFAULT_MERGE_OPERATOR_VERSION = 1

NO_PREFIX = "NoPrefixKeyStateEncoderSpec"
PREFIX_SCAN = "PrefixKeyScanStateEncoderSpec"
RANGE_SCAN = "RangeKeyScanStateEncoderSpec"
TIMESTAMP_PREFIX = "TimestampAsPrefixKeyStateEncoderSpec"
TIMESTAMP_POSTFIX = "TimestampAsPostfixKeyStateEncoderSpec"
TIMESTAMP_BYTES = 8


def merge_operator_version(conf_value: str | None) -> int:
    """The merge operator version a recorded conf names (unset: Spark's default); unknown ones are refused."""
    text = (conf_value or "").strip()
    if not text:
        return DEFAULT_MERGE_OPERATOR_VERSION
    if text.isdigit() and int(text) in MERGE_DELIMITERS:
        return int(text)
    raise UnsupportedOptionError(
        f"spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion={conf_value} is not known "
        f"(known: {', '.join(map(str, MERGE_DELIMITERS))})"
    )


def merge(existing: bytes | None, operand: bytes, delimiter: bytes) -> bytes:
    """The value after a merge record: the operand appended to what the key held."""
    return operand if existing is None else existing + delimiter + operand


def delete_record_key(key: bytes, row_checksum: bool) -> bytes:
    """The RocksDB key a changelog delete record removes (drops the row checksum, if any)."""
    return key[CHECKSUM_BYTES:] if row_checksum else key


def delete_range_end(end: bytes, row_checksum: bool, source: str) -> bytes:
    """The end key (excluded) of a changelog delete range record: with row checksums Spark frames it as
    it frames a single value (the CRC-32C of the range's first key and its end key, then the length)."""
    if not row_checksum:
        return end
    header = CHECKSUM_BYTES + LENGTH_BYTES
    length = int.from_bytes(end[CHECKSUM_BYTES:header], "little", signed=True) if len(end) >= header else None
    if length != len(end) - header:
        raise CorruptFileError(
            f"{source}: the end key of a delete range record ({len(end)} bytes) is not framed with its row "
            f"checksum (a 4-byte checksum, a 4-byte length, then that many bytes), which the store's row "
            "checksums call for",
            path=source,
        )
    return end[header:]


@dataclass(frozen=True)
class KeyEncoderSpec:
    """Which key encoder wrote a store's keys."""

    kind: str = NO_PREFIX
    num_prefix_cols: int = 0
    ordering_ordinals: tuple[int, ...] = ()

    @classmethod
    def from_plan(cls, spec: Mapping[str, Any] | None, num_cols_prefix_key: int) -> KeyEncoderSpec:
        """From a schema v3 encoder spec (JSON) if there is one, else operator metadata's numColsPrefixKey."""
        if spec:
            kind = str(spec.get("keyStateEncoderType", NO_PREFIX))
            if kind == NO_PREFIX:
                return cls()
            if kind == PREFIX_SCAN:
                return cls(PREFIX_SCAN, num_prefix_cols=int(spec.get("numColsPrefixKey", 0)))
            if kind == RANGE_SCAN:
                return cls(RANGE_SCAN, ordering_ordinals=tuple(int(o) for o in spec.get("orderingOrdinals", ())))
            if kind in (TIMESTAMP_PREFIX, TIMESTAMP_POSTFIX):
                return cls(kind)
            raise UnsupportedOptionError(f"RocksDB key encoder {kind} is not supported by state_reader yet")
        if num_cols_prefix_key > 0:
            return cls(PREFIX_SCAN, num_prefix_cols=num_cols_prefix_key)
        return cls()


# -- row spans ------------------------------------------------------------------


def with_spans(rows: RowBuffer, starts: np.ndarray, lengths: np.ndarray) -> RowBuffer:
    """The same bytes with other row spans (no copy)."""
    out = copy.copy(rows)
    out.starts = np.asarray(starts, dtype=np.int64)
    out.lengths = np.asarray(lengths, dtype=np.int64)
    return out


def binary_rows(rows: RowBuffer) -> pa.LargeBinaryArray:
    """The rows as one Arrow binary array (their bytes copied once, one after another): what Arrow's
    hash kernels take to match rows by their bytes."""
    from state_reader.formats import kernels

    n = len(rows.starts)
    gathered = kernels.gather_spans(rows.buf, rows.starts, rows.lengths, np.ones(n, dtype=bool))
    if gathered is not None:
        offsets, data, _ = gathered
    else:
        packed = pack_rows([(0, rows)], rows.source)
        offsets, data = np.append(packed.starts, packed.size), packed.buf[: packed.size]
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def changed_rows(
    before: tuple[RowBuffer, RowBuffer], after: tuple[RowBuffer, RowBuffer]
) -> tuple[np.ndarray, np.ndarray]:
    """Between two versions of a store (unique keys and their values, as stored): the rows of ``after``
    whose key is new or holds other bytes, and the rows of ``before`` whose key ``after`` has not, each
    in row order. Keys and values are compared as bytes, with a hash join: no Python object per row.
    (Two snapshots read from their SST files are compared entry by entry instead: ``read_sst_changes``.)"""
    import pyarrow.compute as pc  # here: the cheap commands that import this module never need it

    if not len(before[0].starts):
        return np.arange(len(after[0].starts), dtype=np.int64), np.zeros(0, dtype=np.int64)
    if not len(after[0].starts):
        return np.zeros(0, dtype=np.int64), np.arange(len(before[0].starts), dtype=np.int64)
    new = pa.table({"k": binary_rows(after[0]), "v": binary_rows(after[1])})
    old = pa.table({"k": binary_rows(before[0]), "w": binary_rows(before[1])})
    new = new.append_column("i", pa.array(np.arange(new.num_rows, dtype=np.int64)))
    old = old.append_column("j", pa.array(np.arange(old.num_rows, dtype=np.int64)))
    joined = new.join(old, "k", join_type="full outer", use_threads=False)
    i, j = joined.column("i"), joined.column("j")
    kept = pc.is_valid(i)
    differs = pc.or_kleene(pc.is_null(j), pc.not_equal(joined.column("v"), joined.column("w")))
    updated = i.filter(pc.and_(kept, differs)).to_numpy()
    deleted = j.filter(pc.invert(kept)).to_numpy()
    return np.sort(updated), np.sort(deleted)


def select(rows: RowBuffer, mask: np.ndarray) -> RowBuffer:
    """The rows where ``mask`` is true."""
    return with_spans(rows, rows.starts[mask], rows.lengths[mask])


def _int32(rows: RowBuffer, addr: np.ndarray) -> np.ndarray:
    """int32 LE at each address (addresses must leave 4 readable bytes)."""
    raw = rows.buf[addr[:, None] + np.arange(4, dtype=np.int64)]
    return np.ascontiguousarray(raw).view("<i4").reshape(-1).astype(np.int64)


def _fail(rows: RowBuffer, bad: np.ndarray, what: str) -> RowDecodeError:
    i = int(np.argmax(bad))
    return RowDecodeError(f"{rows.source}: row {i} ({int(rows.lengths[i])} bytes): {what}", path=rows.source)


def _require(rows: RowBuffer, bad: np.ndarray, what: str) -> None:
    if bad.any():
        raise _fail(rows, bad, what)


def _strip_version(rows: RowBuffer, what: str, valid: np.ndarray | None = None) -> RowBuffer:
    """Encoded rows -> their UnsafeRows, checking the encoding version byte (of valid rows only)."""
    checked = np.ones(len(rows.starts), dtype=bool) if valid is None else valid
    _require(rows, checked & (rows.lengths < 1), f"an encoded {what} needs at least its version byte")
    version = rows.buf[rows.starts]
    bad = checked & (version != STATE_ENCODING_VERSION)
    if bad.any():
        raise _fail(
            rows,
            bad,
            f"encoded {what} has encoding version {int(version[np.argmax(bad)])}, expected {STATE_ENCODING_VERSION}",
        )
    return with_spans(rows, np.where(checked, rows.starts + 1, 0), np.where(checked, rows.lengths - 1, 0))


def _length_prefixed(rows: RowBuffer, what: str) -> tuple[RowBuffer, RowBuffer]:
    """``int32 L | L bytes | rest`` -> (the L-byte parts, the rests)."""
    _require(rows, rows.lengths < LENGTH_BYTES, f"{what} is shorter than its int32 length")
    size = _int32(rows, rows.starts)
    _require(rows, (size < 0) | (LENGTH_BYTES + size > rows.lengths), f"{what} length does not fit in the key")
    head = with_spans(rows, rows.starts + LENGTH_BYTES, size)
    rest = with_spans(rows, rows.starts + LENGTH_BYTES + size, rows.lengths - LENGTH_BYTES - size)
    return head, rest


# -- column families ------------------------------------------------------------


def column_family_ids(keys: RowBuffer) -> np.ndarray:
    """The virtual column family id that starts each key (int16 LE)."""
    _require(keys, keys.lengths < VIRTUAL_CF_PREFIX_BYTES, "key is shorter than its column family id")
    raw = keys.buf[keys.starts[:, None] + np.arange(VIRTUAL_CF_PREFIX_BYTES, dtype=np.int64)]
    return np.ascontiguousarray(raw).view("<i2").reshape(-1)


def strip_column_family(keys: RowBuffer) -> RowBuffer:
    """Keys without their virtual column family id."""
    column_family_ids(keys)  # validates the lengths
    return with_spans(keys, keys.starts + VIRTUAL_CF_PREFIX_BYTES, keys.lengths - VIRTUAL_CF_PREFIX_BYTES)


# -- keys -----------------------------------------------------------------------


def _assemble(schema: StructType, children: list[pa.Array]) -> pa.StructArray:
    n = len(children[0]) if children else 0
    return pa.StructArray.from_buffers(schema.to_arrow(), n, [None], children=children)


def _children(arr: pa.StructArray) -> list[pa.Array]:
    return [arr.field(i) for i in range(arr.type.num_fields)]


def _decode_payload(
    rows: RowBuffer, schema: StructType, what: str, avro: bool, schema_id: bool = True, valid: np.ndarray | None = None
) -> pa.StructArray:
    """Version byte, then an UnsafeRow or (Avro encoding) an optional schema id and an Avro record."""
    stripped = _strip_version(rows, what, valid)
    if not avro:
        return decode_rows(stripped, schema, valid=valid)
    from state_reader.formats.avro_encoding import SCHEMA_ID_BYTES, decode_avro_rows

    skip = SCHEMA_ID_BYTES if schema_id else 0
    checked = np.ones(len(rows.starts), dtype=bool) if valid is None else valid
    _require(stripped, checked & (stripped.lengths < skip), f"an Avro {what} is shorter than its schema id")
    # a null row's span may be shorter than the skip: it is not read
    spans = with_spans(stripped, stripped.starts, np.where(checked, stripped.lengths, skip))
    return decode_avro_rows(spans, schema, rows.source, skip, valid)


def decode_keys(keys: RowBuffer, schema: StructType, spec: KeyEncoderSpec, avro: bool = False) -> pa.StructArray:
    """Decode encoded keys (column family id already stripped) into a StructArray of ``schema``."""
    if spec.kind == NO_PREFIX:
        return _decode_payload(keys, schema, "key", avro)
    fields = schema.fields
    if spec.kind == PREFIX_SCAN:
        n = spec.num_prefix_cols
        if not 0 < n <= len(fields):
            raise CorruptFileError(
                f"{keys.source}: prefix-scan encoder with {n} prefix columns does not fit a key of "
                f"{len(fields)} columns",
                path=keys.source,
            )
        head, rest = _length_prefixed(keys, "prefix-scan key")
        prefix = _decode_payload(head, StructType(fields[:n]), "key prefix", avro, schema_id=False)
        remaining = _decode_payload(rest, StructType(fields[n:]), "key remainder", avro)
        return _assemble(schema, _children(prefix) + _children(remaining))
    if spec.kind == RANGE_SCAN:
        return _decode_range_scan(keys, schema, spec.ordering_ordinals, avro)
    if spec.kind in (TIMESTAMP_PREFIX, TIMESTAMP_POSTFIX):
        return _decode_timestamp_key(keys, schema, spec.kind == TIMESTAMP_PREFIX, avro)
    raise UnsupportedOptionError(f"RocksDB key encoder {spec.kind} is not supported by state_reader yet")


def decode_key_prefixes(
    keys: RowBuffer, schema: StructType, spec: KeyEncoderSpec, avro: bool = False
) -> pa.StructArray:
    """The prefix columns alone (the first ``num_prefix_cols`` of ``schema``) of prefix-scan keys (column family
    id already stripped); what follows the prefix is not read, so a key may be its prefix alone."""
    fields = schema.fields
    n = spec.num_prefix_cols
    if spec.kind != PREFIX_SCAN or not 0 < n <= len(fields):
        raise CorruptFileError(
            f"{keys.source}: keys of the encoder {spec.kind} ({n} prefix columns) have no prefix of a key of "
            f"{len(fields)} columns",
            path=keys.source,
        )
    head, _ = _length_prefixed(keys, "prefix-scan key")
    return _decode_payload(head, StructType(fields[:n]), "key prefix", avro, schema_id=False)


def _decode_range_scan(
    keys: RowBuffer, schema: StructType, ordinals: tuple[int, ...], avro: bool = False
) -> pa.StructArray:
    fields = schema.fields
    check_ordinals(schema, ordinals, keys.source)
    head, rest = _length_prefixed(keys, "range-scan key")
    prefix = _strip_version(head, "range-scan prefix")
    if avro:
        decoded = _avro_ordering_columns(prefix, schema, ordinals)
    else:
        binaries = prefix_schema(len(ordinals))
        ordered = decode_rows(prefix, binaries)
        decoded = {
            o: ordering_column(ordered.field(i), fields[o].data_type, keys.source, fields[o].name)
            for i, o in enumerate(ordinals)
        }
    others = [i for i in range(len(fields)) if i not in decoded]
    if others:
        remaining = _decode_payload(rest, StructType([fields[i] for i in others]), "range-scan remainder", avro)
        decoded.update(zip(others, _children(remaining), strict=True))
    elif avro:
        from state_reader.formats.avro_encoding import SCHEMA_ID_BYTES

        # Spark writes the (empty) remainder record anyway: its version byte and schema id
        _require(
            rest,
            (rest.lengths != 0) & (rest.lengths != 1 + SCHEMA_ID_BYTES),
            "range-scan key has bytes after its ordering columns",
        )
    else:
        _require(rest, rest.lengths != 0, "range-scan key has bytes after its ordering columns")
    return _assemble(schema, [decoded[i] for i in range(len(fields))])


def _avro_ordering_columns(prefix: RowBuffer, schema: StructType, ordinals: tuple[int, ...]) -> dict[int, pa.Array]:
    """The ordering columns of Avro range-scan keys, from their prefix record (version byte stripped).

    Each ordering column is two record fields, ``<name>_marker`` and ``<name>_value``, both Avro
    ``bytes`` in a ``[null, bytes]`` union: ``02 02 marker 02 zigzag(width) value``. Spark writes
    both non-null always (a null column is marker 0x02 and ``width`` zero bytes), so every prefix
    of a family has the same length and the fields sit at fixed offsets.
    """
    source = prefix.source
    widths = ordering_widths(schema, ordinals, source)
    _require(
        prefix,
        prefix.lengths != sum(AVRO_FIELD_BYTES + w for w in widths),
        f"Avro range-scan prefix is not the {len(ordinals)} marker and value fields of its ordering columns",
    )
    out: dict[int, pa.Array] = {}
    at = 0
    for o, width in zip(ordinals, widths, strict=True):
        header = np.array([AVRO_PRESENT, 2, AVRO_PRESENT, 2 * width], dtype=np.uint8)  # zig-zag lengths 1, width
        raw = prefix.buf[prefix.starts[:, None] + at + np.arange(AVRO_FIELD_BYTES + width, dtype=np.int64)]
        _require(
            prefix,
            (raw[:, [0, 1, 3, 4]] != header).any(axis=1),
            f"Avro range-scan field of ordering column {schema.fields[o].name!r} is not a non-null "
            f"1-byte marker and {width}-byte value",
        )
        f = schema.fields[o]
        out[o] = ordering_values(raw[:, 2], raw[:, AVRO_FIELD_BYTES:], f.data_type, source, f.name)
        at += AVRO_FIELD_BYTES + width
    return out


def _decode_timestamp_key(keys: RowBuffer, schema: StructType, prefix: bool, avro: bool) -> pa.StructArray:
    fields = schema.fields
    if not fields or fields[-1].data_type.kind != "long":
        raise CorruptFileError(
            f"{keys.source}: a timestamp key encoder needs a long as the last key column, the key schema is "
            f"{schema.json()}",
            path=keys.source,
        )
    _require(keys, keys.lengths < TIMESTAMP_BYTES + 1, "timestamp-encoded key is shorter than its timestamp")
    at = keys.starts if prefix else keys.starts + keys.lengths - TIMESTAMP_BYTES
    raw = keys.buf[at[:, None] + np.arange(TIMESTAMP_BYTES, dtype=np.int64)]
    flipped = np.ascontiguousarray(raw).view(">u8").reshape(-1).astype("<u8")
    times = (flipped ^ SIGN_BIT).view("<i8")
    row = with_spans(keys, keys.starts + TIMESTAMP_BYTES if prefix else keys.starts, keys.lengths - TIMESTAMP_BYTES)
    others = _decode_payload(row, StructType(fields[:-1]), "key", avro)
    event_time = pa.Array.from_buffers(pa.int64(), len(times), [None, pa.py_buffer(times)])
    return _assemble(schema, [*_children(others), event_time])


# -- values ---------------------------------------------------------------------


def decode_values(
    values: RowBuffer, schema: StructType, row_checksum: bool, valid: np.ndarray | None = None, avro: bool = False
) -> pa.StructArray:
    """Decode single encoded values (optionally framed with a row checksum) into a StructArray.

    Rows where ``valid`` is False (the missing value of a delete) come back null unread.
    """
    checked = np.ones(len(values.starts), dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    if row_checksum:
        header = CHECKSUM_BYTES + LENGTH_BYTES
        _require(values, checked & (values.lengths < header), "value is shorter than its checksum and length")
        size = np.where(checked, _int32(values, values.starts + CHECKSUM_BYTES), 0)
        _require(
            values,
            checked & (size != values.lengths - header),
            "value length after the row checksum does not match the value",
        )
        values = with_spans(values, np.where(checked, values.starts + header, 0), size)
    return _decode_payload(values, schema, "value", avro, valid=checked)


# -- RocksDB keys and values as UnsafeRows (the other way: rocksdb_encode) ----------

# key encoders whose keys hold the whole key as UnsafeRows, so they convert to and from the
# HDFS-backed provider's plain UnsafeRow keys without decoding
CONVERTIBLE_KEY_ENCODERS = (NO_PREFIX, PREFIX_SCAN)


def require_convertible(spec: KeyEncoderSpec, source: str) -> None:
    """Refuse keys of a key encoder that does not keep the whole key as UnsafeRows (both ways)."""
    if spec.kind not in CONVERTIBLE_KEY_ENCODERS:
        raise UnsupportedOptionError(
            f"{source}: keys of the RocksDB key encoder {spec.kind} cannot be converted "
            "to or from the HDFS-backed provider (Spark runs them on RocksDB only)",
            path=source,
        )


def unsafe_keys(keys: RowBuffer, schema: StructType, spec: KeyEncoderSpec) -> RowBuffer:
    """RocksDB keys written with ``spec`` (column family id stripped) as UnsafeRows of ``schema``."""
    require_convertible(spec, keys.source)
    if spec.kind == NO_PREFIX:
        return _strip_version(keys, "key")
    n, fields = spec.num_prefix_cols, schema.fields
    head, rest = _length_prefixed(keys, "prefix-scan key")
    return splice_rows(
        [
            (_strip_version(head, "key prefix"), StructType(fields[:n]), 0, n),
            (_strip_version(rest, "key remainder"), StructType(fields[n:]), 0, len(fields) - n),
        ],
        keys.source,
    )


def unsafe_values(values: RowBuffer) -> RowBuffer:
    """Single RocksDB values (no row checksum) as UnsafeRows."""
    return _strip_version(values, "value")
