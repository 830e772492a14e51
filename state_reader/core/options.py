"""Options of the ``statestore`` and ``state-metadata`` readers.

Names, defaults and validation follow Spark's built-in reader
(``StateSourceOptions``), so both fronts accept exactly what Spark accepts and
refuse the rest with the same error conditions. The Spark-free API takes the
same options in snake_case; :func:`camel_case` maps them mechanically.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from state_reader.errors import (
    ConflictingOptionsError,
    EmptyOptionError,
    InvalidOptionError,
    NegativeOptionError,
    RequiredOptionError,
    public_api,
)
from state_reader.model.store_names import JOIN_SIDES

F = TypeVar("F", bound=Callable[..., Any])

PATH = "path"
BATCH_ID = "batchId"
OPERATOR_ID = "operatorId"
STORE_NAME = "storeName"
JOIN_SIDE = "joinSide"
SNAPSHOT_START_BATCH_ID = "snapshotStartBatchId"
SNAPSHOT_PARTITION_ID = "snapshotPartitionId"
READ_CHANGE_FEED = "readChangeFeed"
CHANGE_START_BATCH_ID = "changeStartBatchId"
CHANGE_END_BATCH_ID = "changeEndBatchId"
STATE_VAR_NAME = "stateVarName"
READ_REGISTERED_TIMERS = "readRegisteredTimers"
FLATTEN_COLLECTION_TYPES = "flattenCollectionTypes"
# ours, not the built-in's
INFER_MISSING_METADATA = "inferMissingMetadata"
INCLUDE_HIDDEN_COLUMNS = "includeHiddenColumns"
CHANGE_FEED_FROM_SNAPSHOTS = "changeFeedFromSnapshots"
TIMEOUT_TIMESTAMP_AS_LONG = "timeoutTimestampAsLong"
KEY_SCHEMA = "keySchema"
VALUE_SCHEMA = "valueSchema"
STORAGE_OPTIONS = "storageOptions"
VERIFY_CHECKSUMS = "verifyChecksums"
STORAGE_PREFIX = "storage."
# read by the data source front only: how many state partitions one Spark task reads
PARTITIONS_PER_TASK = "partitionsPerTask"
# a stream of changes (readStream, follow()): read by core/follow
MAX_BATCHES_PER_TRIGGER = "maxBatchesPerTrigger"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
START_WITH_SNAPSHOT = "startWithSnapshot"

# the defaults of the options that name what is read, written once (OPTIONS, the parsed options and the
# analyses that read operator 0 when none is named take them from here)
DEFAULT_OPERATOR_ID = 0
DEFAULT_STORE_NAME = "default"
NO_JOIN_SIDE = "none"  # joinSide unset: the store itself, not a side's rows
# the values joinSide takes: a side of the join (model/store_names.JOIN_SIDES), or none
JOIN_SIDE_VALUES = (*JOIN_SIDES, NO_JOIN_SIDE)


def camel_case(name: str) -> str:
    """``change_start_batch_id`` -> ``changeStartBatchId``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def snake_case(name: str) -> str:
    """``changeStartBatchId`` -> ``change_start_batch_id``."""
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


# the readers an option belongs to
STATESTORE = "statestore"
STATE_METADATA = "state-metadata"
STREAM = "statestore stream"  # readStream of the change feed, and follow()


@dataclass(frozen=True)
class ReaderOption:
    """One option of the readers: the one table the parsers take their names from and the docs list.

    ``python`` is the Spark-free keyword (None: data source only); ``spark_builtin``
    says whether Spark's own reader has the option too.
    """

    name: str
    default: str
    description: str
    readers: tuple[str, ...] = (STATESTORE,)
    python: str | None = ""
    spark_builtin: bool = True

    def __post_init__(self) -> None:
        if self.python == "":  # the default: the mechanical snake_case name
            object.__setattr__(self, "python", snake_case(self.name))


_BOTH = (STATESTORE, STATE_METADATA)
OPTIONS: tuple[ReaderOption, ...] = (
    ReaderOption(PATH, "—", "the checkpoint: `load(path)`, the first argument of the Python functions", _BOTH),
    ReaderOption(
        BATCH_ID, "latest committed batch", "the state after this batch (state store version `batchId + 1`)", _BOTH
    ),
    ReaderOption(OPERATOR_ID, str(DEFAULT_OPERATOR_ID), "stateful operator, in plan order", (STATESTORE, STREAM)),
    ReaderOption(
        STORE_NAME,
        f"`{DEFAULT_STORE_NAME}`",
        "store of the operator; stream-stream joins have four (`left-keyToNumValues`, "
        "`left-keyWithIndexToValue`, `right-…`; join state format 4: `left-keyWithTsToValues`, "
        "`left-tsWithKey`, `right-…`)",
        (STATESTORE, STREAM),
    ),
    ReaderOption(
        JOIN_SIDE,
        f"`{NO_JOIN_SIDE}`",
        "`left`/`right`: the buffered input rows of that side of a stream-stream join (format 4: the key "
        "also holds `__event_time`, µs); not served by a stream (follow a side's stores with `storeName`)",
    ),
    ReaderOption(
        SNAPSHOT_START_BATCH_ID,
        "—",
        "with `snapshotPartitionId`: rebuild one partition from the snapshot written at that batch",
    ),
    ReaderOption(SNAPSHOT_PARTITION_ID, "—", "the partition `snapshotStartBatchId` rebuilds"),
    ReaderOption(
        READ_CHANGE_FEED,
        "false",
        "one row per change (`batch_id`, `change_type` = `update`/`delete`/`append`, `key`, `value`, `partition_id`)",
        (STATESTORE, STREAM),
    ),
    ReaderOption(
        CHANGE_START_BATCH_ID,
        "— (a stream: the oldest batch the checkpoint still serves)",
        "first batch of the change feed (required in a batch read)",
        (STATESTORE, STREAM),
    ),
    ReaderOption(CHANGE_END_BATCH_ID, "latest", "last batch of the change feed (a stream has none)"),
    ReaderOption(
        STATE_VAR_NAME, "—", "transformWithState: the state variable to read (required there)", (STATESTORE, STREAM)
    ),
    ReaderOption(READ_REGISTERED_TIMERS, "false", "transformWithState: the registered timers"),
    ReaderOption(
        FLATTEN_COLLECTION_TYPES,
        "true",
        "transformWithState list/map state: a row per element, or one array/map per key",
    ),
    ReaderOption(
        CHANGE_FEED_FROM_SNAPSHOTS,
        "false",
        "a change feed for RocksDB checkpoints written without changelog checkpointing (which Spark "
        "refuses), computed by comparing consecutive snapshots; it shows each key's net change per batch",
        (STATESTORE, STREAM),
        spark_builtin=False,
    ),
    ReaderOption(
        TIMEOUT_TIMESTAMP_AS_LONG,
        "false",
        "flatMapGroupsWithState state format 1 declares `timeoutTimestamp` an `int` (as Spark's reader shows "
        "it) but writes a long into its slot; a timeout beyond the int range raises a clear error, and this "
        "option shows the whole long as `bigint` instead",
        spark_builtin=False,
    ),
    ReaderOption(
        KEY_SCHEMA,
        "— (the store's schema file)",
        "with `valueSchema`: the store's key schema as DDL (`window STRUCT<start: TIMESTAMP, end: TIMESTAMP>, "
        "user STRING`), for a store without a schema file (state from before Spark 3.1, or a file lost), which "
        "Spark's reader cannot read; used instead of the schema file when there is one, and checked against "
        "the rows' bytes. Not with `joinSide`, `stateVarName` or `readRegisteredTimers` (a stream-stream "
        "join's stores take it one at a time, with `storeName`); see Reading state",
        (STATESTORE, STREAM),
        spark_builtin=False,
    ),
    ReaderOption(
        VALUE_SCHEMA,
        "— (the store's schema file)",
        "with `keySchema`: the store's value schema as DDL (`count BIGINT, sum DOUBLE`)",
        (STATESTORE, STREAM),
        spark_builtin=False,
    ),
    ReaderOption(
        INFER_MISSING_METADATA,
        "false",
        "describe checkpoints written before Spark 4.0, which have no operator metadata, from their files",
        (STATE_METADATA,),
        spark_builtin=False,
    ),
    ReaderOption(
        INCLUDE_HIDDEN_COLUMNS,
        "false",
        "add the built-in's hidden `_numColsPrefixKey` column (a Python data source cannot declare hidden columns)",
        (STATE_METADATA,),
        spark_builtin=False,
    ),
    ReaderOption(
        STORAGE_OPTIONS,
        "—",
        "fsspec options (credentials, endpoint): a JSON object, or one `storage.<name>` option each",
        (*_BOTH, STREAM),
        spark_builtin=False,
    ),
    ReaderOption(
        VERIFY_CHECKSUMS,
        "true",
        "check files against Hadoop `.crc` sidecars and Spark's checksum files where present",
        _BOTH,
        spark_builtin=False,
    ),
    ReaderOption(
        PARTITIONS_PER_TASK,
        "`auto`",
        "state partitions one Spark task reads. `auto`: as many tasks as Spark had cores when "
        "`state_reader.register(spark)` ran, each reading an even, contiguous share (a Python data source "
        "pays a worker round trip per task); `1`: one task per state partition, like the built-in reader. "
        "Rows and `partition_id` are the same either way",
        python=None,
        spark_builtin=False,
    ),
    ReaderOption(
        MAX_BATCHES_PER_TRIGGER,
        "all committed",
        "producer batches per micro-batch, also under `Trigger.AvailableNow` (Spark 4.2+ only: Spark 4.0 "
        "and 4.1 give Python streaming sources no read limits)",
        (STREAM,),
        spark_builtin=False,
    ),
    ReaderOption(
        FAIL_ON_DATA_LOSS,
        "true",
        "when the producer's cleanup deleted batches not yet read, `ChangesLostError` names them; false "
        "skips to the oldest retained batch and logs which were skipped",
        (STREAM,),
        spark_builtin=False,
    ),
    ReaderOption(
        START_WITH_SNAPSHOT,
        "false",
        "first the whole state (`change_type` `snapshot`), then the changes",
        (STREAM,),
        spark_builtin=False,
    ),
)


def boolean_default(name: str) -> bool:
    """The default of the boolean option ``name``, as :data:`OPTIONS` gives it (``true`` or ``false``)."""
    default = next(o.default for o in OPTIONS if o.name == name)
    if default not in ("true", "false"):
        raise ValueError(f"{name} is not a boolean option (default {default!r})")
    return default == "true"


def option_names(reader: str) -> tuple[str, ...]:
    """The names ``reader`` accepts, in table order (``storage.<name>`` aside)."""
    return tuple(o.name for o in OPTIONS if reader in o.readers)


STATESTORE_OPTIONS = option_names(STATESTORE)
METADATA_OPTIONS = option_names(STATE_METADATA)


@functools.cache
def _named_option_re() -> re.Pattern[str]:
    names = sorted((o.name for o in OPTIONS if o.python and o.python != o.name), key=len, reverse=True)
    return re.compile(r"'?\b(" + "|".join(names) + r")\b'?(=(?:true|false)\b)?")


def in_python_names(message: str) -> str:
    """An error message with the read options it names written as the Python keywords that set them:
    ``'changeStartBatchId'`` -> ``change_start_batch_id``, ``readChangeFeed=true`` -> ``read_change_feed=True``.
    The Spark-free functions raise their errors so (:func:`python_api`); Spark's fronts keep Spark's names."""
    python = {o.name: o.python for o in OPTIONS}

    def name(match: re.Match[str]) -> str:
        value = match.group(2)
        return f"{python[match.group(1)]}{'' if value is None else '=' + value[1:].capitalize()}"

    return _named_option_re().sub(name, message)


def python_api(func: F) -> F:
    """The error boundary of a Spark-free public function (:func:`state_reader.errors.public_api`), whose
    errors name the Python keywords the caller typed, not Spark's option names."""
    return public_api(func, rename=in_python_names)


def _not_negative(name: str, value: int | None) -> None:
    """Spark's refusal of a negative number where an option counts batches, partitions or operators."""
    if value is not None and value < 0:
        raise NegativeOptionError(f"'{name}' cannot be negative (got {value}).")


def check_batch_range(start: int | None, end: int | None) -> None:
    """The batch range's rules, as Spark's reader words them: neither end negative, the end not before the
    start. Every front that takes a range (the change feed, ``stats``, ``plot``) checks it here."""
    _not_negative(CHANGE_START_BATCH_ID, start)
    _not_negative(CHANGE_END_BATCH_ID, end)
    if start is not None and end is not None and end < start:
        raise InvalidOptionError(
            f"Invalid value for option '{CHANGE_END_BATCH_ID}': {CHANGE_END_BATCH_ID} cannot be "
            f"smaller than {CHANGE_START_BATCH_ID} ({end} < {start})."
        )


def given_key(options: Mapping[str, Any], name: str) -> Any:
    """The key under which ``options`` set ``name``, in any case (as Spark reads options), or None."""
    return next((k for k, v in options.items() if v is not None and str(k).lower() == name.lower()), None)


def is_set_true(options: Mapping[str, Any], name: str) -> bool:
    """Whether ``options`` set the boolean option ``name`` to true (``"true"`` in any case, or ``True``)."""
    key = given_key(options, name)
    return key is not None and str(options[key]).strip().lower() == "true"


def without(options: Mapping[str, Any], *names: str) -> dict[str, Any]:
    """``options`` less the options ``names``, however their case was given."""
    dropped = {name.lower() for name in names}
    return {k: v for k, v in options.items() if str(k).lower() not in dropped}


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` most likely misspells (case-insensitive), or None."""
    by_lower = {k.lower(): k for k in known}
    match = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[match[0]] if match else None


class _Options:
    """Case-insensitive view of string options, as Spark's CaseInsensitiveStringMap.

    Unlike Spark's reader, an option name it does not know is an error (with the
    closest valid name), so a misspelled option never silently reads something else.
    """

    def __init__(self, options: Mapping[str, Any], known: tuple[str, ...]) -> None:
        self._map = {str(k).lower(): v for k, v in options.items() if v is not None}
        valid = {k.lower() for k in known}
        for name in options:
            name = str(name)
            if name.lower() in valid or name.lower().startswith(STORAGE_PREFIX):
                continue
            guess = closest(name, known)
            hint = f"; did you mean '{guess}'?" if guess else ""
            raise InvalidOptionError(
                f"Unknown option '{name}'{hint} (options: {', '.join(k for k in known if k != PATH)}, "
                f"{STORAGE_PREFIX}<name>)"
            )

    def get(self, name: str) -> str | None:
        value = self._map.get(name.lower())
        if value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    def path(self) -> str:
        """The checkpoint's path, which every reader requires."""
        path = self.get(PATH)
        if path is None or path == "":
            raise RequiredOptionError(f"'{PATH}' must be specified.")
        return path

    def long(self, name: str) -> int | None:
        text = self.get(name)
        if text is None:
            return None
        try:
            return int(text.strip())
        except ValueError:
            raise InvalidOptionError(f"Invalid value for option '{name}': {text!r} is not an integer") from None

    def boolean(self, name: str) -> bool:
        """The boolean option ``name``; unset, its default in :data:`OPTIONS` (the one place it is written)."""
        text = self.get(name)
        if text is None:
            return boolean_default(name)
        lowered = text.strip().lower()
        if lowered not in ("true", "false"):
            raise InvalidOptionError(f"Invalid value for option '{name}': {text!r}. Boolean value is expected")
        return lowered == "true"

    def storage_options(self) -> dict[str, Any]:
        """fsspec options: ``storageOptions`` (a JSON object) plus ``storage.<name>`` entries."""
        out: dict[str, Any] = {}
        raw = self._map.get(STORAGE_OPTIONS.lower())
        if isinstance(raw, Mapping):  # from the Spark-free API: passed through as is
            out.update(raw)
        elif raw:
            if not isinstance(raw, (str, bytes)):
                raise InvalidOptionError(
                    f"Invalid value for option '{STORAGE_OPTIONS}': a mapping or a JSON object is expected, "
                    f"got {type(raw).__name__}"
                )
            try:
                parsed = json.loads(raw)
            except ValueError as exc:
                raise InvalidOptionError(f"Invalid value for option '{STORAGE_OPTIONS}': not JSON ({exc})") from None
            if not isinstance(parsed, dict):
                raise InvalidOptionError(f"Invalid value for option '{STORAGE_OPTIONS}': a JSON object is expected")
            out.update(parsed)
        for key, value in self._map.items():
            if key.startswith(STORAGE_PREFIX):
                out[key[len(STORAGE_PREFIX) :]] = _loose_json(value)
        return out


def _loose_json(value: Any) -> Any:
    """A storage option value: JSON when it parses as JSON, else the string itself."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


@dataclass(frozen=True)
class StateStoreOptions:
    """Validated ``statestore`` options. ``batch_id`` None = the latest committed batch."""

    path: str
    batch_id: int | None = None
    operator_id: int = DEFAULT_OPERATOR_ID
    store_name: str = DEFAULT_STORE_NAME
    join_side: str = NO_JOIN_SIDE
    snapshot_start_batch_id: int | None = None
    snapshot_partition_id: int | None = None
    read_change_feed: bool = False
    change_start_batch_id: int | None = None
    change_end_batch_id: int | None = None
    state_var_name: str | None = None
    read_registered_timers: bool = False
    flatten_collection_types: bool = True
    # ours: a RocksDB change feed without changelog files, by comparing consecutive snapshots
    change_feed_from_snapshots: bool = False
    # ours: flatMapGroupsWithState format 1's timeoutTimestamp as the long its slot holds, not Spark's int
    timeout_timestamp_as_long: bool = False
    # ours: the key and value schemas as DDL, given for a store without a schema file (checked when parsed)
    key_schema: str | None = None
    value_schema: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    # check files against their .crc sidecars when there are any (Hadoop's and Spark's)
    verify_checksums: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> StateStoreOptions:
        """Validate options given by name (case-insensitive), in Spark's order of checks."""
        opts = _Options(options, STATESTORE_OPTIONS)
        path = opts.path()
        operator_id = opts.long(OPERATOR_ID)
        operator_id = DEFAULT_OPERATOR_ID if operator_id is None else operator_id
        _not_negative(OPERATOR_ID, operator_id)
        store_name_raw = opts.get(STORE_NAME)
        store_name = DEFAULT_STORE_NAME if store_name_raw is None else store_name_raw.strip()
        if not store_name:
            raise EmptyOptionError(f"'{STORE_NAME}' cannot be empty.")
        state_var_name = opts.get(STATE_VAR_NAME)
        state_var_name = state_var_name.strip() if state_var_name is not None else None
        read_timers = opts.boolean(READ_REGISTERED_TIMERS)
        if read_timers and state_var_name is not None:
            raise ConflictingOptionsError(
                f"Options '{READ_REGISTERED_TIMERS}' and '{STATE_VAR_NAME}' cannot be specified together."
            )
        flatten = opts.boolean(FLATTEN_COLLECTION_TYPES)
        join_side = opts.get(JOIN_SIDE) or NO_JOIN_SIDE
        if join_side not in JOIN_SIDE_VALUES:
            raise InvalidOptionError(
                f"Invalid value for option '{JOIN_SIDE}': {join_side!r}. Valid values are {','.join(JOIN_SIDE_VALUES)}"
            )
        if join_side != NO_JOIN_SIDE and store_name != DEFAULT_STORE_NAME:
            raise ConflictingOptionsError(
                f"Options '{JOIN_SIDE}' and '{STORE_NAME}' cannot be specified together "
                f"(joinSide={join_side}, storeName={store_name})."
            )
        batch_id = opts.long(BATCH_ID)
        snap_start = opts.long(SNAPSHOT_START_BATCH_ID)
        snap_part = opts.long(SNAPSHOT_PARTITION_ID)
        read_change_feed = opts.boolean(READ_CHANGE_FEED)
        change_start = opts.long(CHANGE_START_BATCH_ID)
        change_end = opts.long(CHANGE_END_BATCH_ID)
        if read_change_feed:
            for name, given in (
                (JOIN_SIDE, join_side != NO_JOIN_SIDE),
                (BATCH_ID, batch_id is not None),
                (SNAPSHOT_START_BATCH_ID, snap_start is not None),
                (SNAPSHOT_PARTITION_ID, snap_part is not None),
            ):
                if given:
                    raise ConflictingOptionsError(
                        f"Options '{name}' and '{READ_CHANGE_FEED}' cannot be specified together."
                    )
            if change_start is None:
                raise RequiredOptionError(f"'{CHANGE_START_BATCH_ID}' must be specified with {READ_CHANGE_FEED}.")
            check_batch_range(change_start, change_end)
        else:
            for name, value in ((CHANGE_START_BATCH_ID, change_start), (CHANGE_END_BATCH_ID, change_end)):
                if value is not None:
                    raise InvalidOptionError(
                        f"Invalid value for option '{name}': Only specify this option when "
                        f"{READ_CHANGE_FEED} is set to true."
                    )
            _not_negative(BATCH_ID, batch_id)
            _not_negative(SNAPSHOT_START_BATCH_ID, snap_start)
            if snap_start is not None and batch_id is not None and snap_start > batch_id:
                raise InvalidOptionError(
                    f"Invalid value for option '{SNAPSHOT_START_BATCH_ID}': value should be less than "
                    f"or equal to {batch_id}"
                )
            _not_negative(SNAPSHOT_PARTITION_ID, snap_part)
            if snap_part is not None and snap_start is None:
                raise RequiredOptionError(
                    f"'{SNAPSHOT_START_BATCH_ID}' must be specified with {SNAPSHOT_PARTITION_ID}."
                )
            if snap_part is None and snap_start is not None:
                raise RequiredOptionError(
                    f"'{SNAPSHOT_PARTITION_ID}' must be specified with {SNAPSHOT_START_BATCH_ID}."
                )
        key_schema, value_schema = _given_schemas(opts, join_side, state_var_name, read_timers)
        return cls(
            path=path,
            batch_id=batch_id,
            operator_id=operator_id,
            store_name=store_name,
            join_side=join_side,
            snapshot_start_batch_id=snap_start,
            snapshot_partition_id=snap_part,
            read_change_feed=read_change_feed,
            change_start_batch_id=change_start,
            change_end_batch_id=change_end,
            state_var_name=state_var_name,
            read_registered_timers=read_timers,
            flatten_collection_types=flatten,
            change_feed_from_snapshots=opts.boolean(CHANGE_FEED_FROM_SNAPSHOTS),
            timeout_timestamp_as_long=opts.boolean(TIMEOUT_TIMESTAMP_AS_LONG),
            key_schema=key_schema,
            value_schema=value_schema,
            storage_options=opts.storage_options(),
            verify_checksums=opts.boolean(VERIFY_CHECKSUMS),
        )


def _given_schemas(
    opts: _Options, join_side: str, state_var_name: str | None, read_timers: bool
) -> tuple[str | None, str | None]:
    """``keySchema`` and ``valueSchema``: both or neither, each a schema in DDL, for one store."""
    key, value = check_given_schemas(opts.get(KEY_SCHEMA), opts.get(VALUE_SCHEMA))
    if key is None or value is None:
        return None, None
    for name, given_too in (
        (JOIN_SIDE, join_side != NO_JOIN_SIDE),
        (STATE_VAR_NAME, state_var_name is not None),
        (READ_REGISTERED_TIMERS, read_timers),
    ):
        if given_too:
            why = (
                "a join side is read from two stores with schemas of their own; read each store with storeName"
                if name == JOIN_SIDE
                else "transformWithState keeps its schemas in the operator's schema files, which these do not replace"
            )
            raise ConflictingOptionsError(f"Options '{name}' and '{KEY_SCHEMA}' cannot be specified together ({why}).")
    return key, value


def check_given_schemas(key: str | None, value: str | None) -> tuple[str | None, str | None]:
    """``keySchema`` and ``valueSchema`` of one store as given (both or neither, each a schema in DDL),
    stripped; the one check of every reader and command that takes them."""
    if key is None and value is None:
        return None, None
    if key is None or value is None:
        given, missing = (KEY_SCHEMA, VALUE_SCHEMA) if value is None else (VALUE_SCHEMA, KEY_SCHEMA)
        raise RequiredOptionError(
            f"'{missing}' must be specified with {given}: a store without a schema file is read with both."
        )
    # here, not at the top: the command line names options from this module and starts without pyarrow
    from state_reader.formats.spark_types import parse_ddl

    for name, text in ((KEY_SCHEMA, key), (VALUE_SCHEMA, value)):
        try:
            parse_ddl(text)
        except ValueError as exc:
            raise InvalidOptionError(
                f"Invalid value for option '{name}': not a schema in DDL such as 'user STRING, n BIGINT' ({exc})"
            ) from None
    return key.strip(), value.strip()


@dataclass(frozen=True)
class StateMetadataOptions:
    """Validated ``state-metadata`` options."""

    path: str
    batch_id: int | None = None
    infer_missing_metadata: bool = False
    include_hidden_columns: bool = False
    storage_options: dict[str, Any] = field(default_factory=dict)
    # check files against their .crc sidecars when there are any (Hadoop's and Spark's)
    verify_checksums: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> StateMetadataOptions:
        opts = _Options(options, METADATA_OPTIONS)
        path = opts.path()
        batch_id = opts.long(BATCH_ID)
        _not_negative(BATCH_ID, batch_id)
        return cls(
            path=path,
            batch_id=batch_id,
            infer_missing_metadata=opts.boolean(INFER_MISSING_METADATA),
            include_hidden_columns=opts.boolean(INCLUDE_HIDDEN_COLUMNS),
            storage_options=opts.storage_options(),
            verify_checksums=opts.boolean(VERIFY_CHECKSUMS),
        )


def from_kwargs(path: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Spark-free keyword arguments (snake_case) -> data source options (camelCase)."""
    out: dict[str, Any] = {PATH: path}
    for name, value in kwargs.items():
        if value is None:
            continue
        out[camel_case(name)] = value
    return out
