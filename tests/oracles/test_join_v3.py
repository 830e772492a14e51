"""Stream-stream join state format 3 (RocksDB, the four stores as column families
of one store) against Spark's built-in reader."""

from __future__ import annotations

from pathlib import Path

from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from tests.support.oracle import assert_same_as_builtin

STORES = ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"]


def test_join_v3_sides_stores_and_changes(spark, checkpoints):
    path = checkpoints("join_v3")
    batches = CheckpointDir(Storage(path)).committed_batches
    total = 0
    for at in ({}, {"batchId": str(batches[2])}):
        for side in ("left", "right"):
            total += assert_same_as_builtin(spark, path, {"joinSide": side, **at})
        for store in STORES:
            total += assert_same_as_builtin(spark, path, {"storeName": store, **at})
    assert total > 0
    assert (
        assert_same_as_builtin(
            spark, path, {"storeName": "left-keyWithIndexToValue", "readChangeFeed": "true", "changeStartBatchId": "0"}
        )
        > 0
    )
    assert_same_as_builtin(spark, path, {}, fmt="state-metadata")


def test_join_side_from_a_snapshot_on_rocksdb_with_changelogs(spark, checkpoints):
    """joinSide with snapshotStartBatchId on RocksDB (format 2 stores in sub-directories): the side's
    stores have changelogs, though the partition directory itself holds none."""
    path = checkpoints("join_left_outer_rocksdb_cl")
    store = Path(path) / "state" / "0" / "0" / "left-keyToNumValues"
    zips = sorted(int(p.stem) for p in store.glob("*.zip"))
    assert zips, "no snapshot to start from"
    for side in ("left", "right"):
        assert_same_as_builtin(
            spark, path, {"joinSide": side, "snapshotStartBatchId": str(zips[0] - 1), "snapshotPartitionId": "0"}
        )
