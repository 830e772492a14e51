"""``state-reader changes CP --follow``: a running query's state changes printed as batches commit.

Text: a line per batch (its counts of updates, deletes, …) and its rows; ``--json``:
one JSON object a row, a line each (``batch_id``, ``change_type``, ``key``, ``value``,
``partition_id``), flushed as each batch commits, for piping into ``jq`` or a file.
Interrupting (Ctrl-C) ends it; ``--to`` ends it after that batch. With ``--skip-lost``,
batches the query cleaned up before they were read are named on stderr and, with
``--json``, in a line of their own: ``{"skipped": {"first_batch_id", "last_batch_id"},
"reason"}`` (``first_batch`` and ``last_batch`` beside them, their earlier names, for one
release). What it prints is the :class:`~state_reader.fronts.console.Output` ``--json`` chose.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from state_reader.core.changefeed import follow
from state_reader.core.follow import log as follow_log
from state_reader.core.key_filter import KeyFilter
from state_reader.fronts.console import Output, output


def follow_changes(
    checkpoint: str,
    start: int | None,
    end: int | None,
    *,
    operator_id: int | None,
    store_name: str | None,
    state_var_name: str | None,
    key_filter: str | None,
    skip_lost: bool,
    start_with_snapshot: bool,
    as_json: bool,
    storage_options: dict[str, Any] | None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    change_feed_from_snapshots: bool | None = None,
) -> int:
    """Print each committed batch's changes until interrupted or past ``end``; the command's exit code."""
    items = follow(
        checkpoint,
        operator_id=operator_id,
        store_name=store_name,
        state_var_name=state_var_name,
        change_start_batch_id=start,
        fail_on_data_loss=not skip_lost,
        start_with_snapshot=start_with_snapshot,
        change_feed_from_snapshots=change_feed_from_snapshots,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options,
    )
    with _skips_said_here():
        return _print(checkpoint, items, start, end, key_filter, start_with_snapshot, output(as_json))


@contextmanager
def _skips_said_here() -> Iterator[None]:
    """The follower's log (which warns of nothing but batches skipped) quiet: the command names the batches
    it skips itself (``Output.skipped``), once, in its own words."""

    def nothing(record: logging.LogRecord) -> bool:
        return False

    follow_log.addFilter(nothing)
    try:
        yield
    finally:
        follow_log.removeFilter(nothing)


def _print(
    checkpoint: str,
    items: Iterator[tuple[int, Any]],
    start: int | None,
    end: int | None,
    key_filter: str | None,
    start_with_snapshot: bool,
    out: Output,
) -> int:
    """Print ``items`` (``follow``'s) to ``out`` until they end or pass ``end``; the exit code."""
    keys: KeyFilter | None = None
    out.follow_start(checkpoint, key_filter)
    # follow() hands out every batch it reads, in order: a gap is batches skipped as lost (--skip-lost)
    expected = None if start is None else start - 1 if start_with_snapshot else start
    for batch, table in items:
        if expected is not None and batch > expected:
            out.skipped(expected, batch - 1)
        expected = batch + 1
        if key_filter:
            if keys is None:
                keys = KeyFilter(key_filter, table.schema.field("key").type)
            table = table.filter(keys.mask(table.column("key")))
        out.follow_batch(batch, table)
        if end is not None and batch >= end:
            break
    return 0
