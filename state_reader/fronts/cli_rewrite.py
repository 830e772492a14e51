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
from state_reader.fronts.console_rewrite import render_rewrite
from state_reader.model.conf import PROVIDER_NAMES

if TYPE_CHECKING:
    import pyarrow as pa


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
    report = rewrite_checkpoint(
        checkpoint,
        None if dry_run else destination,
        num_partitions=num_partitions,
        provider=provider,
        drop_keys=drop_keys,
        batch_id=batch_id,
        allow_uncommitted=allow_uncommitted,
        dry_run=dry_run,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options_of(storage_option),
        **_rows_to_write(
            checkpoint,
            upsert,
            delete,
            {
                "operator_id": operator_id,
                "store_name": store_name,
                "state_var_name": state_var_name,
                "join_side": join_side,
                "read_registered_timers": read_registered_timers,
            },
            storage_option,
            batch_id,
            (key_schema, value_schema),
        ),
    )
    if plot_out is not None:
        from state_reader.fronts.plotting import rewrite_layout_figure

        rewrite_layout_figure(report).savefig(plot_out)
    render_rewrite(report, plot_out=plot_out, as_json=as_json)
    return EXIT_OK


def _rows_to_write(
    checkpoint: str,
    upsert_file: str | None,
    delete_file: str | None,
    selectors: dict[str, Any],
    storage_option: Sequence[str],
    batch_id: int | None,
    schemas: tuple[str | None, str | None] = (None, None),
) -> dict[str, Any]:
    """``rewrite``'s ``upsert``, ``delete`` and store ``selectors`` (those given), the files read with
    the store's own column types (JSON lines and CSV say little about types themselves); ``schemas``: the
    key and value schemas given for a store without a schema file."""
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
    from state_reader.fronts.api import scan_state
    from state_reader.inspect.flatten import unique_schema

    key_schema, value_schema = schemas
    reader = scan_state(
        checkpoint,
        batch_id=batch_id,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options_of(storage_option),
        **chosen,
    )
    schema = unique_schema(reader.schema)
    reader.close()
    return {
        "upsert": None if upsert_file is None else _read_rows(upsert_file, schema, "--upsert"),
        "delete": None if delete_file is None else _read_rows(delete_file, schema, "--delete"),
        **chosen,
    }


ROWS_FORMATS = {".parquet": "parquet", ".jsonl": "json", ".ndjson": "json", ".csv": "csv"}


def _read_rows(path: str, schema: pa.Schema, flag: str) -> pa.Table:
    """A file of rows (Parquet; JSON lines with ``key`` and ``value`` objects; CSV with dotted column
    names such as ``key.user``), typed by ``schema`` where the format does not carry types."""
    import pyarrow as pa

    kind = ROWS_FORMATS.get(os.path.splitext(path)[1].lower())
    if kind is None:
        raise click.UsageError(f"{flag} {path}: give a .parquet, .jsonl (JSON lines) or .csv file")
    if not os.path.isfile(path):
        raise click.UsageError(f"{flag} {path}: no such file")
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path)
        if kind == "json":
            from pyarrow import json as pa_json

            with open(path, "rb") as fh:
                names = set(json.loads(fh.readline() or b"{}"))
            fields = [f for f in schema if f.name in names]
            options = pa_json.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="infer")
            return pa_json.read_json(path, parse_options=options)
        from pyarrow import csv as pa_csv

        leaves = dict(_leaf_types(schema))
        # an empty field is a null, a quoted empty one an empty string (as pyarrow and Spark write them)
        convert = pa_csv.ConvertOptions(column_types=leaves, strings_can_be_null=True, quoted_strings_can_be_null=False)
        table = pa_csv.read_csv(path, convert_options=convert)
        return _nested(table)
    except pa.ArrowInvalid as exc:
        raise click.UsageError(f"{flag} {path}: {exc}") from None


def _leaf_types(schema: pa.Schema | pa.StructType, prefix: str = "") -> list[tuple[str, pa.DataType]]:
    """Each plain field of ``schema`` by its dotted name (``value.count``), as CSV columns name them."""
    import pyarrow as pa

    out: list[tuple[str, pa.DataType]] = []
    for f in schema if isinstance(schema, pa.Schema) else [schema.field(i) for i in range(schema.num_fields)]:
        name = f"{prefix}{f.name}"
        if pa.types.is_struct(f.type):
            out += _leaf_types(f.type, name + ".")
        elif not pa.types.is_nested(f.type):
            out.append((name, f.type))
    return out


def _nested(table: pa.Table) -> pa.Table:
    """Dotted columns (``key.user``) gathered back into struct columns, in the order they come."""
    import pyarrow as pa

    tree: dict[str, Any] = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        node = tree
        *parents, leaf = name.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = column.combine_chunks()

    def build(node: Any) -> pa.Array:
        if not isinstance(node, dict):
            return node
        children = {k: build(v) for k, v in node.items()}
        return pa.StructArray.from_arrays(list(children.values()), names=list(children))

    return pa.table({name: build(node) for name, node in tree.items()})
