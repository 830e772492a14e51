"""Avro records written and read column by column against fastavro one record at a time: the same bytes, the same
arrays (down to the validity of fields under a null record), and, for records fastavro would not read or write as
these passes do, the batch handed back to fastavro, whose errors name the record as before. (Spark's own bytes:
``tests/oracles/test_avro.py``.)"""

from __future__ import annotations

import datetime
import decimal
import random

import numpy as np
import pyarrow as pa
import pytest

from state_reader import errors
from state_reader.formats.avro_columns import columnar, decode_records, encode_records
from state_reader.formats.avro_encoding import decode_avro, decode_avro_rows, encode_avro, encode_avro_rows
from state_reader.formats.spark_types import StructField, StructType, from_json_value
from state_reader.formats.unsaferow import RowBuffer
from tests.support.rows import row_bytes

_EXACT = decimal.Context(prec=40)
KINDS = [
    "boolean",
    "byte",
    "short",
    "integer",
    "long",
    "float",
    "double",
    "string",
    "binary",
    "date",
    "timestamp",
    "timestamp_ntz",
    "decimal(2,0)",
    "decimal(10,2)",
    "decimal(38,10)",
    "void",
]
INNER = StructType(
    [StructField(name, from_json_value(kind)) for name, kind in (("x", "string"), ("y", "long"), ("v", "void"))]
)
SCHEMA = StructType(
    [StructField(f"k{i}", from_json_value(kind)) for i, kind in enumerate(KINDS)]
    + [StructField("inner", INNER), StructField("outer", StructType([StructField("in", INNER)]))]
)


def _value(kind: str, rng: random.Random):
    if kind == "void" or rng.random() < 0.25:
        return None
    if kind == "boolean":
        return rng.random() < 0.5
    if kind in ("byte", "short", "integer", "long"):
        bits = {"byte": 8, "short": 16, "integer": 32, "long": 64}[kind]
        top = 2 ** (bits - 1)
        return rng.choice([0, -1, 1, 63, 64, -65, top - 1, -top, rng.randint(-top, top - 1)])
    if kind == "float":
        return rng.choice([0.0, -1.5, float("inf"), float("-inf"), 3.25])
    if kind == "double":
        return rng.choice([0.0, -0.0, 1e300, -2.5, float("nan")])
    if kind == "string":
        return rng.choice(["", "a", "héllo", "日本語", "x" * 200])
    if kind == "binary":
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 7, 130])))
    if kind == "date":
        return datetime.date(1970, 1, 1) + datetime.timedelta(days=rng.randint(-10_000, 10_000))
    if kind.startswith("timestamp"):
        base = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc if kind == "timestamp" else None)
        return base + datetime.timedelta(microseconds=rng.randint(-(10**15), 10**15))
    precision, scale = (int(p) for p in kind[len("decimal(") : -1].split(","))
    limit = 10**precision - 1
    return decimal.Decimal(rng.choice([0, limit, -limit, rng.randint(-limit, limit)])).scaleb(-scale, _EXACT)


def _inner(rng: random.Random):
    if rng.random() < 0.3:
        return None
    return {"x": rng.choice(["", "ab", None]), "y": rng.choice([None, 0, 5, -(2**40)]), "v": None}


def _rows(n: int, seed: int) -> pa.StructArray:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        row = {f"k{i}": _value(kind, rng) for i, kind in enumerate(KINDS)}
        row["inner"] = _inner(rng)
        row["outer"] = None if rng.random() < 0.3 else {"in": _inner(rng)}
        rows.append(row)
    return pa.array(rows, SCHEMA.to_arrow())


def _same(got: pa.Array, expected: pa.Array) -> bool:
    """Equal types and values, NaN equal to NaN (``equals`` says a NaN is not)."""
    return got.type == expected.type and repr(got.to_pylist()) == repr(expected.to_pylist())


def _validities(arr: pa.Array) -> list[int]:
    """The null count of the array and of every field nested in it, depth first."""
    out = [arr.null_count]
    if pa.types.is_struct(arr.type):
        for i in range(arr.type.num_fields):
            out += _validities(arr.field(i))
    return out


def test_records_are_written_and_read_as_fastavro_does():
    values = _rows(400, 7)
    head = b"\x00\x05\x00"  # a version byte and a schema id, as a value carries them
    rows = encode_avro_rows(values, SCHEMA, head, "rows")
    assert row_bytes(rows) == [head + r for r in encode_avro(values, SCHEMA, "rows")]
    present = np.random.default_rng(3).random(len(values)) < 0.9
    got = decode_avro_rows(rows, SCHEMA, "rows", skip=len(head), valid=present)
    payloads = [r[len(head) :] if ok else None for r, ok in zip(row_bytes(rows), present.tolist(), strict=True)]
    expected = decode_avro(payloads, SCHEMA, "rows")
    assert _same(got, expected)
    assert _validities(got) == _validities(expected)


def test_a_slice_and_an_empty_batch():
    values = _rows(50, 8).slice(13, 20)
    rows = encode_avro_rows(values, SCHEMA, b"", "rows")
    assert row_bytes(rows) == encode_avro(values, SCHEMA, "rows")
    assert _same(decode_avro_rows(rows, SCHEMA, "rows"), values)
    empty = encode_avro_rows(values.slice(0, 0), SCHEMA, b"\x00", "rows")
    assert len(empty.starts) == 0 and len(decode_avro_rows(empty, SCHEMA, "rows", skip=1)) == 0


def test_arrays_and_maps_go_through_fastavro():
    array = from_json_value({"type": "array", "elementType": "long", "containsNull": False})
    schema = StructType([StructField("xs", array), StructField("s", from_json_value("string"))])
    values = pa.array([{"xs": [1, 2], "s": "a"}, {"xs": None, "s": None}], schema.to_arrow())
    assert not columnar(schema) and columnar(SCHEMA)
    assert encode_records(values, schema, b"", "rows") is None
    rows = encode_avro_rows(values, schema, b"", "rows")
    assert row_bytes(rows) == encode_avro(values, schema, "rows")
    assert decode_records(rows, schema) is None
    assert decode_avro_rows(rows, schema, "rows").equals(values)


def _one(record: bytes) -> RowBuffer:
    return RowBuffer.from_rows([record], "state/0/1/4.changelog")


LONG = StructType([StructField("n", from_json_value("long"))])
TEXT = StructType([StructField("s", from_json_value("string"))])
INT = StructType([StructField("i", from_json_value("integer"))])


@pytest.mark.parametrize(
    ("schema", "record", "error"),
    [
        (LONG, b"\x02", errors.RowDecodeError),  # cut short
        (LONG, b"\x02\x04\x00", errors.RowDecodeError),  # a byte after the record
        (LONG, b"\x04\x04", errors.RowDecodeError),  # a union index that is neither null nor the value
        (TEXT, b"\x02\x06ab", errors.RowDecodeError),  # a string longer than the record
        (TEXT, b"\x02\x04\xff\xfe", errors.RowDecodeError),  # not UTF-8
        (INT, b"\x02\x80\x80\x80\x80\x10", pa.ArrowInvalid),  # 2**31: not an int
    ],
)
def test_records_fastavro_would_not_read_are_left_to_it(schema, record, error):
    """Each is handed back (None), and reading the batch fails as reading it through fastavro always has."""
    assert decode_records(_one(record), schema) is None
    with pytest.raises(error) as got:
        decode_avro_rows(_one(record), schema, "state/0/1/4.changelog")
    with pytest.raises(error) as expected:
        decode_avro([record], schema, "state/0/1/4.changelog")
    assert str(got.value) == str(expected.value)


def test_a_decimal_beyond_its_fixed_is_refused_by_fastavro_naming_the_row():
    schema = StructType([StructField("d", from_json_value("decimal(2,0)"))])
    # a decimal(2,0) is one byte in Avro; 300 does not fit it (pyarrow holds it without checking the precision)
    values = pa.StructArray.from_arrays(
        [pa.Array.from_buffers(pa.decimal128(2, 0), 2, [None, pa.py_buffer(np.array([5, 0, 300, 0], dtype="<i8"))])],
        fields=list(schema.to_arrow()),
    )
    assert encode_records(values, schema, b"", "rows") is None
    with pytest.raises(errors.RowEncodeError, match="row 1 cannot be written"):
        encode_avro_rows(values, schema, b"", "rows")


def test_a_null_row_is_refused():
    values = pa.array([{"n": 1}, None], LONG.to_arrow())
    with pytest.raises(errors.RowEncodeError, match="row 1 is null"):
        encode_avro_rows(values, LONG, b"", "rows")
