"""State partitions grouped into Spark input partitions: one per core, or ``partitionsPerTask``."""

from __future__ import annotations

from pathlib import Path

import pytest

from state_reader.errors import InvalidOptionError
from state_reader.fronts.datasource import group_partitions
from state_reader.fronts.spark_shared import partitions_per_task as _partitions_per_task
from tests.support.oracle import assert_same_as_builtin, diff, spark_rows


def _groups(ids, per_task, cores):
    return [p.partition_ids for p in group_partitions(ids, per_task, cores)]


def test_grouping_gives_each_core_an_even_share():
    ids = list(range(8))
    assert _groups(ids, None, 2) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert _groups(ids, None, 3) == [(0, 1, 2), (3, 4, 5), (6, 7)]
    assert _groups(ids, None, 5) == [(0, 1), (2, 3), (4, 5), (6,), (7,)]  # never fewer than the cores
    assert _groups(ids, None, 64) == [(p,) for p in ids]
    assert _groups(ids, None, None) == [(p,) for p in ids]  # cores unknown: one per state partition
    assert _groups(ids, 1, 2) == [(p,) for p in ids]
    assert _groups(ids, 3, 2) == [(0, 1, 2), (3, 4, 5), (6, 7)]
    assert _groups([5], None, 2) == [(5,)]
    assert _groups([], None, 2) == [()]  # nothing to read: one input partition that reads nothing


def test_partitions_per_task_option():
    assert _partitions_per_task({}) is None
    assert _partitions_per_task({"partitionsPerTask": "auto"}) is None
    assert _partitions_per_task({"partitionspertask": "4"}) == 4  # Spark passes names lower-cased
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(InvalidOptionError, match="partitionsPerTask"):
            _partitions_per_task({"partitionsPerTask": bad})


@pytest.mark.parametrize("name", ["agg_window", "rocksdb_agg_window"])
def test_default_grouping_matches_builtin(spark, checkpoints, name):
    path = checkpoints(name)
    assert assert_same_as_builtin(spark, path, {}) > 0
    ours = spark.read.format("state_reader.statestore").load(path)
    state_partitions = spark.read.format("statestore").load(path).select("partition_id").distinct().count()
    expected = min(state_partitions, spark.sparkContext.defaultParallelism)
    assert ours.rdd.getNumPartitions() == expected


@pytest.mark.parametrize("name", ["agg_window", "rocksdb_agg_window"])
def test_several_state_partitions_per_task_match_builtin(spark, checkpoints, name):
    path = checkpoints(name)
    builtin = spark_rows(spark.read.format("statestore").load(path))
    for per_task, tasks in (("2", 1), ("1", 2)):
        ours = spark.read.format("state_reader.statestore").option("partitionsPerTask", per_task).load(path)
        assert ours.rdd.getNumPartitions() == tasks
        rows = spark_rows(ours)
        assert rows == builtin, f"partitionsPerTask={per_task}: {diff(builtin, rows)}"
    assert len(builtin) > 0


def test_snapshot_partition_read_with_grouping(spark, checkpoints):
    path = checkpoints("rocksdb_cl_agg_window")
    zips = sorted(int(p.stem) for p in Path(path, "state", "0", "1").glob("*.zip"))
    assert zips
    options = {"snapshotStartBatchId": str(zips[0] - 1), "snapshotPartitionId": "1"}
    grouped = spark.read.format("state_reader.statestore").options(**options, partitionsPerTask="8").load(path)
    assert grouped.rdd.getNumPartitions() == 1
    assert assert_same_as_builtin(spark, path, options) > 0


def test_bad_partitions_per_task_is_refused(spark, checkpoints):
    path = checkpoints("agg_window")
    with pytest.raises(Exception, match="partitionsPerTask"):
        spark.read.format("state_reader.statestore").option("partitionsPerTask", "0").load(path).collect()
