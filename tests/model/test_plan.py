"""The plan of one read (``model/plan``): the version a batch reads, the output schema of a state
read and of a change feed, a join side's stores, and the key fields Spark's shuffle hashes."""

from __future__ import annotations

import pytest

from state_reader.core.options import from_kwargs
from state_reader.core.planner import plan_state_read
from state_reader.model.plan import StateReadPlan
from tests.support.golden_dirs import golden_path


def _plan(name: str, **options) -> StateReadPlan:
    return plan_state_read(from_kwargs(golden_path(name), options))


def test_a_batch_reads_the_version_it_committed_from_its_stores_directory():
    plan = _plan("agg_window_hdfs", batch_id=5)
    assert (plan.batch_id, plan.version) == (5, 6)
    assert plan.store_dir(1) == "state/0/1"
    assert plan.codec == "lz4" and plan.provider == plan.provider_class
    assert plan.storage is plan.checkpoint.storage
    assert not plan.is_change_feed


def test_a_state_read_shows_key_value_and_partition_id():
    plan = _plan("agg_window_rocksdb")
    assert plan.arrow_schema.names == ["key", "value", "partition_id"]
    assert plan.output_schema.fields[0].data_type == plan.key_schema
    assert plan.arrow_schema.field("partition_id").type.bit_width == 32


def test_a_change_feed_leads_with_its_batch_and_change_type():
    plan = _plan("agg_window_rocksdb_cl", read_change_feed=True, change_start_batch_id=3)
    assert plan.is_change_feed
    assert plan.arrow_schema.names == ["batch_id", "change_type", "key", "value", "partition_id"]
    assert str(plan.arrow_schema.field("batch_id").type) == "int64"


def test_a_join_side_names_its_two_stores_and_hides_matched():
    plan = _plan("join_inner_hdfs", join_side="right")
    assert plan.join is not None
    assert [plan.join.store_name(i) for i in (0, 1)] == ["right-keyToNumValues", "right-keyWithIndexToValue"]
    assert "matched" in plan.join.row_value_schema.names
    assert "matched" not in plan.join.shown_value_schema.names


@pytest.mark.parametrize(
    ("name", "options", "fields"),
    [
        # a window aggregation: the whole key (window and grouping columns)
        ("agg_window_hdfs", {}, 3),
        # a session window: the grouping key without the session (the prefix-key columns)
        ("session_window_rocksdb_cl", {}, 1),
        # a join's row store: its join key without the row's index
        ("join_inner_hdfs", {"store_name": "left-keyWithIndexToValue"}, 1),
        ("join_inner_hdfs", {"store_name": "left-keyToNumValues"}, 1),
        ("join_inner_hdfs", {"join_side": "left"}, 1),
    ],
)
def test_the_partition_key_is_the_leading_fields_spark_hashes(name, options, fields):
    plan = _plan(name, **options)
    assert plan.partition_key_fields == fields
