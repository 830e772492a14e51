"""The eviction rule both ``doctor`` and ``why`` apply, on synthetic rows (no Spark)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from state_reader.core.eviction import (
    EVENT_TIME,
    EXPIRY,
    NONE_MS,
    SESSION_END,
    WINDOW_END,
    ceil_ms,
    due_at,
    eviction_times,
    join_row_leaves_at,
    timeout_fires_at,
)
from state_reader.formats.spark_types import StructField, StructType, parse_ddl
from state_reader.model import operators
from state_reader.model.checkpoint import WATERMARK_METADATA

T = 1_700_000_010_000


def _at(ms: int, micros: int = 0) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc) + dt.timedelta(microseconds=micros)


def _schema(ddl: str, marked: str | None = None) -> StructType:
    return StructType(
        [
            StructField(f.name, f.data_type, f.nullable, {WATERMARK_METADATA: 1000} if f.name == marked else {})
            for f in parse_ddl(ddl).fields
        ]
    )


def test_ceil_ms_is_the_first_watermark_at_or_after_a_time():
    assert [ceil_ms(T * 1000 + d) for d in (-1, 0, 1, 999, 1000)] == [T, T, T + 1, T + 1, T + 1]


def test_each_row_of_a_store_by_its_event_time_or_window():
    schema = _schema("k STRING, ts TIMESTAMP", "ts")
    table = pa.Table.from_pylist(
        [{"key": {"k": "a", "ts": _at(T)}}, {"key": {"k": "b", "ts": _at(T, 1)}}, {"key": {"k": "c", "ts": None}}]
    )
    found = eviction_times(schema, table, operators.AGGREGATION)
    assert found is not None and (found.kind, found.column, found.event) == (EVENT_TIME, "ts", "evict")
    assert found.leaves_at_ms().tolist() == [T, T + 1, NONE_MS]
    assert eviction_times(schema, table, operators.DEDUP).event == "expire"  # type: ignore[union-attr]

    window = _schema("w STRUCT<start: TIMESTAMP, end: TIMESTAMP>", "w")
    rows = pa.Table.from_pylist([{"key": {"w": {"start": _at(T - 5000), "end": _at(T)}}}])
    found = eviction_times(window, rows, operators.AGGREGATION)
    assert found is not None and (found.kind, found.leaves_at_ms().tolist()) == (WINDOW_END, [T])


def test_the_value_expiry_and_session_before_the_key():
    schema = _schema("ts TIMESTAMP", "ts")
    expiry = pa.Table.from_pylist([{"key": {"ts": _at(0)}, "value": {"expiresAtMicros": T * 1000}}])
    found = eviction_times(schema, expiry, operators.DEDUP_WITHIN_WATERMARK)
    assert found is not None and (found.kind, found.event, found.leaves_at_ms().tolist()) == (EXPIRY, "expire", [T])
    session = pa.Table.from_pylist(
        [{"key": {"ts": _at(0)}, "value": {"session_window": {"start": _at(0), "end": _at(T)}}}]
    )
    found = eviction_times(schema, session, operators.SESSION_WINDOW)
    assert found is not None and (found.kind, found.leaves_at_ms().tolist()) == (SESSION_END, [T])


def test_none_without_a_watermarked_column():
    table = pa.Table.from_pylist([{"key": {"ts": _at(T)}, "value": {"count": 1}}])
    assert eviction_times(_schema("ts TIMESTAMP"), table, operators.AGGREGATION) is None
    assert eviction_times(_schema("ts TIMESTAMP", "ts"), table.select(["value"]), operators.AGGREGATION) is None


def test_the_clocks_of_joins_timeouts_timers_and_ttl():
    assert join_row_leaves_at(T * 1000) == T + 1
    assert join_row_leaves_at(T * 1000, 5000, inclusive=False) == T + 5000
    assert timeout_fires_at(T) == T + 1
    assert due_at(T) == T
