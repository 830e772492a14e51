"""Skew: one formula and one verdict for ``stats``, ``doctor`` and the rewrite report."""

from __future__ import annotations

import math

import pyarrow as pa

from state_reader.core.skew import SKEW_MIN_ROWS, SKEW_THRESHOLD, is_skewed, partition_skew, skew
from state_reader.inspect.doctor_thresholds import THRESHOLDS
from state_reader.inspect.stats import SUMMARY_SCHEMA, batch_summary


def test_skew_rules_for_empty_partitions():
    assert skew(0, 0) == 1.0  # nothing anywhere: even
    assert skew(10, 0) == math.inf  # more than half the partitions empty
    assert skew(12, 4) == 3.0
    assert partition_skew([]) == 1.0
    assert partition_skew([0, 0, 0]) == 1.0
    assert partition_skew([9, 0, 0]) == math.inf
    assert partition_skew([1, 2, 4]) == 2.0


def test_verdict_threshold_is_the_doctors_default():
    assert THRESHOLDS["skew"][0] == SKEW_THRESHOLD and THRESHOLDS["skew-min-rows"][0] == SKEW_MIN_ROWS
    assert is_skewed(SKEW_MIN_ROWS * SKEW_THRESHOLD, SKEW_MIN_ROWS)
    assert not is_skewed(SKEW_MIN_ROWS * SKEW_THRESHOLD - 1, SKEW_MIN_ROWS)
    assert is_skewed(SKEW_MIN_ROWS, 0)  # an empty median partition is as skewed as it gets
    assert not is_skewed(SKEW_MIN_ROWS - 1, 0)  # too small a state to call skewed
    assert not is_skewed(0, 0)


def test_batch_summary_takes_the_one_formula():
    parts = [
        {
            "operator_id": 0,
            "store_name": "default",
            "batch_id": 1,
            "partition_id": p,
            "rows": n,
            "state_bytes": 10 * n,
            "bytes_on_disk": 0,
            "files": 1,
            "delta_chain": 0,
        }
        for p, n in enumerate([0, 0, 0, 1500])
    ]
    parts += [{**r, "batch_id": 2, "rows": 0, "state_bytes": 0} for r in parts]
    summary = batch_summary(pa.Table.from_pylist(parts)).to_pylist()
    assert summary[0]["rows_skew"] is None and summary[0]["bytes_skew"] is None  # infinite: null in the table
    assert summary[1]["rows_skew"] == summary[1]["bytes_skew"] == 1.0  # an empty store is even
    assert batch_summary(pa.Table.from_pylist(parts)).schema == SUMMARY_SCHEMA
