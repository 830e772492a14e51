"""Routing in a rewrite (``core/rewrite/route``): each old partition's rows sent to their new
partitions in runs, counted, and held in spill files read back in chunks of whole records."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

from state_reader.core.rewrite.plan import plan_rewrite
from state_reader.core.rewrite.report import StoreReport
from state_reader.core.rewrite.route import Spill, route_partition, route_store
from state_reader.core.rewrite.rows import StoreRows
from state_reader.core.scan import bind_key_filter
from state_reader.core.size import row_bytes as state_bytes
from state_reader.formats.unsaferow import PAD, RowBuffer
from state_reader.progress import progress
from state_reader.providers.hdfs import frame_records, framed_rows
from tests.support.golden_dirs import golden_checkpoint
from tests.support.rows import row_bytes


def _store(name: str) -> StoreRows:
    return plan_rewrite(golden_checkpoint(name)).stores[0]


def _records(spill: Spill, pid: int) -> list[tuple[bytes, bytes]]:
    out = []
    for chunk in spill.read(pid):
        keys, values = framed_rows(chunk, f"partition {pid}")
        out += zip(row_bytes(keys), row_bytes(values), strict=True)
    return out


def _buffer(rows: list[bytes]) -> RowBuffer:
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    return RowBuffer.wrap(
        np.frombuffer(b"".join(rows) + bytes(PAD), dtype=np.uint8),
        sum(map(len, rows)),
        (np.cumsum(lengths) - lengths).astype(np.int64),
        lengths,
        "test rows",
    )


def test_spilled_records_come_back_per_partition_in_whole_records(tmp_path):
    spill = Spill(str(tmp_path), 3)
    spill.CHUNK = 160  # about two runs of records a chunk
    written: dict[int, list[tuple[bytes, bytes]]] = {0: [], 1: [], 2: []}
    for run in range(3):
        keys = [f"k{run}-{i}".encode() for i in range(6)]
        values = [bytes([run]) * (i + 1) for i in range(6)]
        target = np.array([0, 0, 2, 2, 2, 2])
        framed, lengths = frame_records(_buffer(keys), _buffer(values))
        counts = np.bincount(target, minlength=3)
        spill.add(framed, np.r_[0, np.cumsum(lengths)][np.r_[0, np.cumsum(counts)]], counts)
        for p, k, v in zip(target.tolist(), keys, values, strict=True):
            written[p].append((k, v))
    assert spill.runs[1] == []
    for pid in range(3):
        assert _records(spill, pid) == written[pid]
    chunks = list(spill.read(2))
    sizes = [len(c) for c in chunks]
    # each chunk ends where a run ends, and holds as many runs as fit in CHUNK
    assert len(sizes) > 1
    assert set(np.cumsum(sizes).tolist()) <= set(np.cumsum(spill.runs[2]).tolist())
    assert all(a + b > spill.CHUNK for a, b in itertools.pairwise(sizes))
    assert b"".join(spill.take(2)) == b"".join(chunks)
    assert not (tmp_path / "2.records").exists() and (tmp_path / "0.records").exists()


@pytest.mark.parametrize("to_rocksdb", [False, True])
def test_a_partition_routed_keeps_every_row_in_new_partition_order(to_rocksdb):
    rows = _store("agg_window_hdfs")
    keys, values = rows.load(1)
    routed = list(route_partition(rows, 1, 4, None, to_rocksdb))
    assert sum(r.old_rows for r in routed) == len(keys.lengths)
    assert sum(r.old_bytes for r in routed) == int(state_bytes(keys, values).sum())
    assert sum(r.dropped for r in routed) == 0
    target = np.concatenate([r.target for r in routed])
    assert (np.diff(target) >= 0).all()
    expected = rows.route(keys, 4, None)[0]
    assert sorted(target.tolist()) == sorted(expected.tolist())
    got_keys = [k for r in routed for k in row_bytes(r.keys)]
    want_keys, _ = rows.convert(keys, values, to_rocksdb)
    assert sorted(got_keys) == sorted(row_bytes(want_keys))


def test_routing_a_store_counts_old_and_new_partitions_and_spills_the_rows(tmp_path):
    rows = _store("agg_window_rocksdb")
    report = StoreReport(0, None, "default")
    spill = Spill(str(tmp_path), 3)
    with progress("routing", len(rows.plan.partitions), enabled=False) as bar:
        route_store(rows, report, 3, None, True, spill, bar)
    loaded = [rows.load(pid) for pid in rows.plan.partitions]
    assert report.old_rows_per_partition == [len(k.lengths) for k, _ in loaded]
    assert report.old_bytes_per_partition == [int(state_bytes(k, v).sum()) for k, v in loaded]
    assert report.rows == sum(report.old_rows_per_partition) == sum(report.rows_per_partition)
    assert len(report.rows_per_partition) == 3
    stored = sorted((k, v) for keys, values in loaded for k, v in zip(row_bytes(keys), row_bytes(values), strict=True))
    spilled = []
    for pid in range(3):
        records = _records(spill, pid)
        assert len(records) == report.rows_per_partition[pid]
        assert sum(len(k) + len(v) for k, v in records) == report.bytes_per_partition[pid]
        spilled += records
    assert sorted(spilled) == stored


def test_a_dry_run_counts_without_a_spill_and_drops_what_drop_matches():
    rows = _store("agg_window_hdfs")
    report = StoreReport(0, None, "default")
    drop_all = bind_key_filter(rows.plan, lambda keys: pa.array([True] * len(keys)), "drop_keys")
    with progress("routing", len(rows.plan.partitions), enabled=False) as bar:
        route_store(rows, report, 2, drop_all, False, None, bar)
    assert report.dropped == sum(report.old_rows_per_partition) > 0
    assert report.rows == 0 and report.rows_per_partition == [0, 0] and report.bytes_per_partition == [0, 0]
