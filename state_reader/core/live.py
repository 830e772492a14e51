"""Reads of a checkpoint whose query is still running: plan, read, and plan again if it moved on.

A running query commits batches and its maintenance deletes old state files and
log entries (``spark.sql.streaming.minBatchesToRetain``). A read plans one batch
and then reads that batch's files; when one of them disappears in between, the
read of the *latest* batch is planned again at the new latest batch and read
again from scratch, so a result never mixes two batches. A read of an *explicit*
batch cannot move: once its files are gone it fails with
:class:`BatchNotRetainedError`, naming what the checkpoint still keeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from state_reader.core.options import StateStoreOptions
from state_reader.core.planner import plan_state_read
from state_reader.errors import (
    BatchNotRetainedError,
    CommittedBatchUnavailableError,
    MissingStateFileError,
    OffsetLogUnavailableError,
    ReadOutpacedError,
    StateReaderError,
)
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from state_reader.model.conf import CONF_MIN_BATCHES_TO_RETAIN
from state_reader.model.plan import StateReadPlan

T = TypeVar("T")

# How often and how long a read of the latest batch of a running query is planned again.
ATTEMPTS = 8
SECONDS = 120.0
RETENTION_CONF = CONF_MIN_BATCHES_TO_RETAIN

# what a file or log entry that cleanup deleted between planning and reading looks like
GONE = (MissingStateFileError, CommittedBatchUnavailableError, OffsetLogUnavailableError, FileNotFoundError)


def _span(batches: list[int]) -> str:
    return f"{batches[0]}..{batches[-1]}" if batches else "none"


def read_consistently(
    options: Mapping[str, Any] | StateStoreOptions,
    read: Callable[[StateReadPlan], T],
    *,
    attempts: int = ATTEMPTS,
    seconds: float = SECONDS,
    checkpoint: CheckpointDir | None = None,
) -> T:
    """``read(plan)`` of one planned batch, planned again while a running query cleans up under it.

    ``checkpoint`` (a caller's, with what it has already read of the logs) plans the first attempt;
    every later attempt lists the checkpoint afresh.
    """
    opts = options if isinstance(options, StateStoreOptions) else StateStoreOptions.parse(options)
    requested = opts.change_end_batch_id if opts.read_change_feed else opts.batch_id
    started = time.monotonic()
    planned: list[int] = []
    while True:
        storage = Storage(opts.path, opts.storage_options, verify_checksums=opts.verify_checksums)
        given = checkpoint if checkpoint is not None and not planned else None
        # what the plan is made from: a caller's checkpoint was listed before now, and whether the
        # query moved on is judged from that listing, not from one made after it
        before = _committed_in(given) if given is not None else committed_now(storage)
        # remote: the plan starts from the listing just made (each listing is a round trip); the schemas
        # given for stores without a schema file go with every attempt
        schemas = checkpoint.given_schemas if checkpoint is not None else {}
        fresh = CheckpointDir(storage, schemas) if storage.remote or schemas else None
        try:
            return read(plan_state_read(opts, given if given is not None else fresh))
        except BatchNotRetainedError:
            raise  # planning found the batch asked for cleaned up: planning again cannot bring it back
        except GONE as exc:
            now = CheckpointDir(storage).location
            committed = committed_now(storage)
            if requested is not None:
                # purged before the read began, or cleaned up while it ran; else the files are damaged
                purged = bool(committed) and requested < committed[0]
                if purged or (committed != before and requested < committed[-1]):
                    raise not_retained(now, requested, exc, committed) from exc
                raise
            if not moved_on(before, committed):
                raise  # nothing newer was committed: the checkpoint is damaged, not busy
            planned.append(before[-1])
            storage.forget()  # the next attempt lists everything afresh
            if len(planned) >= attempts or time.monotonic() - started > seconds:
                raise ReadOutpacedError(
                    f"the query writing {now} commits and cleans up faster than its latest batch can be read: "
                    f"{len(planned)} attempts (batches {', '.join(map(str, planned))}) each lost files to "
                    f"cleanup. Pass batch_id of a retained batch (now {_span(committed)}), raise {RETENTION_CONF}, "
                    "or read a copy of the checkpoint.",
                    path=now,
                ) from exc


def not_retained(location: str, batch: int, exc: BaseException, committed: list[int]) -> BatchNotRetainedError:
    """The error for a batch whose files the query cleaned up, naming what it keeps now."""
    why = exc.message if isinstance(exc, StateReaderError) else str(exc)
    return BatchNotRetainedError(
        f"batch {batch} of {location} is no longer retained: the query has cleaned up what it needs ({why}). "
        f"Committed batches now: {_span(committed)}; {RETENTION_CONF} sets how many the query keeps.",
        path=location,
    )


def cleaned_up_during_read(plan: StateReadPlan, exc: BaseException) -> BatchNotRetainedError | None:
    """For a read of ``plan`` that lost files: the error to raise when the query has moved on since, else None.

    Used where the read cannot be planned again (a Spark task reads the batch its driver planned).
    """
    committed = committed_now(plan.storage)
    if not committed or committed[-1] <= plan.batch_id:
        return None
    return not_retained(plan.storage.display(""), plan.batch_id, exc, committed)


def moved_on(before: list[int], now: list[int]) -> bool:
    """Whether the query moved on between two listings of the commit log: it committed a newer batch, or
    it cleaned up older ones (Spark purges the logs when it plans a batch, before that batch commits, so a
    cleanup can come with no newer commit yet)."""
    return bool(before) and bool(now) and (now[-1] > before[-1] or now[0] > before[0])


def _committed_in(checkpoint: CheckpointDir) -> list[int]:
    """The committed batches as ``checkpoint`` listed them."""
    try:
        return checkpoint.committed_batches
    except StateReaderError:
        return []


def committed_now(storage: Storage) -> list[int]:
    """The committed batches as listed now (a fresh listing, no cached view)."""
    storage.forget("commits")
    try:
        return CheckpointDir(storage).committed_batches
    except StateReaderError:
        return []
