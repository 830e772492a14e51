"""Stream-stream join state format 4 (Spark 4.3, RocksDB): the event time is part of
each key and values are lists of rows, since input rows can share a key and an
event time.

Compared with Spark's built-in reader everywhere it is right. On ``joinSide`` reads
Spark 4.3.0 returns the first byte of the key as ``__event_time``; there the event
time is checked against the rows the query buffered instead.
"""

from __future__ import annotations

import datetime
import json

import state_reader
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import JOIN_V4_STORES, CheckpointDir
from tests.support.oracle import arrow_rows, assert_same_as_builtin, diff, spark_rows
from tests.support.streaming_queries import _join_batches

EPOCH = datetime.datetime(1970, 1, 1)


def test_join_v4_stores_and_changes(spark, checkpoints):
    path = checkpoints("join_v4")
    batches = CheckpointDir(Storage(path)).committed_batches
    total = 0
    for at in ({}, {"batchId": str(batches[1])}):
        for store in JOIN_V4_STORES:
            total += assert_same_as_builtin(spark, path, {"storeName": store, **at})
    assert total > 0
    for store in JOIN_V4_STORES:
        assert (
            assert_same_as_builtin(
                spark, path, {"storeName": store, "readChangeFeed": "true", "changeStartBatchId": "0"}
            )
            > 0
        )
        # replay partition 0 from the snapshot of batch 0 on (every changelog after it applied)
        assert_same_as_builtin(
            spark, path, {"storeName": store, "snapshotStartBatchId": "0", "snapshotPartitionId": "0"}
        )
    assert_same_as_builtin(spark, path, {}, fmt="state-metadata")


def _without_event_time(rows: list[str]) -> list[str]:
    out = []
    for row in rows:
        obj = json.loads(row)
        del obj["key"]["__event_time"]
        out.append(json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")))
    return sorted(out)


def _micros(iso: str) -> int:
    delta = datetime.datetime.fromisoformat(iso) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def test_join_v4_sides_hold_the_buffered_input_rows(spark, checkpoints):
    path = checkpoints("join_v4")
    written = [row for batch in _join_batches() for row in batch]
    # the query's two sides: left keeps n % 3 != 1 (lid, amount, price), right keeps even n (rid, tag)
    left_input = {(r["n"], r["grp"], r["ts"]) for r in written if r["n"] % 3 != 1}
    right_input = {(r["n"], r["grp"], r["ts"]) for r in written if r["n"] % 2 == 0}
    for side, time_col, grp_col, id_col, inputs in (
        ("left", "lts", "lgrp", "lid", left_input),
        ("right", "rts", "rgrp", "rid", right_input),
    ):
        builtin = spark.read.format("statestore").option("joinSide", side).load(path)
        ours = spark.read.format("state_reader.statestore").option("joinSide", side).load(path)
        assert ours.schema.json() == builtin.schema.json()
        expected = _without_event_time(spark_rows(builtin))
        for actual in (spark_rows(ours), arrow_rows(state_reader.read_state(path, join_side=side))):
            assert _without_event_time(actual) == expected, diff(expected, _without_event_time(actual))
            rows = [json.loads(r) for r in actual]
            assert rows
            for row in rows:
                key, value = row["key"], row["value"]
                # the event time in the key is the buffered row's event-time column, in microseconds
                assert key["__event_time"] == _micros(value[time_col]), row
                assert key["field0"] == value[grp_col], row
                seconds = key["__event_time"] // 1_000_000
                assert (value[id_col], value[grp_col], seconds) in inputs, row
        # rows sharing a join key and an event time are all there, one per row
        keys = [(r["key"]["field0"], r["key"]["__event_time"]) for r in map(json.loads, spark_rows(ours))]
        if side == "left":
            assert len(keys) > len(set(keys))
