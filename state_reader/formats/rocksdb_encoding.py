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
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from state_reader.errors import CorruptFileError, RowDecodeError, UnsupportedOptionError
from state_reader.formats.spark_types import DataType, StructField, StructType
from state_reader.formats.unsaferow import PAD, RowBuffer, decode_rows
from state_reader.formats.unsaferow_encode import encode_rows, pack_rows, splice_rows

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
_SIGN_BIT = np.uint64(1 << 63)

# Range-scan ordering columns: kind -> (big-endian numpy dtype of the value, is floating point)
_ORDERING_TYPES = {
    "byte": (">i1", False),
    "short": (">i2", False),
    "integer": (">i4", False),
    "long": (">i8", False),
    "date": (">i4", False),
    "timestamp": (">i8", False),
    "timestamp_ntz": (">i8", False),
    "float": (">u4", True),
    "double": (">u8", True),
}
_NEGATIVE, _POSITIVE, _NULL = 0x00, 0x01, 0x02
# an Avro range-scan ordering column: union branch, zig-zag length 1, marker; union branch, zig-zag length, value
_AVRO_PRESENT = 0x02
_AVRO_FIELD_BYTES = 5
_BINARY = DataType("binary", json_name="binary")


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


def _check_ordinals(schema: StructType, ordinals: tuple[int, ...], source: str) -> None:
    n = len(schema.fields)
    if not ordinals or any(not 0 <= o < n for o in ordinals) or len(set(ordinals)) != len(ordinals):
        raise CorruptFileError(
            f"{source}: range-scan ordering ordinals {list(ordinals)} do not fit a key of {n} columns", path=source
        )


def _decode_range_scan(
    keys: RowBuffer, schema: StructType, ordinals: tuple[int, ...], avro: bool = False
) -> pa.StructArray:
    fields = schema.fields
    _check_ordinals(schema, ordinals, keys.source)
    head, rest = _length_prefixed(keys, "range-scan key")
    prefix = _strip_version(head, "range-scan prefix")
    if avro:
        decoded = _avro_ordering_columns(prefix, schema, ordinals)
    else:
        binaries = StructType([StructField(f"_{i}", _BINARY, False) for i in range(len(ordinals))])
        ordered = decode_rows(prefix, binaries)
        decoded = {
            o: _ordering_column(ordered.field(i), fields[o].data_type, keys.source, fields[o].name)
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


def _ordering_widths(schema: StructType, ordinals: tuple[int, ...], source: str) -> list[int]:
    """Bytes of each ordering column's big-endian value (Spark's ``defaultSize`` of its type)."""
    widths = []
    for o in ordinals:
        f = schema.fields[o]
        if f.data_type.kind not in _ORDERING_TYPES:
            raise UnsupportedOptionError(
                f"{source}: range-scan ordering column {f.name!r} of type {f.data_type.json_name} cannot be decoded"
            )
        widths.append(np.dtype(_ORDERING_TYPES[f.data_type.kind][0]).itemsize)
    return widths


def _avro_ordering_columns(prefix: RowBuffer, schema: StructType, ordinals: tuple[int, ...]) -> dict[int, pa.Array]:
    """The ordering columns of Avro range-scan keys, from their prefix record (version byte stripped).

    Each ordering column is two record fields, ``<name>_marker`` and ``<name>_value``, both Avro
    ``bytes`` in a ``[null, bytes]`` union: ``02 02 marker 02 zigzag(width) value``. Spark writes
    both non-null always (a null column is marker 0x02 and ``width`` zero bytes), so every prefix
    of a family has the same length and the fields sit at fixed offsets.
    """
    source = prefix.source
    widths = _ordering_widths(schema, ordinals, source)
    _require(
        prefix,
        prefix.lengths != sum(_AVRO_FIELD_BYTES + w for w in widths),
        f"Avro range-scan prefix is not the {len(ordinals)} marker and value fields of its ordering columns",
    )
    out: dict[int, pa.Array] = {}
    at = 0
    for o, width in zip(ordinals, widths, strict=True):
        header = np.array([_AVRO_PRESENT, 2, _AVRO_PRESENT, 2 * width], dtype=np.uint8)  # zig-zag lengths 1, width
        raw = prefix.buf[prefix.starts[:, None] + at + np.arange(_AVRO_FIELD_BYTES + width, dtype=np.int64)]
        _require(
            prefix,
            (raw[:, [0, 1, 3, 4]] != header).any(axis=1),
            f"Avro range-scan field of ordering column {schema.fields[o].name!r} is not a non-null "
            f"1-byte marker and {width}-byte value",
        )
        f = schema.fields[o]
        out[o] = _ordering_values(raw[:, 2], raw[:, _AVRO_FIELD_BYTES:], f.data_type, source, f.name)
        at += _AVRO_FIELD_BYTES + width
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
    times = (flipped ^ _SIGN_BIT).view("<i8")
    row = with_spans(keys, keys.starts + TIMESTAMP_BYTES if prefix else keys.starts, keys.lengths - TIMESTAMP_BYTES)
    others = _decode_payload(row, StructType(fields[:-1]), "key", avro)
    event_time = pa.Array.from_buffers(pa.int64(), len(times), [None, pa.py_buffer(times)])
    return _assemble(schema, [*_children(others), event_time])


def encode_timestamp_keys(keys: pa.StructArray, schema: StructType, prefix: bool, source: str = "") -> RowBuffer:
    """Keys of ``schema`` as Spark's timestamp key encoders write them (no column family id, UnsafeRow
    encoding): the inverse of :func:`decode_keys` for :data:`TIMESTAMP_PREFIX` (``prefix``) and
    :data:`TIMESTAMP_POSTFIX`, byte for byte. The last key column is the time."""
    fields = schema.fields
    if not fields or fields[-1].data_type.kind != "long":
        raise UnsupportedOptionError(f"{source}: a timestamp key encoder needs a long as the last key column")
    n = len(keys)
    others = StructType(fields[:-1])
    row = encode_rows(
        pa.StructArray.from_arrays([keys.field(i) for i in range(len(fields) - 1)], fields=list(others.to_arrow())),
        others,
        source,
        normalize_floats=True,
    )
    times = np.asarray(keys.field(len(fields) - 1).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    stamp = np.ascontiguousarray((times.view("<u8") ^ _SIGN_BIT).astype(">u8")).view(np.uint8)
    stamp = stamp.reshape(n, TIMESTAMP_BYTES)  # no rows too
    if prefix:
        out = pack_rows([(TIMESTAMP_BYTES + 1, row)], source)
        at = out.starts
    else:
        out = pack_rows([(1, row), (TIMESTAMP_BYTES, None)], source)
        at = out.starts + out.lengths - TIMESTAMP_BYTES
    out.buf[at[:, None] + np.arange(TIMESTAMP_BYTES, dtype=np.int64)] = stamp
    return out


def _ordering_column(arr: pa.BinaryArray, dt: DataType, source: str, name: str) -> pa.Array:
    """Range-scan ``marker | big-endian value`` binaries -> values of type ``dt``."""
    if dt.kind not in _ORDERING_TYPES:
        raise UnsupportedOptionError(
            f"{source}: range-scan ordering column {name!r} of type {dt.json_name} cannot be decoded"
        )
    width = np.dtype(_ORDERING_TYPES[dt.kind][0]).itemsize
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + n + 1].astype(np.int64)
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if n else np.zeros(0, np.uint8)
    sizes = np.diff(offsets)
    if (sizes != width + 1).any():
        i = int(np.argmax(sizes != width + 1))
        raise RowDecodeError(
            f"{source}: range-scan column {name!r} of row {i} has {int(sizes[i])} bytes, expected {width + 1}",
            path=source,
        )
    start = offsets[:-1]
    marker = data[start] if n else np.zeros(0, np.uint8)
    return _ordering_values(marker, data[start[:, None] + 1 + np.arange(width)], dt, source, name)


def _ordering_values(marker: np.ndarray, value_bytes: np.ndarray, dt: DataType, source: str, name: str) -> pa.Array:
    """Range-scan markers and big-endian value bytes (one row of ``width`` bytes each) -> values of ``dt``."""
    big_endian, floating = _ORDERING_TYPES[dt.kind]
    width = np.dtype(big_endian).itemsize
    n = len(marker)
    if (marker > _NULL).any():
        raise RowDecodeError(f"{source}: range-scan column {name!r} has an unknown marker byte", path=source)
    raw = np.ascontiguousarray(value_bytes, dtype=np.uint8).reshape(n, width).view(big_endian).reshape(-1)
    if floating:  # negative values were stored with every bit flipped
        raw = np.where(marker == _NEGATIVE, ~raw, raw)
        values = raw.astype(raw.dtype.newbyteorder("<")).view("<f4" if width == 4 else "<f8")
    else:
        values = raw.astype(raw.dtype.newbyteorder("<"))
    valid = marker != _NULL
    nulls = int(n - np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        dt.to_arrow(), n, [validity, pa.py_buffer(np.ascontiguousarray(values))], null_count=nulls
    )


def _ordering_bytes(arr: pa.Array, dt: DataType, source: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Values of an ordering column -> (marker per row, big-endian value bytes per row): the
    inverse of :func:`_ordering_values` (a null is marker 0x02 and zero bytes)."""
    if dt.kind not in _ORDERING_TYPES:
        raise UnsupportedOptionError(
            f"{source}: range-scan ordering column {name!r} of type {dt.json_name} cannot be encoded"
        )
    big_endian, floating = _ORDERING_TYPES[dt.kind]
    width = np.dtype(big_endian).itemsize
    arr = arr.cast(dt.to_arrow()) if arr.type != dt.to_arrow() else arr
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    little = np.dtype(big_endian).newbyteorder("<")
    bits = (
        np.frombuffer(arr.buffers()[1], dtype=little)[arr.offset : arr.offset + len(arr)]
        if len(arr)
        else np.zeros(0, little)
    )
    bits = np.where(valid, bits, 0).astype(little)
    if floating:  # the sign bit decides, so -0.0 and negative NaNs are negative; their bits are flipped
        negative = (bits >> (8 * width - 1)).astype(bool)
        bits = np.where(negative, ~bits, bits)
    else:
        negative = bits.view(little.str.replace("u", "i")) < 0
    marker = np.where(valid, np.where(negative, _NEGATIVE, _POSITIVE), _NULL).astype(np.uint8)
    value = np.ascontiguousarray(bits.astype(big_endian)).view(np.uint8).reshape(-1, width)
    return marker, value


def encode_range_scan_keys(
    keys: pa.StructArray,
    schema: StructType,
    ordinals: tuple[int, ...],
    avro: bool = False,
    schema_id: int = 0,
    source: str = "",
) -> RowBuffer:
    """Keys of ``schema`` as Spark's range-scan key encoder writes them (no column family id):
    the inverse of :func:`decode_keys` for :data:`RANGE_SCAN`, UnsafeRow or Avro (whose
    remainder carries ``schema_id``), byte for byte."""
    fields = schema.fields
    _check_ordinals(schema, ordinals, source)
    n = len(keys)
    columns = [_ordering_bytes(keys.field(o), fields[o].data_type, source, fields[o].name) for o in ordinals]
    if avro:
        parts = []
        for marker, value in columns:
            framing = np.array([[_AVRO_PRESENT, 2], [_AVRO_PRESENT, 2 * value.shape[1]]], dtype=np.uint8)
            parts += [np.tile(framing[0], (n, 1)), marker[:, None], np.tile(framing[1], (n, 1)), value]
        prefix = _fixed_rows(np.hstack(parts) if n else np.zeros((0, 0), np.uint8), source)
    else:
        binaries = StructType([StructField(f"_{i}", _BINARY, False) for i in range(len(ordinals))])
        packed = [
            pa.Array.from_buffers(
                pa.binary(),
                n,
                [
                    None,
                    pa.py_buffer((np.arange(n + 1) * (value.shape[1] + 1)).astype(np.int32)),
                    pa.py_buffer(np.ascontiguousarray(np.hstack([marker[:, None], value]))),
                ],
            )
            for marker, value in columns
        ]
        prefix = encode_rows(pa.StructArray.from_arrays(packed, names=binaries.names), binaries, source)
    others = [i for i in range(len(fields)) if i not in ordinals]
    rest_schema = StructType([fields[i] for i in others])
    rest_values = (
        pa.StructArray.from_arrays([keys.field(i) for i in others], fields=list(rest_schema.to_arrow()))
        if others
        else None
    )
    header = 1
    rest: RowBuffer | None
    if avro:
        from state_reader.formats.avro_encoding import SCHEMA_ID_BYTES, encode_avro_rows

        header += SCHEMA_ID_BYTES
        # Spark writes the remainder record even when it has no fields
        rest = (
            encode_avro_rows(rest_values, rest_schema, b"", source)
            if others
            else RowBuffer.from_rows([b""] * n, source)
        )
    else:
        rest = encode_rows(rest_values, rest_schema, source) if others else None
    out = pack_rows([(LENGTH_BYTES + 1, prefix), *([(header, rest)] if rest is not None else [])], source)
    length = (prefix.lengths + 1).astype("<i4").view(np.uint8).reshape(-1, LENGTH_BYTES)
    out.buf[out.starts[:, None] + np.arange(LENGTH_BYTES, dtype=np.int64)] = length
    if avro and schema_id:
        at = out.starts + LENGTH_BYTES + 1 + prefix.lengths + 1
        out.buf[at[:, None] + np.arange(2, dtype=np.int64)] = (
            np.full(n, schema_id, dtype="<i2").view(np.uint8).reshape(-1, 2)
        )
    return out


def _fixed_rows(matrix: np.ndarray, source: str) -> RowBuffer:
    """One row per line of a byte matrix."""
    n, width = matrix.shape
    buf = np.zeros(n * width + PAD, dtype=np.uint8)
    buf[: n * width] = matrix.reshape(-1)
    return RowBuffer.wrap(buf, n * width, np.arange(n, dtype=np.int64) * width, np.full(n, width, np.int64), source)


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


# -- writing: UnsafeRows <-> RocksDB keys and values --------------------------------

# key encoders whose keys hold the whole key as UnsafeRows, so they convert to and from the
# HDFS-backed provider's plain UnsafeRow keys without decoding
CONVERTIBLE_KEY_ENCODERS = (NO_PREFIX, PREFIX_SCAN)


def _require_convertible(spec: KeyEncoderSpec, source: str) -> None:
    if spec.kind not in CONVERTIBLE_KEY_ENCODERS:
        raise UnsupportedOptionError(
            f"{source}: keys of the RocksDB key encoder {spec.kind} cannot be converted "
            "to or from the HDFS-backed provider (Spark runs them on RocksDB only)",
            path=source,
        )


def encode_keys(rows: RowBuffer, schema: StructType, spec: KeyEncoderSpec) -> RowBuffer:
    """UnsafeRow keys of ``schema`` as RocksDB writes them with ``spec`` (no column families)."""
    _require_convertible(spec, rows.source)
    if spec.kind == NO_PREFIX:
        return pack_rows([(1, rows)], rows.source)
    n, fields = spec.num_prefix_cols, schema.fields
    head = splice_rows([(rows, schema, 0, n)], rows.source)
    rest = splice_rows([(rows, schema, n, len(fields))], rows.source)
    out = pack_rows([(LENGTH_BYTES + 1, head), (1, rest)], rows.source)
    length = (head.lengths + 1).astype("<i4").view(np.uint8).reshape(-1, LENGTH_BYTES)
    out.buf[out.starts[:, None] + np.arange(LENGTH_BYTES, dtype=np.int64)] = length
    return out


def unsafe_keys(keys: RowBuffer, schema: StructType, spec: KeyEncoderSpec) -> RowBuffer:
    """RocksDB keys written with ``spec`` (column family id stripped) as UnsafeRows of ``schema``."""
    _require_convertible(spec, keys.source)
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


def encode_values(rows: RowBuffer) -> RowBuffer:
    """UnsafeRow values as RocksDB writes single values (no row checksum)."""
    return pack_rows([(1, rows)], rows.source)


def with_row_checksums(keys: RowBuffer, values: RowBuffer, with_length: bool) -> RowBuffer:
    """``values`` framed as Spark stores them with row checksums on: int32 LE CRC-32C of row i's key
    bytes then value bytes (both as stored), then, in RocksDB (``with_length``), int32 LE the value's
    length, then the value. The HDFS-backed provider writes the checksum alone before the value."""
    from state_reader.formats import kernels
    from state_reader.io.integrity import crc32c

    header = CHECKSUM_BYTES + (LENGTH_BYTES if with_length else 0)
    out = pack_rows([(header, values)], values.source)
    kbuf, vbuf = keys.buf, values.buf
    if kernels.numba_wanted(len(values.starts)):
        sums = kernels.crc32c_pairs(kbuf, keys.starts, keys.lengths, vbuf, values.starts, values.lengths)
    else:  # few rows, numba not loaded (or not installed): not worth loading it
        sums = np.fromiter(
            (
                crc32c(bytes(kbuf[k0 : k0 + kn]) + bytes(vbuf[v0 : v0 + vn]))
                for k0, kn, v0, vn in zip(keys.starts, keys.lengths, values.starts, values.lengths, strict=True)
            ),
            dtype=np.uint32,
            count=len(values.starts),
        )
    fields = [sums.astype("<u4")] + ([values.lengths.astype("<i4")] if with_length else [])
    for i, field in enumerate(fields):
        at = out.starts[:, None] + i * 4 + np.arange(4, dtype=np.int64)
        out.buf[at] = field.view(np.uint8).reshape(-1, 4)
    return out


def unsafe_values(values: RowBuffer) -> RowBuffer:
    """Single RocksDB values (no row checksum) as UnsafeRows."""
    return _strip_version(values, "value")
