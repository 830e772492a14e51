"""The one scan path: read a planned store partition by partition, on a few threads.

Every Spark-free read (``read_state`` with or without a key filter, ``changes``,
the CLI, exports) goes through :func:`iter_batches`: partitions are decoded on a
small pool of threads (decompression, numpy, Arrow and the compiled record walk
release the GIL, so they overlap) and handed out in ascending partition order,
each filtered by the key filter as soon as it is decoded. At most one partition
per thread is decoded ahead of the consumer, so memory stays bounded by a few
partitions, and a ``limit`` stops the read without decoding the rest. The Spark
data source reads one partition per task through the same
:func:`partition_batches`.

On a remote filesystem the files of the partitions ahead are fetched
concurrently while earlier ones decode (:class:`_Prefetch`): many partitions in
flight at once, in partition order, bounded by bytes held
(STATE_READER_PREFETCH_MB, 256 by default) and by partitions ahead
(STATE_READER_PREFETCH_PARTITIONS, 64), so a read of hundreds of partitions
costs a handful of round trips and memory stays bounded.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from state_reader.core.decode import read_partition
from state_reader.core.key_filter import OPTION as KEY_FILTER_OPTION
from state_reader.core.key_filter import KeyFilter, KeyFilterSpec, as_key_filter
from state_reader.core.pruning import lookup_partitions
from state_reader.core.size import StoredSizes
from state_reader.errors import InvalidOptionError, MissingStateFileError, StorageError
from state_reader.io.calls import io_threads
from state_reader.model.plan import StateReadPlan
from state_reader.progress import progress
from state_reader.providers.store_files import StoreFiles, files_to_read, unique_id_for


def read_threads() -> int:
    """Threads a scan uses: STATE_READER_THREADS, else the CPUs this process may use."""
    setting = os.environ.get("STATE_READER_THREADS", "").strip()
    if setting.isdigit() and int(setting) > 0:
        return int(setting)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def key_arrow_type(plan: StateReadPlan) -> pa.StructType:
    """Arrow type of the ``key`` column the plan produces."""
    return plan.arrow_schema.field("key").type


def bind_key_filter(
    plan: StateReadPlan, spec: KeyFilterSpec | KeyFilter | None, option: str = KEY_FILTER_OPTION
) -> KeyFilter | None:
    """``spec`` checked against the plan's key (unknown fields fail before any file is read).

    ``option``: the argument ``spec`` came as (``drop_keys`` for a rewrite), which its errors name.
    """
    return as_key_filter(spec, key_arrow_type(plan), option)


def select_partitions(plan: StateReadPlan, partitions: Sequence[int] | None) -> list[int]:
    """The plan's partitions, or those of ``partitions`` (each must exist)."""
    if partitions is None:
        return list(plan.partitions)
    missing = [p for p in partitions if p not in plan.partitions]
    if missing:
        where = plan.storage.display(f"state/{plan.operator_id}")
        have = ", ".join(map(str, plan.partitions)) or "none"
        raise InvalidOptionError(
            f"partition {', '.join(map(str, missing))} of operator {plan.operator_id} does not exist "
            f"under {where} (partitions: {have})",
            path=where,
        )
    return list(dict.fromkeys(partitions))


def partitions_to_read(
    plan: StateReadPlan, key_filter: KeyFilter | None, partitions: Sequence[int] | None = None
) -> list[int]:
    """The partitions a read decodes: those asked for (default: all) that the key filter can match.

    A filter that pins the partition key to a few values reads only the
    partitions Spark put those keys in (:mod:`state_reader.core.pruning`).
    """
    chosen = select_partitions(plan, partitions)
    if key_filter is not None:
        matching = lookup_partitions(plan, key_filter.predicate)
        if matching is not None:
            keep = set(matching)
            chosen = [p for p in chosen if p in keep]
    return chosen


def require_files(plan: StateReadPlan, partitions: Sequence[int]) -> None:
    """MissingStateFileError unless every file the plan's version needs exists in each partition.

    Looks at file names only (one listing per partition). A read that stops at a
    row limit uses it for the partitions it did not decode, so that what it shows
    never hides a partition that cannot be read.
    """
    if plan.join is not None or plan.is_change_feed or plan.snapshot_start_version is not None:
        return  # those read other stores or versions than the plan's own; their reads check as they go
    for pid in partitions:
        directory = plan.store_dir(pid)
        files = StoreFiles(plan.storage, directory, plan.provider_class, plan.codec)
        unique_id = unique_id_for(plan.checkpoint, files, plan.version, plan.operator_id, pid, plan.store_name)
        needed = files.version_files(plan.version, unique_id)
        if not needed.complete:
            missing = [name for name in needed.files if "/" not in name and name not in files.sizes] or needed.files
            shown = plan.storage.display(directory)
            raise MissingStateFileError(
                f"partition {pid} of operator {plan.operator_id} cannot be read at batch {plan.batch_id}: "
                f"{shown} lacks {', '.join(missing[:3])} (version {plan.version} is rebuilt from "
                f"{', '.join(needed.files[:6]) or 'files that are not there'})",
                path=shown,
            )


def partition_batches(
    plan: StateReadPlan,
    partition_id: int,
    key_filter: KeyFilter | None = None,
    stored_sizes: dict[int, StoredSizes] | None = None,
) -> list[pa.RecordBatch]:
    """The record batches of one partition, filtered, empty ones dropped (``stored_sizes``: see
    :func:`iter_batches`)."""
    out = []
    for batch in read_partition(plan, partition_id, stored_sizes):
        if key_filter is not None:
            batch = key_filter.apply(batch)
        if batch.num_rows:
            out.append(batch)
    return out


def _setting(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else default


class _Prefetch:
    """The files of a read's partitions fetched ahead of their decoding, concurrently.

    One task per partition (run on ``workers`` threads, in partition order) finds
    the files the partition's version needs (:func:`files_to_read`) and starts
    their fetches (:meth:`Storage.prefetch`); it is admitted strictly in partition
    order while the partitions admitted and not yet decoded hold less than the
    byte budget and are fewer than ``ahead`` (one is always admitted), so the
    partition the consumer waits for is never starved by later ones.
    """

    def __init__(self, plan: StateReadPlan, chosen: list[int]) -> None:
        self.plan = plan
        self.budget = _setting("STATE_READER_PREFETCH_MB", 256) << 20
        self.ahead = _setting("STATE_READER_PREFETCH_PARTITIONS", 64)
        self._cond = threading.Condition()
        self._serving = 0
        self._used = 0
        self._held: dict[int, tuple[list[str], int]] = {}
        self._closed = False
        self._failed: dict[int, StorageError] = {}
        # as many partitions found at once as files fetched at once (a RocksDB partition's zip is
        # fetched before its SSTs are known)
        self._pool = ThreadPoolExecutor(min(len(chosen), io_threads()), thread_name_prefix="state_reader_prefetch")
        self._tasks = {pid: self._pool.submit(self._warm, i, pid) for i, pid in enumerate(chosen)}

    def _warm(self, index: int, pid: int) -> None:
        rels: list[str] = []
        nbytes = 0
        try:
            found = files_to_read(self.plan, pid)
            if found is not None:
                rels, nbytes = found
        except StorageError as exc:  # the filesystem failed: the partition's read fails with it, not again
            self._failed[pid] = exc
        except Exception:  # the partition's own read meets the error and reports it
            pass
        with self._cond:
            while not self._closed and not (
                self._serving == index
                and (not self._held or (self._used + nbytes <= self.budget and len(self._held) < self.ahead))
            ):
                self._cond.wait()
            self._serving = max(self._serving, index + 1)
            self._cond.notify_all()
            if self._closed:
                self.plan.storage.discard(rels)
                return
            self._held[pid] = (rels, nbytes)
            self._used += nbytes
        self.plan.storage.prefetch(rels)

    def wait(self, pid: int) -> None:
        """Until the partition's fetches have started (its read then waits on each file's)."""
        task = self._tasks.get(pid)
        if task is not None:
            task.result()
        if pid in self._failed:
            raise self._failed[pid]

    def done(self, pid: int) -> None:
        """The partition is decoded: let go of what was fetched for it and not read."""
        with self._cond:
            rels, nbytes = self._held.pop(pid, ([], 0))
            self._used -= nbytes
            self._cond.notify_all()
        self.plan.storage.discard(rels)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            held = [rels for rels, _ in self._held.values()]
            self._held.clear()
        # fetches under way finish in the background: a filesystem that stopped answering does not hold the caller
        self._pool.shutdown(wait=False, cancel_futures=True)
        for rels in held:
            self.plan.storage.discard(rels)


def _prefetched_batches(
    plan: StateReadPlan,
    pid: int,
    flt: KeyFilter | None,
    prefetch: _Prefetch | None,
    sizes: dict[int, StoredSizes] | None = None,
) -> list[pa.RecordBatch]:
    if prefetch is None:
        return partition_batches(plan, pid, flt, sizes)
    prefetch.wait(pid)
    try:
        return partition_batches(plan, pid, flt, sizes)
    finally:
        prefetch.done(pid)


def fetched_ahead(plan: StateReadPlan, partitions: Sequence[int]) -> Iterator[int]:
    """``partitions`` in turn, each with its files fetched (on a remote filesystem, those of the
    partitions after it meanwhile, as a read does): for a loop that reads them one by one
    through the providers (stats measuring a batch), which then costs a few round trips."""
    chosen = list(partitions)
    ahead = plan.storage.remote and chosen and not plan.is_change_feed and plan.snapshot_start_version is None
    prefetch = _Prefetch(plan, chosen) if ahead else None
    try:
        for pid in chosen:
            if prefetch is not None:
                prefetch.wait(pid)
            try:
                yield pid
            finally:
                if prefetch is not None:
                    prefetch.done(pid)
    finally:
        if prefetch is not None:
            prefetch.close()


def _decoded_in_order(
    plan: StateReadPlan,
    chosen: list[int],
    flt: KeyFilter | None,
    threads: int,
    sizes: dict[int, StoredSizes] | None = None,
) -> Iterator[list[pa.RecordBatch]]:
    """Each chosen partition's batches, in order, decoded up to ``threads`` partitions ahead."""
    # a local disk answers at once; elsewhere the files of the partitions ahead are fetched meanwhile
    # (a change feed or a replay reads other versions, as it goes)
    ahead = plan.storage.remote and chosen and not plan.is_change_feed and plan.snapshot_start_version is None
    prefetch = _Prefetch(plan, chosen) if ahead else None
    try:
        yield from _decoded(plan, chosen, flt, threads, prefetch, sizes)
    finally:
        if prefetch is not None:
            prefetch.close()


def _decoded(
    plan: StateReadPlan,
    chosen: list[int],
    flt: KeyFilter | None,
    threads: int,
    prefetch: _Prefetch | None,
    sizes: dict[int, StoredSizes] | None = None,
) -> Iterator[list[pa.RecordBatch]]:
    if threads <= 1 or len(chosen) <= 1:
        for pid in chosen:
            yield _prefetched_batches(plan, pid, flt, prefetch, sizes)
        return
    pending: deque[Future[list[pa.RecordBatch]]] = deque()
    todo = iter(chosen)
    with ThreadPoolExecutor(threads, thread_name_prefix="state_reader") as pool:
        try:
            for pid in todo:
                pending.append(pool.submit(_prefetched_batches, plan, pid, flt, prefetch, sizes))
                if len(pending) >= threads:
                    break
            while pending:
                batches = pending.popleft().result()  # re-raises the partition's error, in partition order
                nxt = next(todo, None)
                if nxt is not None:
                    pending.append(pool.submit(_prefetched_batches, plan, nxt, flt, prefetch, sizes))
                yield batches
        finally:
            for future in pending:  # a limit reached or an error: do not decode the rest
                future.cancel()


def iter_batches(
    plan: StateReadPlan,
    *,
    key_filter: KeyFilterSpec | KeyFilter | None = None,
    partitions: Sequence[int] | None = None,
    limit: int | None = None,
    show_progress: bool | None = None,
    label: str | None = None,
    threads: int | None = None,
    stored_sizes: dict[int, StoredSizes] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches of the planned read, filtered, at most ``limit`` rows in all.

    Partitions come in ascending order. Reading stops as soon as ``limit`` rows
    are out. ``show_progress`` None draws a bar on terminals for slow reads;
    ``threads`` defaults to :func:`read_threads`. ``stored_sizes``, when given,
    gets each partition's rows' sizes as stored (:class:`StoredSizes`, before any
    key filter), measured from what the read loads: ``doctor`` measures rows
    without reading their files again.
    """
    flt = bind_key_filter(plan, key_filter)
    chosen = partitions_to_read(plan, flt, partitions)
    remaining = limit
    what = label or f"operator {plan.operator_id} · batch {plan.batch_id}"
    try:
        with progress(f"reading {what}", len(chosen), enabled=show_progress) as bar:
            for batches in _decoded_in_order(plan, chosen, flt, threads or read_threads(), stored_sizes):
                for batch in batches:
                    if remaining is not None:
                        if batch.num_rows > remaining:
                            batch = batch.slice(0, remaining)
                        remaining -= batch.num_rows
                    yield batch
                    if remaining is not None and remaining <= 0:
                        return
                bar.advance()
    finally:
        # checksum files that were not checksum files, named once for the whole read (a read
        # within checksum_report, such as read_state, names them when that ends instead)
        plan.storage.warn_malformed_checksums()


def result_metadata(plan: StateReadPlan) -> dict[str, str]:
    """What a result was read at, for its Arrow schema metadata (``state_reader.batch_id`` and so on)."""
    meta = {
        "state_reader.batch_id": str(plan.batch_id),
        "state_reader.operator_id": str(plan.operator_id),
        "state_reader.store_name": plan.store_name,
    }
    if plan.variable is not None:
        meta["state_reader.column_family"] = plan.variable.name
    if plan.change_start_batch_id is not None:
        meta["state_reader.change_start_batch_id"] = str(plan.change_start_batch_id)
    return meta


def read_table(plan: StateReadPlan, **kwargs: Any) -> pa.Table:
    """:func:`iter_batches` collected into one table with the plan's schema, its metadata naming the batch."""
    schema = plan.arrow_schema.with_metadata(result_metadata(plan))
    return pa.Table.from_batches(list(iter_batches(plan, **kwargs)), schema=schema)
