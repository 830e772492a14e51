"""flatMapGroupsWithState / applyInPandasWithState state format 1 with timeouts.

The schema file declares the trailing ``timeoutTimestamp`` as an integer, but the
operator writes the timeout (epoch milliseconds) as a long into that 8-byte slot.
Spark 4.3.0's reader fails on plain reads of such a store and its change feed shows
the low 32 bits. We read a long, and check it against the timeouts the query set.
"""

from __future__ import annotations

import json

import pytest
from oracle import arrow_rows, spark_rows
from streaming_queries import FMGWS_TIMEOUT_BASE_S

import state_reader

NAMES = ["fmgws_timeout_fmt1"]


def _low_32_bits(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


@pytest.mark.parametrize("name", NAMES)
def test_timeouts_are_the_longs_the_query_set(spark, checkpoints, name):
    path = checkpoints(name)
    for options in ({}, {"batchId": "1"}):
        df = spark.read.format("state_reader.statestore").options(**options).load(path)
        assert df.schema["value"].dataType.simpleString() == "struct<n:bigint,timeoutTimestamp:bigint>"
        kwargs = {"batch_id": int(options["batchId"])} if options else {}
        table = state_reader.read_state(path, **kwargs)
        assert arrow_rows(table) == spark_rows(df)
        rows = [json.loads(r) for r in spark_rows(df)]
        assert rows
        for row in rows:
            # the query sets the timeout to (base + rows seen by the group) seconds
            assert row["value"]["timeoutTimestamp"] == (FMGWS_TIMEOUT_BASE_S + row["value"]["n"]) * 1000, row


@pytest.mark.parametrize("name", NAMES)
def test_change_feed_keeps_the_whole_timeout(spark, checkpoints, name):
    path = checkpoints(name)
    options = {"readChangeFeed": "true", "changeStartBatchId": "0"}
    builtin = [json.loads(r) for r in spark_rows(spark.read.format("statestore").options(**options).load(path))]
    ours = [json.loads(r) for r in spark_rows(
        spark.read.format("state_reader.statestore").options(**options).load(path))]
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
