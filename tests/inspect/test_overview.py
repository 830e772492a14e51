"""``overview`` (the ``state-reader overview`` command): what a checkpoint holds, as text and JSON, also for
checkpoints written before Spark 4 recorded operator metadata."""

from __future__ import annotations

import os

from tests.support.cli import run, run_json
from tests.support.paths import GOLDEN


def test_overview_text_and_json(agg):
    proc = run("overview", agg)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no progress bar or colour codes in a pipe
    assert "\x1b[" not in proc.stdout
    for fragment in ("stateStoreSave", "hdfs", "codec lz4", "aggregation v2", "recorded"):
        assert fragment in proc.stdout
    info = run_json("overview", agg)
    committed = sorted(int(n) for n in os.listdir(os.path.join(agg, "commits")) if n.isdigit())
    assert info["batches"] == {
        "first": committed[0],
        "first_batch_id": committed[0],
        "last": committed[-1],
        "last_batch_id": committed[-1],
        "count": len(committed),
        "latest_committed": committed[-1],
        "latest_batch_id": committed[-1],
    }
    assert info["provider"] == "hdfs" and info["codec"] == "lz4"
    assert info["state_format_versions"]["aggregation"] == 2
    assert info["shuffle_partitions"] == 2
    [op] = info["operators"]
    assert op["operator_id"] == 0 and op["operator_name"] == "stateStoreSave"
    assert op["stores"] == [{"store_name": "default", "num_partitions": 2}]
    assert op["partitions_on_disk"] == 2


def test_metadata_is_a_hidden_alias_of_overview(agg):
    """`metadata`, the command's earlier name, prints what `overview` prints and is not listed."""
    overview, metadata = run("overview", agg), run("metadata", agg)
    assert metadata.returncode == 0, metadata.stderr
    assert metadata.stdout == overview.stdout and "stateStoreSave" in metadata.stdout
    assert run_json("metadata", agg) == run_json("overview", agg)
    listed = run("--help").stdout.split("Commands:")[1].split()
    assert "overview" in listed and "metadata" not in listed
    assert "Usage: state-reader metadata" in run("metadata", "--help").stdout


def test_overview_before_spark_4_is_inferred():
    info = run_json("overview", GOLDEN / "spark-3.5.8" / "session_window_hdfs")
    assert info["operator_metadata"].startswith("inferred")
    assert [o["operator_name"] for o in info["operators"]] == ["sessionWindowStateStoreSaveExec"]
    joins = run_json("overview", GOLDEN / "spark-3.5.8" / "join_inner_hdfs")
    assert sorted(s["store_name"] for s in joins["operators"][0]["stores"]) == [
        "left-keyToNumValues",
        "left-keyWithIndexToValue",
        "right-keyToNumValues",
        "right-keyWithIndexToValue",
    ]
    text = run("overview", GOLDEN / "spark-3.5.8" / "agg_window_rocksdb").stdout
    assert "rocksdb" in text and "inferred from files" in text


def test_overview_reports_what_the_checkpoint_has(checkpoints):

    agg = run_json("overview", checkpoints("agg_window"))
    assert agg["state_format_versions"] == {"aggregation": 2}  # not the join and fmgws confs every query records
    assert agg["row_checksum"] is False and agg["changelog_checkpointing"] is None
    assert agg["operators"][0]["batches"]["last"] == agg["batches"]["latest_committed"]
    rocks = run_json("overview", checkpoints("rocksdb_cl_agg_window"))
    assert rocks["changelog_checkpointing"] is True and rocks["checkpoint_format_version"] == 1
    # format 2 is not in the offset log's confs: the commit log's unique ids tell
    assert run_json("overview", checkpoints("rocksdb_v2_agg_window"))["checkpoint_format_version"] == 2
    golden = GOLDEN / "spark-3.5.8"
    names = {op["operator_name"] for op in run_json("overview", golden / "multi_op_hdfs")["operators"]}
    assert "dedupeWithinWatermark" in names
    assert run_json("overview", golden / "dedup_hdfs")["operators"][0]["operator_name"] == "dedupe"
