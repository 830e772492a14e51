"""The command line's flags: the options several commands declare alike, and the flags that error
messages name in place of the read options.

The commands and :func:`~state_reader.fronts.cli.main` are in :mod:`state_reader.fronts.cli`. The
flags an error names are read from the commands' own declarations, so the functions that name them
take the group of commands (``cli``) rather than import it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import click

from state_reader.core.options import OPTIONS, snake_case
from state_reader.deprecation import renamed_message

# what a command exits with
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_DAMAGED = 2  # verify: damage found
EXIT_FINDINGS = 3  # doctor: a warning or worse
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as shells report an interrupted command


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


def storage_options_of(pairs: Sequence[str]) -> dict[str, Any] | None:
    """The storage options ``-o KEY=VALUE`` gives (a VALUE that is JSON as its value, else the text)."""
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


def deprecated_flag(old: str, new: str, dest: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``old``, a flag's earlier spelling: hidden from ``--help``, it still sets ``dest`` (the command
    reads it in place of ``new``) and warns on stderr that ``new`` replaces it."""

    def warn(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value not in (None, (), False):
            click.echo(f"warning: {renamed_message(old, new)}", err=True)
        return value

    return click.option(old, dest, hidden=True, callback=warn, **kwargs)


def instead_of(new: Any, old: Any, new_flag: str, old_flag: str) -> Any:
    """The value of a flag or of its deprecated spelling, not both."""
    if new is not None and old is not None:
        raise click.UsageError(f"give {new_flag}, not both {old_flag} and {new_flag}")
    return old if new is None else new


def batch_range_flags(first: str, last: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--from`` and ``--to``, the batch range (``changeStartBatchId`` and ``changeEndBatchId``, in Python
    ``change_start_batch_id`` and ``change_end_batch_id``), with each command's help."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        func = click.option("--to", "change_end_batch_id", type=click.IntRange(min=0), help=last)(func)
        return click.option("--from", "change_start_batch_id", type=click.IntRange(min=0), help=first)(func)

    return decorate


def deprecated_batches_flag(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--batches A..B``, the earlier spelling of ``--from A --to B`` (``stats``, ``plot``)."""
    return deprecated_flag("--batches", "--from/--to", "batch_range", metavar="A..B")(func)


def chosen_batch_range(start: int | None, end: int | None, batches: str | None) -> tuple[int | None, int | None]:
    """``--from``/``--to``, or what the deprecated ``--batches A..B`` says (not both)."""
    if batches is None:
        return start, end
    if start is not None or end is not None:
        raise click.UsageError("give --from/--to, not both --batches and --from/--to")
    from state_reader.inspect.stats import parse_batch_range

    return parse_batch_range(batches)


def key_lookup_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """Which keys of which store (``why``): operator, store, state variable and the key filter (required)."""
    options = [
        click.option("--operator", "-O", "operator_id", type=int, help="Operator id (default 0)."),
        click.option("--store", "-s", "store_name", help="Store name (default 'default')."),
        STATE_VAR_NAME,
        click.option(
            "--key-filter", "-k", required=True, help="The keys to explain, e.g. \"user = 'ann' and region_id > 3\"."
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


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
    **{
        option.python: option.name
        for option in OPTIONS
        if option.python
        in (
            "read_registered_timers",
            "batch_id",
            "change_start_batch_id",
            "change_end_batch_id",
            "operator_id",
            "store_name",
            "state_var_name",
            "join_side",
            "key_schema",
            "value_schema",
        )
    },
    # the Spark-free API's own keywords, named alike in its messages
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
