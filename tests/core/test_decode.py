"""Decoding one partition (``core/decode``): the provider chosen by class, batches in the plan's
schema, a join side's live rows, the change feed's batches, and sizes as stored."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

from state_reader.core import decode
from state_reader.core.options import from_kwargs
from state_reader.core.planner import plan_state_read
from state_reader.core.size import state_size
from state_reader.errors import RowDecodeError, UnsupportedOptionError
from state_reader.model.plan import StateReadPlan
from tests.support.golden_dirs import golden_path
from tests.support.oracle import arrow_rows


def _plan(name: str, **options) -> StateReadPlan:
    return plan_state_read(from_kwargs(golden_path(name), options))


@pytest.mark.parametrize("name", ["agg_window_hdfs", "agg_window_rocksdb", "agg_window_rocksdb_cl", "dedup_rocksdb"])
def test_a_partition_reads_as_its_stored_rows_in_the_plans_schema(name):
    plan = _plan(name)
    for pid in plan.partitions:
        batches = list(decode.read_partition(plan, pid))
        table = pa.Table.from_batches(batches, plan.arrow_schema)
        keys, _ = decode.stored_rows(plan, pid)
        assert table.num_rows == len(keys.lengths) > 0
        assert table.column("partition_id").to_pylist() == [pid] * table.num_rows
        decoded_keys, _ = decode.decode_partition(plan, pid)
        assert table.column("key").combine_chunks().equals(decoded_keys)


def test_a_partition_is_cut_into_batches_of_at_most_batch_rows(monkeypatch):
    plan = _plan("agg_window_hdfs")
    whole = pa.Table.from_batches(list(decode.read_partition(plan, 1)))
    monkeypatch.setattr(decode, "BATCH_ROWS", 2)
    batches = list(decode.read_partition(plan, 1))
    assert [b.num_rows for b in batches] == [2] * (whole.num_rows // 2) + [whole.num_rows % 2] * (whole.num_rows % 2)
    # compared as canonical rows: the state holds NaN, which equals nothing
    assert arrow_rows(pa.Table.from_batches(batches)) == arrow_rows(whole)


@pytest.mark.parametrize("name", ["agg_window_hdfs", "agg_window_rocksdb"])
def test_a_partition_measures_its_stored_key_and_value_bytes(name):
    plan = _plan(name)
    for pid in plan.partitions:
        keys, values = decode.stored_rows(plan, pid)
        size = decode.measure_partition(plan, pid)
        assert size == state_size(keys, values)
        assert size.rows == len(keys.lengths)
        assert size.bytes == int(keys.lengths.sum() + values.lengths.sum())


def test_a_join_side_has_as_many_rows_as_its_counts_say_without_index_or_matched():
    plan = _plan("join_inner_hdfs", join_side="left")
    assert plan.join is not None
    for pid in plan.partitions:
        keys, values = decode.decode_partition(plan, pid)
        counts_plan = replace(
            plan,
            join=None,
            store_name=plan.join.store_name(0),
            key_schema=plan.join.count_key_schema,
            value_schema=plan.join.count_value_schema,
        )
        _, counts = decode.decode_partition(counts_plan, pid)
        assert len(keys) == sum(counts.field(0).to_pylist()) > 0
        assert keys.type.names == ["field0"] and "matched" not in values.type.names
        with pytest.raises(UnsupportedOptionError, match="not stored rows"):
            decode.stored_rows(plan, pid)
        # a side's bytes are its two stores'
        stores = [replace(counts_plan, store_name=plan.join.store_name(i)) for i in (0, 1)]
        stored = sum(state_size(*decode.stored_rows(s, pid)).bytes for s in stores)
        assert decode.measure_partition(plan, pid).bytes == stored


def test_the_change_feed_gives_each_batchs_changes_with_its_batch_id():
    plan = _plan("agg_window_rocksdb_cl", read_change_feed=True, change_start_batch_id=4)
    for pid in plan.partitions:
        table = pa.Table.from_batches(list(decode.read_partition(plan, pid)), plan.arrow_schema)
        assert table.schema.names == ["batch_id", "change_type", "key", "value", "partition_id"]
        expected = []
        for batch in range(4, plan.batch_id + 1):
            kinds, keys, _ = decode.decode_changes(plan, pid, batch + 1)
            assert len(kinds) == len(keys)
            expected += [(batch, kind) for kind in kinds]
        assert (
            list(zip(table.column("batch_id").to_pylist(), table.column("change_type").to_pylist(), strict=True))
            == expected
        )
        assert set(table.column("change_type").to_pylist()) <= {"update", "delete"}
    assert table.num_rows > 0


def test_an_unknown_provider_class_is_refused_by_name():
    plan = replace(_plan("agg_window_hdfs"), provider_class="com.example.MemoryStateStoreProvider")
    with pytest.raises(UnsupportedOptionError, match=r"com\.example\.MemoryStateStoreProvider is not supported"):
        decode.decode_partition(plan, 0)


def test_rows_that_do_not_fit_given_schemas_blame_the_schemas():
    plan = _plan("agg_window_hdfs", key_schema="a BIGINT, b STRING", value_schema="x STRING")
    with pytest.raises(RowDecodeError, match="The schemas given do not fit the state: keySchema='a BIGINT, b STRING'"):
        decode.decode_partition(plan, 0)
