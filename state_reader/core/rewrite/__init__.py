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
(:class:`TransformedStoreRows`) and the schema files with them. Edits write rows into a
store (:class:`StoreEdit`: ``upsert`` and ``delete``, in the shape ``read_state`` returns), checked
against its schemas first and applied to each new partition as it is written
(:mod:`~state_reader.core.rewrite.edit`). What a rewrite is asked travels as one
:class:`RewriteOptions`. :mod:`~state_reader.core.rewrite.spark_mover` moves the rows with Spark
instead (pyspark imported only when it runs).
"""

from __future__ import annotations

from state_reader.core.rewrite.edit import BoundEdit, StoreEdit, bind_edits
from state_reader.core.rewrite.edit_fit import EditMode
from state_reader.core.rewrite.pipeline import LocalRows, RowMover, Target, rewrite_checkpoint
from state_reader.core.rewrite.plan import SINGLE_PARTITION_OPERATORS, RewriteOptions, RewritePlan, plan_rewrite
from state_reader.core.rewrite.report import RewriteReport, StoreReport, store_report
from state_reader.core.rewrite.route import RoutedSlice, route_partition
from state_reader.core.rewrite.rows import (
    FamilyStoreRows,
    StoreRows,
    Transform,
    TransformedStoreRows,
    store_label,
    zip_extra_metadata,
)
from state_reader.core.rewrite.write import Put, counting_writer, failure_marked, finish_checkpoint, write_partition

__all__ = [
    "SINGLE_PARTITION_OPERATORS",
    "BoundEdit",
    "EditMode",
    "FamilyStoreRows",
    "LocalRows",
    "Put",
    "RewriteOptions",
    "RewritePlan",
    "RewriteReport",
    "RoutedSlice",
    "RowMover",
    "StoreEdit",
    "StoreReport",
    "StoreRows",
    "Target",
    "Transform",
    "TransformedStoreRows",
    "bind_edits",
    "counting_writer",
    "failure_marked",
    "finish_checkpoint",
    "plan_rewrite",
    "rewrite_checkpoint",
    "route_partition",
    "store_label",
    "store_report",
    "write_partition",
    "zip_extra_metadata",
]
