"""``state-reader``: look at a streaming checkpoint's state from a terminal.

A thin front over the Spark-free API: each command reads its options, calls one
function of the API (``describe_checkpoint``, ``plan_state_read`` + ``scan``,
``collect_stats``, ``changes``, ``export_state``, ``verify_checkpoint``,
``figure_from_stats``) and hands what comes back to :mod:`state_reader.fronts.console`,
which prints it. Every command takes ``--json``. Failures print one line (the
error's message) and exit with 1; ``--debug`` adds the traceback. ``verify`` exits
with 2 when it finds damage. ``plot``, ``rewrite`` and ``why`` are commands of their own
modules (:mod:`state_reader.fronts.plot_cli`, :mod:`state_reader.fronts.cli_rewrite`,
:mod:`state_reader.fronts.why_cli`), added to the group here.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from state_reader._version import __version__
from state_reader.errors import StateReaderError
from state_reader.fronts import console
from state_reader.fronts.cli_flags import (
    EXIT_DAMAGED,
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    FROM_SNAPSHOTS,
    KEY_FILTER_HELP,
    LAYOUT,
    STATE_VAR_NAME,
    NegatingFlag,
    batch_range_flags,
    common_options,
    deprecated_batches_flag,
    deprecated_flag,
    given_schema_flags,
    in_flags,
    instead_of,
    stats_of_flags,
    storage_options_of,
    store_read_flags,
)
from state_reader.fronts.cli_rewrite import rewrite
from state_reader.fronts.plot_cli import plot
from state_reader.fronts.why_cli import why
from state_reader.inspect.doctor_thresholds import THRESHOLDS

if TYPE_CHECKING:
    import pyarrow as pa

    from state_reader.model.plan import StateReadPlan

# Each command imports what it uses when it runs: numpy, pyarrow and fsspec are most of
# a cold start, and `overview` or `--help` should not wait for what only `show` needs.

DEFAULT_LIMIT = 50


# ---------------------------------------------------------------------------
# options (the flags several commands declare alike are in cli_flags)


T = TypeVar("T")


def _read(checkpoint: str, storage_option: Sequence[str], read: Callable[[StateReadPlan], T], **kwargs: Any) -> T:
    """``read(plan)`` of the options given, planned again if a running query cleans up under it."""
    from state_reader.core.live import read_consistently
    from state_reader.core.options import from_kwargs

    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return read_consistently(
        from_kwargs(checkpoint, {**kwargs, "storage_options": storage_options_of(storage_option)}), read
    )


def _shown_store(plan: StateReadPlan, store_name: str | None, join_side: str | None) -> str:
    """What was read, in the user's words: a join side, a column family read as a store, or the store."""
    if join_side:
        return f"joinSide={join_side}"
    return store_name or plan.store_name


# ---------------------------------------------------------------------------
# commands


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="state-reader")
@click.option("--debug", is_flag=True, help="Show the full traceback of an error.")
@click.option(
    "--verbose",
    is_flag=True,
    help="Report the calls made to the filesystem and the bytes fetched when the command ends "
    "(on stderr; also accepted after the command).",
)
def cli(debug: bool, verbose: bool) -> None:
    """See inside the state of a Spark Structured Streaming checkpoint.

    CHECKPOINT is a local path or an fsspec URL (s3://, gs://, abfs://, file://).
    Start with `state-reader overview CHECKPOINT`.
    """


@cli.command()
@click.argument("checkpoint")
@common_options
def overview(checkpoint: str, as_json: bool, debug: bool, storage_option: Sequence[str]) -> int:
    """The checkpoint at a glance: operators, stores, batches, provider, codec, state formats."""
    from state_reader.inspect.overview import describe_checkpoint

    info = describe_checkpoint(checkpoint, storage_options=storage_options_of(storage_option))
    console.output(as_json).overview(info)
    return EXIT_OK


# `metadata`, the command's earlier name (a word the state-metadata source also uses), still works unlisted
_metadata = copy.copy(overview)
_metadata.name, _metadata.hidden = "metadata", True
cli.add_command(_metadata)


@cli.command(epilog=KEY_FILTER_HELP)
@click.argument("checkpoint")
@store_read_flags
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(min=0),
    default=DEFAULT_LIMIT,
    show_default=True,
    help="Rows to show; 0 shows all.",
)
@LAYOUT
@common_options
def show(
    checkpoint: str,
    operator_id: int | None,
    store_name: str | None,
    batch_id: int | None,
    partitions: tuple[int, ...],
    key_filter: str | None,
    state_var_name: str | None,
    read_registered_timers: bool | None,
    join_side: str | None,
    key_schema: str | None,
    value_schema: str | None,
    limit: int,
    layout: str,
    as_json: bool,
    debug: bool,
    storage_option: Sequence[str],
) -> int:
    """The state of one store at one batch, as a table."""
    from state_reader.core.scan import bind_key_filter, partitions_to_read, read_table, require_files

    def read(plan: StateReadPlan) -> tuple[StateReadPlan, pa.Table, bool, list[int]]:
        # a key filter that pins the partition key reads only the partitions it can match
        chosen = partitions_to_read(plan, bind_key_filter(plan, key_filter), list(partitions) or None)
        # one row more than shown tells whether there are more
        table = read_table(plan, key_filter=key_filter, partitions=chosen, limit=(limit + 1) if limit else None)
        truncated = bool(limit) and table.num_rows > limit
        if truncated:
            # the limit stopped the read early: the partitions it did not decode must still be readable
            require_files(plan, chosen)
            table = table.slice(0, limit)
        return plan, table, truncated, chosen

    plan, table, truncated, chosen = _read(
        checkpoint,
        storage_option,
        read,
        operator_id=operator_id,
        store_name=store_name,
        batch_id=batch_id,
        state_var_name=state_var_name,
        join_side=join_side,
        read_registered_timers=read_registered_timers,
        key_schema=key_schema,
        value_schema=value_schema,
    )
    console.output(as_json).show(
        plan,
        table,
        shown_store=_shown_store(plan, store_name, join_side),
        chosen=chosen,
        key_filter=key_filter,
        partitions_given=bool(partitions),
        truncated=truncated,
        limit=limit,
        layout=layout,
    )
    return EXIT_OK


@cli.command()
@click.argument("checkpoint")
@click.option("--operator", "-O", "operator_id", type=int, help="Only this operator (default: all).")
@click.option("--store", "-s", "store_name", help="Only this store (default: all).")
@batch_range_flags(
    "First batch (default: the oldest whose state is on disk).", "Last batch (default: the latest committed)."
)
@deprecated_batches_flag
@given_schema_flags
@click.option("--detail", is_flag=True, help="Also list every (batch, partition).")
@common_options
def stats(
    checkpoint: str,
    operator_id: int | None,
    store_name: str | None,
    change_start_batch_id: int | None,
    change_end_batch_id: int | None,
    batch_range: str | None,
    key_schema: str | None,
    value_schema: str | None,
    detail: bool,
    as_json: bool,
    debug: bool,
    storage_option: Sequence[str],
) -> int:
    """State size per partition and batch: growth, skew."""
    from state_reader.inspect.stats import batch_summary

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
    console.output(as_json).stats(result, batch_summary(result.table), detail=detail)
    return EXIT_OK


@cli.command(name="changes", epilog=KEY_FILTER_HELP)
@click.argument("checkpoint")
@batch_range_flags(
    "First batch of the change feed (required without --follow).",
    "Last batch (default: the latest committed; with --follow: follow until it is printed).",
)
@click.option(
    "--follow",
    "-f",
    "follow",
    is_flag=True,
    help="Print the changes of each batch as the query commits it, until interrupted "
    "(--from defaults to the oldest batch the checkpoint keeps).",
)
@click.option(
    "--skip-lost",
    is_flag=True,
    cls=NegatingFlag,
    negates="fail_on_data_loss",
    help="With --follow: skip batches the query cleaned up before they "
    "were read (a warning names them) instead of failing.",
)
@click.option(
    "--snapshot",
    "start_with_snapshot",
    is_flag=True,
    help="With --follow: first print the whole state before the first batch (change_type snapshot).",
)
@click.option("--operator", "-O", "operator_id", type=int, help="Operator id (default 0).")
@click.option("--store", "-s", "store_name", help="Store name (default 'default').")
@STATE_VAR_NAME
@click.option("--key-filter", "-k", help="Keep keys matching e.g. \"user = 'ann'\".")
@FROM_SNAPSHOTS
@given_schema_flags
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(min=0),
    default=DEFAULT_LIMIT,
    show_default=True,
    help="Rows to show; 0 shows all.",
)
@LAYOUT
@common_options
def changes_command(
    checkpoint: str,
    change_start_batch_id: int | None,
    change_end_batch_id: int | None,
    follow: bool,
    skip_lost: bool,
    start_with_snapshot: bool,
    operator_id: int | None,
    store_name: str | None,
    state_var_name: str | None,
    key_filter: str | None,
    change_feed_from_snapshots: bool | None,
    key_schema: str | None,
    value_schema: str | None,
    limit: int,
    layout: str,
    as_json: bool,
    debug: bool,
    storage_option: Sequence[str],
) -> int:
    """The change feed: what batches FROM..TO changed; with --follow, each batch's changes as it commits.

    --json prints one JSON document ({"rows", "counts", "row_count", ...}); with --follow it prints JSON
    lines instead, one object a row as each batch commits (and one a skip, with --skip-lost), for piping."""
    from state_reader.core.changefeed import change_counts, changes

    # the change feed read, the same followed or not
    read: dict[str, Any] = dict(
        operator_id=operator_id,
        store_name=store_name,
        state_var_name=state_var_name,
        key_filter=key_filter,
        key_schema=key_schema,
        value_schema=value_schema,
        change_feed_from_snapshots=change_feed_from_snapshots,
        storage_options=storage_options_of(storage_option),
    )
    if follow:
        from state_reader.fronts.follow_cli import follow_changes

        return follow_changes(
            checkpoint,
            change_start_batch_id,
            change_end_batch_id,
            **read,
            skip_lost=skip_lost,
            start_with_snapshot=start_with_snapshot,
            as_json=as_json,
        )
    if skip_lost or start_with_snapshot:
        raise click.UsageError("--skip-lost and --snapshot go with --follow")
    if change_start_batch_id is None:
        raise click.UsageError("Missing option '--from' (it may be left out with --follow only)")

    table = changes(checkpoint, change_start_batch_id, change_end_batch_id, **read)
    console.output(as_json).changes(
        table,
        change_counts(table),
        start=change_start_batch_id,
        end=change_end_batch_id,
        key_filter=key_filter,
        limit=limit,
        layout=layout,
    )
    return EXIT_OK


@cli.command(epilog=KEY_FILTER_HELP)
@click.argument("checkpoint")
@click.option(
    "--out",
    metavar="FILE",
    help="Output file: .parquet, .csv, .json (one JSON array) or .jsonl (one JSON object a line). Required.",
)
@deprecated_flag("--to", "--out", "deprecated_to", metavar="FILE")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["parquet", "csv", "json", "jsonl"]),
    help="Output format (default: from the extension).",
)
@store_read_flags
@common_options
def export(
    checkpoint: str,
    out: str | None,
    deprecated_to: str | None,
    fmt: str | None,
    operator_id: int | None,
    store_name: str | None,
    batch_id: int | None,
    partitions: tuple[int, ...],
    key_filter: str | None,
    state_var_name: str | None,
    read_registered_timers: bool | None,
    join_side: str | None,
    key_schema: str | None,
    value_schema: str | None,
    as_json: bool,
    debug: bool,
    storage_option: Sequence[str],
) -> int:
    """Write the state of one store at one batch to a file."""
    from state_reader.inspect.export import export_state

    out = instead_of(out, deprecated_to, "--out", "--to")
    if out is None:
        raise click.UsageError("Missing option '--out'")
    plan, result = _read(
        checkpoint,
        storage_option,
        lambda plan: (
            plan,
            export_state(plan, out, fmt=fmt, key_filter=key_filter, partitions=list(partitions) or None),
        ),
        operator_id=operator_id,
        store_name=store_name,
        batch_id=batch_id,
        state_var_name=state_var_name,
        join_side=join_side,
        read_registered_timers=read_registered_timers,
        key_schema=key_schema,
        value_schema=value_schema,
    )
    console.output(as_json).export(
        plan,
        result,
        out=out,
        shown_store=_shown_store(plan, store_name, join_side),
        size=os.path.getsize(out),
    )
    return EXIT_OK


@cli.command()
@click.argument("checkpoint")
@click.option("--operator", "-O", "operator_id", type=int, help="Only this operator (default: all).")
@given_schema_flags
@common_options
def verify(
    checkpoint: str,
    operator_id: int | None,
    key_schema: str | None,
    value_schema: str | None,
    as_json: bool,
    debug: bool,
    storage_option: Sequence[str],
) -> int:
    """Decode every retained version; exit 2 on damage."""
    from state_reader.inspect.verify import verify_checkpoint

    report = verify_checkpoint(
        checkpoint,
        operator_id=operator_id,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options_of(storage_option),
    )
    for problem in report.problems:  # what the planner says of a store, in the flags' words
        problem.message = in_flags(problem.message, cli)
    console.output(as_json).verify(report)
    return EXIT_OK if report.ok else EXIT_DAMAGED


cli.add_command(plot)
cli.add_command(rewrite)


@cli.command()
@click.argument("checkpoint")
@click.option(
    "--threshold",
    "thresholds",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a threshold (repeatable): " + ", ".join(THRESHOLDS) + ".",
)
@given_schema_flags
@common_options
def doctor(
    checkpoint: str,
    thresholds: Sequence[str],
    key_schema: str | None,
    value_schema: str | None,
    as_json: bool,
    debug: bool,
    storage_option: Sequence[str],
) -> int:
    """Say what is wrong with the query that wrote CHECKPOINT; exit 3 when a warning or worse is found."""
    from state_reader.inspect.doctor import diagnose

    given: dict[str, str] = {}
    for item in thresholds:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--threshold")
        given[name.strip()] = value.strip()
    result = diagnose(
        checkpoint,
        thresholds=given,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options_of(storage_option),
    )
    # what a store's read said of it, in the flags' words
    result.findings = [dataclasses.replace(f, summary=in_flags(f.summary, cli)) for f in result.findings]
    console.output(as_json).doctor(result)
    return EXIT_OK if result.healthy else EXIT_FINDINGS


cli.add_command(why)


@cli.command()
@click.argument("checkpoint")
@common_options
def schema(checkpoint: str, as_json: bool, debug: bool, storage_option: Sequence[str]) -> int:
    """Print every store's stored key and value schema."""
    from state_reader.inspect.schema_check import store_schemas

    schemas = store_schemas(checkpoint, storage_options=storage_options_of(storage_option))
    console.output(as_json).schema(schemas)
    return EXIT_OK


@cli.command(name="schema-diff")
@click.argument("checkpoint")
@click.argument("other")
@common_options
def schema_diff(checkpoint: str, other: str, as_json: bool, debug: bool, storage_option: Sequence[str]) -> int:
    """Would the query that wrote OTHER (e.g. a short test run of a changed query) restart from CHECKPOINT?

    Exit 3 when Spark would refuse the restart.
    """
    from state_reader.inspect.schema_check import compare_schemas

    verdicts = compare_schemas(checkpoint, other, storage_options=storage_options_of(storage_option))
    console.output(as_json).schema_diff(verdicts)
    return EXIT_OK if all(v.compatible for v in verdicts) else EXIT_FINDINGS


# ---------------------------------------------------------------------------
# entry point


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _counted(args: list[str]) -> int:
    """:func:`main` of ``args``, then the filesystem calls it made and the bytes it fetched, on stderr."""
    from state_reader.io.calls import describe_counts, io_counts, io_counts_since

    before, started = io_counts(), time.monotonic()
    try:
        return main(args)
    finally:
        click.echo(
            f"filesystem: {describe_counts(io_counts_since(before))} in {time.monotonic() - started:.2f} s", err=True
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 error, 2 damage found by ``verify``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--verbose" in args:  # anywhere on the line, for every command
        return _counted([a for a in args if a != "--verbose"])
    debug = "--debug" in args or os.environ.get("STATE_READER_DEBUG", "") not in ("", "0")
    as_json = "--json" in args
    try:
        code = cli.main(args=args, prog_name="state-reader", standalone_mode=False)
        return code if isinstance(code, int) else EXIT_OK
    except StateReaderError as exc:
        if debug:
            traceback.print_exc()
        message = in_flags(exc.message, cli, args)
        console.output(as_json).error(exc.error_class, message, exc.path)
        click.echo(f"error: {_one_line(message)}", err=True)
        return EXIT_ERROR
    except click.exceptions.Abort:
        # what click makes of Ctrl-C
        click.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except click.exceptions.NoArgsIsHelpError as exc:
        # bare `state-reader` (or a group without a command): the help is the answer
        click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
        return EXIT_OK
    except click.ClickException as exc:
        if debug:
            traceback.print_exc()
        hint = ""
        ctx = getattr(exc, "ctx", None)
        if ctx is not None:
            hint = f" (see '{ctx.command_path} --help')"
        console.output(as_json).error("USAGE", _one_line(exc.format_message()), None)
        click.echo(f"error: {_one_line(exc.format_message())}{hint}", err=True)
        return EXIT_ERROR
    except BrokenPipeError:
        # `state-reader show ... | head`: the reader went away; that is fine
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except Exception as exc:  # one line for the user, the traceback on request
        if debug:
            traceback.print_exc()
        click.echo(
            f"error: unexpected {type(exc).__name__}: {_one_line(str(exc))} (run with --debug for the traceback)",
            err=True,
        )
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
