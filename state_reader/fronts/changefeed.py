"""The change feed of a store between two batches, ordered for reading.

:func:`changes` is ``read_state(cp, read_change_feed=True,
change_start_batch_id=start, change_end_batch_id=end)`` with its rows sorted by
batch and partition, plus :func:`change_counts`, the per-batch tally of
updates and deletes the CLI prints above the rows.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from state_reader.core.key_filter import KeyFilter, KeyFilterSpec
from state_reader.core.live import read_consistently
from state_reader.core.options import from_kwargs
from state_reader.core.scan import read_table
from state_reader.errors import public_api
from state_reader.fronts.flatten import with_unique_field_names


def change_options(checkpoint: str, start: int, end: int | None = None, *, operator_id: int | None = None,
                   store_name: str | None = None, state_var_name: str | None = None,
                   storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The data source options of the change feed ``start``..``end`` (end: the latest committed batch)."""
    return from_kwargs(checkpoint, {
        "read_change_feed": True, "change_start_batch_id": start, "change_end_batch_id": end,
        "operator_id": operator_id, "store_name": store_name, "state_var_name": state_var_name,
        "storage_options": storage_options})


def sort_changes(table: pa.Table) -> pa.Table:
    """Rows by batch then partition, keeping each partition's order within a batch."""
    if table.num_rows == 0 or "batch_id" not in table.schema.names:
        return table
    order = pc.sort_indices(pa.table({"b": table.column("batch_id"), "p": table.column("partition_id"),
                                      "i": pa.array(range(table.num_rows))}),
                            sort_keys=[("b", "ascending"), ("p", "ascending"), ("i", "ascending")])
    return table.take(order)


@public_api
def changes(checkpoint: str, start: int, end: int | None = None, *, operator_id: int | None = None,
            store_name: str | None = None, state_var_name: str | None = None,
            key_filter: KeyFilterSpec | KeyFilter | None = None,
            storage_options: dict[str, Any] | None = None, show_progress: bool | None = None,
            exact_schema: bool = False) -> pa.Table:
    """What batches ``start``..``end`` changed in a store, as a ``pyarrow.Table``.

    Columns as Spark's change feed: ``batch_id``, ``change_type`` (``update``,
    ``delete``, …), ``key``, ``value`` (null for deletes), ``partition_id``;
    sorted by batch and partition. ``end`` defaults to the latest committed
    batch; ``state_var_name`` (a transformWithState variable), ``key_filter`` and
    ``exact_schema`` as in ``read_state``.
    """
    options = change_options(checkpoint, start, end, operator_id=operator_id, store_name=store_name,
                             state_var_name=state_var_name, storage_options=storage_options)
    table = read_consistently(options, lambda plan: sort_changes(read_table(plan, key_filter=key_filter,
                                                                            show_progress=show_progress)))
    return table if exact_schema else with_unique_field_names(table)


def change_counts(table: pa.Table) -> list[dict[str, Any]]:
    """``[{"batch_id", "change_type", "rows"}]`` of a change feed table, by batch."""
    if table.num_rows == 0:
        return []
    grouped = pa.table({"batch_id": table.column("batch_id"), "change_type": table.column("change_type")}) \
        .group_by(["batch_id", "change_type"]).aggregate([("batch_id", "count")])
    rows = [{"batch_id": r["batch_id"], "change_type": r["change_type"], "rows": r["batch_id_count"]}
            for r in grouped.to_pylist()]
    return sorted(rows, key=lambda r: (r["batch_id"], str(r["change_type"])))
