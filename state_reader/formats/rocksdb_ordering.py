"""Bytes that sort as their values: the ordering columns of Spark's range-scan key encoder, and the time
of its timestamp key encoders, both ways.

An ordering column is a marker byte (0x00 negative, 0x01 zero or positive, 0x02 null, then zero bytes)
and the value big-endian in its type's ``defaultSize`` bytes, a negative float or double with every bit
flipped. With UnsafeRow encoding a key's ordering columns are the binary fields of one row
(:func:`prefix_schema`); with Avro encoding each is two ``[null, bytes]`` fields, marker and value
(:data:`AVRO_FIELD_BYTES` of them before the value). A timestamp key's time is a big-endian long with its
sign bit flipped (:data:`SIGN_BIT`). The keys around them are laid out in
:mod:`state_reader.formats.rocksdb_encoding`, which reads them; :mod:`state_reader.formats.rocksdb_encode`
writes them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from state_reader.errors import CorruptFileError, RowDecodeError, UnsupportedOptionError
from state_reader.formats.spark_types import DataType, StructField, StructType

# a timestamp key's time is stored big-endian with this bit flipped, so that its bytes sort by time
SIGN_BIT = np.uint64(1 << 63)

# Range-scan ordering columns: kind -> (big-endian numpy dtype of the value, is floating point)
ORDERING_TYPES = {
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
MARKER_NEGATIVE, MARKER_POSITIVE, MARKER_NULL = 0x00, 0x01, 0x02
# an Avro range-scan ordering column: union branch, zig-zag length 1, marker; union branch, zig-zag length, value
AVRO_PRESENT = 0x02
AVRO_FIELD_BYTES = 5
_BINARY = DataType("binary", json_name="binary")


def prefix_schema(count: int) -> StructType:
    """The row of ``count`` ordering columns that starts an UnsafeRow range-scan key: a non-null binary
    field each, marker and value."""
    return StructType([StructField(f"_{i}", _BINARY, False) for i in range(count)])


def check_ordinals(schema: StructType, ordinals: tuple[int, ...], source: str) -> None:
    """Refuse ordering ordinals that are not distinct key columns of ``schema``."""
    n = len(schema.fields)
    if not ordinals or any(not 0 <= o < n for o in ordinals) or len(set(ordinals)) != len(ordinals):
        raise CorruptFileError(
            f"{source}: range-scan ordering ordinals {list(ordinals)} do not fit a key of {n} columns", path=source
        )


def ordering_widths(schema: StructType, ordinals: tuple[int, ...], source: str) -> list[int]:
    """Bytes of each ordering column's big-endian value (Spark's ``defaultSize`` of its type)."""
    widths = []
    for o in ordinals:
        f = schema.fields[o]
        if f.data_type.kind not in ORDERING_TYPES:
            raise UnsupportedOptionError(
                f"{source}: range-scan ordering column {f.name!r} of type {f.data_type.json_name} cannot be decoded"
            )
        widths.append(np.dtype(ORDERING_TYPES[f.data_type.kind][0]).itemsize)
    return widths


def ordering_column(arr: pa.BinaryArray, dt: DataType, source: str, name: str) -> pa.Array:
    """Range-scan ``marker | big-endian value`` binaries -> values of type ``dt``."""
    if dt.kind not in ORDERING_TYPES:
        raise UnsupportedOptionError(
            f"{source}: range-scan ordering column {name!r} of type {dt.json_name} cannot be decoded"
        )
    width = np.dtype(ORDERING_TYPES[dt.kind][0]).itemsize
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
    return ordering_values(marker, data[start[:, None] + 1 + np.arange(width)], dt, source, name)


def ordering_values(marker: np.ndarray, value_bytes: np.ndarray, dt: DataType, source: str, name: str) -> pa.Array:
    """Range-scan markers and big-endian value bytes (one row of ``width`` bytes each) -> values of ``dt``."""
    big_endian, floating = ORDERING_TYPES[dt.kind]
    width = np.dtype(big_endian).itemsize
    n = len(marker)
    if (marker > MARKER_NULL).any():
        raise RowDecodeError(f"{source}: range-scan column {name!r} has an unknown marker byte", path=source)
    raw = np.ascontiguousarray(value_bytes, dtype=np.uint8).reshape(n, width).view(big_endian).reshape(-1)
    if floating:  # negative values were stored with every bit flipped
        raw = np.where(marker == MARKER_NEGATIVE, ~raw, raw)
        values = raw.astype(raw.dtype.newbyteorder("<")).view("<f4" if width == 4 else "<f8")
    else:
        values = raw.astype(raw.dtype.newbyteorder("<"))
    valid = marker != MARKER_NULL
    nulls = int(n - np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        dt.to_arrow(), n, [validity, pa.py_buffer(np.ascontiguousarray(values))], null_count=nulls
    )


def ordering_bytes(arr: pa.Array, dt: DataType, source: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Values of an ordering column -> (marker per row, big-endian value bytes per row): the
    inverse of :func:`ordering_values` (a null is marker 0x02 and zero bytes)."""
    if dt.kind not in ORDERING_TYPES:
        raise UnsupportedOptionError(
            f"{source}: range-scan ordering column {name!r} of type {dt.json_name} cannot be encoded"
        )
    big_endian, floating = ORDERING_TYPES[dt.kind]
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
    marker = np.where(valid, np.where(negative, MARKER_NEGATIVE, MARKER_POSITIVE), MARKER_NULL).astype(np.uint8)
    value = np.ascontiguousarray(bits.astype(big_endian)).view(np.uint8).reshape(-1, width)
    return marker, value
