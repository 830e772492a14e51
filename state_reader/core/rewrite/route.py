"""Routing in a rewrite: each old partition's rows sent to their new partitions, a run of rows at a
time, and held in local temporary files until each new partition is written."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from state_reader.core.key_filter import KeyFilter
from state_reader.core.rewrite.report import StoreReport
from state_reader.core.rewrite.rows import StoreRows
from state_reader.core.size import row_bytes
from state_reader.formats.unsaferow import RowBuffer
from state_reader.formats.unsaferow_encode import row_runs
from state_reader.io.memory import release_free_memory
from state_reader.progress import Progress
from state_reader.providers.hdfs import frame_records


@dataclass
class RoutedSlice:
    """The kept rows of a run of one old partition's rows, ordered by new partition, in the target encoding."""

    keys: RowBuffer
    values: RowBuffer
    # each kept row's new partition (non-decreasing)
    target: np.ndarray
    dropped: int
    old_rows: int
    old_bytes: int


# An old partition is routed in runs of rows of about 1/16 of its bytes, within these bounds:
# what routing holds beyond the loaded partition (decoded keys, hashes, framed records) follows
# a run, not the partition.
_SLICE_BYTES = (256 << 10, 4 << 20)


def route_partition(
    rows: StoreRows, pid: int, num_partitions: int, drop: KeyFilter | None, to_rocksdb: bool
) -> Iterator[RoutedSlice]:
    """Load old partition ``pid`` of a store and send each row to its new partition, a run of rows at a time."""
    keys, values, source_sizes = rows.load_sized(pid)
    sizes = row_bytes(keys, values)
    low, high = _SLICE_BYTES
    for lo, hi in row_runs(sizes, min(max(int(sizes.sum()) // 16, low), high)):
        part_keys = keys.take(slice(lo, hi))
        target, keep = rows.route(part_keys, num_partitions, drop)
        index = np.flatnonzero(keep)
        index = index[np.argsort(target[index], kind="stable")]
        k, v = rows.convert(part_keys.take(index), values.take(index + lo), to_rocksdb)
        yield RoutedSlice(k, v, target[index], hi - lo - len(index), hi - lo, int(source_sizes[lo:hi].sum()))


class Spill:
    """The framed records routed to each new partition of one store, in local temporary files
    until that partition is written: memory holds one old partition while routing and a few
    MiB of one new partition while writing, never the whole store."""

    # what a new partition's records are read back in (runs of whole records of about this size)
    CHUNK = 4 << 20

    def __init__(self, workdir: str, num_partitions: int) -> None:
        self.paths = [os.path.join(workdir, f"{p}.records") for p in range(num_partitions)]
        # the size of each run of whole records appended to each file
        self.runs: list[list[int]] = [[] for _ in range(num_partitions)]
        for path in self.paths:
            open(path, "wb").close()

    def add(self, framed: np.ndarray, bounds: np.ndarray, counts: np.ndarray) -> None:
        """Append each new partition's run of ``framed`` (``bounds[p]:bounds[p+1]``)."""
        for pid in np.flatnonzero(counts).tolist():
            with open(self.paths[pid], "ab") as fh:
                fh.write(framed[bounds[pid] : bounds[pid + 1]].data)
            self.runs[pid].append(int(bounds[pid + 1] - bounds[pid]))

    def take(self, pid: int) -> Iterator[bytes]:
        """New partition ``pid``'s records, in chunks of whole records; the file goes once read."""
        try:
            yield from self.read(pid)
        finally:
            os.remove(self.paths[pid])

    def read(self, pid: int) -> Iterator[bytes]:
        """New partition ``pid``'s records, in chunks of whole records (the file stays)."""
        with open(self.paths[pid], "rb") as fh:
            chunk = 0
            for size in self.runs[pid]:
                if chunk and chunk + size > self.CHUNK:
                    yield fh.read(chunk)
                    chunk = 0
                chunk += size
            if chunk:
                yield fh.read(chunk)


def route_store(
    rows: StoreRows,
    report: StoreReport,
    num_partitions: int,
    drop: KeyFilter | None,
    to_rocksdb: bool,
    spill: Spill | None,
    bar: Progress,
) -> None:
    """Send every row of one store to its new partition (into ``spill`` unless a dry run),
    counting rows and bytes per old and per new partition in ``report``."""
    new_rows = np.zeros(num_partitions, dtype=np.int64)
    new_bytes = np.zeros(num_partitions, dtype=np.int64)
    for pid in rows.plan.partitions:
        old_rows = old_bytes = 0
        for routed in route_partition(rows, pid, num_partitions, drop, to_rocksdb):
            old_rows += routed.old_rows
            old_bytes += routed.old_bytes
            report.dropped += routed.dropped
            counts = np.bincount(routed.target, minlength=num_partitions)
            new_rows += counts
            sizes = row_bytes(routed.keys, routed.values)
            new_bytes += np.bincount(routed.target, weights=sizes, minlength=num_partitions).astype(np.int64)
            if spill is not None and len(routed.target):
                framed, lengths = frame_records(routed.keys, routed.values)
                # the records are in partition order: partition p's bytes run between these offsets
                spill.add(framed, np.r_[0, np.cumsum(lengths)][np.r_[0, np.cumsum(counts)]], counts)
            del routed
        report.old_rows_per_partition.append(old_rows)
        report.old_bytes_per_partition.append(old_bytes)
        release_free_memory()  # the next partition starts from what this one used, not on top of it
        bar.advance()
    targets = rows.target_partitions(num_partitions)
    report.rows = int(new_rows.sum())
    report.rows_per_partition = [int(new_rows[p]) for p in targets]
    report.bytes_per_partition = [int(new_bytes[p]) for p in targets]
