"""stats(), batch_summary(), plot_state_size() and the file accounting behind them."""

from __future__ import annotations

import os
import re
import statistics

import pytest

import state_reader
from state_reader.inspect.stats import STATS_SCHEMA, SUMMARY_SCHEMA, batch_summary, collect_stats, parse_batch_range
from tests.support.cli import run as cli_run
from tests.support.paths import GOLDEN


def _committed(cp: str) -> list[int]:
    return sorted(int(n) for n in os.listdir(os.path.join(cp, "commits")) if n.isdigit())


def _hdfs_chain(directory: str, version: int) -> tuple[list[str], int]:
    """Files (and their bytes) of an HDFS version, from a listing: the test's own oracle."""
    names = os.listdir(directory)
    snaps = [int(m.group(1)) for n in names if (m := re.fullmatch(r"(\d+)\.snapshot", n))]
    start = max((s for s in snaps if s <= version), default=0)
    files = ([f"{start}.snapshot"] if start else []) + [f"{v}.delta" for v in range(start + 1, version + 1)]
    return files, sum(os.path.getsize(os.path.join(directory, f)) for f in files)


def test_stats_rows_match_read_state_and_files_match_disk(agg):
    table = state_reader.stats(agg)
    assert table.schema == STATS_SCHEMA
    committed = _committed(agg)
    assert sorted(set(table.column("batch_id").to_pylist())) == committed
    for row in table.to_pylist():
        state = state_reader.read_state(agg, batch_id=row["batch_id"])
        in_partition = [p for p in state.column("partition_id").to_pylist() if p == row["partition_id"]]
        assert row["rows"] == len(in_partition)
        assert row["version"] == row["batch_id"] + 1
        files, size = _hdfs_chain(os.path.join(agg, "state", "0", str(row["partition_id"])), row["version"])
        assert row["files"] == len(files) and row["bytes_on_disk"] == size
        assert row["delta_chain"] == sum(f.endswith(".delta") for f in files)
        assert row["snapshot_version"] == (int(files[0].split(".")[0]) if files[0].endswith(".snapshot") else None)
        assert row["state_bytes"] > 0 or row["rows"] == 0


def test_batch_summary_totals_and_skew(agg):
    table = state_reader.stats(agg)
    summary = batch_summary(table)
    assert summary.schema == SUMMARY_SCHEMA
    assert summary.num_rows == len(_committed(agg))
    rows = table.to_pylist()
    for s in summary.to_pylist():
        parts = [r for r in rows if r["batch_id"] == s["batch_id"]]
        counts = [r["rows"] for r in parts]
        assert s["rows"] == sum(counts) == state_reader.read_state(agg, batch_id=s["batch_id"]).num_rows
        assert s["max_partition_rows"] == max(counts)
        assert s["median_partition_rows"] == statistics.median(counts)
        median = statistics.median(counts)
        # every partition empty: even; only the median one: infinitely skewed, null in the table
        assert s["rows_skew"] == (pytest.approx(max(counts) / median) if median else 1.0 if max(counts) == 0 else None)
        assert s["bytes_on_disk"] == sum(r["bytes_on_disk"] for r in parts)


def test_stats_selects_operator_store_and_batches():
    multi = str(GOLDEN / "spark-4.0.5" / "multi_op_hdfs")
    both = state_reader.stats(multi)
    assert sorted(set(both.column("operator_id").to_pylist())) == [0, 1]
    one = state_reader.stats(multi, operator_id=1, change_start_batch_id=2, change_end_batch_id=4)
    assert set(one.column("operator_id").to_pylist()) == {1}
    assert sorted(set(one.column("batch_id").to_pylist())) == [2, 3, 4]
    join = state_reader.stats(str(GOLDEN / "spark-3.5.8" / "join_inner_hdfs"), store_name="left-keyToNumValues")
    assert set(join.column("store_name").to_pylist()) == {"left-keyToNumValues"}
    with pytest.raises(state_reader.CommittedBatchUnavailableError, match=r"range 99\.\. .*committed batches: 0\.\.7"):
        state_reader.stats(multi, change_start_batch_id=99)
    with pytest.raises(state_reader.SchemaReadError, match="operator 5"):
        state_reader.stats(multi, operator_id=5)
    with pytest.raises(state_reader.SchemaReadError, match="no store 'nope'"):
        state_reader.stats(multi, store_name="nope")


def test_rocksdb_stats_count_snapshot_ssts():
    cp = str(GOLDEN / "spark-4.0.5" / "agg_window_rocksdb_cl")
    result = collect_stats(cp)
    for row in result.table.to_pylist():
        state = state_reader.read_state(cp, batch_id=row["batch_id"])
        assert row["rows"] == state.column("partition_id").to_pylist().count(row["partition_id"])
        if row["snapshot_version"] is not None:
            assert row["files"] > 1 + row["delta_chain"]  # the zip, its SSTs and the changelogs since
        else:
            assert row["files"] == row["delta_chain"] == row["version"]


def test_parse_batch_range():
    assert parse_batch_range("3..7") == (3, 7)
    assert parse_batch_range("3..") == (3, None)
    assert parse_batch_range("..7") == (None, 7)
    assert parse_batch_range("5") == (5, 5)
    assert parse_batch_range(None) == (None, None)
    for bad in ("a..b", "7..3", "-1..2"):
        with pytest.raises(state_reader.InvalidOptionError):
            parse_batch_range(bad)


@pytest.mark.parametrize("name", ["agg_window", "rocksdb_agg_window"])
def test_logs_metadata_and_schemas_are_read_once_per_call(checkpoints, monkeypatch, name):
    from collections import Counter

    from state_reader.inspect.verify import verify_checkpoint
    from state_reader.io.storage import Storage

    reads: Counter[str] = Counter()
    real = Storage.read_bytes

    def counted(self, rel):
        reads[rel] += 1
        return real(self, rel)

    monkeypatch.setattr(Storage, "read_bytes", counted)
    path = checkpoints(name)
    for call in (lambda: state_reader.stats(path), lambda: verify_checkpoint(path)):
        reads.clear()
        call()
        logs = {
            rel: n
            for rel, n in reads.items()
            if rel.startswith(("commits/", "offsets/")) or "/_metadata/" in rel or "_stateSchema" in rel
        }
        assert logs, reads
        assert {rel: n for rel, n in logs.items() if n > 1} == {}


def test_growth_note_says_only_what_the_rows_show():
    from state_reader.inspect.stats import growth_note

    assert growth_note([0, 30, 60, 90], 0, 3) == "state grew in every batch: is a watermark holding back eviction?"
    assert "never shrank over batches 0..5" in growth_note([0, 30, 60, 90, 90, 90], 0, 5)
    assert "every batch" not in growth_note([0, 30, 60, 90, 90, 90], 0, 5)
    assert growth_note([0, 30, 20, 90], 0, 3) is None
    assert growth_note([5, 5, 5], 0, 2) is None


def test_a_batch_range_wider_than_the_checkpoint_is_clamped_and_said(checkpoints):
    import json

    path = checkpoints("agg_window")
    proc = cli_run("stats", path, "--from", "0", "--to", "99", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["batches"] and doc["batches"][-1] < 99
    assert any("0..99 asked for" in n for n in doc["notes"])
