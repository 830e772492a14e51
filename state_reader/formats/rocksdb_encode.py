"""State rows as Spark's RocksDB provider writes them: RocksDB keys and values from UnsafeRows and Arrow.

The inverse, byte for byte, of the decoders in :mod:`state_reader.formats.rocksdb_encoding`, whose
docstring lays the bytes out: keys of the no-prefix and prefix-scan key encoders from UnsafeRow keys
(:func:`encode_keys`), of the range-scan and timestamp key encoders from Arrow (:func:`encode_range_scan_keys`,
:func:`encode_timestamp_keys`), single values (:func:`encode_values`) and values framed with their row
checksums (:func:`with_row_checksums`). A rewrite writes new stores with them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from state_reader.errors import UnsupportedOptionError
from state_reader.formats.rocksdb_encoding import (
    CHECKSUM_BYTES,
    LENGTH_BYTES,
    NO_PREFIX,
    TIMESTAMP_BYTES,
    KeyEncoderSpec,
    require_convertible,
)
from state_reader.formats.rocksdb_ordering import AVRO_PRESENT, SIGN_BIT, check_ordinals, ordering_bytes, prefix_schema
from state_reader.formats.spark_types import StructType
from state_reader.formats.unsaferow import PAD, RowBuffer
from state_reader.formats.unsaferow_encode import encode_rows, pack_rows, splice_rows

# -- keys -----------------------------------------------------------------------


def encode_keys(rows: RowBuffer, schema: StructType, spec: KeyEncoderSpec) -> RowBuffer:
    """UnsafeRow keys of ``schema`` as RocksDB writes them with ``spec`` (no column families)."""
    require_convertible(spec, rows.source)
    if spec.kind == NO_PREFIX:
        return pack_rows([(1, rows)], rows.source)
    n, fields = spec.num_prefix_cols, schema.fields
    head = splice_rows([(rows, schema, 0, n)], rows.source)
    rest = splice_rows([(rows, schema, n, len(fields))], rows.source)
    out = pack_rows([(LENGTH_BYTES + 1, head), (1, rest)], rows.source)
    length = (head.lengths + 1).astype("<i4").view(np.uint8).reshape(-1, LENGTH_BYTES)
    out.buf[out.starts[:, None] + np.arange(LENGTH_BYTES, dtype=np.int64)] = length
    return out


def encode_range_scan_keys(
    keys: pa.StructArray,
    schema: StructType,
    ordinals: tuple[int, ...],
    avro: bool = False,
    schema_id: int = 0,
    source: str = "",
) -> RowBuffer:
    """Keys of ``schema`` as Spark's range-scan key encoder writes them (no column family id): the inverse
    of :func:`~state_reader.formats.rocksdb_encoding.decode_keys` for
    :data:`~state_reader.formats.rocksdb_encoding.RANGE_SCAN`, UnsafeRow or Avro (whose remainder carries
    ``schema_id``), byte for byte."""
    fields = schema.fields
    check_ordinals(schema, ordinals, source)
    n = len(keys)
    columns = [ordering_bytes(keys.field(o), fields[o].data_type, source, fields[o].name) for o in ordinals]
    if avro:
        parts = []
        for marker, value in columns:
            framing = np.array([[AVRO_PRESENT, 2], [AVRO_PRESENT, 2 * value.shape[1]]], dtype=np.uint8)
            parts += [np.tile(framing[0], (n, 1)), marker[:, None], np.tile(framing[1], (n, 1)), value]
        prefix = _fixed_rows(np.hstack(parts) if n else np.zeros((0, 0), np.uint8), source)
    else:
        binaries = prefix_schema(len(ordinals))
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


def encode_timestamp_keys(keys: pa.StructArray, schema: StructType, prefix: bool, source: str = "") -> RowBuffer:
    """Keys of ``schema`` as Spark's timestamp key encoders write them (no column family id, UnsafeRow
    encoding): the inverse of :func:`~state_reader.formats.rocksdb_encoding.decode_keys` for
    :data:`~state_reader.formats.rocksdb_encoding.TIMESTAMP_PREFIX` (``prefix``) and
    :data:`~state_reader.formats.rocksdb_encoding.TIMESTAMP_POSTFIX`, byte for byte. The last key column is
    the time."""
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
    stamp = np.ascontiguousarray((times.view("<u8") ^ SIGN_BIT).astype(">u8")).view(np.uint8)
    stamp = stamp.reshape(n, TIMESTAMP_BYTES)  # no rows too
    if prefix:
        out = pack_rows([(TIMESTAMP_BYTES + 1, row)], source)
        at = out.starts
    else:
        out = pack_rows([(1, row), (TIMESTAMP_BYTES, None)], source)
        at = out.starts + out.lengths - TIMESTAMP_BYTES
    out.buf[at[:, None] + np.arange(TIMESTAMP_BYTES, dtype=np.int64)] = stamp
    return out


# -- values -----------------------------------------------------------------------


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
