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
from typing import TYPE_CHECKING, Any

import click

from state_reader.core.options import OPTIONS, snake_case
from state_reader.deprecation import renamed_message

if TYPE_CHECKING:
    from state_reader.inspect.stats import StatsResult

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


def STATE_VAR_NAME(func: Callable[..., Any]) -> Callable[..., Any]:  # noqa: N802 - used as the other flags are
    """``--state-var-name`` (stateVarName, state_var_name: one name everywhere) and ``--state-var``, its earlier
    spelling, which still works with a warning; the command gets ``state_var_name`` from either."""

    @functools.wraps(func)
    def command(*args: Any, deprecated_state_var: str | None = None, **kwargs: Any) -> Any:
        kwargs["state_var_name"] = instead_of(
            kwargs.get("state_var_name"), deprecated_state_var, "--state-var-name", "--state-var"
        )
        return func(*args, **kwargs)

    flagged: Callable[..., Any] = deprecated_flag(
        "--state-var", "--state-var-name", "deprecated_state_var", stands_for="state_var_name"
    )(command)
    return click.option("--state-var-name", "state_var_name", help="State variable of a transformWithState operator.")(
        flagged
    )


class _EarlierSpelling(click.Option):
    """A deprecated flag; ``stands_for``: the parameter of the flag that replaces it, whose errors may name
    it as the user typed it."""

    def __init__(self, *args: Any, stands_for: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stands_for = stands_for


class NegatingFlag(click.Option):
    """A flag that sets a read option to false (``--skip-lost``: ``failOnDataLoss=false``), so that an error
    naming ``failOnDataLoss=false`` names the flag."""

    def __init__(self, *args: Any, negates: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.negates = negates


def deprecated_flag(
    old: str, new: str, dest: str, *, stands_for: str | None = None, **kwargs: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``old``, a flag's earlier spelling: hidden from ``--help``, it still sets ``dest`` (the command
    reads it in place of ``new``) and warns on stderr that ``new`` replaces it. ``stands_for``: the
    parameter ``new`` sets, when an error may name it (then as ``old`` if that is what was typed)."""

    def warn(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value not in (None, (), False):
            click.echo(f"warning: {renamed_message(old, new)}", err=True)
        return value

    return click.option(old, dest, hidden=True, callback=warn, cls=_EarlierSpelling, stands_for=stands_for, **kwargs)


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


def stats_of_flags(
    checkpoint: str,
    operator_id: int | None,
    store_name: str | None,
    change_start_batch_id: int | None,
    change_end_batch_id: int | None,
    batch_range: str | None,
    key_schema: str | None,
    value_schema: str | None,
    storage_option: Sequence[str],
) -> StatsResult:
    """The state sizes of the stores and batches the flags choose (``stats``, ``plot``)."""
    from state_reader.inspect.stats import collect_stats

    start, end = chosen_batch_range(change_start_batch_id, change_end_batch_id, batch_range)
    return collect_stats(
        checkpoint,
        operator_id=operator_id,
        store_name=store_name,
        change_start_batch_id=start,
        change_end_batch_id=end,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options_of(storage_option),
    )


def key_lookup_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """Which keys of which store (``why``): operator, store, state variable and the key filter (without one:
    every key's verdict, summed up)."""
    options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
        click.option("--operator", "-O", "operator_id", type=int, help="Operator id (default 0)."),
        click.option("--store", "-s", "store_name", help="Store name (default 'default')."),
        STATE_VAR_NAME,
        click.option(
            "--key-filter",
            "-k",
            help="The keys to explain, e.g. \"user = 'ann' and region_id > 3\" (none: every key's verdict, summed up).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


# changeFeedFromSnapshots: a RocksDB store written without changelogs (`changes`, `why`)
FROM_SNAPSHOTS = click.option(
    "--from-snapshots",
    "change_feed_from_snapshots",
    is_flag=True,
    default=None,
    help="A RocksDB store without changelogs: compare snapshots for the changes (why: the default when it has none).",
)


# keySchema / valueSchema: a store without a schema file (written before Spark 3.1, or lost)
GIVEN_SCHEMAS = (
    click.option(
        "--key-schema",
        metavar="DDL",
        help='The store\'s key schema, e.g. "user STRING, n INT", for a store without a schema file '
        "(with --value-schema; a command that reads several stores: the one --operator and --store name, "
        "by default operator 0's store default).",
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
    options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
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


# the Spark-free functions' own keywords (beyond the read options in core/options.OPTIONS) that their messages
# name and that commands take as flags of the same meaning
_API_KEYWORDS = ("key_filter", "drop_keys", "allow_uncommitted", "dry_run", "num_partitions")
# a command's parameter named otherwise than the keyword it stands for
_PARAM_KEYWORDS = {"storage_option": "storage_options"}


def _is_identifier(name: str) -> bool:
    """A name no sentence uses as a word (``batchId``, ``key_filter``): only such names are rewritten."""
    return "_" in name or name != name.lower()


@functools.cache
def _options_by_keyword() -> dict[str, str]:
    """Each Python keyword a message may name -> the option it stands for (Spark's name where there is one)."""
    out = {option.python: option.name for option in OPTIONS if option.python and _is_identifier(option.python)}
    out.update({keyword: keyword for keyword in _API_KEYWORDS})
    return out


@functools.cache
def _declared(group: click.Group) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """(each option -> the long flags that set it, each option -> the flag that sets it to false), as the
    commands of ``group`` declare them; a deprecated spelling last."""
    out: dict[str, tuple[str, ...]] = {}
    earlier: dict[str, tuple[str, ...]] = {}
    negated: dict[str, str] = {}
    for command in group.commands.values():
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            name = getattr(param, "stands_for", None) or param.name or ""
            long = tuple(o for o in param.opts if o.startswith("--"))
            negates = _options_by_keyword().get(getattr(param, "negates", None) or "")
            if negates is not None:
                negated[negates] = long[0]
                continue
            option = _options_by_keyword().get(_PARAM_KEYWORDS.get(name, name))
            if option is None:
                continue
            into = earlier if param.hidden else out
            into[option] = tuple(dict.fromkeys(into.get(option, ()) + long))
    for option, spellings in earlier.items():
        out[option] = tuple(dict.fromkeys(out.get(option, ()) + spellings))
    return out, negated


def flags(group: click.Group) -> dict[str, tuple[str, ...]]:
    """Each read option (or Spark-free keyword) -> the long flags that set it, as the commands of ``group``
    declare them (first spelling first, a deprecated one last)."""
    return _declared(group)[0]


@functools.cache
def _spellings(group: click.Group) -> dict[str, str]:
    """Each way a message may name an option a flag sets -> the option: Spark's name, and the Python keyword
    in the messages of the Spark-free functions the commands call (``core/options.in_python_names``)."""
    named = {*flags(group), *_declared(group)[1]}
    out = {option: option for option in named}
    out.update({snake_case(option): option for option in named})
    return {name: option for name, option in out.items() if _is_identifier(name)}


@functools.cache
def _flag_re(group: click.Group) -> re.Pattern[str]:
    names = sorted(_spellings(group), key=len, reverse=True)
    boolean = r"(=(?:(?:true|True|false|False)\b)?)?"
    return re.compile(r"(?:option |source option )?'?\b(" + "|".join(names) + r")\b'?" + boolean)


@functools.cache
def _flagless_re(group: click.Group) -> re.Pattern[str] | None:
    """A parenthesis that names an option no command has a flag for: advice for the other fronts."""
    named = set(_spellings(group).values())
    names = {
        spelled
        for option in (o.name for o in OPTIONS if o.python)
        if option not in named
        for spelled in (option, snake_case(option))
        if _is_identifier(spelled)
    }
    if not names:
        return None
    return re.compile(r" ?\([^()]*\b(?:" + "|".join(sorted(names, key=len, reverse=True)) + r")\b[^()]*\)")


def in_flags(message: str, group: click.Group, typed: Sequence[str] = ()) -> str:
    """An error message with the options it names written as the flags of ``group``'s commands, whether it
    names them as Spark does or as the Python keywords; a parenthesis naming an option no command has a
    flag for (advice for Python and Spark only) is left out.

    ``typed``: the command line, so that a flag with several spellings is named as the user wrote it.
    """
    words = {arg.split("=", 1)[0] for arg in typed}
    declared, negated = _declared(group)

    def flag(match: re.Match[str]) -> str:
        option, value = _spellings(group)[match.group(1)], match.group(2) or ""
        if value.lower() == "=false" and option in negated:  # failOnDataLoss=false -> --skip-lost
            return negated[option]
        if option not in declared:  # only a flag that sets it to false: named as it was
            return match.group(0)
        spellings = declared[option]
        chosen = next((f for f in spellings if f in words), spellings[0])
        # "joinSide=left" -> "--join-side left"; "readRegisteredTimers=true" -> "--timers"
        return chosen + (" " if value == "=" else "" if value.lower() in ("", "=true") else value)

    message = _flag_re(group).sub(flag, message)
    flagless = _flagless_re(group)
    return message if flagless is None else flagless.sub("", message)
