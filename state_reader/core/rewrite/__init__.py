"""Rewrite a checkpoint into a new one that the same query resumes from.

The state of every operator and store at one committed batch ``B`` is read
partition by partition (raw key and value bytes, merged as a read merges them),
each row is sent to the partition Spark's shuffle sends its key to,
``pmod(murmur3(partition key), N)`` (:mod:`state_reader.formats.spark_hash`), and
each new partition's rows are written as the snapshot of version ``B + 1``, the
version Spark loads to run batch ``B + 1``. Only keys are decoded, to hash them
and to match ``drop_keys``; rows are moved as bytes, re-framed between the
providers' encodings when the provider changes (UnsafeRows in HDFS-backed
snapshots; a version byte, and for session windows a split prefix key, in RocksDB).

Routed rows wait in local temporary files, one per new partition, so memory holds
one old partition while routing and one new partition while writing.

Everything else Spark reads at restart comes along: ``metadata``, the source
logs, the offset and commit logs up to ``B`` (the offset log's recorded
``spark.sql.shuffle.partitions`` set to ``N`` and, on a move, its provider class),
the state schema files and the operator metadata (its partition counts set to
``N``). Nothing is written inside the source. The destination's ``metadata`` file
is written first with content Spark cannot parse and replaced by the source's only
at the very end, so a rewrite that stops part-way (an error, a killed process)
leaves a directory that Spark refuses to start from.

Every operator on both providers: stores with RocksDB column families
(transformWithState, join formats 3 and 4; :class:`FamilyStoreRows`) and RocksDB
checkpoint format 2 (new unique ids, listed in the rewritten commit entry)
included, and moves between the providers where Spark runs the operator on both.
``transform`` rewrites each row's key and value on the way
(:class:`TransformedStoreRows`) and the schema files with them.
"""

from __future__ import annotations

import tempfile

from state_reader.core.key_filter import KeyFilter, KeyFilterSpec
from state_reader.core.rewrite.plan import SINGLE_PARTITION_OPERATORS, RewritePlan, plan_rewrite
from state_reader.core.rewrite.report import RewriteReport, StoreReport, store_report
from state_reader.core.rewrite.route import RoutedSlice, Spill, route_partition, route_store
from state_reader.core.rewrite.rows import (
    FamilyStoreRows,
    StoreRows,
    Transform,
    TransformedStoreRows,
    zip_extra_metadata,
)
from state_reader.core.rewrite.write import Put, counting_writer, failure_marked, finish_checkpoint, write_partition
from state_reader.core.scan import bind_key_filter
from state_reader.errors import InvalidOptionError
from state_reader.io.destination import Destination
from state_reader.io.memory import release_free_memory
from state_reader.io.storage import Storage
from state_reader.model.plan import StateReadPlan
from state_reader.progress import progress

__all__ = [
    "SINGLE_PARTITION_OPERATORS",
    "FamilyStoreRows",
    "Put",
    "RewritePlan",
    "RewriteReport",
    "RoutedSlice",
    "StoreReport",
    "StoreRows",
    "Transform",
    "TransformedStoreRows",
    "counting_writer",
    "failure_marked",
    "finish_checkpoint",
    "plan_rewrite",
    "rewrite_checkpoint",
    "route_partition",
    "store_report",
    "write_partition",
    "zip_extra_metadata",
]


def _dropped(plan: StateReadPlan, drop_keys: KeyFilterSpec | None) -> KeyFilter | None:
    """``drop_keys`` bound to a store's key; its errors name ``drop_keys``, the argument it came as."""
    return bind_key_filter(plan, drop_keys, "drop_keys")


def rewrite_checkpoint(
    source: Storage,
    dest: Destination | None,
    *,
    num_partitions: int | None = None,
    provider: str | None = None,
    drop_keys: KeyFilterSpec | None = None,
    batch_id: int | None = None,
    allow_uncommitted: bool = False,
    dry_run: bool = False,
    show_progress: bool | None = None,
    transform: Transform | dict[int, Transform] | None = None,
) -> RewriteReport:
    """Write the checkpoint of ``source`` at ``batch_id`` (default: the last committed) into ``dest``.

    ``dry_run`` writes nothing (``dest`` may be None) and reports the rows and bytes each
    new partition would get next to each old partition's. ``transform`` changes each row's
    key and value on the way (:class:`TransformedStoreRows`), and the schema files with them.
    """
    rp = plan_rewrite(
        source,
        num_partitions=num_partitions,
        provider=provider,
        batch_id=batch_id,
        allow_uncommitted=allow_uncommitted,
        transform=transform,
    )
    n = rp.new_partitions
    if dry_run:
        report = rp.report("", dry_run=True)
        for rows in rp.stores:
            store = store_report(rows.plan)
            with progress(f"routing {_label(rows.plan)}", len(rows.plan.partitions), enabled=show_progress) as bar:
                route_store(rows, store, n, _dropped(rows.plan, drop_keys), rp.to_rocksdb, None, bar)
            report.stores.append(store)
        return report
    if dest is None:
        raise InvalidOptionError("a rewrite needs a destination (or dry_run=True)")
    dropped = [_dropped(rows.plan, drop_keys) for rows in rp.stores]  # a bad filter fails before anything is written
    dest.begin(rp.checkpoint.location)  # marked incomplete: the commit point is the real `metadata`, written last
    report = rp.report(dest.display(), dry_run=False)
    put = counting_writer(dest, report)
    with failure_marked(rp, dest):
        with tempfile.TemporaryDirectory(prefix="state_reader-rewrite-") as workdir:
            for rows, drop in zip(rp.stores, dropped, strict=True):
                store = store_report(rows.plan)
                spill = Spill(workdir, n)
                targets = rows.target_partitions(n)
                with progress(
                    f"routing {_label(rows.plan)}", len(rows.plan.partitions) + len(targets), enabled=show_progress
                ) as bar:
                    route_store(rows, store, n, drop, rp.to_rocksdb, spill, bar)
                    bar.advance(0, f"writing {_label(rows.plan)}")
                    extra = zip_extra_metadata(rows.plan)
                    for pid in targets:
                        write_partition(
                            rows.plan, pid, spill.take(pid), rp.to_rocksdb, extra, put, rp.unique_id(rows.plan, pid)
                        )
                        release_free_memory()
                        bar.advance()
                report.stores.append(store)
        finish_checkpoint(rp, dest, put)
    return report


def _label(plan: StateReadPlan) -> str:
    return f"operator {plan.operator_id} store {plan.store_name}"
