"""``state-reader changes CP --follow``: a running query's state changes printed as batches commit.

Text: a line per batch (its counts of updates, deletes, …) and its rows; ``--json``:
one JSON object a row, a line each (``batch_id``, ``change_type``, ``key``, ``value``,
``partition_id``), flushed as each batch commits, for piping into ``jq`` or a file.
Interrupting (Ctrl-C) ends it; ``--to`` ends it after that batch.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click
import pyarrow as pa

from state_reader.core.key_filter import KeyFilter
from state_reader.inspect.changefeed import change_counts, follow
from state_reader.inspect.flatten import display_rows, json_rows


def follow_changes(checkpoint: str, start: int | None, end: int | None, *, operator_id: int | None,
                   store_name: str | None, state_var_name: str | None, key_filter: str | None, skip_lost: bool,
                   start_with_snapshot: bool, as_json: bool, storage_options: dict[str, Any] | None) -> int:
    """Print each committed batch's changes until interrupted or past ``end``; the command's exit code."""
    items = follow(checkpoint, operator_id=operator_id, store_name=store_name, state_var_name=state_var_name,
                   start=start, fail_on_data_loss=not skip_lost, start_with_snapshot=start_with_snapshot,
                   storage_options=storage_options)
    keys: KeyFilter | None = None
    if not as_json:
        click.echo(f"following {checkpoint}" + (f" · key filter: {key_filter}" if key_filter else "")
                   + " (Ctrl-C stops)", err=True)
    for batch, table in items:
        if key_filter:
            if keys is None:
                keys = KeyFilter(key_filter, table.schema.field("key").type)
            table = table.filter(keys.mask(table.column("key")))
        _print_batch(batch, table, as_json)
        if end is not None and batch >= end:
            break
    return 0


def _print_batch(batch: int, table: pa.Table, as_json: bool) -> None:
    if as_json:
        for row in json_rows(table):
            sys.stdout.write(json.dumps(row, ensure_ascii=False, allow_nan=False, default=str) + "\n")
        sys.stdout.flush()
        return
    counts = change_counts(table)
    summary = ", ".join(f"{c['rows']} {c['change_type']}{'s' if c['rows'] != 1 else ''}" for c in counts)
    click.echo(f"batch {batch}: {summary or 'no changes'}")
    if table.num_rows:
        names, rows = display_rows(table)
        for cells in rows:
            click.echo("  " + "  ".join(f"{n}={v}" for n, v in zip(names, cells, strict=True)
                                        if n not in ("batch_id",)))
    sys.stdout.flush()
