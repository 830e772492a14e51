"""The change feed of a store between two batches, ordered for reading, and the
changes of a running query as it commits them (:func:`follow`).

:func:`changes` is ``read_state(cp, read_change_feed=True,
change_start_batch_id=..., change_end_batch_id=...)`` with its rows sorted by
batch and partition, plus :func:`change_counts`, the per-batch tally of
updates and deletes the CLI prints above the rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from state_reader.core.follow import Follow, follow_batches
from state_reader.core.key_filter import KeyFilter, KeyFilterSpec
from state_reader.core.live import read_consistently
from state_reader.core.options import from_kwargs, in_python_names, python_api
from state_reader.core.scan import read_table
from state_reader.deprecation import renamed_keywords
from state_reader.errors import StateReaderError, renamed, unexpected_errors_as_ours
from state_reader.formats.flatten import with_unique_field_names
from state_reader.io.integrity import with_checksum_report


def change_options(
    checkpoint: str,
    change_start_batch_id: int,
    change_end_batch_id: int | None = None,
    *,
    operator_id: int | None = None,
    store_name: str | None = None,
    state_var_name: str | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    change_feed_from_snapshots: bool | None = None,
    storage_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The data source options of the change feed ``change_start_batch_id``..``change_end_batch_id``
    (the end: the latest committed batch)."""
    return from_kwargs(
        checkpoint,
        {
            "read_change_feed": True,
            "change_start_batch_id": change_start_batch_id,
            "change_end_batch_id": change_end_batch_id,
            "operator_id": operator_id,
            "store_name": store_name,
            "state_var_name": state_var_name,
            "key_schema": key_schema,
            "value_schema": value_schema,
            "change_feed_from_snapshots": change_feed_from_snapshots,
            "storage_options": storage_options,
        },
    )


def sort_changes(table: pa.Table) -> pa.Table:
    """Rows by batch then partition, keeping each partition's order within a batch."""
    if table.num_rows == 0 or "batch_id" not in table.schema.names:
        return table
    order = pc.sort_indices(
        pa.table(
            {"b": table.column("batch_id"), "p": table.column("partition_id"), "i": pa.array(range(table.num_rows))}
        ),
        sort_keys=[("b", "ascending"), ("p", "ascending"), ("i", "ascending")],
    )
    return table.take(order)


@renamed_keywords("changes", start="change_start_batch_id", end="change_end_batch_id")
@python_api
@with_checksum_report  # one warning for all the files read
def changes(
    checkpoint: str,
    change_start_batch_id: int,
    change_end_batch_id: int | None = None,
    *,
    operator_id: int | None = None,
    store_name: str | None = None,
    state_var_name: str | None = None,
    key_filter: KeyFilterSpec | KeyFilter | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    change_feed_from_snapshots: bool | None = None,
    storage_options: dict[str, Any] | None = None,
    show_progress: bool | None = None,
    exact_schema: bool = False,
) -> pa.Table:
    """What batches ``change_start_batch_id``..``change_end_batch_id`` changed in a store, as a ``pyarrow.Table``.

    Columns as Spark's change feed: ``batch_id``, ``change_type`` (``update``,
    ``delete``, …), ``key``, ``value`` (null for deletes), ``partition_id``;
    sorted by batch and partition. ``change_end_batch_id`` defaults to the latest
    committed batch; ``state_var_name`` (a transformWithState variable), ``key_filter``,
    ``key_schema`` and ``value_schema`` (a store without a schema file),
    ``change_feed_from_snapshots`` (a RocksDB store without changelogs) and
    ``exact_schema`` as in ``read_state``.
    """
    options = change_options(
        checkpoint,
        change_start_batch_id,
        change_end_batch_id,
        operator_id=operator_id,
        store_name=store_name,
        state_var_name=state_var_name,
        key_schema=key_schema,
        value_schema=value_schema,
        change_feed_from_snapshots=change_feed_from_snapshots,
        storage_options=storage_options,
    )
    table = read_consistently(
        options, lambda plan: sort_changes(read_table(plan, key_filter=key_filter, show_progress=show_progress))
    )
    return table if exact_schema else with_unique_field_names(table)


def change_counts(table: pa.Table) -> list[dict[str, Any]]:
    """``[{"batch_id", "change_type", "rows"}]`` of a change feed table, by batch."""
    if table.num_rows == 0:
        return []
    grouped = (
        pa.table({"batch_id": table.column("batch_id"), "change_type": table.column("change_type")})
        .group_by(["batch_id", "change_type"])
        .aggregate([("batch_id", "count")])
    )
    rows = [
        {"batch_id": r["batch_id"], "change_type": r["change_type"], "rows": r["batch_id_count"]}
        for r in grouped.to_pylist()
    ]
    return sorted(rows, key=lambda r: (r["batch_id"], str(r["change_type"])))


@renamed_keywords("follow", start="change_start_batch_id", max_batches="max_batches_per_trigger")
@python_api
def follow(
    checkpoint: str,
    *,
    operator_id: int | None = None,
    store_name: str | None = None,
    state_var_name: str | None = None,
    change_start_batch_id: int | None = None,
    max_batches_per_trigger: int | None = None,
    fail_on_data_loss: bool = True,
    start_with_snapshot: bool = False,
    change_feed_from_snapshots: bool | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    poll_seconds: float = 1.0,
    max_poll_seconds: float = 30.0,
    stop: threading.Event | Callable[[], bool] | None = None,
    storage_options: dict[str, Any] | None = None,
    exact_schema: bool = False,
) -> Iterator[tuple[int, pa.Table]]:
    """The changes of a running query's store as its batches commit: ``(batch_id, pyarrow.Table)``.

    One item per committed producer batch, in order, a batch without changes as an
    empty table (so the last batch seen says where to resume:
    ``change_start_batch_id=batch + 1``). ``change_start_batch_id`` defaults to the
    oldest batch the checkpoint still serves. The commit log is polled every
    ``poll_seconds``, the wait doubling up to
    ``max_poll_seconds`` while nothing commits; the iteration ends when ``stop``
    (a ``threading.Event`` or a callable) says so, or when the caller stops
    iterating. At most ``max_batches_per_trigger`` producer batches are read at once.

    Batches the query cleaned up before they were read raise
    :class:`~state_reader.errors.ChangesLostError`; with ``fail_on_data_loss=False``
    they are skipped (a warning in the ``state_reader.follow`` log names them).
    ``start_with_snapshot``: the first item is ``(change_start_batch_id - 1, the whole state then)``,
    rows with ``change_type = 'snapshot'``. Errors for a location that is no
    checkpoint, a query that has not committed a batch, or an operator, store or
    variable that does not exist are raised by this call, before iterating.
    ``key_schema`` and ``value_schema`` as in ``read_state``. Nothing is written
    to the checkpoint.
    """
    options = from_kwargs(
        checkpoint,
        {
            "operator_id": operator_id,
            "store_name": store_name,
            "state_var_name": state_var_name,
            "change_start_batch_id": change_start_batch_id,
            "max_batches_per_trigger": max_batches_per_trigger,
            "fail_on_data_loss": fail_on_data_loss,
            "start_with_snapshot": start_with_snapshot,
            "change_feed_from_snapshots": change_feed_from_snapshots,
            "key_schema": key_schema,
            "value_schema": value_schema,
            "storage_options": storage_options,
        },
    )
    spec = Follow.parse(options)
    spec.initial_offset()
    spec.schema_plan()  # the operator, store or variable exists
    stopped = stop.is_set if isinstance(stop, threading.Event) else stop

    def items() -> Iterator[tuple[int, pa.Table]]:
        try:
            with unexpected_errors_as_ours(str(checkpoint)):
                for batch, table in follow_batches(
                    spec,
                    poll_seconds=poll_seconds,
                    max_poll_seconds=max_poll_seconds,
                    stop=stopped,
                    sleep=_sleeper(stop),
                ):
                    yield batch, table if exact_schema else with_unique_field_names(table)
        except StateReaderError as exc:  # raised while iterating: in the caller's words too
            renamed(exc, in_python_names)
            raise

    return items()


def _sleeper(stop: threading.Event | Callable[[], bool] | None) -> Callable[[float], None]:
    """A wait between polls that an Event cuts short."""
    if isinstance(stop, threading.Event):
        event = stop

        def wait(seconds: float) -> None:
            event.wait(seconds)

        return wait
    return time.sleep
