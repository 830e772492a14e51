"""One store's rows in a rewrite (``core/rewrite/rows``): loaded as stored, sent where Spark's
shuffle would send them, and turned into the other provider's encoding and back."""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from state_reader.core.rewrite.plan import plan_rewrite
from state_reader.core.rewrite.rows import StoreRows, store_label
from state_reader.core.scan import bind_key_filter
from state_reader.core.size import row_bytes as state_bytes
from state_reader.formats.rocksdb_encoding import decode_keys
from state_reader.formats.unsaferow import decode_rows
from tests.support.golden_dirs import golden_checkpoint
from tests.support.rows import row_bytes


def _stores(name: str) -> list[StoreRows]:
    return plan_rewrite(golden_checkpoint(name)).stores


def test_a_store_is_named_by_operator_and_store_and_with_its_checkpoint_when_asked():
    rows = _stores("join_inner_hdfs")[0]
    assert store_label(rows.plan) == "operator 0 store right-keyToNumValues"
    located = store_label(rows.plan, located=True)
    assert located.startswith("operator 0 store right-keyToNumValues of ") and located.endswith("join_inner_hdfs")


@pytest.mark.parametrize("name", ["agg_window_hdfs", "agg_window_rocksdb", "join_inner_hdfs", "dedup_rocksdb"])
def test_routed_to_the_recorded_partition_count_every_row_stays_where_spark_put_it(name):
    for rows in _stores(name):
        assert not rows.single
        for pid in rows.plan.partitions:
            keys, _ = rows.load(pid)
            target, keep = rows.route(keys, rows.plan.num_partitions, None)
            assert len(target) == len(keys.lengths) > 0
            assert keep.all()
            assert (target == pid).all(), f"{store_label(rows.plan)} partition {pid}: {target}"


def test_routed_to_more_partitions_rows_spread_and_to_one_they_gather():
    rows = _stores("agg_window_hdfs")[0]
    keys, _ = rows.load(1)
    assert (rows.route(keys, 1, None)[0] == 0).all()
    spread = rows.route(keys, 64, None)[0]
    assert spread.min() >= 0 and spread.max() < 64 and len(set(spread.tolist())) > 1


def test_a_global_limit_keeps_its_count_in_partition_zero():
    (rows,) = _stores("limit_hdfs")
    assert rows.single
    assert rows.target_partitions(5) == [0]
    keys, _ = rows.load(0)
    target, keep = rows.route(keys, 5, None)
    assert target.tolist() == [0] * len(keys.lengths) and keep.all()


def test_rows_matched_by_drop_are_not_kept():
    rows = _stores("agg_window_hdfs")[0]
    drop = bind_key_filter(rows.plan, lambda keys: pc.equal(keys.field("region_id"), 1), "drop_keys")
    keys, _ = rows.load(1)
    _, keep = rows.route(keys, 2, drop)
    region = decode_rows(keys, rows.plan.key_schema).field("region_id").to_pylist()
    # a null region_id is no match: that key is kept
    assert keep.tolist() == [r != 1 for r in region]
    assert 0 < keep.sum() < len(keep)


def test_sizes_are_state_bytes_as_stored():
    rows = _stores("agg_window_rocksdb")[0]
    keys, values, sizes = rows.load_sized(1)
    assert sizes.tolist() == state_bytes(keys, values).tolist()
    assert sizes.sum() == keys.lengths.sum() + values.lengths.sum()


def test_rows_stay_as_they_are_within_a_provider():
    rows = _stores("agg_window_hdfs")[0]
    keys, values = rows.load(0)
    assert rows.convert(keys, values, to_rocksdb=False) == (keys, values)


def test_rocksdb_rows_become_unsaferows_with_the_same_keys_and_back_to_the_same_bytes():
    rows = _stores("agg_window_rocksdb")[0]
    for pid in rows.plan.partitions:
        keys, values = rows.load(pid)
        unsafe_keys, unsafe_values = rows.convert(keys, values, to_rocksdb=False)
        plan = rows.plan
        assert decode_rows(unsafe_keys, plan.key_schema).equals(
            decode_keys(keys, plan.key_schema, rows.spec, plan.store_conf.avro)
        )
        # the same store as the HDFS-backed provider would hold it, turned into RocksDB's encoding
        as_hdfs = StoreRows(plan)
        as_hdfs.rocksdb = False
        back_keys, back_values = as_hdfs.convert(unsafe_keys, unsafe_values, to_rocksdb=True)
        assert row_bytes(back_keys) == row_bytes(keys)
        assert row_bytes(back_values) == row_bytes(values)
        assert row_bytes(unsafe_keys) != row_bytes(keys)  # the two encodings do differ
