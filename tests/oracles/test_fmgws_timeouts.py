"""flatMapGroupsWithState / applyInPandasWithState state format 1 with timeouts.

The schema file declares the trailing ``timeoutTimestamp`` as an integer, but the
operator writes the timeout (epoch milliseconds) as a long into that 8-byte slot.
Spark's reader types it ``int``; with a real epoch-millisecond timeout Spark 4.3.0's
reader fails on plain reads and its change feed shows the low 32 bits. We raise a
clear error there, and ``timeoutTimestampAsLong`` reads the whole long, which the
tests check against the timeouts the query set.
"""

from __future__ import annotations

import json

import pytest

import state_reader
from state_reader.errors import RowDecodeError
from tests.support.oracle import arrow_rows, spark_rows
from tests.support.streaming_queries import FMGWS_TIMEOUT_BASE_S

NAMES = ["fmgws_timeout_fmt1"]
AS_LONG = {"timeoutTimestampAsLong": "true"}


def _low_32_bits(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


@pytest.mark.parametrize("name", NAMES)
def test_a_timeout_beyond_the_declared_int_is_an_error_not_a_wrapped_value(spark, checkpoints, name):
    path = checkpoints(name)
    for kwargs in ({}, {"batch_id": 1}, {"read_change_feed": True, "change_start_batch_id": 0}):
        with pytest.raises(RowDecodeError) as err:
            state_reader.read_state(path, **kwargs)
        message = str(err.value)
        assert "timeoutTimestamp" in message and "int range" in message and "timeout_timestamp_as_long" in message
        assert "/state/0/" in message  # names the file
    with pytest.raises(Exception, match="timeoutTimestampAsLong"):
        spark.read.format("state_reader.statestore").load(path).collect()


@pytest.mark.parametrize("name", NAMES)
def test_timeouts_as_long_are_the_longs_the_query_set(spark, checkpoints, name):
    path = checkpoints(name)
    for options in ({}, {"batchId": "1"}):
        df = spark.read.format("state_reader.statestore").options(**options, **AS_LONG).load(path)
        assert df.schema["value"].dataType.simpleString() == "struct<n:bigint,timeoutTimestamp:bigint>"
        kwargs = {"batch_id": int(options["batchId"])} if options else {}
        table = state_reader.read_state(path, timeout_timestamp_as_long=True, **kwargs)
        assert arrow_rows(table) == spark_rows(df)
        rows = [json.loads(r) for r in spark_rows(df)]
        assert rows
        for row in rows:
            # the query sets the timeout to (base + rows seen by the group) seconds
            assert row["value"]["timeoutTimestamp"] == (FMGWS_TIMEOUT_BASE_S + row["value"]["n"]) * 1000, row


@pytest.mark.parametrize("name", NAMES)
def test_change_feed_as_long_keeps_the_whole_timeout(spark, checkpoints, name):
    path = checkpoints(name)
    options = {"readChangeFeed": "true", "changeStartBatchId": "0"}
    builtin = [json.loads(r) for r in spark_rows(spark.read.format("statestore").options(**options).load(path))]
    ours = [
        json.loads(r)
        for r in spark_rows(spark.read.format("state_reader.statestore").options(**options, **AS_LONG).load(path))
    ]
    assert len(ours) == len(builtin) > 0
    for row in ours:
        if row["value"] is not None:
            assert row["value"]["timeoutTimestamp"] == (FMGWS_TIMEOUT_BASE_S + row["value"]["n"]) * 1000, row

    def comparable(rows: list[dict], timeout) -> list[str]:
        out = []
        for row in rows:
            if row["value"] is not None:
                row = {**row, "value": {**row["value"], "timeoutTimestamp": timeout(row["value"]["timeoutTimestamp"])}}
            out.append(json.dumps(row, sort_keys=True))
        return sorted(out)

    # everything else equals Spark's change feed, which truncates the timeout to an int
    assert comparable(ours, _low_32_bits) == comparable(builtin, lambda v: v)
