"""UnsafeRow -> Arrow on bytes from real files and the format's documented examples."""

from __future__ import annotations

import datetime
import decimal
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from state_reader import errors
from state_reader.formats.schema_files import read_schema_v1v2
from state_reader.formats.spark_types import parse_struct
from state_reader.formats.unsaferow import RowBuffer, decode_rows
from state_reader.io.storage import Storage
from state_reader.providers.hdfs import HDFSStore

# The delta of spec §2.2 (a groupBy("grp") aggregation, state format 1), as Spark wrote it.
SPEC_KEY = bytes.fromhex("000000000000000001000000100000006100000000000000")
SPEC_VALUE = bytes.fromhex("00000000000000000100000020000000020000000000000003000000000000006100000000000000")


def test_unsaferow_spec_example():
    key_schema = parse_struct('{"type":"struct","fields":[{"name":"grp","type":"string","nullable":true}]}', "k")
    value_schema = parse_struct(
        '{"type":"struct","fields":[{"name":"grp","type":"string","nullable":true},'
        '{"name":"count","type":"long","nullable":false},{"name":"sum","type":"long","nullable":true}]}',
        "v",
    )
    keys = decode_rows(RowBuffer.from_rows([SPEC_KEY], "k"), key_schema)
    values = decode_rows(RowBuffer.from_rows([SPEC_VALUE], "v"), value_schema)
    assert keys.field(0).to_pylist() == ["a"]
    assert [values.field(i).to_pylist()[0] for i in range(3)] == ["a", 2, 3]


def test_unsaferow_array_spec_example():
    # array(0, 1, null) of ints inside a one-field row
    array = bytes.fromhex("0300000000000000040000000000000000000000010000000000000000000000")
    row = bytes.fromhex("0000000000000000") + struct.pack("<II", len(array), 16) + array
    schema = parse_struct(
        '{"type":"struct","fields":[{"name":"a","type":{"type":"array",'
        '"elementType":"integer","containsNull":true},"nullable":true}]}',
        "s",
    )
    assert decode_rows(RowBuffer.from_rows([row], "r"), schema).field(0).to_pylist() == [[0, 1, None]]


def test_unsaferow_rejects_rows_that_do_not_fit():
    schema = parse_struct('{"type":"struct","fields":[{"name":"s","type":"string","nullable":true}]}', "s")
    too_long = bytes(8) + struct.pack("<II", 4000, 16) + b"abcdefgh"
    with pytest.raises(errors.RowDecodeError, match="runs past"):
        decode_rows(RowBuffer.from_rows([too_long], "bad.delta"), schema)
    with pytest.raises(errors.RowDecodeError, match="fixed bytes"):
        decode_rows(RowBuffer.from_rows([bytes(8)], "bad.delta"), schema)
    array_schema = parse_struct(
        '{"type":"struct","fields":[{"name":"a","type":{"type":"array",'
        '"elementType":"long","containsNull":true},"nullable":true}]}',
        "s",
    )
    huge = bytes(8) + struct.pack("<II", 16, 16) + struct.pack("<q", 2**40) + bytes(8)
    with pytest.raises(errors.RowDecodeError, match="elements"):
        decode_rows(RowBuffer.from_rows([huge], "bad.delta"), array_schema)


def test_a_schema_with_more_fields_than_the_rows_does_not_fit():
    """Rows of one string field ("abc") read with schemas of two and three fields."""
    row = bytes(8) + struct.pack("<II", 3, 16) + b"abc".ljust(8, b"\0")  # size 3, at byte 16
    rows = RowBuffer.from_rows([row, row], "0.delta key")
    # two fields: the fixed region is 24 bytes, where the string's bytes start at byte 16
    two = parse_struct('{"type":"struct","fields":[{"name":"s","type":"string"},{"name":"t","type":"string"}]}', "s")
    with pytest.raises(errors.RowDecodeError) as caught:
        decode_rows(rows, two)
    assert str(caught.value).endswith(
        "0.delta key: a variable-length value of 3 bytes at byte 16 of its row starts inside the row's first "
        "24 bytes, its null bits and slots (field s)"
    )
    # three fields: 32 fixed bytes, more than the 24-byte rows hold
    three = parse_struct(
        '{"type":"struct","fields":[{"name":"s","type":"string"},{"name":"n","type":"long"},'
        '{"name":"m","type":"long"}]}',
        "s",
    )
    with pytest.raises(errors.RowDecodeError) as caught:
        decode_rows(rows, three)
    assert str(caught.value).endswith(
        "0.delta key: a row of 3 fields needs at least 32 fixed bytes (null bits, then 8 bytes a field); row 0 "
        "has 24, and 1 more rows are short too (field <row>)"
    )
    one = parse_struct('{"type":"struct","fields":[{"name":"s","type":"string"}]}', "s")
    assert decode_rows(rows, one).field(0).to_pylist() == ["abc", "abc"]


def _typed_state(checkpoints) -> tuple[pa.StructArray, pa.StructArray]:
    """Keys and values of the typed aggregation's partition 0 and 1 at the latest version."""
    root = Path(checkpoints("types"))
    key_schema, value_schema = read_schema_v1v2((root / "state/0/0/_metadata/schema").read_bytes(), "schema")
    keys, values = [], []
    version = max(int(p.stem) for p in (root / "state/0/0").glob("*.delta"))
    for part in (0, 1):
        state = HDFSStore(Storage(str(root)), f"state/0/{part}", "lz4").load(version)
        keys += list(state)
        values += list(state.values())
    return (
        decode_rows(RowBuffer.from_rows(keys, "k"), key_schema),
        decode_rows(RowBuffer.from_rows(values, "v"), value_schema),
    )


def _column(struct_array: pa.StructArray, name: str) -> list:
    index = struct_array.type.get_field_index(name)
    return struct_array.field(index).to_pylist()


def test_every_type_decodes_to_the_generating_values(checkpoints):
    keys, values = _typed_state(checkpoints)
    rows = {}
    ints = _column(keys, "k_int")
    for i, n in enumerate(ints):
        rows[n] = i
    assert None in rows, "the all-null key row must be present"
    everything_null = rows[None]
    for name in keys.type.names if hasattr(keys.type, "names") else [f.name for f in keys.type]:
        assert _column(keys, name)[everything_null] is None, name
    for n, i in rows.items():
        if n is None:
            continue
        col = lambda c, i=i: _column(keys, c)[i]  # noqa: E731
        assert col("k_str") == f"héllo-{n}"
        assert col("k_long") == n * 10_000_000_000
        assert col("k_short") == n and col("k_byte") == n
        assert col("k_double") == pytest.approx(n / 3)
        assert col("k_float") == pytest.approx(np.float32(n) / np.float32(7))
        assert col("k_bool") == (n % 2 == 0)
        assert col("k_dec") == decimal.Decimal(n * 1234) / 100
        sign = "-" if n % 3 == 0 else ""
        assert col("k_bigdec") == decimal.Decimal(f"{sign}12345678901234567890123456{n:02d}.0123456789")
        assert col("k_date") == datetime.date(2024, 2, 29) + datetime.timedelta(days=n)
        assert col("k_ntz") == datetime.datetime(2024, 1, 2, 3, 4, 5, 123456) + datetime.timedelta(days=n)
        assert col("k_bin") == f"bin{n}".encode()
        assert col("k_struct") == {"a": n, "b": f"s{n}", "c": {"d": float(n)}}
        assert col("k_arr") == [n, n + 1, None]
        assert col("k_sarr") == [f"x{n}", None, ""]
        # aggregation buffers repeat names (last, valueSet, ...): read them by position
        value = lambda pos, i=i: values.field(pos).to_pylist()[i]  # noqa: E731
        assert value(0) >= 1
        assert value(1) == [("k1", n), ("k2", 2 * n)]
        assert value(3) == [(n, f"v{n}")]
        assert value(5) == datetime.timedelta(days=n, hours=1, minutes=2, seconds=3.5)
        assert value(7) == [{"x": n, "y": f"y{n}"}, None]
        assert value(9) == [[n], []]
        assert isinstance(value(12), bytes)  # collect_list keeps its own binary buffer


def test_intervals_and_variant_spark_free(checkpoints):
    """Year-month and calendar intervals and variants decode (the Spark front cannot carry them)."""
    import state_reader

    table = state_reader.read_state(checkpoints("exotic_types"))
    assert table.num_rows == 2
    value = table.column("value").combine_chunks()
    parity = table.column("key").combine_chunks().field(0).to_pylist()
    for row, p in enumerate(parity):
        ym = value.field(0).to_pylist()[row]
        n = ym.months - 12  # last() may pick any row of the group: check the row is consistent
        assert n % 2 == p and 0 <= n <= 14
        assert (ym.days, ym.nanoseconds) == (0, 0)
        cal = value.field(2).to_pylist()[row]  # buffers are (last, valueSet) pairs
        assert (cal.months, cal.days, cal.nanoseconds) == (1, n, 250_000_000)
        variant = value.field(4).to_pylist()[row]
        assert set(variant) == {"value", "metadata"} and variant["value"] and variant["metadata"]
    assert table.schema.field("value").type.field(0).type == pa.month_day_nano_interval()
