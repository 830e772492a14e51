"""A rewrite's plan (``core/rewrite/plan``): what it takes from the checkpoint's logs and metadata,
what the destination records differently, and what it refuses before anything is written."""

from __future__ import annotations

import uuid

import pytest

from state_reader.core.rewrite.plan import RewriteOptions, offset_batches, plan_rewrite
from state_reader.errors import InvalidOptionError, StateReaderError
from state_reader.model.checkpoint import JOIN_STORES
from tests.support.golden_dirs import golden_checkpoint


def test_by_default_the_last_committed_batch_is_planned_as_it_is():
    cp = golden_checkpoint("agg_window_rocksdb")
    rewrite_plan = plan_rewrite(cp)
    assert rewrite_plan.batch_id == cp.latest_committed_batch() == 7
    assert (rewrite_plan.old_partitions, rewrite_plan.new_partitions) == (2, 2)
    assert (rewrite_plan.source_provider, rewrite_plan.provider) == ("rocksdb", "rocksdb")
    assert rewrite_plan.to_rocksdb
    assert [rows.plan.batch_id for rows in rewrite_plan.stores] == [7]
    assert rewrite_plan.offset_confs == {"spark.sql.shuffle.partitions": "2"}
    assert offset_batches(cp) == list(range(8))


def test_a_new_provider_and_partition_count_are_recorded_in_the_offset_confs():
    rewrite_plan = plan_rewrite(
        golden_checkpoint("agg_window_hdfs"), RewriteOptions(num_partitions=5, provider="RocksDB", batch_id=4)
    )
    assert rewrite_plan.batch_id == 4 and rewrite_plan.new_partitions == 5
    assert rewrite_plan.provider == "rocksdb" and rewrite_plan.source_provider == "hdfs"
    assert rewrite_plan.offset_confs == {
        "spark.sql.shuffle.partitions": "5",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
    }
    assert rewrite_plan.report("/dst", dry_run=True).source_provider == "hdfs"


def test_a_join_plans_its_four_stores():
    rewrite_plan = plan_rewrite(golden_checkpoint("join_inner_hdfs"))
    assert sorted(rows.plan.store_name for rows in rewrite_plan.stores) == sorted(JOIN_STORES)


def test_the_commit_entry_is_the_sources_in_format_1():
    cp = golden_checkpoint("join_inner_hdfs")
    rewrite_plan = plan_rewrite(cp)
    assert not rewrite_plan.unique_ids
    assert rewrite_plan.unique_id(rewrite_plan.stores[0].plan, 0) is None
    assert rewrite_plan.commit_entry() == cp.commit_entry(7)[1]


def test_unique_ids_in_format_2_name_each_store_of_each_new_partition_in_spark_order():
    rewrite_plan = plan_rewrite(golden_checkpoint("join_inner_hdfs"), RewriteOptions(num_partitions=3))
    rewrite_plan.unique_ids = True  # as a checkpoint of format 2 records them
    plans = {rows.plan.store_name: rows.plan for rows in rewrite_plan.stores}
    ids = rewrite_plan.commit_entry()["stateUniqueIds"]["0"]
    assert len(ids) == 3
    for pid, row in enumerate(ids):
        assert row == [rewrite_plan.unique_id(plans[name], pid) for name in JOIN_STORES]
    every = [i for row in ids for i in row]
    assert len(set(every)) == 12 and all(uuid.UUID(i).version == 5 for i in every)
    # the same rewrite names the same files alike in any process; another rewrite does not
    again = plan_rewrite(golden_checkpoint("join_inner_hdfs"), RewriteOptions(num_partitions=3))
    again.unique_ids, again.rewrite_id = True, rewrite_plan.rewrite_id
    assert again.commit_entry() == rewrite_plan.commit_entry()
    again.rewrite_id = str(uuid.uuid4())
    assert again.commit_entry() != rewrite_plan.commit_entry()


def test_a_global_limit_is_one_partition_whatever_the_count():
    rewrite_plan = plan_rewrite(golden_checkpoint("limit_hdfs"), RewriteOptions(num_partitions=4))
    (rows,) = rewrite_plan.stores
    assert rows.single and rows.target_partitions(rewrite_plan.new_partitions) == [0]


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        (RewriteOptions(num_partitions=0), InvalidOptionError, "num_partitions must be at least 1"),
        (RewriteOptions(provider="memory"), InvalidOptionError, "provider must be one of hdfs, rocksdb"),
        (RewriteOptions(batch_id=42), StateReaderError, "42"),
    ],
)
def test_what_cannot_be_rewritten_is_refused_up_front(options, error, words):
    with pytest.raises(error, match=words):
        plan_rewrite(golden_checkpoint("agg_window_hdfs"), options)
