"""Our readers against Spark's built-in reader on checkpoints written by real
queries with the HDFS-backed provider: every operator, latest and earlier batches."""

from __future__ import annotations

import pytest

from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from tests.support.oracle import assert_same_as_builtin
from tests.support.streaming_queries import QUERIES

# HDFS single-source queries; exotic_types holds intervals PySpark cannot collect (see test_decoders)
QUERY_NAMES = sorted(
    n
    for n, q in QUERIES.items()
    if "RocksDB" not in q.confs.get("spark.sql.streaming.stateStore.providerClass", "")
    and q.sources == 1
    and n != "exotic_types"
)
JOIN_QUERIES = ["join_inner", "join_left_outer", "join_right_outer"]
JOIN_STORES = ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"]


def _batches(path: str) -> list[int]:
    return CheckpointDir(Storage(path)).committed_batches


@pytest.mark.parametrize("name", QUERY_NAMES)
def test_every_batch_matches_builtin(spark, checkpoints, name):
    path = checkpoints(name)
    batches = _batches(path)
    assert len(batches) >= 5
    total = 0
    for op in range(QUERIES[name].operators):
        total += assert_same_as_builtin(spark, path, {"operatorId": str(op)})
        for batch in batches[:-1]:
            total += assert_same_as_builtin(spark, path, {"operatorId": str(op), "batchId": str(batch)})
    assert total > 0


@pytest.mark.parametrize("name", ["agg_window", "multi", "limit"])
def test_metadata_matches_builtin(spark, checkpoints, name):
    path = checkpoints(name)
    assert assert_same_as_builtin(spark, path, {}, fmt="state-metadata") >= 1
    assert_same_as_builtin(spark, path, {"batchId": "1"}, fmt="state-metadata")


def test_snapshots_and_deltas_both_used(checkpoints):
    """The queries must leave snapshots behind, or snapshot+delta rebuild is not tested."""
    storage = Storage(checkpoints("agg_window"))
    names = storage.list_names("state/0/0") + storage.list_names("state/0/1")
    assert any(n.endswith(".snapshot") for n in names)
    assert any(n.endswith(".delta") for n in names)


@pytest.mark.parametrize("name", JOIN_QUERIES)
def test_join_sides_and_stores_match_builtin(spark, checkpoints, name):
    path = checkpoints(name)
    batches = _batches(path)
    total = 0
    for batch in (None, batches[1], batches[-2]):
        at = {} if batch is None else {"batchId": str(batch)}
        for side in ("left", "right"):
            total += assert_same_as_builtin(spark, path, {"joinSide": side, **at})
        for store in JOIN_STORES:
            total += assert_same_as_builtin(spark, path, {"storeName": store, **at})
    assert total > 0
    assert_same_as_builtin(spark, path, {}, fmt="state-metadata")


@pytest.mark.parametrize("name", ["agg_window", "session_window", "dedup", "limit", "join_inner"])
def test_change_feed_matches_builtin(spark, checkpoints, name):
    path = checkpoints(name)
    batches = _batches(path)
    store = {"storeName": "left-keyWithIndexToValue"} if name.startswith("join") else {}
    rows = assert_same_as_builtin(spark, path, {"readChangeFeed": "true", "changeStartBatchId": "0", **store})
    assert rows > 0
    assert_same_as_builtin(
        spark,
        path,
        {
            "readChangeFeed": "true",
            "changeStartBatchId": str(batches[1]),
            "changeEndBatchId": str(batches[-2]),
            **store,
        },
    )


def _snapshot_batches(path: str, partition: int, store: str = "") -> list[int]:
    names = Storage(path).list_names(f"state/0/{partition}{'/' + store if store else ''}") or []
    return sorted(int(n.split(".")[0]) - 1 for n in names if n.endswith(".snapshot"))


@pytest.mark.parametrize("name", ["agg_window", "session_window", "join_inner"])
def test_snapshot_replay_matches_builtin(spark, checkpoints, name):
    path = checkpoints(name)
    join = name.startswith("join")
    store = "left-keyWithIndexToValue" if join else ""
    starts = _snapshot_batches(path, 0, store)
    assert starts, "the query left no snapshot to replay from"
    extra = {"joinSide": "left"} if join else {}
    for start in starts:
        options = {"snapshotStartBatchId": str(start), "snapshotPartitionId": "0", **extra}
        assert_same_as_builtin(spark, path, options)
        assert_same_as_builtin(spark, path, {**options, "batchId": str(_batches(path)[-1])})
    missing = next(b for b in range(10) if b not in starts)
    import state_reader

    with pytest.raises(state_reader.MissingStateFileError, match="snapshot"):
        state_reader.read_state(
            path, snapshot_start_batch_id=missing, snapshot_partition_id=0, **({"join_side": "left"} if join else {})
        )
