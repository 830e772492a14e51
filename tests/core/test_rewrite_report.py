"""A rewrite's report: one store's counts, an edit's changes to them, and the whole report as a
table, a layout, plain data and one line (``core/rewrite/report``)."""

from __future__ import annotations

import pytest

from state_reader.core.rewrite.plan import plan_rewrite
from state_reader.core.rewrite.report import CURRENT, LAYOUTS, NEW, RewriteReport, StoreReport, store_report
from tests.support.golden_dirs import golden_checkpoint


def _store(name: str, new_rows: list[int], new_bytes: list[int], old_rows: list[int], old_bytes: list[int]):
    return StoreReport(
        0,
        "stateStoreSave",
        name,
        rows=sum(new_rows),
        rows_per_partition=list(new_rows),
        bytes_per_partition=list(new_bytes),
        old_rows_per_partition=list(old_rows),
        old_bytes_per_partition=list(old_bytes),
    )


def _report(*stores: StoreReport, dry_run: bool = False) -> RewriteReport:
    return RewriteReport("/src", "/dst", 7, "rocksdb", 2, 3, "hdfs", dry_run, list(stores), files=12, bytes=3 << 20)


def test_an_edit_counts_start_at_zero_for_every_new_partition_and_move_rows_and_bytes():
    store = _store("default", [5, 0, 2], [50, 0, 20], [4, 3], [40, 30])
    assert not store.edited
    store.add_edit(1, gained=3, replaced=1, lost=0, byte_change=33)
    store.add_edit(2, gained=0, replaced=0, lost=2, byte_change=-20)
    assert store.edited
    assert store.gained_per_partition == [0, 3, 0]
    assert store.replaced_per_partition == [0, 1, 0]
    assert store.lost_per_partition == [0, 0, 2]
    assert store.rows_per_partition == [5, 3, 0]
    assert store.bytes_per_partition == [50, 33, 0]
    assert store.rows == 8


def test_an_edit_counting_other_rows_than_its_keys_moves_rows_by_row_change():
    store = _store("default", [1, 1], [10, 10], [2], [20])
    # a list replaced: one key replaced, but its three elements became one
    store.add_edit(0, gained=0, replaced=1, lost=0, byte_change=-5, row_change=-2)
    assert store.rows_per_partition == [-1, 1]
    assert store.rows == 0


def test_partition_sizes_sum_the_stores_in_either_layout():
    a = _store("a", [1, 2, 3], [10, 20, 30], [4, 2], [40, 20])
    b = _store("b", [0, 5, 0], [0, 50, 0], [5, 0], [50, 0])
    report = _report(a, b)
    rows, size = report.partition_sizes(new=True)
    assert rows.tolist() == [1, 7, 3] and size.tolist() == [10, 70, 30]
    rows, size = report.partition_sizes(new=False)
    assert rows.tolist() == [9, 2] and size.tolist() == [90, 20]
    assert report.skew(new=True) == pytest.approx(70 / 30)
    assert report.skew(new=False) == pytest.approx(90 / 55)


def test_table_has_a_row_per_store_and_new_partition():
    report = _report(_store("a", [1, 2, 3], [10, 20, 30], [], []), _store("b", [4, 0, 0], [40, 0, 0], [], []))
    assert report.table().to_pylist()[2:4] == [
        {"operator_id": 0, "store_name": "a", "partition_id": 2, "rows": 3, "bytes": 30},
        {"operator_id": 0, "store_name": "b", "partition_id": 0, "rows": 4, "bytes": 40},
    ]
    assert report.table().num_rows == 6


def test_layout_names_the_current_layout_then_the_new():
    report = _report(_store("a", [1, 2, 3], [10, 20, 30], [4, 2], [40, 20]))
    layout = report.layout().to_pydict()
    assert [name for name, _ in LAYOUTS] == [CURRENT, NEW]
    assert layout["layout"] == [CURRENT] * 2 + [NEW] * 3
    assert layout["partition_id"] == [0, 1, 0, 1, 2]
    assert layout["rows"] == [4, 2, 1, 2, 3]
    assert layout["bytes"] == [40, 20, 10, 20, 30]


def test_summary_gives_both_layouts_and_an_edit_only_for_edited_stores():
    plain = _store("a", [1, 0, 0], [10, 0, 0], [1, 0], [10, 0])
    edited = _store("b", [2, 2, 2], [20, 0, 0], [3, 3], [30, 30])
    edited.add_edit(0, gained=1, replaced=0, lost=0, byte_change=10)
    edited.widened = ["value.count: int widened to bigint"]
    summary = _report(plain, edited).summary()
    assert summary[CURRENT]["skew"] == pytest.approx(40 / 35)
    assert summary[NEW]["rows_per_partition"] == [4, 2, 2]
    assert summary[NEW]["bytes_per_partition"] == [40, 0, 0]
    # the new layout's median partition is empty: an infinite skew is no number in JSON
    assert summary[NEW]["skew"] is None
    assert summary["destination"] == "/dst" and summary["source_provider"] == "hdfs"
    first, second = summary["stores"]
    assert "gained" not in first
    assert second["gained"] == 1 and second["gained_per_partition"] == [1, 0, 0]
    assert second["widened"] == edited.widened


def test_one_line_says_what_was_written_or_would_be():
    store = _store("a", [1_000, 234], [1, 1], [], [])
    assert str(_report(store)) == (
        "rewrite of /src at batch 7 into /dst: 2 -> 3 partitions, 1,234 rows, 12 files, 3.0 MiB"
    )
    assert str(_report(store, dry_run=True)) == "dry run of a rewrite of /src at batch 7: 2 -> 3 partitions, 1,234 rows"


def test_an_empty_report_has_no_skew_to_speak_of():
    report = _report()
    assert report.partition_sizes(new=True)[0].tolist() == [0, 0, 0]
    assert report.skew() == 1.0
    assert report.table().num_rows == 0


@pytest.mark.parametrize(("writer", "name"), [("spark-4.0.5", "stateStoreSave"), ("spark-3.5.8", None)])
def test_a_store_report_names_the_operator_its_metadata_names(writer, name):
    plan = plan_rewrite(golden_checkpoint("agg_window_hdfs", writer)).stores[0].plan
    report = store_report(plan)
    assert (report.operator_id, report.operator_name, report.store_name) == (0, name, "default")
    assert report.rows == 0 and not report.edited
