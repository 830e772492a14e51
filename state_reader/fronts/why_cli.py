"""``state-reader why CP``: why a key is in state, or why the state is this big.

With ``--key-filter``, each key it matches: its story over the retained batches (batch time, the
watermark the operator saw, each change and value) and the verdict on when Spark will emit, expire or
evict it (:func:`~state_reader.inspect.explain.explain`). Without one, every key's verdict of one store
summed up (:func:`~state_reader.inspect.verdict_summary.summarize_verdicts`: keys per verdict, when they
leave, their ages), which ``plot --verdicts`` draws as well (:func:`verdict_summary`). Registered on the
command line's group by :mod:`state_reader.fronts.cli`; what it prints is the
:class:`~state_reader.fronts.console.Output` ``--json`` chose (``why`` and ``verdicts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from state_reader.fronts.cli_flags import (
    EXIT_OK,
    FROM_SNAPSHOTS,
    KEY_FILTER_HELP,
    common_options,
    given_schema_flags,
    key_lookup_flags,
    storage_options_of,
)
from state_reader.fronts.console import output

if TYPE_CHECKING:
    from state_reader.inspect.verdict_summary import VerdictSummary


def verdict_summary(
    checkpoint: str,
    operator_id: int | None,
    store_name: str | None,
    state_var_name: str | None,
    key_schema: str | None,
    value_schema: str | None,
    storage_option: Sequence[str],
) -> VerdictSummary:
    """Every key's verdict of the store the flags choose, summed up (``why`` without -k, ``plot --verdicts``)."""
    from state_reader.inspect.verdict_summary import summarize_verdicts

    return summarize_verdicts(
        checkpoint,
        operator_id=operator_id,
        store_name=store_name,
        state_var_name=state_var_name,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options_of(storage_option),
    )


@click.command(epilog=KEY_FILTER_HELP)
@click.argument("checkpoint")
@key_lookup_flags
@FROM_SNAPSHOTS
@click.option(
    "--history",
    metavar="PATH",
    help="A Parquet history kept by following the query: the timeline starts there, before the retained batches.",
)
@given_schema_flags
@common_options
def why(
    checkpoint: str,
    operator_id: int | None,
    store_name: str | None,
    state_var_name: str | None,
    key_filter: str | None,
    change_feed_from_snapshots: bool | None,
    history: str | None,
    key_schema: str | None,
    value_schema: str | None,
    as_json: bool,
    debug: bool,
    storage_option: Sequence[str],
) -> int:
    """Why a key is in state: its story over the retained batches (batch time, the watermark the operator
    saw, each change and value), and when Spark will emit, expire or evict it. Without --key-filter: why
    the state is this big, every key's verdict summed up (keys per verdict, when they leave, their ages)."""
    if key_filter is None:
        summary = verdict_summary(
            checkpoint, operator_id, store_name, state_var_name, key_schema, value_schema, storage_option
        )
        output(as_json).verdicts(summary)
        return EXIT_OK
    from state_reader.inspect.explain import explain

    result = explain(
        checkpoint,
        key_filter=key_filter,
        operator_id=operator_id,
        store_name=store_name,
        state_var_name=state_var_name,
        change_feed_from_snapshots=change_feed_from_snapshots,
        history=history,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options_of(storage_option),
    )
    output(as_json).why(result)
    return EXIT_OK
