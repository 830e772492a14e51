"""``state-reader``: look at a streaming checkpoint's state from a terminal.

A thin front over the Spark-free API: each command calls one core function
(``describe_checkpoint``, ``plan_state_read`` + ``scan``, ``collect_stats``,
``changes``, ``export_state``, ``verify_checkpoint``, ``figure_from_stats``) and
only formats what comes back. Every command takes ``--json``. Failures print one
line (the error's message) and exit with 1; ``--debug`` adds the traceback.
``verify`` exits with 2 when it finds damage.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from state_reader._version import __version__
from state_reader.errors import StateReaderError
from state_reader.inspect.doctor_thresholds import THRESHOLDS
from state_reader.model.conf import PROVIDER_NAMES, provider_name
from state_reader.units import human_bytes

if TYPE_CHECKING:
    import pyarrow as pa

    from state_reader.inspect.stats import StatsResult
    from state_reader.model.plan import StateReadPlan

# Each command imports what it uses when it runs: numpy, pyarrow and fsspec are most of
# a cold start, and `metadata` or `--help` should not wait for what only `show` needs.

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_DAMAGED = 2
EXIT_FINDINGS = 3  # doctor: a warning or worse
DEFAULT_LIMIT = 50
SPARK_BLOCKS = "▁▂▃▄▅▆▇█"


# ---------------------------------------------------------------------------
# output helpers


def _console() -> Console:
    # pipes get no colour; give them a wide page so tables are not squeezed to 80 columns
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200
    return Console(highlight=False, width=width)


def _emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, ensure_ascii=False, indent=2, allow_nan=False, default=str))


def sparkline(values: Sequence[float]) -> str:
    """A one-line bar chart: ``▁▃▅█``."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if hi == lo:
        return SPARK_BLOCKS[3] * len(values)
    return "".join(SPARK_BLOCKS[round((v - lo) / (hi - lo) * (len(SPARK_BLOCKS) - 1))] for v in values)


CELL_WIDTH = 48  # longest cell shown in table layout; records layout shows everything


def _data_table(names: list[str], rows: list[list[Any]]) -> Table:
    from state_reader.inspect.flatten import render_cell

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in names:
        table.add_column(name, no_wrap=True, overflow="ellipsis", max_width=CELL_WIDTH)
    for row in rows:
        # Text(): state values must never be read as rich markup
        table.add_row(*(Text(render_cell(v), style="dim" if v is None else "") for v in row))
    return table


def _records(names: list[str], rows: list[list[Any]]) -> Table:
    """One block per row, one line per column: readable however many columns there are."""
    from state_reader.inspect.flatten import render_cell

    grid = Table(box=None, show_header=False, pad_edge=False, padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for i, row in enumerate(rows):
        if i:
            grid.add_row("", "")
        grid.add_row(Text(f"row {i + 1}", style="bold cyan"), "")
        for name, value in zip(names, row, strict=True):
            grid.add_row(Text(name), Text(render_cell(value), style="dim" if value is None else ""))
    return grid


def _print_rows(con: Console, names: list[str], rows: list[list[Any]], layout: str) -> None:
    """A table when the rows fit the screen (or ``layout`` says so), else records."""
    from state_reader.inspect.flatten import render_cell

    if layout == "auto":
        widths = [max([len(n)] + [min(len(render_cell(r[i])), CELL_WIDTH) for r in rows]) for i, n in
                  enumerate(names)]
        layout = "table" if sum(w + 3 for w in widths) <= con.width else "records"
    con.print(_data_table(names, rows) if layout == "table" else _records(names, rows))


KEY_FILTER_HELP = """\b
Key filters compare key fields (a leading 'key.' is optional) with literals:
  user = 'ann'            region_id > 3 and not grp in ('a', 'b')
  window.start >= '2024-01-01 10:00:00'       tag is null or n != 0
Operators: = != < <= > >= in, not in, is [not] null, and, or, not, ( ).
Timestamps are UTC unless the text has an offset; `back quotes` for odd names.
"""


LAYOUT = click.option("--layout", type=click.Choice(["auto", "table", "records"]), default="auto",
                      show_default=True, help="Rows as a table, or one block per row (records).")


def _storage_options(pairs: Sequence[str]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--storage-option")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out or None


def common_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--json``, ``--debug`` and ``--storage-option`` on every command."""
    func = click.option("-o", "--storage-option", "storage_option", multiple=True, metavar="KEY=VALUE",
                        help="fsspec storage option for remote checkpoints (repeatable; VALUE may be JSON).")(func)
    func = click.option("--debug", is_flag=True, help="Show the full traceback of an error.")(func)
    func = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")(func)
    return func


class _OneName(click.Option):
    """An option shown in ``--help`` under its first name; the others are accepted spellings."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        names, self.opts = self.opts, self.opts[:1]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = names


# stateVarName / state_var_name / --state-var-name: one name everywhere; --state-var, its earlier spelling, still works
STATE_VAR_NAME = click.option("--state-var-name", "--state-var", "state_var_name", cls=_OneName,
                              help="State variable of a transformWithState operator.")


def store_read_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """What to read (``show``, ``export``): operator, store, batch, partitions, key filter, variable, join side."""
    options = [
        click.option("--operator", "-O", "operator_id", type=int, help="Operator id (default 0)."),
        click.option("--store", "-s", "store_name", help="Store name (default 'default')."),
        click.option("--batch", "-b", "batch_id", type=int, help="Batch id (default: the latest committed)."),
        click.option("--partition", "-p", "partitions", type=int, multiple=True,
                     help="Only this partition (repeatable)."),
        click.option("--key-filter", "-k", help="Keep keys matching e.g. \"user = 'ann' and region_id > 3\"."),
        STATE_VAR_NAME,
        click.option("--timers", "read_registered_timers", is_flag=True, default=None,
                     help="The registered timers of a transformWithState operator."),
        click.option("--join-side", type=click.Choice(["left", "right"]),
                     help="A stream-stream join's buffered input rows of one side."),
    ]
    for option in reversed(options):  # the first listed shows first in --help
        func = option(func)
    return func


T = TypeVar("T")


def _read(checkpoint: str, storage_option: Sequence[str], read: Callable[[StateReadPlan], T], **kwargs: Any) -> T:
    """``read(plan)`` of the options given, planned again if a running query cleans up under it."""
    from state_reader.core.live import read_consistently
    from state_reader.core.options import from_kwargs

    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return read_consistently(from_kwargs(checkpoint, {**kwargs, "storage_options": _storage_options(storage_option)}),
                             read)


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
@click.option("--verbose", is_flag=True,
              help="Report the calls made to the filesystem and the bytes fetched when the command ends "
                   "(on stderr; also accepted after the command).")
def cli(debug: bool, verbose: bool) -> None:
    """See inside the state of a Spark Structured Streaming checkpoint.

    CHECKPOINT is a local path or an fsspec URL (s3://, gs://, abfs://, file://).
    Start with `state-reader metadata CHECKPOINT`.
    """


@cli.command()
@click.argument("checkpoint")
@common_options
def metadata(checkpoint: str, as_json: bool, debug: bool, storage_option: Sequence[str]) -> int:
    """Operators, stores, batches, provider, codec, state formats."""
    from state_reader.inspect.overview import describe_checkpoint

    info = describe_checkpoint(checkpoint, storage_options=_storage_options(storage_option))
    if as_json:
        _emit_json(info)
        return EXIT_OK
    con = _console()
    b = info["batches"]
    formats = " · ".join(f"{k} v{v}" for k, v in info["state_format_versions"].items()) or "not recorded"
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("checkpoint", Text(info["checkpoint"]))
    grid.add_row("batches", f"{b['first']}..{b['last']} ({b['count']} committed, latest {b['latest_committed']})")
    codec = info["codec"] + ("" if info["codec_recorded"] else " (default; not recorded)")
    parts = [info["provider"], f"codec {codec}"]
    if info["shuffle_partitions"] is not None:
        parts.append(f"{info['shuffle_partitions']} shuffle partitions")
    grid.add_row("state store", " · ".join(parts))
    if info["provider"] == "rocksdb":
        grid.add_row("", f"changelog checkpointing {'on' if info['changelog_checkpointing'] else 'off'} · "
                         f"checkpoint format v{info['checkpoint_format_version']}")
    grid.add_row("state formats", formats)
    grid.add_row("", f"encoding {info['encoding_format'] or 'unsaferow'} · "
                     f"row checksums {'on' if info['row_checksum'] else 'off'}")
    grid.add_row("operator metadata", info["operator_metadata"])
    con.print(grid)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("op", "operator", "store", "partitions", "dirs on disk", "provider", "state of batches", "properties"):
        table.add_column(col)
    for op in info["operators"]:
        span = f"{op['batches']['first']}..{op['batches']['last']}" if op["batches"] else "-"
        for i, store in enumerate(op["stores"]):
            first = i == 0
            table.add_row(str(op["operator_id"]) if first else "",
                          Text(op["operator_name"] or "unknown") if first else "",
                          Text(store["store_name"]), str(store["num_partitions"]),
                          str(op["partitions_on_disk"]) if first else "", op["provider"] if first else "",
                          span if first else "", Text(op["operator_properties"] or "") if first else "")
    if info["operators"]:
        con.print(table)
        for op in info["operators"]:  # transformWithState: the user's variables, a column family each
            if op.get("state_variables"):
                con.print(Text(f"operator {op['operator_id']} state variables: " + "; ".join(
                    f"{v['name']}: {v['described']}" for v in op["state_variables"])))
    else:
        con.print("no stateful operators (no state/ directory)")
    return EXIT_OK


@cli.command(epilog=KEY_FILTER_HELP)
@click.argument("checkpoint")
@store_read_options
@click.option("--limit", "-n", type=click.IntRange(min=0), default=DEFAULT_LIMIT, show_default=True,
              help="Rows to show; 0 shows all.")
@LAYOUT
@common_options
def show(checkpoint: str, operator_id: int | None, store_name: str | None, batch_id: int | None,
         partitions: tuple[int, ...], key_filter: str | None, state_var_name: str | None,
         read_registered_timers: bool | None, join_side: str | None, limit: int, layout: str, as_json: bool,
         debug: bool, storage_option: Sequence[str]) -> int:
    """The state of one store at one batch, as a table."""
    from state_reader.core.scan import bind_key_filter, partitions_to_read, read_table, require_files
    from state_reader.inspect.flatten import display_rows, json_rows

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
        checkpoint, storage_option, read, operator_id=operator_id, store_name=store_name, batch_id=batch_id,
        state_var_name=state_var_name, join_side=join_side, read_registered_timers=read_registered_timers)
    where = {"operator_id": plan.operator_id, "store_name": _shown_store(plan, store_name, join_side),
             "batch_id": plan.batch_id, "version": plan.version, "partitions": chosen}
    if as_json:
        # row_count: every row of the result (None: the limit stopped the read before all were counted)
        _emit_json({**where, "key_filter": key_filter, "row_count": None if truncated else table.num_rows,
                    "rows_shown": table.num_rows, "truncated": truncated, "rows": json_rows(table)})
        return EXIT_OK
    con = _console()
    head = (f"operator {plan.operator_id} · store {where['store_name']} · batch {plan.batch_id} "
            f"(version {plan.version}) · partitions {', '.join(map(str, chosen))}"
            + (f" of {len(plan.partitions)} (the key filter pins the partition key)"
               if key_filter and not partitions and len(chosen) < len(plan.partitions) else ""))
    con.print(Text(head + (f" · key filter: {key_filter}" if key_filter else ""), style="bold"))
    if table.num_rows == 0:
        con.print("no rows" + (" match the key filter" if key_filter else ""))
        return EXIT_OK
    names, rows = display_rows(table)
    _print_rows(con, names, rows, layout)
    if truncated:
        con.print(f"first {limit} rows shown; there are more (--limit 0 shows all)")
    else:
        con.print(f"{table.num_rows} row{'s' if table.num_rows != 1 else ''}")
    return EXIT_OK


def _stats_text(con: Console, result: StatsResult, summary: pa.Table, detail: bool) -> None:
    from state_reader.core.skew import is_skewed
    from state_reader.inspect.stats import growth_note

    all_rows = result.table.to_pylist()
    for (op, store), provider in result.providers.items():
        batches = [r for r in summary.to_pylist() if r["operator_id"] == op and r["store_name"] == store]
        parts = [r for r in all_rows if r["operator_id"] == op and r["store_name"] == store]
        if not batches:
            continue
        name = result.operator_names.get(op) or "unknown"
        kind = provider_name(provider) or provider
        con.print(Text(f"operator {op} ({name}) · store {store} · {kind}", style="bold"))
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("batch", "rows", "Δ rows", "state", "on disk", "files", "chain", "largest partition",
                    "max/median"):
            table.add_column(col, justify="left" if col == "largest partition" else "right")
        prev = None
        for r in batches:
            delta = "" if prev is None else f"{r['rows'] - prev:+d}"
            skew = r["rows_skew"]  # null: the median partition is empty, the skew infinite
            skew_text = Text("∞" if skew is None else f"{skew:.2f}×",
                             style="yellow" if is_skewed(r["max_partition_rows"], r["median_partition_rows"]) else "")
            table.add_row(str(r["batch_id"]), str(r["rows"]), delta, human_bytes(r["state_bytes"]),
                          human_bytes(r["bytes_on_disk"]), str(r["files"]), str(r["max_delta_chain"]),
                          f"{r['max_partition']} ({r['max_partition_rows']} rows)", skew_text)
            prev = r["rows"]
        con.print(table)
        first, last = batches[0], batches[-1]
        counts = [r["rows"] for r in batches]
        change = last["rows"] - first["rows"]
        pct = f" ({change / first['rows']:+.0%})" if first["rows"] else ""
        con.print(f"rows  {sparkline(counts)}  {first['rows']} → {last['rows']} over batches "
                  f"{first['batch_id']}..{last['batch_id']}{pct}")
        con.print(f"bytes {sparkline([r['state_bytes'] for r in batches])}  "
                  f"{human_bytes(first['state_bytes'])} → {human_bytes(last['state_bytes'])} state, "
                  f"{human_bytes(last['bytes_on_disk'])} on disk")
        growth = growth_note(counts, first["batch_id"], last["batch_id"])
        if growth:
            con.print(Text(growth, style="yellow"))
        latest_parts = sorted((p for p in parts if p["batch_id"] == last["batch_id"]),
                              key=lambda p: (-p["rows"], p["partition_id"]))
        total = last["rows"] or 1
        ptable = Table(box=box.SIMPLE_HEAD, pad_edge=False,
                       title=f"partitions at batch {last['batch_id']} (largest first)", title_justify="left")
        for col in ("partition", "rows", "share", "state", "on disk", "files", "chain", "snapshot"):
            ptable.add_column(col, justify="right")
        for p in latest_parts[:10]:
            ptable.add_row(str(p["partition_id"]), str(p["rows"]), f"{p['rows'] / total:.0%}",
                           human_bytes(p["state_bytes"]), human_bytes(p["bytes_on_disk"]), str(p["files"]),
                           str(p["delta_chain"]),
                           "-" if p["snapshot_version"] is None else str(p["snapshot_version"]))
        con.print(ptable)
        if len(latest_parts) > 10:
            con.print(f"… and {len(latest_parts) - 10} more partitions (--json lists all)")
        skew = last["rows_skew"]
        # the doctor's verdict and threshold (`doctor` reports the same store as a skew finding)
        verdict = "skewed" if is_skewed(last["max_partition_rows"], last["median_partition_rows"]) else "even"
        con.print(Text(
            f"skew at batch {last['batch_id']}: partition {last['max_partition']} holds "
            f"{last['max_partition_rows']} of {last['rows']} rows; largest/median "
            f"{'∞' if skew is None else f'{skew:.2f}×'} ({verdict}); median partition "
            f"{last['median_partition_rows']:g} rows", style="yellow" if verdict == "skewed" else ""))
        if detail:
            dtable = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="every batch and partition",
                           title_justify="left")
            for col in ("batch", "partition", "rows", "state", "on disk", "files", "chain", "snapshot"):
                dtable.add_column(col, justify="right")
            for p in parts:
                dtable.add_row(str(p["batch_id"]), str(p["partition_id"]), str(p["rows"]),
                               human_bytes(p["state_bytes"]), human_bytes(p["bytes_on_disk"]), str(p["files"]),
                               str(p["delta_chain"]),
                               "-" if p["snapshot_version"] is None else str(p["snapshot_version"]))
            con.print(dtable)
        con.print()


@cli.command()
@click.argument("checkpoint")
@click.option("--operator", "-O", "operator_id", type=int, help="Only this operator (default: all).")
@click.option("--store", "-s", "store_name", help="Only this store (default: all).")
@click.option("--batches", "batch_range", metavar="A..B",
              help="Batches A..B, A.., ..B or B (default: every batch whose state is on disk).")
@click.option("--detail", is_flag=True, help="Also list every (batch, partition).")
@common_options
def stats(checkpoint: str, operator_id: int | None, store_name: str | None, batch_range: str | None, detail: bool,
          as_json: bool, debug: bool, storage_option: Sequence[str]) -> int:
    """State size per partition and batch: growth, skew."""
    from state_reader.inspect.flatten import json_rows
    from state_reader.inspect.stats import batch_summary, collect_stats, parse_batch_range

    start, end = parse_batch_range(batch_range)
    result = collect_stats(checkpoint, operator_id=operator_id, store_name=store_name, start_batch=start,
                           end_batch=end, storage_options=_storage_options(storage_option))
    summary = batch_summary(result.table)
    skipped = [{"operator_id": op, "store_name": s, "reason": why} for op, s, why in result.skipped]
    if as_json:
        _emit_json({"batches": result.batches, "summary": json_rows(summary),
                    "partitions": json_rows(result.table), "skipped": skipped, "notes": result.notes})
        return EXIT_OK
    con = _console()
    for note in result.notes:
        con.print(Text(note, style="dim"))
    _stats_text(con, result, summary, detail)
    for s in skipped:
        con.print(Text(f"operator {s['operator_id']} store {s['store_name']} skipped: {s['reason']}", style="dim"))
    return EXIT_OK


@cli.command(name="changes", epilog=KEY_FILTER_HELP)
@click.argument("checkpoint")
@click.option("--from", "start", type=click.IntRange(min=0),
              help="First batch of the change feed (required without --follow).")
@click.option("--to", "end", type=click.IntRange(min=0),
              help="Last batch (default: the latest committed; with --follow: follow until it is printed).")
@click.option("--follow", "-f", "follow", is_flag=True,
              help="Print the changes of each batch as the query commits it, until interrupted "
                   "(--from defaults to the oldest batch the checkpoint keeps).")
@click.option("--skip-lost", is_flag=True, help="With --follow: skip batches the query cleaned up before they "
                                                 "were read (a warning names them) instead of failing.")
@click.option("--snapshot", "start_with_snapshot", is_flag=True,
              help="With --follow: first print the whole state before the first batch (change_type snapshot).")
@click.option("--operator", "-O", "operator_id", type=int, help="Operator id (default 0).")
@click.option("--store", "-s", "store_name", help="Store name (default 'default').")
@STATE_VAR_NAME
@click.option("--key-filter", "-k", help="Keep keys matching e.g. \"user = 'ann'\".")
@click.option("--limit", "-n", type=click.IntRange(min=0), default=DEFAULT_LIMIT, show_default=True,
              help="Rows to show; 0 shows all.")
@LAYOUT
@common_options
def changes_command(checkpoint: str, start: int | None, end: int | None, follow: bool, skip_lost: bool,
                    start_with_snapshot: bool, operator_id: int | None, store_name: str | None,
                    state_var_name: str | None, key_filter: str | None, limit: int, layout: str, as_json: bool,
                    debug: bool, storage_option: Sequence[str]) -> int:
    """The change feed: what batches FROM..TO changed; with --follow, each batch's changes as it commits
    (--json: one JSON object a row, a line each, for piping)."""
    from state_reader.inspect.changefeed import change_counts, changes
    from state_reader.inspect.flatten import display_rows, json_rows

    if follow:
        from state_reader.fronts.follow_cli import follow_changes

        return follow_changes(checkpoint, start, end, operator_id=operator_id, store_name=store_name,
                              state_var_name=state_var_name, key_filter=key_filter, skip_lost=skip_lost,
                              start_with_snapshot=start_with_snapshot, as_json=as_json,
                              storage_options=_storage_options(storage_option))
    if skip_lost or start_with_snapshot:
        raise click.UsageError("--skip-lost and --snapshot go with --follow")
    if start is None:
        raise click.UsageError("Missing option '--from' (it may be left out with --follow only)")

    table = changes(checkpoint, start, end, operator_id=operator_id, store_name=store_name,
                    state_var_name=state_var_name, key_filter=key_filter,
                    storage_options=_storage_options(storage_option))
    counts = change_counts(table)
    total = table.num_rows
    truncated = bool(limit) and total > limit
    shown = table.slice(0, limit) if truncated else table
    if as_json:
        _emit_json({"start_batch": start, "end_batch": end, "key_filter": key_filter, "counts": counts,
                    "row_count": total, "rows_shown": shown.num_rows, "truncated": truncated,
                    "rows": json_rows(shown)})
        return EXIT_OK
    con = _console()
    span = f"{start}..{end}" if end is not None else f"{start}..latest"
    con.print(Text(f"changes in batches {span}" + (f" · key filter: {key_filter}" if key_filter else ""),
                   style="bold"))
    if total == 0:
        con.print("no changes")
        return EXIT_OK
    by_batch: dict[int, list[str]] = {}
    for c in counts:
        by_batch.setdefault(c["batch_id"], []).append(
            f"{c['rows']} {c['change_type']}{'s' if c['rows'] != 1 else ''}")
    for batch, parts in by_batch.items():
        con.print(f"  batch {batch}: {', '.join(parts)}")
    names, rows = display_rows(shown)
    _print_rows(con, names, rows, layout)
    con.print(f"first {limit} of {total} rows shown (--limit 0 shows all)" if truncated else f"{total} rows")
    return EXIT_OK


@cli.command(epilog=KEY_FILTER_HELP)
@click.argument("checkpoint")
@click.option("--to", "out", required=True, metavar="FILE",
              help="Output file: .parquet, .csv, .json (one JSON array) or .jsonl (one JSON object a line).")
@click.option("--format", "fmt", type=click.Choice(["parquet", "csv", "json", "jsonl"]),
              help="Output format (default: from the extension).")
@store_read_options
@common_options
def export(checkpoint: str, out: str, fmt: str | None, operator_id: int | None, store_name: str | None,
           batch_id: int | None, partitions: tuple[int, ...], key_filter: str | None, state_var_name: str | None,
           read_registered_timers: bool | None, join_side: str | None, as_json: bool, debug: bool,
           storage_option: Sequence[str]) -> int:
    """Write the state of one store at one batch to a file."""
    from state_reader.inspect.export import export_state

    plan, result = _read(checkpoint, storage_option,
                         lambda plan: (plan, export_state(plan, out, fmt=fmt, key_filter=key_filter,
                                                          partitions=list(partitions) or None)),
                         operator_id=operator_id, store_name=store_name, batch_id=batch_id,
                         state_var_name=state_var_name, join_side=join_side,
                         read_registered_timers=read_registered_timers)
    shown_store = _shown_store(plan, store_name, join_side)
    size = os.path.getsize(out)
    if as_json:
        _emit_json({"path": out, "format": result.format, "rows": result.rows, "partitions": result.partitions,
                    "bytes": size, "operator_id": plan.operator_id, "store_name": shown_store,
                    "batch_id": plan.batch_id})
        return EXIT_OK
    _console().print(Text(f"wrote {result.rows} rows from {result.partitions} partitions of operator "
                          f"{plan.operator_id} (store {shown_store}, batch {plan.batch_id}) to {out} "
                          f"({result.format}, {human_bytes(size)})"))
    return EXIT_OK


@cli.command()
@click.argument("checkpoint")
@click.option("--operator", "-O", "operator_id", type=int, help="Only this operator (default: all).")
@common_options
def verify(checkpoint: str, operator_id: int | None, as_json: bool, debug: bool, storage_option: Sequence[str]) -> int:
    """Decode every retained version; exit 2 on damage."""
    from state_reader.inspect.verify import verify_checkpoint

    report = verify_checkpoint(checkpoint, operator_id=operator_id, storage_options=_storage_options(storage_option))
    code = EXIT_OK if report.ok else EXIT_DAMAGED
    if as_json:
        _emit_json(report.as_dict())
        return code
    con = _console()
    for s in report.stores:
        ps = s["partitions"]
        if ps:
            lo = min(p["first_version"] for p in ps)
            hi = max(p["last_version"] for p in ps)
            span = f"versions {lo}..{hi} (batches {lo - 1}..{hi - 1})"
        else:
            span = "no versions"
        con.print(Text(f"operator {s['operator_id']} ({s['operator_name'] or 'unknown'}) · store {s['store_name']} · "
                       f"{len(ps)} partitions · {span}"))
    for s in report.skipped:
        con.print(Text(f"operator {s['operator_id']} store {s['store_name']} skipped: {s['reason']}", style="dim"))
    if report.ok:
        con.print(Text(f"OK: {report.versions_checked} versions decoded without error", style="green bold"))
        return code
    if not report.problems:
        con.print(Text(f"INCOMPLETE: {report.versions_checked} versions decoded without error, but "
                       f"{len(report.skipped)} store{'s' if len(report.skipped) != 1 else ''} could not be checked",
                       style="red bold"))
        return code
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="problems", title_justify="left")
    for col in ("op", "store", "partition", "version", "batch", "error", "file", "message"):
        table.add_column(col, overflow="fold")
    for p in report.problems:
        table.add_row(str(p.operator_id), Text(p.store_name), "-" if p.partition_id is None else str(p.partition_id),
                      "-" if p.version is None else str(p.version), "-" if p.batch_id is None else str(p.batch_id),
                      p.error_class, Text(_relative(p.path, report.checkpoint)), Text(p.message))
    con.print(table)
    con.print(Text(f"DAMAGED: {len(report.problems)} of {report.versions_checked} versions failed", style="red bold"))
    for path, n in report.damaged_files().items():
        con.print(Text(f"  {path}: breaks {n} version{'s' if n != 1 else ''}"))
    return code


@cli.command()
@click.argument("checkpoint")
@click.option("--out", required=True, metavar="FILE.png", help="Image file to write (PNG, SVG or PDF by extension).")
@click.option("--operator", "-O", "operator_id", type=int, help="Only this operator (default: all).")
@click.option("--store", "-s", "store_name", help="Only this store (default: all).")
@click.option("--batches", "batch_range", metavar="A..B", help="Batches A..B, A.., ..B or B.")
@common_options
def plot(checkpoint: str, out: str, operator_id: int | None, store_name: str | None, batch_range: str | None,
         as_json: bool, debug: bool, storage_option: Sequence[str]) -> int:
    """Plot state rows and bytes per partition over batches."""
    from state_reader.fronts.plotting import PLOT_NEEDS, figure_from_stats
    from state_reader.inspect.stats import collect_stats, parse_batch_range

    try:
        import matplotlib
    except ImportError:
        raise click.ClickException(PLOT_NEEDS) from None
    matplotlib.use("Agg")  # files only, never a window

    start, end = parse_batch_range(batch_range)
    result = collect_stats(checkpoint, operator_id=operator_id, store_name=store_name, start_batch=start,
                           end_batch=end, storage_options=_storage_options(storage_option))
    fig = figure_from_stats(result.table, title=f"state of {checkpoint}")
    fig.savefig(out)
    width, height = (round(float(v)) for v in fig.get_size_inches() * fig.dpi)
    stores = len(result.providers)
    if as_json:
        _emit_json({"path": out, "width": width, "height": height, "stores": stores, "batches": result.batches})
        return EXIT_OK
    span = f"{result.batches[0]}..{result.batches[-1]}" if result.batches else "none"
    _console().print(Text(f"wrote {out} ({width}×{height} px): {stores} store{'s' if stores != 1 else ''}, "
                          f"batches {span}"))
    return EXIT_OK


@cli.command(epilog=KEY_FILTER_HELP)
@click.argument("checkpoint")
@click.argument("destination", required=False)
@click.option("--partitions", "-n", "num_partitions", type=click.IntRange(min=1),
              help="New number of state partitions (default: unchanged).")
@click.option("--provider", type=click.Choice(list(PROVIDER_NAMES)), help="Write the state in this provider's files.")
@click.option("--drop-keys", metavar="EXPR", help="Leave out the keys matching this key filter, from every store.")
@click.option("--batch", "batch_id", type=int, help="Committed batch to rewrite (default: the last).")
@click.option("--allow-uncommitted", is_flag=True, help="Rewrite even when the last planned batch has no commit.")
@click.option("--dry-run", is_flag=True, help="Write nothing; show the rows and bytes each new partition would get.")
@click.option("--plot", "plot_out", metavar="FILE.png", help="Also draw today's and the new partition sizes.")
@common_options
def rewrite(checkpoint: str, destination: str | None, num_partitions: int | None, provider: str | None,
            drop_keys: str | None, batch_id: int | None, allow_uncommitted: bool, dry_run: bool,
            plot_out: str | None, as_json: bool, debug: bool, storage_option: Sequence[str]) -> int:
    """Write CHECKPOINT's state into a new checkpoint DESTINATION that the same query resumes from
    (CHECKPOINT is only read; DESTINATION must not exist or be empty)."""
    from state_reader.fronts.api import rewrite as rewrite_checkpoint

    if destination is None and not dry_run:
        raise click.UsageError("DESTINATION is required unless --dry-run is given")
    if plot_out is not None:
        try:
            import matplotlib
        except ImportError:
            from state_reader.fronts.plotting import PLOT_NEEDS

            raise click.ClickException(PLOT_NEEDS) from None
        matplotlib.use("Agg")
    report = rewrite_checkpoint(checkpoint, None if dry_run else destination, num_partitions=num_partitions,
                                provider=provider, drop_keys=drop_keys, batch_id=batch_id,
                                allow_uncommitted=allow_uncommitted, dry_run=dry_run,
                                storage_options=_storage_options(storage_option))
    if plot_out is not None:
        from state_reader.fronts.plotting import rewrite_layout_figure

        rewrite_layout_figure(report).savefig(plot_out)
    if as_json:
        _emit_json({**report.summary(), "plot": plot_out})
        return EXIT_OK
    con = _console()
    for line in str(report).split("\n"):
        con.print(Text(line))
    if plot_out is not None:
        con.print(Text(f"wrote {plot_out}"))
    return EXIT_OK


@cli.command()
@click.argument("checkpoint")
@click.option("--threshold", "thresholds", multiple=True, metavar="NAME=VALUE",
              help="Override a threshold (repeatable): " + ", ".join(THRESHOLDS) + ".")
@common_options
def doctor(checkpoint: str, thresholds: Sequence[str], as_json: bool, debug: bool,
           storage_option: Sequence[str]) -> int:
    """Say what is wrong with the query that wrote CHECKPOINT; exit 3 when a warning or worse is found."""
    from state_reader.inspect.doctor import diagnose

    given: dict[str, str] = {}
    for item in thresholds:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--threshold")
        given[name.strip()] = value.strip()
    result = diagnose(checkpoint, thresholds=given, storage_options=_storage_options(storage_option))
    code = EXIT_OK if result.healthy else EXIT_FINDINGS
    if as_json:
        _emit_json(result.as_dict())
        return code
    con = _console()
    if not result.findings:
        con.print(Text(f"nothing found in {result.checkpoint} (batch {result.batch_id}); checked:", style="green"))
        for line in result.checked:
            con.print(Text(f"  {line}"))
        return code
    styles = {"error": "red bold", "warning": "yellow bold", "info": "cyan"}
    for f in result.findings:
        where = "" if f.operator_id is None else f" · operator {f.operator_id}, store {f.store_name}"
        con.print(Text(f"{f.severity.upper()} {f.kind}{where}", style=styles[f.severity]))
        con.print(Text(f"  {f.summary}"))
        con.print(Text("  evidence: " + ", ".join(f"{k}={json.dumps(v, default=str, ensure_ascii=False)}"
                                                  for k, v in f.evidence.items()), style="dim"))
        con.print(Text(f"  what to do: {f.action}"))
    return code


@cli.command()
@click.argument("checkpoint")
@common_options
def schema(checkpoint: str, as_json: bool, debug: bool, storage_option: Sequence[str]) -> int:
    """Print every store's stored key and value schema."""
    from state_reader.inspect.schema_check import ddl, store_schemas

    schemas = store_schemas(checkpoint, storage_options=_storage_options(storage_option))
    if as_json:
        _emit_json({"stores": [s.as_dict() for s in schemas]})
        return EXIT_OK
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("op", "operator", "store", "key", "value"):
        table.add_column(col, overflow="fold")
    for s in schemas:
        table.add_row(str(s.operator_id), Text(s.operator_name or "unknown"), Text(s.store_name), Text(ddl(s.key)),
                      Text(ddl(s.value)))
    _console().print(table)
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

    verdicts = compare_schemas(checkpoint, other, storage_options=_storage_options(storage_option))
    code = EXIT_OK if all(v.compatible for v in verdicts) else EXIT_FINDINGS
    if as_json:
        _emit_json({"compatible": code == EXIT_OK, "stores": [v.as_dict() for v in verdicts]})
        return code
    con = _console()
    for v in verdicts:
        verdict = Text("compatible" if v.compatible else f"refused ({v.error_class})",
                       style="green" if v.compatible else "red bold")
        con.print(Text(f"operator {v.operator_id}, store {v.store_name}: ") + verdict)
        con.print(Text(f"  {v.reason}"))
    con.print(Text("Spark would restart from it" if code == EXIT_OK else "Spark would refuse to restart from it",
                   style="green bold" if code == EXIT_OK else "red bold"))
    return code


# ---------------------------------------------------------------------------
# entry point


def _relative(path: str | None, root: str) -> str:
    """``path`` inside the checkpoint ``root`` as ``state/0/1/1.delta``."""
    if not path:
        return "-"
    prefix = root.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else path


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# the read options that errors name as flags, by the parameter of the commands that takes each; the flags
# themselves are the ones the commands declare (written once, in their decorators)
_FLAG_PARAMS: dict[str, str] = {
    "read_registered_timers": "readRegisteredTimers", "batch_id": "batchId", "start": "changeStartBatchId",
    "end": "changeEndBatchId", "operator_id": "operatorId", "store_name": "storeName",
    "state_var_name": "stateVarName", "join_side": "joinSide", "key_filter": "key_filter", "drop_keys": "drop_keys"}


@functools.cache
def flags() -> dict[str, tuple[str, ...]]:
    """Each read option -> the long flags that set it, as the commands declare them (first spelling first)."""
    out: dict[str, tuple[str, ...]] = {}
    for command in cli.commands.values():
        for param in command.params:
            option = _FLAG_PARAMS.get(param.name or "")
            if option is not None and isinstance(param, click.Option):
                spellings = out.get(option, ()) + tuple(o for o in param.opts if o.startswith("--"))
                out[option] = tuple(dict.fromkeys(spellings))
    return out


@functools.cache
def _flag_re() -> re.Pattern[str]:
    return re.compile(r"(?:option |source option )?'?\b(" + "|".join(flags()) + r")\b'?(=(?:true\b)?)?")


def in_flags(message: str, typed: Sequence[str] = ()) -> str:
    """An error message with the read options it names written as this command line's flags.

    ``typed``: the command line, so that a flag with several spellings is named as the user wrote it.
    """
    words = {arg.split("=", 1)[0] for arg in typed}

    def flag(option: str) -> str:
        spellings = flags()[option]
        return next((f for f in spellings if f in words), spellings[0])

    # "joinSide=left" -> "--join-side left"; "readRegisteredTimers=true" -> "--timers"
    return _flag_re().sub(lambda m: flag(m.group(1)) + (" " if m.group(2) == "=" else ""), message)


def _counted(args: list[str]) -> int:
    """:func:`main` of ``args``, then the filesystem calls it made and the bytes it fetched, on stderr."""
    from state_reader.io.storage import describe_counts, io_counts, io_counts_since

    before, started = io_counts(), time.monotonic()
    try:
        return main(args)
    finally:
        click.echo(f"filesystem: {describe_counts(io_counts_since(before))} in "
                   f"{time.monotonic() - started:.2f} s", err=True)


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
        message = in_flags(exc.message, args)
        if as_json:
            _emit_json({"error": {"class": exc.error_class, "message": message, "path": exc.path}})
        click.echo(f"error: {_one_line(message)}", err=True)
        return EXIT_ERROR
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return EXIT_ERROR
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
        if as_json:
            _emit_json({"error": {"class": "USAGE", "message": _one_line(exc.format_message()), "path": None}})
        click.echo(f"error: {_one_line(exc.format_message())}{hint}", err=True)
        return EXIT_ERROR
    except BrokenPipeError:
        # `state-reader show ... | head`: the reader went away; that is fine
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except Exception as exc:  # one line for the user, the traceback on request
        if debug:
            traceback.print_exc()
        click.echo(f"error: unexpected {type(exc).__name__}: {_one_line(str(exc))} "
                   "(run with --debug for the traceback)", err=True)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
