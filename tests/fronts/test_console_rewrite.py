"""What ``state-reader rewrite`` prints: a report's text, its sizes as people read them, and the rows
written per partition."""

from __future__ import annotations

import json

from state_reader.fronts.console_rewrite import render_rewrite, rewrite_lines


def _report(dry_run: bool):
    from state_reader.core.rewrite import RewriteReport, StoreReport

    report = RewriteReport("/cp", "" if dry_run else "/new", 3, "rocksdb", 2, 3, source_provider="hdfs")
    report.dry_run = dry_run
    report.stores.append(
        StoreReport(
            0,
            "stateStoreSave",
            "default",
            rows=6,
            dropped=1,
            rows_per_partition=[1, 2, 3],
            bytes_per_partition=[1024, 2048, 3 << 20],
            old_rows_per_partition=[3, 4],
            old_bytes_per_partition=[1536, 100],
        )
    )
    if not dry_run:
        report.files, report.bytes = 12, 5 << 20
    return report


def test_a_rewrite_report_as_text_gives_bytes_as_people_read_them():
    done = rewrite_lines(_report(dry_run=False))
    assert done[0] == "rewrote /cp at batch 3 into /new: hdfs -> rocksdb, 2 -> 3 partitions, 12 files, 5.0 MiB"
    assert done[1] == (
        "  current: 2 partitions, 7 rows, 1.6 KiB; per partition 100 B .. median 818 B .. max 1.5 KiB, "
        "skew (max/median) 1.88"
    )
    assert done[2].startswith("      new: 3 partitions, 6 rows, 3.0 MiB; per partition 1.0 KiB .. median 2.0 KiB")
    assert done[3] == "  operator 0 (stateStoreSave) store default: 6 rows, 1 dropped, per partition [1, 2, 3]"
    dry = rewrite_lines(_report(dry_run=True))
    assert dry[0] == "dry run: /cp at batch 3, hdfs -> rocksdb, 2 -> 3 partitions (nothing written)"
    # the report's own text is one line
    assert str(_report(dry_run=True)).count("\n") == 0


def test_render_rewrite_prints_the_text_or_the_summary(capsys):
    report = _report(dry_run=False)
    render_rewrite(report, plot_out=None, as_json=False)
    assert capsys.readouterr().out.splitlines() == rewrite_lines(report)
    render_rewrite(report, plot_out="plan.png", as_json=True)
    assert json.loads(capsys.readouterr().out) == {**report.summary(), "plot": "plan.png"}


def test_rows_written_into_a_store_are_counted_per_partition_they_change():
    report = _report(dry_run=True)
    store = report.stores[0]
    store.add_edit(0, gained=2, replaced=0, lost=0, byte_change=100)
    store.add_edit(2, gained=0, replaced=1, lost=1, byte_change=-50)
    store.widened.append("upsert field value.sum: int converted to bigint, every value fits")
    assert store.rows == 7 and store.rows_per_partition == [3, 2, 2]
    lines = rewrite_lines(report)
    at = lines.index("    rows written: 2 keys gained, 1 replaced, 1 lost")
    assert lines[at + 1 :] == [
        "      partition 0 gains 2, replaces 0, loses 0",
        "      partition 2 gains 0, replaces 1, loses 1",
        "    upsert field value.sum: int converted to bigint, every value fits",
    ]
    summary = report.summary()["stores"][0]
    assert summary["gained_per_partition"] == [2, 0, 0] and summary["lost"] == 1
