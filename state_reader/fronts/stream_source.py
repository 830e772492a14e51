"""``spark.readStream.format("state_reader.statestore")``: the state changes of a running query, as a stream.

The streaming reader of the ``state_reader.statestore`` data source (Spark 4.0+
Python streaming data sources), a thin adapter over :mod:`state_reader.core.follow`:
the offset is the producer's committed batch id, ``{"batch_id": N}`` meaning every
change of batches up to N has been emitted; the reading query's own checkpoint
keeps it, so each producer batch is emitted exactly once across restarts. Each
micro-batch is planned on the driver and its state partitions read on the
executors, as the batch source reads them.

Spark 4.2+ passes Python streaming sources a read limit and offers
``SupportsTriggerAvailableNow``: ``maxBatchesPerTrigger`` caps the producer
batches per micro-batch, under every trigger including ``availableNow``. On
Spark 4.0 and 4.1 a micro-batch reads every batch committed since the last one,
``maxBatchesPerTrigger`` is refused, and ``Trigger.AvailableNow`` reads all that
was committed when it started in one micro-batch (Spark's fallback for sources
without it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from state_reader.core import live
from state_reader.core.follow import MAX_BATCHES_PER_TRIGGER, Follow, snapshot_batches
from state_reader.core.scan import iter_batches
from state_reader.errors import InvalidOptionError
from state_reader.fronts import spark_shared as shared
from state_reader.model.plan import StateReadPlan

log = logging.getLogger("state_reader.follow")

try:  # pyspark 4.2+: read limits and Trigger.AvailableNow for Python streaming sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxFiles,
        SupportsTriggerAvailableNow,
    )

    _MIXINS: tuple[type, ...] = (SupportsTriggerAvailableNow,)
    READ_LIMITS = True
except ImportError:  # pyspark 4.0, 4.1
    ReadAllAvailable = ReadMaxFiles = None
    _MIXINS = ()
    READ_LIMITS = False

OFFSET = "batch_id"
SNAPSHOT_FLAG = "snapshot"


class _ChangePartition(InputPartition):
    """One Spark task of a micro-batch: the state partitions it reads, with the plans of the snapshot (the
    first micro-batch of ``startWithSnapshot``) and of the change feed, either of which may be None."""

    def __init__(
        self, snapshot: StateReadPlan | None, changes: StateReadPlan | None, partition_ids: tuple[int, ...]
    ) -> None:
        super().__init__(partition_ids)
        self.snapshot = snapshot
        self.changes = changes
        self.partition_ids = partition_ids


class StateChangeStreamReader(DataSourceStreamReader, *_MIXINS):  # type: ignore[misc]
    """The stream of a store's changes: offsets are producer batch ids (see the module's docstring)."""

    def __init__(self, follow: Follow, per_task: int | None = None, cores: int | None = None) -> None:
        self.follow = follow
        self.per_task = per_task
        self.cores = cores
        self.target: int | None = None  # Trigger.AvailableNow: the latest batch when the query started
        self.where = follow.storage().display("")
        if follow.max_batches_per_trigger is not None and not READ_LIMITS:
            import pyspark

            raise InvalidOptionError(
                f"Invalid value for option '{MAX_BATCHES_PER_TRIGGER}': pyspark {pyspark.__version__} gives "
                "Python streaming sources no read limits (Spark 4.2+); each micro-batch reads every batch "
                "committed since the last one"
            )

    def initialOffset(self) -> dict:  # noqa: N802 (PySpark's names)
        with shared.spark_worker_errors(self.where):
            offset = {OFFSET: self.follow.initial_offset()}
            return {**offset, SNAPSHOT_FLAG: True} if self.follow.start_with_snapshot else offset

    def getDefaultReadLimit(self):  # noqa: N802
        # any limit but ReadAllAvailable means "maxBatchesPerTrigger": Spark has no limit counted in batches
        if self.follow.max_batches_per_trigger is None or not READ_LIMITS:
            return ReadAllAvailable() if READ_LIMITS else None
        return ReadMaxFiles(self.follow.max_batches_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        with shared.spark_worker_errors(self.where):
            self.target = self.follow.committed()[-1]

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:  # noqa: N802
        with shared.spark_worker_errors(self.where):
            if start is None:  # Spark 4.0, 4.1: no start, no limit
                return {OFFSET: self.follow.latest_offset(-1, limited=False, target=self.target)}
            limited = READ_LIMITS and not isinstance(limit, ReadAllAvailable)
            return {OFFSET: self.follow.latest_offset(int(start[OFFSET]), limited=limited, target=self.target)}

    def reportLatestOffset(self) -> dict | None:  # noqa: N802
        try:
            return {OFFSET: self.follow.committed()[-1]}
        except Exception:  # only reported in the query's progress
            return None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        with shared.spark_worker_errors(self.where):
            first, last = int(start[OFFSET]), int(end[OFFSET])
            snapshot = self.follow.plan_snapshot(first) if start.get(SNAPSHOT_FLAG) else None
            changes = self.follow.plan_range(first, last) if last > first else None
            plan = changes or snapshot
            if plan is None:
                return []
            return [
                _ChangePartition(snapshot, changes, group)
                for group in shared.group_partitions(plan.partitions, self.per_task, self.cores)
            ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        ids = list(partition.partition_ids)
        snapshot: StateReadPlan | None = partition.snapshot
        changes: StateReadPlan | None = partition.changes
        what = f"partition{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))} of {self.where}"
        with shared.spark_worker_errors(what):
            try:
                if snapshot is not None:
                    yield from snapshot_batches(snapshot, ids, threads=1)
                if changes is not None:
                    yield from iter_batches(changes, partitions=ids, show_progress=False, threads=1)
            except live.GONE as exc:
                # the driver planned this range; the query's cleanup deleted its files since
                plan = changes or snapshot
                assert plan is not None
                first = plan.change_start_batch_id if plan.change_start_batch_id is not None else plan.batch_id
                if self.follow.fail_on_data_loss:
                    raise self.follow.lost(first, plan.batch_id, exc) from exc
                log.warning(
                    "skipping the changes of batches %d..%d in %s: the query cleaned up their state "
                    "files while they were read (%s)",
                    first,
                    plan.batch_id,
                    what,
                    exc,
                )

    def commit(self, end: dict) -> None:
        """Nothing to do: the producer's checkpoint is never written to, and the offset is Spark's to keep."""


class FailedStreamReader(DataSourceStreamReader):
    """A stream whose options or checkpoint were refused: raises the error when Spark first asks for an
    offset (pyspark shows an error raised while creating the reader as one of its own)."""

    def __init__(self, error: Exception, where: str) -> None:
        self.error = error
        self.where = where

    def _raise(self):
        with shared.spark_worker_errors(self.where):
            raise self.error

    def initialOffset(self) -> dict:  # noqa: N802
        return self._raise()

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:  # noqa: N802
        return self._raise()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return self._raise()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._raise()
