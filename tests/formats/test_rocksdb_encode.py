"""RocksDB keys and values written as Spark's RocksDB provider writes them (``formats/rocksdb_encode.py``):
byte for byte, and read back by the decoders of ``formats/rocksdb_encoding.py`` to what was written."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest

from state_reader.errors import UnsupportedOptionError
from state_reader.formats.rocksdb_encode import (
    encode_keys,
    encode_range_scan_keys,
    encode_timestamp_keys,
    encode_values,
    with_row_checksums,
)
from state_reader.formats.rocksdb_encoding import (
    PREFIX_SCAN,
    RANGE_SCAN,
    TIMESTAMP_POSTFIX,
    TIMESTAMP_PREFIX,
    KeyEncoderSpec,
    decode_keys,
    decode_values,
    unsafe_keys,
    unsafe_values,
)
from state_reader.formats.spark_types import INTEGER, LONG, STRING, DataType, StructField, StructType
from state_reader.formats.unsaferow import RowBuffer
from state_reader.formats.unsaferow_encode import encode_rows
from state_reader.io.integrity import crc32c
from tests.support.rows import row_bytes

DOUBLE = DataType("double", json_name="double")
KEY = StructType([StructField("user", STRING), StructField("region", INTEGER), StructField("n", LONG)])
KEYS = pa.array(
    [{"user": "ann", "region": 3, "n": 7}, {"user": None, "region": -1, "n": 0}, {"user": "bo", "region": 0, "n": -9}],
    KEY.to_arrow(),
)


def test_no_prefix_and_prefix_scan_keys_are_their_unsafe_rows_framed_and_back():
    rows = encode_rows(KEYS, KEY)
    plain = row_bytes(rows)
    spec = KeyEncoderSpec()
    encoded = encode_keys(rows, KEY, spec)
    assert row_bytes(encoded) == [b"\x00" + r for r in plain]  # the encoding version, then the row
    assert row_bytes(unsafe_keys(encoded, KEY, spec)) == plain
    assert decode_keys(encoded, KEY, spec).to_pylist() == KEYS.to_pylist()
    # prefix scan: int32 LE length | the first column's row | the other columns' row, each with its version byte
    spec = KeyEncoderSpec(PREFIX_SCAN, num_prefix_cols=1)
    encoded = encode_keys(rows, KEY, spec)
    head = row_bytes(
        encode_rows(pa.StructArray.from_arrays([KEYS.field(0)], names=["user"]), StructType(KEY.fields[:1]))
    )
    for key, first in zip(row_bytes(encoded), head, strict=True):
        assert key[:4] == struct.pack("<i", len(first) + 1) and key[4 : 5 + len(first)] == b"\x00" + first
    assert row_bytes(unsafe_keys(encoded, KEY, spec)) == plain
    assert decode_keys(encoded, KEY, spec).to_pylist() == KEYS.to_pylist()


def test_keys_of_the_other_encoders_do_not_convert_to_plain_rows():
    for spec in (KeyEncoderSpec(RANGE_SCAN, ordering_ordinals=(1,)), KeyEncoderSpec(TIMESTAMP_PREFIX)):
        with pytest.raises(UnsupportedOptionError, match="cannot be converted"):
            encode_keys(encode_rows(KEYS, KEY, "k"), KEY, spec)


@pytest.mark.parametrize("avro", [False, True])
def test_range_scan_keys_sort_as_their_ordering_columns_and_read_back(avro):
    schema = StructType([StructField("tag", STRING), StructField("x", DOUBLE), StructField("t", LONG)])
    xs = [-2.5, -0.0, 0.0, 1.0, None, 3.5e300, -1e-300]
    ts = [-3, 7, 7, -3, 0, 2**40, 0]
    rows = [{"tag": f"k{i}", "x": x, "t": t} for i, (x, t) in enumerate(zip(xs, ts, strict=True))]
    keys = pa.array(rows, schema.to_arrow())
    spec = KeyEncoderSpec(RANGE_SCAN, ordering_ordinals=(2, 1))
    encoded = encode_range_scan_keys(keys, schema, spec.ordering_ordinals, avro=avro, schema_id=5)
    assert decode_keys(encoded, schema, spec, avro=avro).to_pylist() == keys.to_pylist()
    # the bytes of the ordering columns sort as (t, x): negatives first, -0.0 before 0.0, nulls last
    order = sorted(range(len(xs)), key=lambda i: row_bytes(encoded)[i])
    assert [(ts[i], xs[i]) for i in order] == [
        (-3, -2.5),
        (-3, 1.0),
        (0, -1e-300),
        (0, None),
        (7, -0.0),
        (7, 0.0),
        (2**40, 3.5e300),
    ]


def test_timestamp_keys_encode_as_spark_writes_them():
    """Join state format 4's keys, event time last: after the join key (postfix) or before it
    (prefix), big-endian with the sign bit flipped; bytes as Spark wrote them, and back."""
    schema = StructType([StructField("field0", STRING), StructField("__event_time", LONG, False)])
    keys = pa.array(
        [{"field0": "a", "__event_time": 1_700_000_040_000_000}, {"field0": None, "__event_time": -5}],
        schema.to_arrow(),
    )
    row = "00" + "0000000000000000" + "0100000010000000" + "6100000000000000"  # version byte, UnsafeRow of "a"
    stamp = "80060a241a809a00"
    for kind, first in ((TIMESTAMP_POSTFIX, row + stamp), (TIMESTAMP_PREFIX, stamp + row)):
        encoded = encode_timestamp_keys(keys, schema, kind == TIMESTAMP_PREFIX)
        start, length = int(encoded.starts[0]), int(encoded.lengths[0])
        assert bytes(encoded.buf[start : start + length]).hex() == first
        assert decode_keys(encoded, schema, KeyEncoderSpec(kind)).to_pylist() == keys.to_pylist()


def test_values_are_framed_with_their_row_checksums_as_spark_frames_them():
    value = StructType([StructField("c", LONG)])
    values = encode_rows(pa.array([{"c": 1}, {"c": None}], value.to_arrow()), value)
    keys = RowBuffer.from_rows([b"\x00\x01key", b"k2"], "k")
    single = encode_values(values)
    assert row_bytes(unsafe_values(single)) == row_bytes(values)
    framed = with_row_checksums(keys, single, with_length=True)
    for key, stored, out in zip(row_bytes(keys), row_bytes(single), row_bytes(framed), strict=True):
        # int32 CRC-32C of the key then the value as stored, int32 the value's length, the value
        assert out == struct.pack("<Ii", crc32c(key + stored), len(stored)) + stored
    assert decode_values(framed, value, row_checksum=True).to_pylist() == [{"c": 1}, {"c": None}]
    # the HDFS-backed provider's framing: the checksum alone
    hdfs = with_row_checksums(keys, values, with_length=False)
    assert [out[4:] for out in row_bytes(hdfs)] == row_bytes(values)
