"""What the checkpoint's logs allow: one rule for a batch older than the oldest commit entry.

A copy whose commit and offset logs were cleaned below batch N while the state files of older
versions are still there (as a query's cleanup or a published copy leaves it): every read that
starts or ends below N is refused, as Spark's reader refuses it, through every option and front.
"""

from __future__ import annotations

import shutil

import pytest

import state_reader
from tests.support.damage import logs_cleaned_below
from tests.support.oracle import arrow_rows, spark_rows

OLDEST = 3  # the oldest batch left in the logs of the damaged copy

# each option that names a batch a read starts or ends at, below OLDEST; Python keywords and Spark options
READS = [
    ({"batch_id": 1}, {"batchId": "1"}),
    ({"read_change_feed": True, "change_start_batch_id": 1}, {"readChangeFeed": "true", "changeStartBatchId": "1"}),
    (
        {"snapshot_start_batch_id": 1, "snapshot_partition_id": 0},
        {"snapshotStartBatchId": "1", "snapshotPartitionId": "0"},
    ),
    (
        {"snapshot_start_batch_id": 1, "snapshot_partition_id": 0, "batch_id": 4},
        {"snapshotStartBatchId": "1", "snapshotPartitionId": "0", "batchId": "4"},
    ),
]


@pytest.fixture(scope="module")
def cleaned(checkpoints, tmp_path_factory):
    """(the original, a copy whose logs start at batch OLDEST with every state file kept)."""
    original = checkpoints("agg_fmt2")
    copy = tmp_path_factory.mktemp("cleaned") / "checkpoint"
    shutil.copytree(original, copy)
    assert logs_cleaned_below(copy, OLDEST)
    assert any(p.name.startswith("1.") for p in (copy / "state" / "0" / "0").iterdir()), "old state files kept"
    return original, str(copy)


@pytest.mark.parametrize("python, spark_options", READS, ids=["batch", "change-feed", "snapshot", "snapshot-to-4"])
def test_a_batch_older_than_the_commit_log_is_refused_everywhere(spark, cleaned, python, spark_options):
    _, cp = cleaned
    with pytest.raises(Exception, match="STDS_COMMITTED_BATCH_UNAVAILABLE"):
        spark.read.format("statestore").options(**spark_options).load(cp).collect()
    with pytest.raises(state_reader.BatchNotRetainedError) as caught:
        state_reader.read_state(cp, **python)
    assert isinstance(caught.value, state_reader.CommittedBatchUnavailableError)
    message = str(caught.value)
    assert "oldest batch in its commit log is 3" in message and "spark.sql.streaming.minBatchesToRetain" in message
    with pytest.raises(Exception, match="STATE_READER_BATCH_NOT_RETAINED"):
        spark.read.format("state_reader.statestore").options(**spark_options).load(cp).collect()


def test_the_refusal_says_the_state_files_are_still_there(cleaned):
    _, cp = cleaned
    with pytest.raises(state_reader.BatchNotRetainedError, match="still holds state files of versions from 1"):
        state_reader.changes(cp, 1)


def test_batches_still_in_the_commit_log_read_as_before(spark, cleaned):
    original, cp = cleaned
    for spark_options in ({"batchId": "3"}, {"readChangeFeed": "true", "changeStartBatchId": "3"}):
        builtin = spark_rows(spark.read.format("statestore").options(**spark_options).load(cp))
        assert builtin == spark_rows(spark.read.format("statestore").options(**spark_options).load(original))
    assert arrow_rows(state_reader.changes(cp, OLDEST, exact_schema=True)) == arrow_rows(
        state_reader.changes(original, OLDEST, exact_schema=True)
    )
    assert arrow_rows(state_reader.changes(cp, OLDEST, exact_schema=True)) == spark_rows(
        spark.read.format("statestore").options(readChangeFeed="true", changeStartBatchId=OLDEST).load(cp)
    )


def test_num_partitions_recorded_else_the_highest_partition_directory(tmp_path):
    """One rule for the number of state partitions (reads, ``metadata`` and the rewrite): the shuffle
    partitions the offset log records, else one past the highest partition directory of any operator."""
    from state_reader.io.storage import Storage
    from state_reader.model.checkpoint import CheckpointDir
    from state_reader.model.conf import CONF_SHUFFLE_PARTITIONS

    for op, partitions in ((0, 3), (1, 1)):  # operator 1: a single-partition operator (a global limit)
        for pid in range(partitions):
            (tmp_path / "state" / str(op) / str(pid)).mkdir(parents=True)
    cp = CheckpointDir(Storage(str(tmp_path), {}))
    assert cp.num_partitions({CONF_SHUFFLE_PARTITIONS: "8"}) == 8
    assert cp.num_partitions({}) == cp.num_partitions({CONF_SHUFFLE_PARTITIONS: "0"}) == 3
    assert CheckpointDir(Storage(str(tmp_path / "empty"), {})).num_partitions({}) == 0
