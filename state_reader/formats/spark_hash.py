"""Spark's row hash, ``hash(...)`` in SQL: Murmur3 x86 32-bit, seed 42, over Arrow arrays.

A stateful operator's input is shuffled by ``HashPartitioning``: a row goes to
partition ``pmod(hash(partition key columns), numPartitions)``, and its state
lives in that partition's store. This module computes the same hash, bit for
bit, vectorised with numpy over whole columns (uint32 arithmetic wraps exactly
like Java's int).

How Spark hashes each value (``Murmur3Hash`` / ``InterpretedHashFunction``),
each column's hash being the seed of the next:

* null: skipped, the running hash passes through unchanged;
* boolean, byte, short, int, date: ``hashInt`` of the value (true = 1);
* long, timestamp, timestamp_ntz: ``hashLong`` (the low int, then the high int);
* float: ``hashInt(floatToIntBits)``, double: ``hashLong(doubleToLongBits)``;
  -0.0 hashes as 0 and every NaN as the canonical NaN;
* decimal of precision <= 18: ``hashLong`` of the unscaled value; wider: the
  bytes of ``BigInteger.toByteArray`` (two's complement, big-endian, shortest);
* string, binary: ``hashUnsafeBytes`` of the bytes: whole little-endian ints
  first, then each remaining byte on its own, sign-extended (this differs from
  the reference Murmur3 tail), finished with the byte length;
* struct: its fields in order; array: its elements in order; map: each key then
  its value, entry by entry.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_reader.errors import UnsupportedOptionError

SEED = 42

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_M5 = np.uint32(5)
_N1 = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k1: np.ndarray) -> np.ndarray:
    return _rotl(k1 * _C1, 15) * _C2


def _mix_h1(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    return _rotl(h1 ^ k1, 13) * _M5 + _N1


def _fmix(h1: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h1 = h1 ^ np.asarray(length, dtype=np.uint32)
    h1 = h1 ^ (h1 >> np.uint32(16))
    h1 = h1 * _F1
    h1 = h1 ^ (h1 >> np.uint32(13))
    h1 = h1 * _F2
    return h1 ^ (h1 >> np.uint32(16))


def hash_int(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark's ``hashInt`` of 32-bit values, each with its own running hash as seed."""
    return _fmix(_mix_h1(seed, _mix_k1(values.astype(np.uint32, copy=False))), 4)


def hash_long(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark's ``hashLong`` of 64-bit values: the low int, then the high int."""
    v = values.astype(np.uint64, copy=False)
    h1 = _mix_h1(seed, _mix_k1((v & np.uint64(0xFFFFFFFF)).astype(np.uint32)))
    h1 = _mix_h1(h1, _mix_k1((v >> np.uint64(32)).astype(np.uint32)))
    return _fmix(h1, 8)


def hash_bytes(data: np.ndarray, offsets: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark's ``hashUnsafeBytes`` of byte strings ``data[offsets[i]:offsets[i + 1]]``.

    Vectorised across rows: one numpy step per 4-byte word position, over the
    rows that are that long (keys are short, so there are few steps).
    """
    starts = offsets[:-1].astype(np.int64)
    lengths = (offsets[1:] - offsets[:-1]).astype(np.int64)
    words = lengths // 4
    h1 = seed.copy()
    data = np.concatenate([data, np.zeros(4, np.uint8)])  # a word read never runs past the end
    for j in range(int(words.max(initial=0))):
        rows = np.flatnonzero(words > j)
        at = starts[rows] + 4 * j
        word = (
            data[at].astype(np.uint32)
            | (data[at + 1].astype(np.uint32) << np.uint32(8))
            | (data[at + 2].astype(np.uint32) << np.uint32(16))
            | (data[at + 3].astype(np.uint32) << np.uint32(24))
        )
        h1[rows] = _mix_h1(h1[rows], _mix_k1(word))
    tails = lengths - 4 * words
    for t in range(3):
        rows = np.flatnonzero(tails > t)
        if len(rows):
            byte = data[starts[rows] + 4 * words[rows] + t].astype(np.int8).astype(np.int32).astype(np.uint32)
            h1[rows] = _mix_h1(h1[rows], _mix_k1(byte))
    return _fmix(h1, lengths.astype(np.uint32))


def _binary_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, offsets) of a string or binary array, offsets relative to the array's own slice."""
    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    offset_type = np.int64 if large else np.int32
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return data, offsets


def _java_bytes(unscaled: int) -> bytes:
    """``BigInteger.toByteArray``: shortest two's complement, big-endian, at least one byte."""
    bits = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()  # Java's bitLength()
    return unscaled.to_bytes(bits // 8 + 1, "big", signed=True)


def _hash_wide_decimals(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    # decimals wider than 18 digits are rare in keys: their bytes are built in Python, then hashed as above
    raw = arr.buffers()[1].to_pybytes()[16 * arr.offset : 16 * (arr.offset + len(arr))]
    blobs = [_java_bytes(int.from_bytes(raw[16 * i : 16 * i + 16], "little", signed=True)) for i in range(len(arr))]
    lengths = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    data = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    return hash_bytes(data, offsets, seed)


def _values(arr: pa.Array, dtype: type) -> np.ndarray:
    """The values of a fixed-width array as numpy (nulls as zeros; their hash is discarded)."""
    if arr.null_count:
        arr = arr.fill_null(False if pa.types.is_boolean(arr.type) else 0)
    return arr.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _hash_column(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    """The running hashes ``seed`` after hashing each row of ``arr`` (nulls leave theirs unchanged)."""
    typ = arr.type
    if pa.types.is_null(typ) or len(arr) == 0:
        return seed
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
        typ = arr.type
    if pa.types.is_boolean(typ):
        out = hash_int(_values(arr, np.bool_).astype(np.uint32), seed)
    elif (pa.types.is_integer(typ) and typ.bit_width <= 32) or pa.types.is_date32(typ):
        out = hash_int(_values(arr.cast(pa.int32()), np.int32).view(np.uint32), seed)
    elif pa.types.is_integer(typ) or pa.types.is_timestamp(typ) or pa.types.is_date64(typ):
        if pa.types.is_timestamp(typ) and typ.unit != "us":
            raise UnsupportedOptionError(f"Spark keeps timestamps in microseconds, not {typ}")
        out = hash_long(_values(arr.cast(pa.int64()), np.int64).view(np.uint64), seed)
    elif pa.types.is_float32(typ):
        bits = _values(arr, np.float32)
        bits = np.where(bits == 0, np.float32(0), bits)  # -0.0 hashes as 0
        ints = bits.view(np.uint32).copy()
        ints[np.isnan(bits)] = 0x7FC00000
        out = hash_int(ints, seed)
    elif pa.types.is_float64(typ):
        bits = _values(arr, np.float64)
        bits = np.where(bits == 0, np.float64(0), bits)
        longs = bits.view(np.uint64).copy()
        longs[np.isnan(bits)] = 0x7FF8000000000000
        out = hash_long(longs, seed)
    elif pa.types.is_decimal(typ):
        if not pa.types.is_decimal128(typ):
            raise UnsupportedOptionError(f"Spark has no {typ} type")
        if typ.precision > 18:
            out = _hash_wide_decimals(arr, seed)
        else:  # the unscaled value fits the low 64 bits of each 16-byte little-endian value
            raw = np.frombuffer(arr.buffers()[1], dtype=np.uint64)
            out = hash_long(raw[2 * arr.offset : 2 * (arr.offset + len(arr)) : 2], seed)
    elif (
        pa.types.is_string(typ)
        or pa.types.is_binary(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_large_binary(typ)
    ):
        data, offsets = _binary_buffers(arr)
        out = hash_bytes(data, offsets, seed)
    elif pa.types.is_struct(typ):
        out = seed
        for i in range(typ.num_fields):
            out = _hash_column(pc.struct_field(arr, [i]), out)  # a null struct's fields read as null
        return out
    elif pa.types.is_map(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ):
        out = _hash_lists(arr, seed)
    else:
        raise UnsupportedOptionError(f"Spark's hash of a {typ} column is not known to state_reader")
    if arr.null_count:
        out = np.where(np.asarray(arr.is_valid()), out, seed)
    return out


def _hash_lists(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    """Each list's (or map's) elements hashed in order, one numpy step per element position."""
    if pa.types.is_map(arr.type):
        elements = pa.StructArray.from_arrays([arr.keys, arr.items], names=["key", "value"])
    else:
        elements = arr.values
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    base = offsets[0]
    starts = offsets[:-1] - base
    lengths = offsets[1:] - offsets[:-1]
    if arr.null_count:
        lengths = np.where(np.asarray(arr.is_valid()), lengths, 0)
    out = seed.copy()
    for j in range(int(lengths.max(initial=0))):
        rows = np.flatnonzero(lengths > j)
        out[rows] = _hash_column(elements.take(pa.array(starts[rows] + j)), out[rows])
    return out


def murmur3_hash(columns: Sequence[pa.Array], seed: int = SEED) -> np.ndarray:
    """``hash(col1, col2, ...)`` as Spark computes it: one int32 per row."""
    if not columns:
        raise ValueError("hash of no columns")
    length = len(columns[0])
    out = np.full(length, seed, dtype=np.uint32)
    for col in columns:
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        out = _hash_column(col, out)
    return out.view(np.int32)


def partition_ids(columns: Sequence[pa.Array], num_partitions: int) -> np.ndarray:
    """``pmod(hash(columns), num_partitions)``: the shuffle partition of each row, as Spark assigns it."""
    return np.mod(murmur3_hash(columns).astype(np.int64), num_partitions).astype(np.int32)
