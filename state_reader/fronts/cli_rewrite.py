"""``state-reader rewrite``: a checkpoint's state into a new checkpoint, with rows upserted and deleted on the way.

Registered on the command line's group by :mod:`state_reader.fronts.cli`; the rows ``--upsert`` and
``--delete`` name are read here, typed by the store's own schema where the file's format carries no types.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from state_reader.fronts.cli_flags import (
    EXIT_OK,
    KEY_FILTER_HELP,
    STATE_VAR_NAME,
    common_options,
    deprecated_flag,
    given_schema_flags,
    instead_of,
    storage_options_of,
)
from state_reader.fronts.console import output
from state_reader.model.conf import PROVIDER_NAMES

if TYPE_CHECKING:
    import pyarrow as pa

    from state_reader.core.rewrite.edit_fit import TextRows


@click.command(epilog=KEY_FILTER_HELP)
@click.argument("checkpoint")
@click.argument("destination", required=False)
@click.option(
    "--partitions",
    "num_partitions",
    type=click.IntRange(min=1),
    help="New number of state partitions (default: unchanged).",
)
@deprecated_flag("-n", "--partitions", "deprecated_n", type=click.IntRange(min=1))
@click.option("--provider", type=click.Choice(list(PROVIDER_NAMES)), help="Write the state in this provider's files.")
@click.option(
    "--conf",
    "confs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Change a conf Spark froze into the checkpoint, as spark-submit --conf sets it "
    "(repeatable; docs/rewrite.md lists them).",
)
@click.option("--drop-keys", metavar="EXPR", help="Leave out the keys matching this key filter, from every store.")
@click.option("--batch", "-b", "batch_id", type=int, help="Committed batch to rewrite (default: the last).")
@click.option("--allow-uncommitted", is_flag=True, help="Rewrite even when the last planned batch has no commit.")
@click.option("--dry-run", is_flag=True, help="Write nothing; show the rows and bytes each new partition would get.")
@click.option("--plot", "plot_out", metavar="FILE.png", help="Also draw the current and the new partition sizes.")
@click.option(
    "--upsert",
    "upsert",
    metavar="ROWS",
    help="Write these rows into one store (Parquet, JSON lines or CSV; columns key and value as show gives them).",
)
@click.option("--delete", "delete", metavar="KEYS", help="Take these keys out of that store (a key column).")
@click.option(
    "--operator",
    "-O",
    "operator_id",
    type=int,
    help="The operator --upsert and --delete write into (and --key-schema and --value-schema describe).",
)
@click.option(
    "--store",
    "-s",
    "store_name",
    help="The store --upsert and --delete write into, and --key-schema and --value-schema describe "
    "(default 'default').",
)
@STATE_VAR_NAME
@click.option(
    "--join-side",
    type=click.Choice(["left", "right"]),
    help="The join side --upsert and --delete write into (rows as show --join-side gives them).",
)
@click.option(
    "--timers",
    "read_registered_timers",
    is_flag=True,
    default=None,
    help="--upsert and --delete write timers of a transformWithState operator (rows as show --timers gives them).",
)
@given_schema_flags
@common_options
def rewrite(
    checkpoint: str,
    destination: str | None,
    num_partitions: int | None,
    deprecated_n: int | None,
    provider: str | None,
    confs: Sequence[str],
    drop_keys: str | None,
    batch_id: int | None,
    allow_uncommitted: bool,
    dry_run: bool,
    plot_out: str | None,
    upsert: str | None,
    delete: str | None,
    operator_id: int | None,
    store_name: str | None,
    state_var_name: str | None,
    join_side: str | None,
    read_registered_timers: bool | None,
    key_schema: str | None,
    value_schema: str | None,
    as_json: bool,
    debug: bool,
    storage_option: Sequence[str],
) -> int:
    """Write CHECKPOINT's state into a new checkpoint DESTINATION that the same query resumes from
    (CHECKPOINT is only read; DESTINATION must not exist or be empty). With --upsert and --delete,
    rows are written into one store (or, with --join-side, one side of a join; with --timers, the
    timers of a transformWithState operator) on the way (the dry run says how many keys each
    partition gains, replaces and loses)."""
    from state_reader.fronts.api import rewrite as rewrite_checkpoint

    num_partitions = instead_of(num_partitions, deprecated_n, "--partitions", "-n")
    if destination is None and not dry_run:
        raise click.UsageError("DESTINATION is required unless --dry-run is given")
    if plot_out is not None:
        try:
            import matplotlib
        except ImportError:
            from state_reader.fronts.plotting import PLOT_NEEDS

            raise click.ClickException(PLOT_NEEDS) from None
        matplotlib.use("Agg")
    from state_reader.errors import InvalidEditError

    try:
        report = rewrite_checkpoint(
            checkpoint,
            None if dry_run else destination,
            num_partitions=num_partitions,
            provider=provider,
            confs=confs_of(confs),
            drop_keys=drop_keys,
            batch_id=batch_id,
            allow_uncommitted=allow_uncommitted,
            dry_run=dry_run,
            key_schema=key_schema,
            value_schema=value_schema,
            storage_options=storage_options_of(storage_option),
            **_rows_to_write(
                upsert,
                delete,
                {
                    "operator_id": operator_id,
                    "store_name": store_name,
                    "state_var_name": state_var_name,
                    "join_side": join_side,
                    "read_registered_timers": read_registered_timers,
                },
                (key_schema, value_schema),
            ),
        )
    except InvalidEditError as exc:
        raise _naming_the_file(exc, upsert, delete) from None
    if plot_out is not None:
        from state_reader.fronts.plotting import rewrite_layout_figure

        rewrite_layout_figure(report).savefig(plot_out)
    output(as_json).rewrite(report, plot_out=plot_out)
    return EXIT_OK


def confs_of(pairs: Sequence[str]) -> dict[str, str] | None:
    """The confs ``--conf KEY=VALUE`` gives (VALUE as text, as Spark takes it; a key given twice is an error)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--conf")
        if key in out and out[key] != value:
            raise click.BadParameter(f"{key} given twice, as {out[key]!r} and {value!r}", param_hint="--conf")
        out[key] = value
    return out or None


def _naming_the_file(exc: Exception, upsert_file: str | None, delete_file: str | None) -> Exception:
    """An edit's error with the file its rows came from (the message says ``upsert`` or ``delete``)."""
    from state_reader.errors import InvalidEditError

    assert isinstance(exc, InvalidEditError)
    path = delete_file if exc.message.startswith("delete") or upsert_file is None else upsert_file
    if path is None or path in exc.message:
        return exc
    flag = "--delete" if path == delete_file else "--upsert"
    return type(exc)(f"{exc.message} (the rows of {flag} {path})", path=path)


def _rows_to_write(
    upsert_file: str | None,
    delete_file: str | None,
    selectors: dict[str, Any],
    schemas: tuple[str | None, str | None] = (None, None),
) -> dict[str, Any]:
    """``rewrite``'s ``upsert``, ``delete`` and store ``selectors`` (those given), the files read as
    they are: the rewrite types them by the store they go into, as it does every form of rows;
    ``schemas``: the key and value schemas given for a store without a schema file."""
    chosen = {name: value for name, value in selectors.items() if value is not None}
    if upsert_file is None and delete_file is None:
        if schemas != (None, None) and set(chosen) <= {"operator_id", "store_name"}:
            return chosen  # --operator and --store name the store the schemas describe
        if chosen:
            raise click.UsageError(
                "--operator, --store, --state-var-name, --join-side and --timers choose the store that --upsert and "
                "--delete write into"
            )
        return {}
    return {
        "upsert": None if upsert_file is None else read_rows_file(upsert_file, "--upsert"),
        "delete": None if delete_file is None else read_rows_file(delete_file, "--delete"),
        **chosen,
    }


ROWS_FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv"}


def read_rows_file(path: str, flag: str) -> pa.Table | TextRows:
    """A file of rows in a format ``export`` writes: Parquet as its table; JSON lines, a JSON array
    of objects, or CSV with dotted column names (``key.user``) as text the rewrite types by the
    store's schema (these formats carry no types of their own)."""
    import pyarrow as pa

    kind = ROWS_FORMATS.get(os.path.splitext(path)[1].lower())
    if kind is None:
        raise click.UsageError(f"{flag} {path}: give a .parquet, .jsonl (JSON lines), .json or .csv file")
    if not os.path.isfile(path):
        raise click.UsageError(f"{flag} {path}: no such file")
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path)
        if kind == "csv":
            return _csv_rows(path, flag)
        return _json_rows(path, flag, lines=kind == "jsonl")
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise click.UsageError(f"{flag} {path}: {exc}") from None


def _json_rows(path: str, flag: str, *, lines: bool) -> TextRows:
    from state_reader.core.rewrite.edit_fit import TextRows
    from state_reader.errors import EditSchemaError

    def no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [k for k, _ in pairs]
        if len(set(names)) != len(names):
            twice = next(k for k in names if names.count(k) > 1)
            raise ValueError(f"the field {twice!r} is given twice in one object")
        return dict(pairs)

    with open(path, encoding="utf-8") as fh:
        try:
            if lines:
                rows = [json.loads(line, object_pairs_hook=no_repeats) for line in fh if line.strip()]
            else:
                rows = json.load(fh, object_pairs_hook=no_repeats)
        except ValueError as exc:  # json.JSONDecodeError among them
            raise click.UsageError(f"{flag} {path}: not JSON{' lines' if lines else ''} ({exc})") from None
    if not isinstance(rows, list):
        raise click.UsageError(f"{flag} {path}: a .json file of rows is one array of objects")
    names = list(rows[0]) if rows else []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or set(row) != set(names):
            raise EditSchemaError(
                f"{flag} {path}: row {i} is not an object with the fields of row 0 ({', '.join(names)})", path=path
            )
    return TextRows({name: [row[name] for row in rows] for name in names}, "json")


def _csv_rows(path: str, flag: str) -> TextRows:
    import csv

    import pyarrow as pa
    from pyarrow import csv as pa_csv

    from state_reader.core.rewrite.edit_fit import TextRows
    from state_reader.errors import EditSchemaError

    with open(path, encoding="utf-8", newline="") as fh:
        names = next(csv.reader(fh), [])
    if len(set(names)) != len(names):
        raise EditSchemaError(f"{flag} {path}: a column is named twice in the header ({', '.join(names)})", path=path)
    # every cell as text: an empty cell is a null, a quoted empty one the empty string (as export writes them)
    convert = pa_csv.ConvertOptions(
        column_types={name: pa.string() for name in names},
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
    )
    table = pa_csv.read_csv(path, convert_options=convert)
    columns = {name: table.column(name).combine_chunks() for name in table.column_names}
    return TextRows(columns, "csv")
