"""Our readers against Spark's built-in reader on checkpoints written by real
queries with the HDFS-backed provider: every operator, latest and earlier batches."""

from __future__ import annotations

import pytest
from oracle import assert_same_as_builtin
from streaming_queries import QUERIES

from state_reader.checkpoint import Checkpoint
from state_reader.storage import Storage

QUERY_NAMES = sorted(QUERIES)


def _batches(path: str) -> list[int]:
    return Checkpoint(Storage(path)).committed_batches


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
