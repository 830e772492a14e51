"""``state-reader plot CP --out FILE``: a picture of the state, written to a file.

Two pictures: state rows and bytes per partition over batches (from
:func:`~state_reader.inspect.stats.collect_stats`), or with ``--verdicts`` the keys of one store over
the watermark (or time) at which they leave state, as ``why`` without a key filter sums them up
(:func:`~state_reader.fronts.why_cli.verdict_summary`). Drawn by :mod:`state_reader.fronts.plotting`
with matplotlib, the only command that needs it; registered on the command line's group by
:mod:`state_reader.fronts.cli`.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from state_reader.fronts.cli_flags import (
    EXIT_OK,
    STATE_VAR_NAME,
    batch_range_flags,
    common_options,
    deprecated_batches_flag,
    given_schema_flags,
    stats_of_flags,
)
from state_reader.fronts.console import output
from state_reader.fronts.why_cli import verdict_summary


@click.command()
@click.argument("checkpoint")
@click.option("--out", required=True, metavar="FILE.png", help="Image file to write (PNG, SVG or PDF by extension).")
@click.option("--operator", "-O", "operator_id", type=int, help="Only this operator (default: all).")
@click.option("--store", "-s", "store_name", help="Only this store (default: all).")
@STATE_VAR_NAME
@click.option(
    "--verdicts",
    "verdicts",
    is_flag=True,
    help="Keys over the watermark (or time) at which they leave state, the watermark now drawn in "
    "(one store: operator 0's default unless given), as `why` without a key filter sums them up.",
)
@batch_range_flags("First batch (default: the oldest whose state is on disk).", "Last batch (default: the latest).")
@deprecated_batches_flag
@given_schema_flags
@common_options
def plot(
    checkpoint: str,
    out: str,
    operator_id: int | None,
    store_name: str | None,
    state_var_name: str | None,
    verdicts: bool,
    change_start_batch_id: int | None,
    change_end_batch_id: int | None,
    batch_range: str | None,
    key_schema: str | None,
    value_schema: str | None,
    as_json: bool,
    debug: bool,
    storage_option: Sequence[str],
) -> int:
    """Plot state rows and bytes per partition over batches (--verdicts: when the keys leave state)."""
    from state_reader.fronts.plotting import PLOT_NEEDS, figure_from_stats, figure_from_verdicts

    try:
        import matplotlib
    except ImportError:
        raise click.ClickException(PLOT_NEEDS) from None
    matplotlib.use("Agg")  # files only, never a window

    if verdicts:
        summary = verdict_summary(
            checkpoint, operator_id, store_name, state_var_name, key_schema, value_schema, storage_option
        )
        fig = figure_from_verdicts(summary)
        fig.savefig(out)
        width, height = (round(float(v)) for v in fig.get_size_inches() * fig.dpi)
        output(as_json).plot(out, width=width, height=height, stores=1, batches=[summary.latest_batch_id])
        return EXIT_OK

    result = stats_of_flags(
        checkpoint,
        operator_id,
        store_name,
        change_start_batch_id,
        change_end_batch_id,
        batch_range,
        key_schema,
        value_schema,
        storage_option,
    )
    fig = figure_from_stats(result.table, title=f"state of {checkpoint}")
    fig.savefig(out)
    width, height = (round(float(v)) for v in fig.get_size_inches() * fig.dpi)
    output(as_json).plot(out, width=width, height=height, stores=len(result.providers), batches=result.batches)
    return EXIT_OK
