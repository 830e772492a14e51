"""One rewrite, whoever moves its rows: the plan checked, ``drop_keys`` bound to each store's key,
rows written into stores (``upsert``, ``delete``) checked and encoded, the destination marked
incomplete, each store's rows moved by a :class:`RowMover`, then the logs, schema files and operator
metadata, and last the commit point.

Two movers: :class:`LocalRows` routes on this machine through local temporary files; the Spark
``spark_mover.SparkRows`` moves them with Spark's own shuffle. A dry run always
counts on this machine (nothing is written, so nothing needs spreading out).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from state_reader.core.key_filter import KeyFilter, KeyFilterSpec
from state_reader.core.rewrite.edit import BoundEdit, EditCounts, SpillTo, bind_edits, edited
from state_reader.core.rewrite.edit_join import expand_join_sides
from state_reader.core.rewrite.plan import RewriteOptions, RewritePlan, plan_rewrite
from state_reader.core.rewrite.report import RewriteReport, StoreReport, store_report
from state_reader.core.rewrite.route import Spill, route_store
from state_reader.core.rewrite.rows import StoreRows, store_label
from state_reader.core.rewrite.write import Put, counting_writer, failure_marked, finish_checkpoint, write_partition
from state_reader.core.scan import bind_key_filter
from state_reader.errors import InvalidOptionError, UnsupportedConfChangeError
from state_reader.io.destination import Destination
from state_reader.io.memory import release_free_memory
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from state_reader.model.conf import CONF_JOIN_FORMAT
from state_reader.progress import progress


@dataclass(frozen=True)
class Target:
    """Where a rewrite's rows go: the destination, and ``put``, which writes into it and counts
    each file and its bytes in ``report`` (what is written elsewhere is added to ``report`` too)."""

    dest: Destination
    report: RewriteReport
    put: Put


class RowMover(Protocol):
    """How the rows of one store get from its old partitions into the new partitions' snapshots."""

    def move(
        self,
        rewrite_plan: RewritePlan,
        rows: StoreRows,
        drop: KeyFilter | None,
        target: Target,
        edit: BoundEdit | None = None,
    ) -> StoreReport:
        """Write every new partition of ``rows``'s store (an empty one too), leaving out the rows
        ``drop`` matches and applying ``edit`` (rows upserted, keys deleted), and return the
        store's counts, old partitions and new."""
        ...


@dataclass(frozen=True)
class LocalRows:
    """Rows moved on this machine: each old partition routed into local temporary files, one per
    new partition (memory holds one old partition while routing), then each new partition streamed
    from there into its snapshot."""

    show_progress: bool | None = None

    def move(
        self,
        rewrite_plan: RewritePlan,
        rows: StoreRows,
        drop: KeyFilter | None,
        target: Target,
        edit: BoundEdit | None = None,
    ) -> StoreReport:
        return self._route(rewrite_plan, rows, drop, edit, target)

    def count(
        self, rewrite_plan: RewritePlan, rows: StoreRows, drop: KeyFilter | None, edit: BoundEdit | None = None
    ) -> StoreReport:
        """A dry run's counts of one store: every row routed, nothing written (an edit's rows are
        routed through temporary files, to count the keys each partition gains, replaces and loses)."""
        if edit is not None:
            return self._route(rewrite_plan, rows, drop, edit, None)
        store = store_report(rows.plan)
        label = store_label(rows.plan)
        with progress(f"routing {label}", len(rows.plan.partitions), enabled=self.show_progress) as bar:
            route_store(rows, store, rewrite_plan.new_partitions, drop, rewrite_plan.to_rocksdb, None, bar)
        return store

    def _route(
        self,
        rewrite_plan: RewritePlan,
        rows: StoreRows,
        drop: KeyFilter | None,
        edit: BoundEdit | None,
        target: Target | None,
    ) -> StoreReport:
        n = rewrite_plan.new_partitions
        store = store_report(rows.plan)
        new_pids = rows.target_partitions(n)
        label = store_label(rows.plan)
        with tempfile.TemporaryDirectory(prefix="state_reader-rewrite-") as workdir:
            spill = Spill(workdir, n)
            with progress(
                f"routing {label}", len(rows.plan.partitions) + len(new_pids), enabled=self.show_progress
            ) as bar:
                route_store(rows, store, n, drop, rewrite_plan.to_rocksdb, spill, bar)
                routed = None if edit is None else edit.spill
                if edit is not None:
                    store.widened = list(edit.widened)
                bar.advance(0, f"writing {label}" if target is not None else f"counting {label}")
                extra = rows.zip_metadata()
                for index, pid in enumerate(new_pids):
                    records: Iterator[bytes | np.ndarray] = spill.take(pid)
                    counts = EditCounts()
                    if routed is not None:
                        where = f"{label}, new partition {pid}"
                        records = edited(records, *routed.take(pid), where, counts, edit.match if edit else None)
                    if target is None:
                        for _ in records:  # counted as they pass
                            pass
                    else:
                        unique_id = rewrite_plan.unique_id(rows.plan, pid)
                        write_partition(rows.plan, pid, records, rewrite_plan.to_rocksdb, extra, target.put, unique_id)
                    if routed is not None:
                        byte_change = counts.added_bytes - counts.removed_bytes
                        store.add_edit(
                            index, counts.gained, counts.replaced, counts.lost, byte_change, counts.row_change
                        )
                    release_free_memory()
                    bar.advance()
        return store


def rewrite_checkpoint(
    source: Storage | CheckpointDir,
    dest: Destination | None,
    options: RewriteOptions | None = None,
    mover: RowMover | None = None,
) -> RewriteReport:
    """Write the checkpoint of ``source`` into ``dest`` as ``options`` ask (default: the last committed
    batch, as it is).

    A dry run (``options.dry_run``) writes nothing (``dest`` may be None) and reports the rows and bytes
    each new partition would get next to each old partition's. ``options.edits`` write rows into stores
    (:class:`~state_reader.core.rewrite.edit.StoreEdit`: ``upsert``, ``delete``), checked against each
    store's schemas before anything is written. ``mover`` moves each store's rows (default:
    :class:`LocalRows`); a dry run counts with :class:`LocalRows` whatever it is.
    """
    options = options or RewriteOptions()
    rewrite_plan = plan_rewrite(source, options)
    edits = options.edits
    join_format = next((c for c in rewrite_plan.conf_changes if c.key == CONF_JOIN_FORMAT and c.changed), None)
    if edits and join_format is not None:
        # the rows given are checked against the stores as they will be written: one layout at a time
        raise UnsupportedConfChangeError(
            f"{rewrite_plan.checkpoint.location}: rows written into a store (upsert, delete) and a join state "
            f"format change ({join_format.old} -> {join_format.new}) in one rewrite are not supported; rewrite "
            "twice: the format first, then the rows",
            conf=CONF_JOIN_FORMAT,
            path=rewrite_plan.checkpoint.location,
        )
    with tempfile.TemporaryDirectory(prefix="state_reader-edit-") if edits else nullcontext("") as workdir:
        # checked, encoded and routed up front: rows that do not fit fail before anything is written (a join
        # side's rows become its two stores' rows first)
        to = SpillTo(workdir, rewrite_plan.new_partitions, rewrite_plan.to_rocksdb)
        location = rewrite_plan.checkpoint.location
        bound = bind_edits(rewrite_plan.stores, expand_join_sides(rewrite_plan, edits), location, to)
        local = LocalRows(options.show_progress)
        return _rewrite(rewrite_plan, dest, bound, options.drop_keys, options.dry_run, local, mover)


def _rewrite(
    rewrite_plan: RewritePlan,
    dest: Destination | None,
    edits: list[BoundEdit | None],
    drop_keys: KeyFilterSpec | None,
    dry_run: bool,
    local: LocalRows,
    mover: RowMover | None,
) -> RewriteReport:
    if dry_run:
        report = rewrite_plan.report("", dry_run=True)
        for rows, edit in zip(rewrite_plan.stores, edits, strict=True):
            report.stores.append(local.count(rewrite_plan, rows, _dropped(rows, drop_keys), edit))
        return report
    if dest is None:
        raise InvalidOptionError("a rewrite needs a destination (or dry_run=True)")
    # bound to each store's key up front: a bad filter fails before anything is written or any task runs
    dropped = [_dropped(rows, drop_keys) for rows in rewrite_plan.stores]
    for rows, edit in zip(rewrite_plan.stores, edits, strict=True):
        if edit is not None and edit.in_spark:
            # rows held in Spark (a Spark DataFrame) are checked by the mover that reads them, before any write
            check = getattr(mover, "check_edit", None)
            if check is None:
                raise InvalidOptionError(f"rows for {store_label(rows.plan)} are a Spark DataFrame: pass spark= too")
            check(rewrite_plan, rows, edit)
    dest.begin(
        rewrite_plan.checkpoint.location
    )  # marked incomplete: the commit point is the real `metadata`, written last
    report = rewrite_plan.report(dest.display(), dry_run=False)
    target = Target(dest, report, counting_writer(dest, report))
    with failure_marked(rewrite_plan, dest):
        for rows, drop, edit in zip(rewrite_plan.stores, dropped, edits, strict=True):
            report.stores.append((mover or local).move(rewrite_plan, rows, drop, target, edit))
        finish_checkpoint(rewrite_plan, dest, target.put)
    return report


def _dropped(rows: StoreRows, drop_keys: KeyFilterSpec | None) -> KeyFilter | None:
    """``drop_keys`` bound to a store's key; its errors name ``drop_keys``, the argument it came as."""
    return bind_key_filter(rows.plan, drop_keys, "drop_keys")
