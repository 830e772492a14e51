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
    SchemaReadError,
    StateReaderError,
)
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import Checkpoint
from state_reader.model.plan import StateReadPlan

T = TypeVar("T")

# How often and how long a read of the latest batch of a running query is planned again.
ATTEMPTS = 8
SECONDS = 120.0
RETENTION_CONF = "spark.sql.streaming.minBatchesToRetain"

# what a file or log entry deleted between planning and reading looks like
_GONE = (MissingStateFileError, CommittedBatchUnavailableError, OffsetLogUnavailableError, SchemaReadError,
         FileNotFoundError)


def _span(batches: list[int]) -> str:
    return f"{batches[0]}..{batches[-1]}" if batches else "none"


def read_consistently(options: Mapping[str, Any] | StateStoreOptions, read: Callable[[StateReadPlan], T], *,
                      attempts: int = ATTEMPTS, seconds: float = SECONDS) -> T:
    """``read(plan)`` of one planned batch, planned again while a running query cleans up under it."""
    opts = options if isinstance(options, StateStoreOptions) else StateStoreOptions.parse(options)
    requested = opts.change_end_batch_id if opts.read_change_feed else opts.batch_id
    started = time.monotonic()
    planned: list[int] = []
    while True:
        plan: StateReadPlan | None = None
        try:
            plan = plan_state_read(opts)
            return read(plan)
        except _GONE as exc:
            # a fresh view: what the checkpoint holds now
            now = Checkpoint(Storage(opts.path, opts.storage_options, verify_checksums=False))
            try:
                committed = now.committed_batches
            except StateReaderError:
                committed = []
            batch = plan.batch_id if plan is not None else requested
            if batch is not None:
                planned.append(batch)
            moved_on = bool(committed) and (batch is None or committed[-1] > batch)
            if not moved_on:
                raise  # nothing newer was committed: the checkpoint is damaged, not busy
            if requested is not None:
                raise BatchNotRetainedError(
                    f"batch {requested} of {now.location} is no longer retained: the query has cleaned up "
                    f"what it needs ({exc.message if isinstance(exc, StateReaderError) else exc}). Committed "
                    f"batches now: {_span(committed)}; {RETENTION_CONF} sets how many the query keeps.",
                    path=now.location) from exc
            if len(planned) >= attempts or time.monotonic() - started > seconds:
                raise ReadOutpacedError(
                    f"the query writing {now.location} commits and cleans up faster than its latest batch can be "
                    f"read: {len(planned)} attempts (batches {', '.join(map(str, planned))}) each lost files to "
                    f"cleanup. Pass batch_id of a retained batch (now {_span(committed)}), raise {RETENTION_CONF}, "
                    "or read a copy of the checkpoint.", path=now.location) from exc
