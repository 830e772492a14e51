"""State size per partition and batch, and how it spreads over partitions.

:func:`stats` answers "how big is the state, where, and is it growing?": for each
store of each operator, each batch and each partition, the rows and
state bytes (:mod:`state_reader.core.size`: the key and value bytes as the
store keeps them, uncompressed; with the same plan ``read_state`` uses), plus the files the
version is rebuilt from, their bytes on disk and the delta chain since the last
snapshot. :func:`batch_summary` folds that into one row per batch with the skew
between partitions (largest over median).
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from state_reader.core import live
from state_reader.core.decode import measure_partition
from state_reader.core.options import check_batch_range, from_kwargs, python_api
from state_reader.core.planner import give_schemas, plan_store_read, store_read_options
from state_reader.core.retained import operator_stores, retained_batches
from state_reader.core.scan import fetched_ahead
from state_reader.core.skew import partition_skew
from state_reader.deprecation import renamed_keywords
from state_reader.errors import (
    CommittedBatchUnavailableError,
    InvalidOptionError,
    ReadOutpacedError,
    RequiredOptionError,
    UnsupportedOptionError,
)
from state_reader.io.integrity import with_checksum_report
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from state_reader.model.plan import StateReadPlan
from state_reader.progress import progress
from state_reader.providers.store_files import StoreFiles, unique_id_for

STATS_SCHEMA = pa.schema(
    [
        pa.field("operator_id", pa.int32()),
        pa.field("store_name", pa.string()),
        pa.field("batch_id", pa.int64()),
        pa.field("version", pa.int64()),
        pa.field("partition_id", pa.int32()),
        pa.field("rows", pa.int64()),
        pa.field("state_bytes", pa.int64()),  # key and value bytes as stored, uncompressed (core/size.py)
        pa.field("files", pa.int32()),  # files the version is rebuilt from (snapshot, deltas, SSTs)
        pa.field("bytes_on_disk", pa.int64()),  # their size
        pa.field("delta_chain", pa.int32()),  # deltas/changelogs replayed after the snapshot
        pa.field("snapshot_version", pa.int64()),  # null: rebuilt from the empty state
    ]
)

SUMMARY_SCHEMA = pa.schema(
    [
        pa.field("operator_id", pa.int32()),
        pa.field("store_name", pa.string()),
        pa.field("batch_id", pa.int64()),
        pa.field("partitions", pa.int32()),
        pa.field("rows", pa.int64()),
        pa.field("state_bytes", pa.int64()),
        pa.field("bytes_on_disk", pa.int64()),
        pa.field("files", pa.int32()),
        pa.field("max_delta_chain", pa.int32()),
        pa.field("max_partition", pa.int32()),  # the partition with the most rows
        pa.field("max_partition_rows", pa.int64()),
        pa.field("median_partition_rows", pa.float64()),
        pa.field("rows_skew", pa.float64()),  # max / median rows; null when the median is 0
        pa.field("max_bytes_partition", pa.int32()),
        pa.field("bytes_skew", pa.float64()),  # max / median state bytes
    ]
)


@dataclass
class StatsResult:
    """:func:`collect_stats` output: the table and the stores it could not read."""

    table: pa.Table
    batches: list[int]
    # (operator_id, store_name, reason) of stores left out (e.g. unsupported operators)
    skipped: list[tuple[int, str, str]] = field(default_factory=list)
    providers: dict[tuple[int, str], str] = field(default_factory=dict)
    operator_names: dict[int, str | None] = field(default_factory=dict)
    # what the caller should know about the batches measured (a range clamped to what exists)
    notes: list[str] = field(default_factory=list)
    # batches a running query cleaned up while they were being measured
    cleaned_up: int = 0


def parse_batch_range(text: str | None) -> tuple[int | None, int | None]:
    """``"3..7"``, ``"3.."``, ``"..7"``, ``"5"`` -> (start, end); None/"" -> (None, None)."""
    if text is None or not text.strip():
        return None, None
    raw = text.strip()
    lo, sep, hi = raw.partition("..")
    try:
        start = int(lo) if lo.strip() else None
        end = int(hi) if hi.strip() else None
        if not sep:
            end = start
    except ValueError:
        raise InvalidOptionError(f"batch range {raw!r} is not A..B, A.., ..B or B (batch ids)") from None
    if (start is not None and start < 0) or (end is not None and end < 0):
        raise InvalidOptionError(f"batch range {raw!r}: batch ids cannot be negative")
    if start is not None and end is not None and end < start:
        raise InvalidOptionError(f"batch range {raw!r}: the end is before the start")
    return start, end


def _plan(
    checkpoint: str,
    cp: CheckpointDir,
    storage_options: dict[str, Any] | None,
    operator_id: int,
    store_name: str,
    batch_id: int,
    operator_name: str | None = None,
) -> StateReadPlan:
    """The plan of one store at ``batch_id``."""
    return plan_store_read(cp, operator_id, store_name, batch_id, operator_name)


@with_checksum_report  # one warning for all the files read
def collect_stats(checkpoint: str, **kwargs: Any) -> StatsResult:
    """Compute the :data:`STATS_SCHEMA` table; see :func:`stats`.

    A running query may clean up every batch the walk planned before it gets to
    them; the walk then starts again over what is retained now.
    """
    storage = Storage(checkpoint, dict(kwargs.get("storage_options") or {}), verify_checksums=False)
    for _ in range(live.ATTEMPTS):
        before = live.committed_now(storage)
        try:
            result = _collect_stats(checkpoint, **kwargs)
        except live.GONE:
            if not live.moved_on(before, live.committed_now(storage)):
                raise  # nothing newer was committed: the checkpoint is damaged, not busy
            continue
        if result.table.num_rows or not result.cleaned_up:
            return result
    raise ReadOutpacedError(
        f"the query writing {checkpoint} cleaned up every batch before it could be measured, "
        f"{live.ATTEMPTS} times; measure a copy, or raise {live.RETENTION_CONF}",
        path=checkpoint,
    )


def _collect_stats(
    checkpoint: str,
    *,
    operator_id: int | None = None,
    store_name: str | None = None,
    change_start_batch_id: int | None = None,
    change_end_batch_id: int | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    storage_options: dict[str, Any] | None = None,
    show_progress: bool | None = None,
) -> StatsResult:
    check_batch_range(change_start_batch_id, change_end_batch_id)
    storage = Storage(checkpoint, dict(storage_options or {}))
    cp = CheckpointDir(storage)
    latest = cp.latest_committed_batch()  # fails clearly for a missing or empty checkpoint
    give_schemas(cp, key_schema, value_schema, operator_id, store_name)
    committed = cp.committed_batches
    targets = operator_stores(cp, operator_id, store_name, latest)
    result = StatsResult(pa.Table.from_pylist([], schema=STATS_SCHEMA), [])
    work: list[tuple[int, str, StateReadPlan, dict[int, StoreFiles]]] = []
    for op, store, op_name in targets:
        result.operator_names[op] = op_name
        try:
            plan = _plan(checkpoint, cp, storage_options, op, store, latest, op_name)
        except (UnsupportedOptionError, RequiredOptionError) as exc:
            if operator_id is not None and store_name is not None:
                raise
            result.skipped.append((op, store, exc.message))
            continue
        files = {p: StoreFiles(storage, plan.store_dir(p), plan.provider_class, plan.codec) for p in plan.partitions}
        result.providers[(op, store)] = plan.provider_class
        work.append((op, store, plan, files))
    if not work and result.skipped:
        op, store, why = result.skipped[0]
        raise UnsupportedOptionError(f"operator {op}, store '{store}': {why}")

    batches_by_store = {}
    lo = change_start_batch_id if change_start_batch_id is not None else committed[0]
    hi = change_end_batch_id if change_end_batch_id is not None else latest
    for op, store, _plan_latest, files in work:
        # a range wider than what is committed and on disk is clamped to it (and said so)
        # a partition that can rebuild no version: the latest batch alone, whose read says why
        retained = retained_batches(cp, files.values()) or committed[-1:]
        batches_by_store[(op, store)] = [b for b in retained if lo <= b <= hi]
    result.batches = sorted({b for bs in batches_by_store.values() for b in bs})
    if (
        result.batches
        and (change_start_batch_id is not None or change_end_batch_id is not None)
        and (lo < result.batches[0] or hi > result.batches[-1])
    ):
        result.notes.append(
            f"batches {lo}..{hi} asked for; {result.batches[0]}..{result.batches[-1]} are committed "
            f"with their state on disk (committed: {committed[0]}..{committed[-1]})"
        )
    if work and not result.batches:
        raise CommittedBatchUnavailableError(
            f"No committed batch with its state on disk in the range "
            f"{'' if change_start_batch_id is None else change_start_batch_id}.."
            f"{'' if change_end_batch_id is None else change_end_batch_id} of {cp.storage.display('commits')} "
            f"(committed batches: {committed[0]}..{committed[-1]})",
            path=cp.location,
        )

    total = sum(len(batches_by_store[(op, s)]) * len(f) for op, s, _, f in work)
    rows_out: list[dict[str, Any]] = []
    with progress("measuring state", total, enabled=show_progress) as bar:
        for op, store, plan_latest, files in work:
            op_name = result.operator_names.get(op)

            def measure(
                plan: StateReadPlan, op: int = op, store: str = store, files: dict[int, StoreFiles] = files
            ) -> list[dict[str, Any]]:
                # each partition's rows go as soon as they are measured; a batch planned again lists afresh
                out = []
                for pid in fetched_ahead(plan, plan.partitions):  # remote: a few round trips for all
                    size = measure_partition(plan, pid)
                    listed = files.get(pid) if plan.batch_id <= latest else None
                    # a batch planned again lists through its plan's storage, afresh
                    store_files = listed or StoreFiles(
                        plan.storage, plan.store_dir(pid), plan.provider_class, plan.codec
                    )
                    uid = unique_id_for(plan.checkpoint, store_files, plan.version, op, pid, plan.store_name)
                    vf = store_files.version_files(plan.version, uid)
                    out.append(
                        {
                            "operator_id": op,
                            "store_name": store,
                            "batch_id": plan.batch_id,
                            "version": plan.version,
                            "partition_id": pid,
                            "rows": size.rows,
                            "state_bytes": size.bytes,
                            "files": len(vf.files),
                            "bytes_on_disk": vf.bytes_on_disk,
                            "delta_chain": vf.delta_chain,
                            "snapshot_version": vf.snapshot_version,
                        }
                    )
                    bar.advance(description=f"measuring operator {op} · batch {plan.batch_id}")
                return out

            # newest first: on a running query, the batches cleanup takes next are the oldest
            for batch in reversed(batches_by_store[(op, store)]):
                if batch == latest and change_end_batch_id is None:
                    # the latest batch moves on with a running query: measured as read_state reads it
                    rows_out.extend(
                        live.read_consistently(
                            from_kwargs(checkpoint, store_read_options(op, store, None, storage_options, op_name)),
                            measure,
                            checkpoint=cp,
                        )
                    )
                    continue
                try:
                    rows_out.extend(
                        measure(
                            plan_latest
                            if batch == latest
                            else _plan(checkpoint, cp, storage_options, op, store, batch, op_name)
                        )
                    )
                except live.GONE:
                    # a running query cleaned this batch up while we walked the others: leave it out, say so
                    if not live.moved_on(committed, live.committed_now(storage)):
                        raise
                    result.notes.append(
                        f"batch {batch} of operator {op}, store {store} was cleaned up by the "
                        "running query during the read and is left out"
                    )
                    result.cleaned_up += 1
                    bar.advance(len(files))
    rows_out.sort(key=lambda row: (row["operator_id"], row["store_name"], row["batch_id"], row["partition_id"]))
    result.table = pa.Table.from_pylist(rows_out, schema=STATS_SCHEMA)
    result.batches = sorted(set(result.batches) | {row["batch_id"] for row in rows_out})
    return result


@renamed_keywords("stats", start_batch="change_start_batch_id", end_batch="change_end_batch_id")
@python_api
def stats(
    checkpoint: str,
    *,
    operator_id: int | None = None,
    store_name: str | None = None,
    change_start_batch_id: int | None = None,
    change_end_batch_id: int | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    storage_options: dict[str, Any] | None = None,
    show_progress: bool | None = None,
) -> pa.Table:
    """State size per operator, store, batch and partition, as a ``pyarrow.Table``.

    Columns (:data:`STATS_SCHEMA`): ``operator_id``, ``store_name``,
    ``batch_id``, ``version``, ``partition_id``, ``rows``, ``state_bytes``
    (the key and value bytes as the store keeps them, uncompressed: the one
    size of a state, :mod:`state_reader.core.size`), ``files`` and
    ``bytes_on_disk`` (the snapshot, deltas/changelogs and SSTs the version is
    rebuilt from), ``delta_chain`` (deltas replayed after the snapshot) and
    ``snapshot_version`` (null: rebuilt from the empty state).

    Every operator and store unless ``operator_id`` / ``store_name`` is given;
    batches ``change_start_batch_id``..``change_end_batch_id`` (committed ones), by default every
    committed batch whose state files are still on disk. Each (batch, partition)
    is loaded, so narrow the range on large checkpoints. Operators this reader
    cannot read yet are left out (an error if nothing else is left).
    ``key_schema`` and ``value_schema`` (DDL, both or neither) read a store without a schema file, as in
    ``read_state``: the store ``operator_id`` and ``store_name`` name (operator 0, store ``default``
    unless given).
    ``batch_summary(stats(cp))`` gives one row per batch with the skew.
    """
    return collect_stats(
        checkpoint,
        operator_id=operator_id,
        store_name=store_name,
        change_start_batch_id=change_start_batch_id,
        change_end_batch_id=change_end_batch_id,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options,
        show_progress=show_progress,
    ).table


def growth_note(rows: list[int], first_batch: int, last_batch: int) -> str | None:
    """A sentence about state that only grows over the batches measured, or None.

    "grew in every batch" only when each batch has more rows than the one
    before; state that grew and then held steady "never shrank".
    """
    if len(rows) < 3 or rows[-1] <= rows[0]:
        return None
    steps = list(itertools.pairwise(rows))
    if all(b > a for a, b in steps):
        return "state grew in every batch: is a watermark holding back eviction?"
    if all(b >= a for a, b in steps):
        return f"state never shrank over batches {first_batch}..{last_batch}: is anything evicting it?"
    return None


def _skew(values: list[float]) -> float | None:
    # null, not inf, when more than half the partitions are empty: the table goes out as JSON too
    ratio = partition_skew(values)
    return ratio if math.isfinite(ratio) else None


def batch_summary(table: pa.Table) -> pa.Table:
    """One row per (operator, store, batch) of a :func:`stats` table: totals and skew.

    ``rows_skew`` is the largest partition's rows over the median partition's
    (:func:`state_reader.core.skew.skew`: 1.0 = even, also when every partition is
    empty; null when only the median partition is, i.e. the skew is infinite);
    ``bytes_skew`` the same for state bytes.
    """
    groups: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for row in table.to_pylist():
        groups.setdefault((row["operator_id"], row["store_name"], row["batch_id"]), []).append(row)
    out = []
    for (op, store, batch), rows in groups.items():
        by_rows = max(rows, key=lambda r: (r["rows"], -r["partition_id"]))
        by_bytes = max(rows, key=lambda r: (r["state_bytes"], -r["partition_id"]))
        counts = [r["rows"] for r in rows]
        out.append(
            {
                "operator_id": op,
                "store_name": store,
                "batch_id": batch,
                "partitions": len(rows),
                "rows": sum(counts),
                "state_bytes": sum(r["state_bytes"] for r in rows),
                "bytes_on_disk": sum(r["bytes_on_disk"] for r in rows),
                "files": sum(r["files"] for r in rows),
                "max_delta_chain": max(r["delta_chain"] for r in rows),
                "max_partition": by_rows["partition_id"],
                "max_partition_rows": by_rows["rows"],
                "median_partition_rows": float(statistics.median(counts)),
                "rows_skew": _skew([float(c) for c in counts]),
                "max_bytes_partition": by_bytes["partition_id"],
                "bytes_skew": _skew([float(r["state_bytes"]) for r in rows]),
            }
        )
    out.sort(key=lambda r: (r["operator_id"], r["store_name"], r["batch_id"]))
    return pa.Table.from_pylist(out, schema=SUMMARY_SCHEMA)
