"""Follow the state changes of a running query, batch by batch, as it commits them.

Spark-free: the streaming source (``fronts/datasource``), :func:`state_reader.follow`
and ``state-reader changes --follow`` all go through :class:`Follow`.

The position of a follower is a producer batch id, the *offset*: every change of
batches up to and including it has been handed out. A range ``(start, end]`` of
offsets is read as the change feed ``changeStartBatchId=start+1``,
``changeEndBatchId=end``. The first range may also carry the whole state at
batch ``start`` (``startWithSnapshot``), rows with ``change_type = 'snapshot'``,
so that a history kept from the follower can rebuild every later batch.

The producer's cleanup (``spark.sql.streaming.minBatchesToRetain``) deletes old
files whether or not a follower has read them. A range whose first batches are
gone is data loss: :class:`~state_reader.errors.ChangesLostError` names the
batches, or with ``failOnDataLoss=false`` the follower skips to the oldest batch
still retained and logs what it skipped. Nothing is written to the producer's
checkpoint: a follower only lists and reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from state_reader.core import live
from state_reader.core.options import (
    BATCH_ID,
    CHANGE_END_BATCH_ID,
    CHANGE_START_BATCH_ID,
    FAIL_ON_DATA_LOSS,
    FLATTEN_COLLECTION_TYPES,
    MAX_BATCHES_PER_TRIGGER,
    READ_CHANGE_FEED,
    START_WITH_SNAPSHOT,
    STATESTORE_OPTIONS,
    STREAM,
    StateStoreOptions,
    _Options,
    given_key,
    is_set_true,
    option_names,
    without,
)
from state_reader.core.planner import plan_state_read
from state_reader.core.scan import iter_batches
from state_reader.errors import (
    BatchNotRetainedError,
    ChangesLostError,
    CommittedBatchUnavailableError,
    InvalidOptionError,
    NegativeOptionError,
)
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from state_reader.model.plan import StateReadPlan

log = logging.getLogger("state_reader.follow")

# a stream's own options (the names in core/options.OPTIONS); the rest are the change feed's
FOLLOW_OPTIONS = tuple(name for name in option_names(STREAM) if name not in STATESTORE_OPTIONS)
SNAPSHOT = "snapshot"  # change_type of the rows of the state a history starts from

# how often a skip-ahead is planned again when cleanup keeps deleting what it skipped to
_SKIP_ATTEMPTS = 5


def is_follow(options: Mapping[str, Any]) -> bool:
    """Whether ``options`` only make sense for a follower (a change feed without a start, or a follow option)."""
    if any(given_key(options, name) is not None for name in FOLLOW_OPTIONS):
        return True
    return is_set_true(options, READ_CHANGE_FEED) and given_key(options, CHANGE_START_BATCH_ID) is None


def may_follow(options: Mapping[str, Any]) -> bool:
    """Whether ``options`` could be a follower's: a change feed with no end."""
    return is_set_true(options, READ_CHANGE_FEED) and given_key(options, CHANGE_END_BATCH_ID) is None


@dataclass(frozen=True)
class Follow:
    """What to follow (the change feed options without a range) and how.

    ``start``: the first producer batch whose changes to hand out (None: the
    oldest the checkpoint can still serve); ``max_batches_per_trigger``: at most this many
    producer batches per read (None: all committed); ``fail_on_data_loss``:
    raise when batches not yet handed out were cleaned up (else skip them);
    ``start_with_snapshot``: hand out the state at batch ``start - 1`` first.
    """

    options: dict[str, Any]
    start: int | None = None
    max_batches_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    start_with_snapshot: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> Follow:
        """Validate the options of a follower: the change feed's, less its range, plus :data:`FOLLOW_OPTIONS`."""
        rest = without(options, *FOLLOW_OPTIONS)
        own = {k: v for k, v in options.items() if k not in rest}
        mine = _Options(own, FOLLOW_OPTIONS)
        max_batches = mine.long(MAX_BATCHES_PER_TRIGGER)
        if max_batches is not None and max_batches < 1:
            raise InvalidOptionError(
                f"Invalid value for option '{MAX_BATCHES_PER_TRIGGER}': at least 1 producer batch per "
                f"micro-batch (got {max_batches})"
            )
        if given_key(rest, CHANGE_END_BATCH_ID) is not None:
            raise InvalidOptionError(
                f"Invalid value for option '{CHANGE_END_BATCH_ID}': a stream of changes follows the query as it "
                "commits and has no last batch; read a closed range with spark.read (a batch query)"
            )
        start_key = given_key(rest, CHANGE_START_BATCH_ID)
        start = rest.pop(start_key) if start_key is not None else None
        if start is not None:
            try:
                start = int(str(start).strip())
            except ValueError:
                raise InvalidOptionError(
                    f"Invalid value for option '{CHANGE_START_BATCH_ID}': {start!r} is not an integer"
                ) from None
            if start < 0:
                raise NegativeOptionError(f"'{CHANGE_START_BATCH_ID}' cannot be negative (got {start}).")
        rest = without(rest, READ_CHANGE_FEED)
        # validate the rest now, as a change feed from batch 0, so a typo fails before anything is read
        StateStoreOptions.parse({**rest, READ_CHANGE_FEED: "true", CHANGE_START_BATCH_ID: 0})
        return cls(rest, start, max_batches, mine.boolean(FAIL_ON_DATA_LOSS), mine.boolean(START_WITH_SNAPSHOT))

    # -- the producer's checkpoint ----------------------------------------------

    def _base(self) -> StateStoreOptions:
        return StateStoreOptions.parse({**self.options, READ_CHANGE_FEED: "true", CHANGE_START_BATCH_ID: 0})

    def storage(self) -> Storage:
        opts = self._base()
        return Storage(opts.path, opts.storage_options, verify_checksums=opts.verify_checksums)

    def committed(self) -> list[int]:
        """The producer's committed batches, listed afresh. Errors when the location is no checkpoint, or
        the query has not committed its first batch yet (a follower never waits silently on nothing)."""
        storage = self.storage()
        batches = live.committed_now(storage)
        if not batches:
            CheckpointDir(storage).latest_committed_batch()  # raises: not a checkpoint, or nothing committed
        return batches

    def initial_offset(self) -> int:
        """The offset before the first batch to hand out: ``start - 1``, by default the oldest retained batch
        (with a snapshot: whose state is read) or the one before it (without: whose changes are read)."""
        committed = self.committed()
        if self.start is not None:
            if self.start > committed[-1] + 1:
                raise InvalidOptionError(
                    f"Invalid value for option '{CHANGE_START_BATCH_ID}': batch {self.start} is more than one "
                    f"batch after the latest committed batch of {self.storage().display('')} ({committed[-1]})"
                )
            return self.start - 1
        return committed[0] if self.start_with_snapshot else committed[0] - 1

    def schema_plan(self) -> StateReadPlan:
        """A plan of the change feed of the latest committed batch: the stream's schema, and a check that
        the operator, store and variable exist (a wrong one fails here, before any micro-batch)."""
        latest = self.committed()[-1]
        return plan_state_read(self._range_options(latest, latest))

    def latest_offset(
        self, start: int, *, limited: bool = True, target: int | None = None, committed: list[int] | None = None
    ) -> int:
        """The offset to read up to from ``start``: the latest committed batch, at most ``max_batches_per_trigger`` on
        (when ``limited``) and at most ``target`` (Trigger.AvailableNow's end); never before ``start``.
        ``committed``: a listing the caller just made (else the commit log is listed here)."""
        end = (committed or self.committed())[-1]
        if target is not None:
            end = min(end, target)
        if limited and self.max_batches_per_trigger is not None:
            end = min(end, start + self.max_batches_per_trigger)
        return max(start, end)

    # -- planning a range ------------------------------------------------------

    def _range_options(self, first: int, last: int) -> dict[str, Any]:
        return {**self.options, READ_CHANGE_FEED: "true", CHANGE_START_BATCH_ID: first, CHANGE_END_BATCH_ID: last}

    def past_lost(self, offset: int, committed: list[int] | None = None) -> int:
        """The offset to read on from: ``offset`` itself, or when the query's cleanup has passed it, the one
        before the oldest batch in its commit log (the one rule of every read: a batch without its commit entry
        is not read). With ``failOnDataLoss`` the skipped batches raise :class:`ChangesLostError` instead; else
        a warning in the ``state_reader.follow`` log names them. ``committed``: a listing the caller just
        made (else the commit log is listed here)."""
        if committed is None:
            committed = live.committed_now(self.storage())
        if not committed or offset + 1 >= committed[0]:
            return offset
        first, last = offset + 1, committed[0] - 1
        if self.fail_on_data_loss:
            raise self.lost(first, last, None)
        log.warning(
            "skipping %s of %s: the query cleaned them up before they were read (%s sets how many batches it retains)",
            batch_span(first, last),
            self.storage().display(""),
            live.RETENTION_CONF,
        )
        return last

    def plan_range(self, start: int, end: int) -> StateReadPlan | None:
        """The change feed of offsets ``(start, end]``; None when that is empty or (skipping) all lost.

        Batches cleaned up before they were read raise :class:`ChangesLostError`, or with
        ``failOnDataLoss=false`` are skipped (:meth:`past_lost`).
        """
        for _ in range(_SKIP_ATTEMPTS):
            start = self.past_lost(start)
            if start >= end:
                return None
            try:
                return plan_state_read(self._range_options(start + 1, end))
            except BatchNotRetainedError:
                continue  # cleanup passed the start between the listing and the plan: look again
        raise self.lost(start + 1, end, None)

    def lost(self, first: int, last: int, exc: BaseException | None) -> ChangesLostError:
        """The error for batches ``first..last`` whose changes were cleaned up before they were read."""
        where = self.storage().display("")
        committed = live.committed_now(self.storage())
        span = f"{committed[0]}..{committed[-1]}" if committed else "none"
        return ChangesLostError(
            f"the changes of {batch_span(first, last)} of {where} were lost: the query cleaned them up before they "
            f"were read (committed batches now: {span}). Raise {live.RETENTION_CONF} on the query so it "
            f"retains more batches, read more often (or more batches at a time, {MAX_BATCHES_PER_TRIGGER}), or "
            f"skip ahead to the oldest retained batch with {FAIL_ON_DATA_LOSS}=false"
            + (f" ({exc.message})" if isinstance(exc, BatchNotRetainedError) else ""),
            path=where,
        )

    def plan_snapshot(self, batch: int) -> StateReadPlan | None:
        """The state at ``batch`` that a history starts from (None before batch 0: nothing yet)."""
        if batch < 0:
            return None
        options = without(self.options, FLATTEN_COLLECTION_TYPES)
        try:
            # collections one row per item, as in the change feed
            return plan_state_read({**options, BATCH_ID: batch, FLATTEN_COLLECTION_TYPES: "true"})
        except CommittedBatchUnavailableError as exc:
            raise self.lost(batch, batch, None) from exc


def batch_span(first: int, last: int) -> str:
    """``batch 5`` or ``batches 5..26``, as messages name a run of batches."""
    return f"batch {first}" if last <= first else f"batches {first}..{last}"


def change_schema(plan: StateReadPlan) -> pa.Schema:
    """The change feed's Arrow schema for what ``plan`` reads (a state read or a change feed)."""
    if plan.is_change_feed:
        return plan.arrow_schema
    return replace(plan, change_start_batch_id=plan.batch_id).arrow_schema


def snapshot_batches(
    plan: StateReadPlan, partitions: list[int] | None = None, *, threads: int | None = None
) -> Iterator[pa.RecordBatch]:
    """The state of ``plan``'s batch as change feed rows: ``batch_id`` = that batch, ``change_type`` = 'snapshot'."""
    schema = change_schema(plan)
    for batch in iter_batches(plan, partitions=partitions, show_progress=False, threads=threads):
        n = batch.num_rows
        columns = [pa.array([plan.batch_id] * n, pa.int64()), pa.array([SNAPSHOT] * n, pa.string()), *batch.columns]
        yield pa.RecordBatch.from_arrays(columns, schema=schema)


def read_range(follow: Follow, start: int, end: int, snapshot: bool) -> tuple[pa.Table, int]:
    """Everything offsets ``(start, end]`` hand out, read here (Spark-free), and the first batch read (later
    than ``start + 1`` when lost batches were skipped): the snapshot at ``start`` first when asked, then the
    changes by batch and partition. Planned again when cleanup races the read."""
    from state_reader.core.scan import read_table

    for _ in range(live.ATTEMPTS):
        parts: list[pa.Table] = []
        try:
            snap = follow.plan_snapshot(start) if snapshot else None
            plan = follow.plan_range(start, end)
            if snap is not None:
                parts.append(pa.Table.from_batches(list(snapshot_batches(snap)), schema=change_schema(snap)))
            if plan is not None:
                parts.append(read_table(plan, show_progress=False))
        except ChangesLostError:
            raise
        except live.GONE:
            continue  # cleanup deleted a file between planning and reading: plan again (it may be data loss now)
        first = plan.change_start_batch_id if plan is not None and plan.change_start_batch_id is not None else end + 1
        if parts:
            # only a part whose schema differs is cast: a cast (even to its own schema) refuses the null values
            # of deletes when the value struct has non-nullable fields
            target = parts[-1].schema
            table = pa.concat_tables([part if part.schema.equals(target) else part.cast(target) for part in parts])
        else:
            table = (follow.schema_plan().arrow_schema if snap is None else change_schema(snap)).empty_table()
        return _sorted(table), first
    raise follow.lost(start + 1, end, None)


def _sorted(table: pa.Table) -> pa.Table:
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return table
    order = pc.sort_indices(
        pa.table(
            {
                "b": table.column("batch_id"),
                "s": pc.not_equal(table.column("change_type"), SNAPSHOT),
                "p": table.column("partition_id"),
                "i": pa.array(range(table.num_rows)),
            }
        ),
        sort_keys=[("b", "ascending"), ("s", "ascending"), ("p", "ascending"), ("i", "ascending")],
    )
    return table.take(order)


def follow_batches(
    follow: Follow,
    *,
    poll_seconds: float = 1.0,
    max_poll_seconds: float = 30.0,
    stop: Callable[[], bool] | None = None,
    batches_per_read: int = 10,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[tuple[int, pa.Table]]:
    """``(batch_id, changes)`` for every producer batch as it commits, in order, empty tables included.

    Polls the commit log, waiting ``poll_seconds`` after a poll that found nothing new and doubling the
    wait up to ``max_poll_seconds`` while nothing comes; ends when ``stop()`` is true. With
    ``startWithSnapshot`` the first item is ``(start - 1, the state then)``.
    """
    offset = follow.initial_offset()
    snapshot = follow.start_with_snapshot
    wait = poll_seconds
    limit = follow.max_batches_per_trigger or batches_per_read
    while not (stop is not None and stop()):
        committed = follow.committed()  # one listing a poll, for the skip and the range both
        if not snapshot:  # a skip moves the range on, so that it starts at the oldest batch kept
            offset = follow.past_lost(offset, committed)
        end = min(follow.latest_offset(offset, limited=False, committed=committed), offset + limit)
        if end <= offset and not snapshot:
            sleep(wait)
            wait = min(max_poll_seconds, wait * 2)
            continue
        wait = poll_seconds
        table, first = read_range(follow, offset, end, snapshot)
        empty = table.schema.empty_table()
        by_batch = _split(table)
        if snapshot:
            yield offset, by_batch.pop(offset, empty)
            snapshot = False
        # every batch read is handed out, empty or not; batches skipped as lost are not
        for batch in range(first, end + 1):
            yield batch, by_batch.get(batch, empty)
        offset = end


def _split(table: pa.Table) -> dict[int, pa.Table]:
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return {}
    ids = table.column("batch_id")
    out: dict[int, pa.Table] = {}
    for batch in pc.unique(ids).to_pylist():
        out[batch] = table.filter(pc.equal(ids, batch))
    return out
