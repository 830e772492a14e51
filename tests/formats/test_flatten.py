"""Nested Arrow state made flat and JSON-ready (``inspect/flatten``), on Spark's own state: aggregation buffers
whose fields repeat a name, and the JSON conventions for the values Spark keeps."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa

import state_reader
from state_reader.formats.flatten import flatten_table, json_rows, unique_names, with_unique_field_names
from tests.support.oracle import arrow_rows
from tests.support.paths import GOLDEN

# a windowed aggregation whose value struct repeats names (count, sum, sum, count, ...)
AGGREGATION = GOLDEN / "spark-3.5.8" / "agg_window_hdfs"


def test_repeated_field_names_get_suffixes_and_keep_their_values():
    exact = state_reader.read_state(str(AGGREGATION), exact_schema=True)
    names = [f.name for f in exact.schema.field("value").type]
    assert len(set(names)) < len(names), "the fixture's value struct repeats a name"
    unique = with_unique_field_names(exact)
    renamed = [f.name for f in unique.schema.field("value").type]
    assert renamed == unique_names(names) and len(set(renamed)) == len(renamed)
    assert all(r == n or r.startswith(n + "#") for r, n in zip(renamed, names, strict=True))
    # the same values, field by field (NaN included), under the new names
    for i in range(len(names)):
        ours, theirs = (t.column("value").combine_chunks().field(i) for t in (unique, exact))
        assert arrow_rows(pa.table({"v": ours})) == arrow_rows(pa.table({"v": theirs}))


def test_flat_columns_are_dotted_paths_of_the_nested_ones():
    table = state_reader.read_state(str(AGGREGATION))
    flat = flatten_table(table)
    assert flat.num_rows == table.num_rows
    assert "key.window.start" in flat.column_names and all(not pa.types.is_struct(t) for t in flat.schema.types)


def test_json_rows_follow_the_documented_conventions():
    table = pa.table(
        {
            "at": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)], pa.timestamp("us", tz="UTC")),
            "dec": pa.array([Decimal("12.30")], pa.decimal128(10, 2)),
            "raw": pa.array([b"\x00\xff"], pa.binary()),
            "nan": pa.array([float("nan")], pa.float64()),
            "inf": pa.array([float("-inf")], pa.float64()),
            "m": pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int64())),
            "im": pa.array([[(1, "x")]], pa.map_(pa.int32(), pa.string())),
        }
    )
    (row,) = json_rows(table)
    assert row["at"].startswith("2024-01-02T03:04:05")
    assert row["dec"] == "12.30" and row["raw"] == "AP8="
    assert row["nan"] == "NaN" and row["inf"] == "-Infinity"
    assert row["m"] == {"a": 1} and row["im"] == [{"key": 1, "value": "x"}]
    json.dumps(row, allow_nan=False)  # every value is plain JSON
