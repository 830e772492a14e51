"""The command line's flags: the options several commands declare alike, and the flags that error
messages name in place of the read options.

The commands and :func:`~state_reader.fronts.cli.main` are in :mod:`state_reader.fronts.cli`. The
flags an error names are read from the commands' own declarations, so the functions that name them
take the group of commands (``cli``) rather than import it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

import click

# ---------------------------------------------------------------------------
# the options several commands declare alike


KEY_FILTER_HELP = """\b
Key filters compare key fields (a leading 'key.' is optional) with literals:
  user = 'ann'            region_id > 3 and not grp in ('a', 'b')
  window.start >= '2024-01-01 10:00:00'       tag is null or n != 0
Operators: = != < <= > >= in, not in, is [not] null, and, or, not, ( ).
Timestamps are UTC unless the text has an offset; `back quotes` for odd names.
"""


LAYOUT = click.option(
    "--layout",
    type=click.Choice(["auto", "table", "records"]),
    default="auto",
    show_default=True,
    help="Rows as a table, or one block per row (records).",
)


def common_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--json``, ``--debug`` and ``--storage-option`` on every command."""
    func = click.option(
        "-o",
        "--storage-option",
        "storage_option",
        multiple=True,
        metavar="KEY=VALUE",
        help="fsspec storage option for remote checkpoints (repeatable; VALUE may be JSON).",
    )(func)
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
STATE_VAR_NAME = click.option(
    "--state-var-name",
    "--state-var",
    "state_var_name",
    cls=_OneName,
    help="State variable of a transformWithState operator.",
)


# keySchema / valueSchema: a store without a schema file (written before Spark 3.1, or lost)
GIVEN_SCHEMAS = (
    click.option(
        "--key-schema",
        metavar="DDL",
        help='The store\'s key schema, e.g. "user STRING, n INT", for a store without a schema file '
        "(with --value-schema).",
    ),
    click.option("--value-schema", metavar="DDL", help="The store's value schema (with --key-schema)."),
)


def given_schema_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--key-schema`` and ``--value-schema``."""
    for option in reversed(GIVEN_SCHEMAS):
        func = option(func)
    return func


def store_read_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """What to read (``show``, ``export``): operator, store, batch, partitions, key filter, variable, join side,
    and the schemas of a store without a schema file."""
    options = [
        click.option("--operator", "-O", "operator_id", type=int, help="Operator id (default 0)."),
        click.option("--store", "-s", "store_name", help="Store name (default 'default')."),
        click.option("--batch", "-b", "batch_id", type=int, help="Batch id (default: the latest committed)."),
        click.option(
            "--partition", "-p", "partitions", type=int, multiple=True, help="Only this partition (repeatable)."
        ),
        click.option("--key-filter", "-k", help="Keep keys matching e.g. \"user = 'ann' and region_id > 3\"."),
        STATE_VAR_NAME,
        click.option(
            "--timers",
            "read_registered_timers",
            is_flag=True,
            default=None,
            help="The registered timers of a transformWithState operator.",
        ),
        click.option(
            "--join-side",
            type=click.Choice(["left", "right"]),
            help="A stream-stream join's buffered input rows of one side.",
        ),
        *GIVEN_SCHEMAS,
    ]
    for option in reversed(options):  # the first listed shows first in --help
        func = option(func)
    return func


# ---------------------------------------------------------------------------
# the flags an error message names


# the read options that errors name as flags, by the parameter of the commands that takes each; the flags
# themselves are the ones the commands declare (written once, in their decorators)
_FLAG_PARAMS: dict[str, str] = {
    "read_registered_timers": "readRegisteredTimers",
    "batch_id": "batchId",
    "start": "changeStartBatchId",
    "end": "changeEndBatchId",
    "operator_id": "operatorId",
    "store_name": "storeName",
    "state_var_name": "stateVarName",
    "join_side": "joinSide",
    "key_schema": "keySchema",
    "value_schema": "valueSchema",
    "key_filter": "key_filter",
    "drop_keys": "drop_keys",
}


@functools.cache
def flags(group: click.Group) -> dict[str, tuple[str, ...]]:
    """Each read option -> the long flags that set it, as the commands of ``group`` declare them (first
    spelling first)."""
    out: dict[str, tuple[str, ...]] = {}
    for command in group.commands.values():
        for param in command.params:
            option = _FLAG_PARAMS.get(param.name or "")
            if option is not None and isinstance(param, click.Option):
                spellings = out.get(option, ()) + tuple(o for o in param.opts if o.startswith("--"))
                out[option] = tuple(dict.fromkeys(spellings))
    return out


@functools.cache
def _spellings(group: click.Group) -> dict[str, str]:
    """Each way a message may name a read option -> the option: Spark's name, and the Python keyword in
    the messages of the Spark-free functions the commands call (``core/options.in_python_names``)."""
    from state_reader.core.options import snake_case

    out = {option: option for option in flags(group)}
    out.update({snake_case(option): option for option in flags(group)})
    return out


@functools.cache
def _flag_re(group: click.Group) -> re.Pattern[str]:
    names = sorted(_spellings(group), key=len, reverse=True)
    return re.compile(r"(?:option |source option )?'?\b(" + "|".join(names) + r")\b'?(=(?:[Tt]rue\b)?)?")


def in_flags(message: str, group: click.Group, typed: Sequence[str] = ()) -> str:
    """An error message with the read options it names written as the flags of ``group``'s commands.

    ``typed``: the command line, so that a flag with several spellings is named as the user wrote it.
    """
    words = {arg.split("=", 1)[0] for arg in typed}

    def flag(named: str) -> str:
        spellings = flags(group)[_spellings(group)[named]]
        return next((f for f in spellings if f in words), spellings[0])

    # "joinSide=left" -> "--join-side left"; "readRegisteredTimers=true" -> "--timers"
    return _flag_re(group).sub(lambda m: flag(m.group(1)) + (" " if m.group(2) == "=" else ""), message)
