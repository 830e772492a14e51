"""The JSON conventions both ways (``formats/json_values``): what ``export`` writes for each type reads
back as the same value, text is parsed only where a convention writes a type as text, and a value
without the store's structure is refused naming its row."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pyarrow as pa
import pytest

from state_reader.errors import EditSchemaError, EditValueError
from state_reader.formats.json_values import (
    json_values,
    objects_to_arrow,
    parse_duration,
    parse_timestamp,
    text_to_arrow,
)

UTC = dt.timezone.utc

# one value of each type the conventions write as text, and the Arrow type it is read back as
TYPED = [
    (pa.array([float("nan"), float("inf"), -float("inf"), 1.5]), pa.float64()),
    (pa.array([Decimal("-12345678901234567890.12345")], pa.decimal128(30, 5)), pa.decimal128(30, 5)),
    (pa.array([dt.date(2024, 2, 29)]), pa.date32()),
    (pa.array([dt.datetime(2023, 11, 14, 22, 13, 50, 123456, tzinfo=UTC)], pa.timestamp("us", UTC)), None),
    (pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 1)], pa.timestamp("us")), None),
    (pa.array([b"\x00\xffbin", b""]), pa.binary()),
    (pa.array([dt.timedelta(days=-3, seconds=7, microseconds=5), dt.timedelta(0)], pa.duration("us")), None),
    (pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64())), None),
    (pa.array([[(1, "v")]], pa.map_(pa.int32(), pa.string())), None),
    (pa.array([[{"x": 1, "y": None}], None], pa.list_(pa.struct([("x", pa.int64()), ("y", pa.string())]))), None),
]


@pytest.mark.parametrize(("given", "as_type"), TYPED, ids=[str(g.type) for g, _ in TYPED])
def test_what_export_writes_reads_back_as_the_same_value(given, as_type):
    written = json_values(given)
    back = objects_to_arrow(written, given.type, "value.x", "upsert", text=True)
    if not pa.types.is_nested(given.type):  # a nested one's plain values keep their own types until conformed
        back = back.cast(as_type or given.type)
        assert back.type == given.type
    assert json_values(back) == written  # NaN compares unequal to itself: compared as written


def test_a_struct_must_have_the_stores_fields_in_every_row():
    target = pa.struct([("count", pa.int64()), ("sum", pa.int64()), ("sum", pa.int64())])
    rows = [{"count": 1, "sum": 2, "sum#2": 3}, {"count": 1, "sum": 2}]
    with pytest.raises(EditSchemaError, match=r"upsert row 1: value does not have .* missing field value\.sum#2"):
        objects_to_arrow(rows, target, "value", "upsert", text=True)
    with pytest.raises(EditValueError, match=r"upsert row 0: value is \[1, 2\] \(list\)"):
        objects_to_arrow([[1, 2]], target, "value", "upsert", text=True)


def test_text_is_parsed_only_where_a_convention_writes_the_type_as_text():
    with pytest.raises(EditValueError, match=r"row 1: value\.n is 'seven' \(text\), which the store's bigint"):
        objects_to_arrow([1, "seven"], pa.int64(), "value.n", "upsert", text=True)
    with pytest.raises(EditValueError, match=r"row 0: value\.d is 'nan' \(text\).*\"NaN\""):
        objects_to_arrow(["nan"], pa.float64(), "value.d", "upsert", text=True)
    assert math.isnan(objects_to_arrow(["NaN"], pa.float64(), "value.d", "upsert", text=True)[0].as_py())


def test_csv_cells_are_numbers_as_they_spell_them():
    cells = pa.array(["1", None, "2.5", "3e9"])
    assert text_to_arrow(cells, pa.int32(), "value.n", "upsert").to_pylist() == [1.0, None, 2.5, 3e9]
    assert text_to_arrow(pa.array(["1", "2"]), pa.int32(), "value.n", "upsert").type == pa.int64()
    with pytest.raises(EditValueError, match=r"row 1: value\.n is 'x' \(text\)"):
        text_to_arrow(pa.array(["1", "x"]), pa.int32(), "value.n", "upsert")


@pytest.mark.parametrize(
    ("text", "zoned", "expected"),
    [
        ("2023-11-14 22:13:50", True, dt.datetime(2023, 11, 14, 22, 13, 50, tzinfo=UTC)),
        ("2023-11-14T22:13:50+00:00", True, dt.datetime(2023, 11, 14, 22, 13, 50, tzinfo=UTC)),
        ("2023-11-14 23:13:50.5+01:00", True, dt.datetime(2023, 11, 14, 22, 13, 50, 500000, tzinfo=UTC)),
        ("1970-01-01 00:00:00.000000Z", True, dt.datetime(1970, 1, 1, tzinfo=UTC)),
        ("2024-01-02T03:04:05.123456000", False, dt.datetime(2024, 1, 2, 3, 4, 5, 123456)),
    ],
)
def test_timestamps_as_iso_text_as_show_prints_them_and_as_csv_writes_them(text, zoned, expected):
    assert parse_timestamp(text, zoned=zoned) == expected


@pytest.mark.parametrize("text", ["2023-11-14T22:13:50.0000001", "yesterday", "2023-11-14T22:13:50+01:00 UTC"])
def test_a_timestamp_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError):
        parse_timestamp(text, zoned=True)
    with pytest.raises(ValueError):
        parse_timestamp("2023-11-14T22:13:50+01:00", zoned=False)  # a timestamp_ntz has no zone


def test_durations_read_back_as_written():
    for td in (dt.timedelta(days=1, hours=2, minutes=3, seconds=4.5), -dt.timedelta(seconds=1), dt.timedelta(0)):
        assert parse_duration(json_values(pa.array([td], pa.duration("us")))[0]) == td
