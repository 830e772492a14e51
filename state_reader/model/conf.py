"""The SQL confs a checkpoint's offset log pins, parsed once into a :class:`StoreConf`.

Spark records in every ``offsets/<batch>`` entry the confs that decide how state
is stored, and restores them on restart. Every decision the readers make from
them (which provider, which codec, whether rows carry a checksum, UnsafeRow or
Avro, which merge operator, how many state partitions) is made here and nowhere else,
and so are the provider classes' short names (``hdfs``, ``rocksdb``).

Light on imports (the formats are imported where a conf is parsed): the command line
lists the provider names in its help without loading numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from state_reader.errors import UnsupportedOptionError

CONF_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CONF_CODEC = "spark.sql.streaming.stateStore.compression.codec"
CONF_SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
CONF_AGG_FORMAT = "spark.sql.streaming.aggregation.stateFormatVersion"
CONF_JOIN_FORMAT = "spark.sql.streaming.join.stateFormatVersion"
CONF_FMGWS_FORMAT = "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion"
CONF_ROW_CHECKSUM = "spark.sql.streaming.stateStore.rowChecksum.enabled"
CONF_ENCODING = "spark.sql.streaming.stateStore.encodingFormat"
CONF_MERGE_OPERATOR = "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion"
CONF_CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
CONF_CHECKPOINT_FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"
# how many batches a query keeps (its logs and the state files they need); older ones are cleaned up
CONF_MIN_BATCHES_TO_RETAIN = "spark.sql.streaming.minBatchesToRetain"

HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

# the short names users give a provider by (`rewrite --provider`) and see it as (`metadata`, `stats`)
PROVIDER_NAMES: dict[str, str] = {"hdfs": HDFS_PROVIDER, "rocksdb": ROCKSDB_PROVIDER}

ENCODINGS = ("unsaferow", "avro")
# what a checkpoint that records no encoding was written with
DEFAULT_ENCODING = ENCODINGS[0]


def provider_name(provider_class: str | None) -> str | None:
    """The short name of a provider class (``hdfs``, ``rocksdb``), or None for a class we do not read."""
    return next((name for name, cls in PROVIDER_NAMES.items() if cls == provider_class), None)


def shuffle_partitions(conf: Mapping[str, str]) -> int | None:
    """``spark.sql.shuffle.partitions`` as recorded: the number of state partitions (None: not recorded)."""
    text = str(conf.get(CONF_SHUFFLE_PARTITIONS, "")).strip()
    return int(text) if text.isdigit() else None


def conf_flag(conf: Mapping[str, str], key: str) -> bool:
    """A boolean conf as Spark parses it (absent means false)."""
    return str(conf.get(key, "false")).strip().lower() == "true"


@dataclass(frozen=True)
class StoreConf:
    """How a checkpoint's state is stored, from the confs of one offset log entry."""

    # the provider class recorded (not its short name), None when the offset log records none
    provider_class: str | None
    codec: str | None
    row_checksum: bool
    encoding: str
    merge_operator_version: int
    # spark.sql.shuffle.partitions as the query first ran: the number of state partitions (None: not recorded)
    shuffle_partitions: int | None = None

    @classmethod
    def parse(cls, conf: Mapping[str, str]) -> StoreConf:
        """Parse and validate the storage confs (unknown encodings and merge operators are refused)."""
        from state_reader.formats.rocksdb_encoding import merge_operator_version

        encoding = str(conf.get(CONF_ENCODING) or DEFAULT_ENCODING).strip().lower()
        if encoding not in ENCODINGS:
            raise UnsupportedOptionError(f"state encoding format '{encoding}' is not supported by state_reader")
        return cls(
            provider_class=conf.get(CONF_PROVIDER) or None,
            codec=conf.get(CONF_CODEC) or None,
            row_checksum=conf_flag(conf, CONF_ROW_CHECKSUM),
            encoding=encoding,
            merge_operator_version=merge_operator_version(conf.get(CONF_MERGE_OPERATOR)),
            shuffle_partitions=shuffle_partitions(conf),
        )

    @property
    def provider(self) -> str | None:
        """The provider class, under its former name (:attr:`provider_class`)."""
        return self.provider_class

    @property
    def avro(self) -> bool:
        """True when keys and values are Avro records rather than UnsafeRows."""
        return self.encoding == "avro"

    @property
    def merge_delimiter(self) -> bytes:
        """What Spark's merge operator puts between merged values."""
        from state_reader.formats.rocksdb_encoding import MERGE_DELIMITERS

        return MERGE_DELIMITERS[self.merge_operator_version]


# --- the confs Spark freezes into a checkpoint, and what a rewrite can do with each ------------------------

CONF_MULTIPLE_WATERMARK_POLICY = "spark.sql.streaming.multipleWatermarkPolicy"
CONF_ROCKSDB_FORMAT = "spark.sql.streaming.stateStore.rocksdb.formatVersion"
CONF_STRICT_DISTRIBUTION = "spark.sql.streaming.statefulOperator.useStrictDistribution"
CONF_PRUNE_STREAMING_SUBPLAN = "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan"
CONF_PROTOBUF_EXTENSIONS = "spark.sql.function.protobufExtensions.enabled"
CONF_SOURCE_EVOLUTION = "spark.sql.streaming.queryEvolution.enableSourceEvolution"
CONF_ALWAYS_NULLABLE_OUTPUT = "spark.sql.streaming.statefulOperator.alwaysNullableOutput.enabled"
CONF_DEDUP_KEY_ORDER = "spark.sql.dropDuplicates.deterministicKeyOrder.enabled"
CONF_SESSION_WINDOW_FORMAT = "spark.sql.streaming.sessionWindow.stateFormatVersion"

CODECS = ("lz4", "lzf", "snappy", "zstd")
# where Spark keeps a frozen conf: the offset log's conf map, the commit log, or nowhere (one format only)
OFFSET_LOG, COMMIT_LOG, NOT_RECORDED = "offset log", "commit log", "not recorded"
# the kinds of value a frozen conf takes, as Spark parses them
INT, BOOL, NAME = "int", "bool", "name"


@dataclass(frozen=True)
class FrozenConf:
    """A conf Spark freezes into a checkpoint at its first batch and restores at every restart, whatever the
    session says: what it freezes, its values (and the Spark versions that have each), and whether a rewrite
    changes it (``migration``, the name of the step that does) or refuses to (``refusal``, why)."""

    key: str
    freezes: str
    # each value Spark has -> the Spark versions that have it; empty: any value of ``kind`` (a count, a version)
    values: dict[str, str]
    kind: str
    # what Spark assumes when an offset log does not record it (None: the session's value, or nothing to assume)
    absent: str | None
    migration: str | None = None
    refusal: str | None = None
    recorded_in: str = OFFSET_LOG
    # the operators whose state it shapes (operator names); empty: every stateful query's
    operators: tuple[str, ...] = ()
    # the provider a value needs (value -> short provider name)
    needs_provider: dict[str, str] | None = None

    @property
    def supported(self) -> bool:
        return self.refusal is None


_NOT_STATE = (
    "it shapes the query's plan, not how its state is stored; a rewrite moves state and cannot make the "
    "state written under one value right for the other"
)

# Every conf Spark 4.3 records in the conf map of offsets/<batch> (seventeen), the checkpoint format of the
# commit log, and the session window's format (one value, never recorded). Each change is either a migration
# (core/rewrite/migrate.MIGRATIONS carries it out) or refused with the reason given.
FROZEN_CONFS: tuple[FrozenConf, ...] = (
    FrozenConf(
        CONF_SHUFFLE_PARTITIONS,
        "the number of state partitions: each key lives in pmod(hash(key), N)",
        {},
        INT,
        None,
        migration="repartition",
    ),
    FrozenConf(
        CONF_PROVIDER,
        "the state store provider: HDFS-backed (delta and snapshot files) or RocksDB (SST files in zips, changelogs)",
        {HDFS_PROVIDER: "2.0+", ROCKSDB_PROVIDER: "3.2+"},
        NAME,
        None,
        migration="provider",
    ),
    FrozenConf(
        CONF_CODEC,
        "the codec of the HDFS-backed provider's delta and snapshot files and of RocksDB's changelog files",
        {"lz4": "3.1+", "lzf": "3.1+", "snappy": "3.1+", "zstd": "3.1+"},
        NAME,
        "lz4",
        migration="recompress",
    ),
    FrozenConf(
        CONF_AGG_FORMAT,
        "a streaming aggregation's state value: format 1 the whole input row (grouping columns, then the "
        "aggregation buffer), format 2 the buffer alone",
        {"1": "2.3+", "2": "2.4+"},
        INT,
        "1",
        migration="aggregation format",
        operators=("stateStoreSave",),
    ),
    FrozenConf(
        CONF_FMGWS_FORMAT,
        "(flat)mapGroupsWithState's and applyInPandasWithState's state value: format 1 the state's fields "
        "(then the timeout as a long, with timeouts), format 2 a groupState struct and a timeoutTimestamp",
        {"1": "2.2+", "2": "2.4+"},
        INT,
        "1",
        migration="flatMapGroupsWithState format",
        operators=("flatMapGroupsWithState", "applyInPandasWithState"),
    ),
    FrozenConf(
        CONF_JOIN_FORMAT,
        "a stream-stream join's state: formats 1 and 2 four stores (2 adds each row's matched flag), "
        "3 the four as column families of one RocksDB store, 4 an event-time index for eviction",
        {"1": "2.3+ (4.3 refuses to start new queries on it)", "2": "3.0+", "3": "4.1+", "4": "4.2+"},
        INT,
        "1",
        migration="join format (1 <-> 2; 2, 3, 4 -> 3, 4; 3, 4 -> 2, 1; 1 -> 3, 4 refused)",
        operators=("symmetricHashJoin",),
        needs_provider={"3": "rocksdb", "4": "rocksdb"},
    ),
    FrozenConf(
        CONF_ENCODING,
        "how keys and values are encoded: UnsafeRow, or Avro (transformWithState state schemas can evolve "
        "under Avro only)",
        {"unsaferow": "2.0+", "avro": "4.0+"},
        NAME,
        "unsaferow",
        migration="transcode",
        # Spark 4.0-4.3 refuse Avro for every other operator (AnalysisException: "not supported for operator")
        operators=("transformWithStateExec", "transformWithStateInPandasExec", "transformWithStateInPySparkExec"),
        needs_provider={"avro": "rocksdb"},
    ),
    FrozenConf(
        CONF_ROW_CHECKSUM,
        "whether each state row carries a CRC-32C of its key and value that Spark checks",
        {"false": "2.0+", "true": "4.1+"},
        BOOL,
        "false",
        migration="transcode",
    ),
    FrozenConf(
        CONF_MERGE_OPERATOR,
        "the RocksDB merge operator: what separates the elements of a merged list value (transformWithState "
        "lists, join format 4)",
        {"1": "3.2+", "2": "4.2+"},
        INT,
        "1",
        migration="transcode",
    ),
    FrozenConf(
        CONF_ROCKSDB_FORMAT,
        "the table format version of the SST files RocksDB writes",
        {},
        INT,
        None,
        refusal="the rewrite's snapshots are written in the table format of the RocksDB it bundles; writing "
        "another format version is not supported",
    ),
    FrozenConf(
        CONF_CHECKPOINT_FORMAT,
        "RocksDB's checkpoint format: 2 names state files by unique ids that the commit log lists",
        {"1": "2.0+", "2": "4.0+"},
        INT,
        "1",
        migration="checkpoint format",
        recorded_in=COMMIT_LOG,
        needs_provider={"2": "rocksdb"},
    ),
    FrozenConf(
        CONF_SESSION_WINDOW_FORMAT,
        "a session window's state (grouping columns and session start as key, the whole row as value)",
        {"1": "3.2+"},
        INT,
        "1",
        refusal="Spark has one session window state format (1); there is nothing to change it to",
        recorded_in=NOT_RECORDED,
        operators=("sessionWindowStateStoreSaveExec",),
    ),
    FrozenConf(
        CONF_MULTIPLE_WATERMARK_POLICY,
        "how the global watermark is chosen among several (the minimum or the maximum)",
        {"min": "2.4+", "max": "2.4+"},
        NAME,
        "min",
        refusal="it decides what the query evicts and emits from now on, not how state is stored; " + _NOT_STATE,
    ),
    FrozenConf(
        CONF_STRICT_DISTRIBUTION,
        "how rows are distributed to the stateful operators (Spark: never to be changed by hand)",
        {"true": "3.3+", "false": "3.3+"},
        BOOL,
        "false",
        refusal="state written under one distribution may sit in partitions the other does not send its keys to; "
        + _NOT_STATE,
    ),
    FrozenConf(
        CONF_PRUNE_STREAMING_SUBPLAN,
        "whether the optimizer may prune a streaming subplan under a false filter",
        {"true": "4.0+", "false": "4.0+"},
        BOOL,
        "true",
        refusal="it can change which stateful operators the plan has; " + _NOT_STATE,
    ),
    FrozenConf(
        CONF_PROTOBUF_EXTENSIONS,
        "whether from_protobuf and to_protobuf read proto2 extensions",
        {"true": "4.2+", "false": "4.2+"},
        BOOL,
        "false",
        refusal="it changes what the query computes, not its state; " + _NOT_STATE,
    ),
    FrozenConf(
        CONF_SOURCE_EVOLUTION,
        "whether sources are named (.name()) in the offset log, so that they may be added, removed or reordered",
        {"true": "4.1+", "false": "4.1+"},
        BOOL,
        "false",
        refusal="the offset and source logs would have to name every source; not supported",
    ),
    FrozenConf(
        CONF_ALWAYS_NULLABLE_OUTPUT,
        "whether every stateful operator's output and state schemas are nullable throughout (the state schema "
        "files of every operator but transformWithState, whose schemas are the user's)",
        {"true": "4.3+", "false": "4.3+"},
        BOOL,
        "false",
        migration="nullable schemas (false -> true widens every schema file; true -> false keeps them, as Spark "
        "accepts stored schemas more nullable than the query's)",
    ),
    FrozenConf(
        CONF_DEDUP_KEY_ORDER,
        "the order of a deduplication's key columns in its state keys: false, the order of a Scala set of their "
        "names in Spark Classic (their own order up to four); true, the order the query first names them",
        {"true": "4.3+", "false": "4.3+"},
        BOOL,
        "false",
        migration="dedup key order (the same under both values for up to four distinct key columns; five or "
        "more refused)",
        operators=("dedupe", "dedupeWithinWatermark"),
    ),
)
FROZEN: dict[str, FrozenConf] = {conf.key: conf for conf in FROZEN_CONFS}


def frozen_conf(key: str) -> FrozenConf:
    """The table row of ``key``; a key Spark does not freeze is refused (:class:`UnknownConfError`)."""
    from state_reader.errors import UnknownConfError

    conf = FROZEN.get(key.strip())
    if conf is None:
        raise UnknownConfError(
            f"'{key}' is not a conf Spark freezes into a checkpoint; a rewrite changes only those "
            "(docs/rewrite.md lists them)",
            conf=key,
        )
    return conf


def conf_value(key: str, value: object) -> str:
    """``value`` of frozen conf ``key`` as Spark records it (a provider's short name as its class, a codec
    and a policy in lower case, a version as a number), checked against the values Spark has."""
    from state_reader.errors import InvalidConfValueError

    conf = frozen_conf(key)
    text = str(value).strip()
    if conf.kind == BOOL:
        text = text.lower()
        if text not in ("true", "false"):
            raise InvalidConfValueError(f"{conf.key} takes true or false, got {value!r}", conf=conf.key)
    elif conf.kind == INT:
        if not text.isdigit() or (conf.key == CONF_SHUFFLE_PARTITIONS and int(text) < 1):
            least = "a positive" if conf.key == CONF_SHUFFLE_PARTITIONS else "a non-negative"
            raise InvalidConfValueError(f"{conf.key} takes {least} whole number, got {value!r}", conf=conf.key)
        text = str(int(text))
    elif conf.key == CONF_PROVIDER:
        text = PROVIDER_NAMES.get(text.lower(), text)
    else:
        text = text.lower()
    if conf.values and text not in conf.values:
        shown = [provider_name(v) or v for v in conf.values] if conf.key == CONF_PROVIDER else list(conf.values)
        raise InvalidConfValueError(
            f"{conf.key} has no value {value!r} in any Spark; its values: {', '.join(shown)}", conf=conf.key
        )
    return text


def recorded_conf(conf: Mapping[str, str], key: str) -> tuple[str | None, bool]:
    """Frozen conf ``key`` of an offset log entry's ``conf``: its value (as :func:`conf_value` spells it) and
    whether the entry records it; unrecorded, the value Spark assumes at restart (None: the session's)."""
    spec = frozen_conf(key)
    raw = conf.get(key)
    if raw is None or str(raw).strip() == "":
        return spec.absent, False
    from state_reader.errors import ConfChangeError

    try:
        return conf_value(key, raw), True
    except ConfChangeError:  # a value this table does not know (a custom provider class): kept as recorded
        return str(raw), True


def frozen_values(
    conf: Mapping[str, str], operator_names: list[str | None], checkpoint_format: int
) -> list[dict[str, object]]:
    """The frozen confs that shape a checkpoint's state (those of operators it has, and every query's), each with
    its value (recorded in the offset or commit log, or what Spark assumes), whether it is recorded, and how a
    rewrite changes it: the migration, or None where a change is refused (``overview``, ``doctor``)."""
    out: list[dict[str, object]] = []
    for spec in FROZEN_CONFS:
        if spec.operators and not any(name in spec.operators for name in operator_names):
            continue
        if spec.recorded_in == COMMIT_LOG:
            value: str | None = str(checkpoint_format)
            recorded = True
        elif spec.recorded_in == NOT_RECORDED:
            value, recorded = spec.absent, False
        else:
            value, recorded = recorded_conf(conf, spec.key)
        out.append({"conf": spec.key, "value": value, "recorded": recorded, "migration": spec.migration})
    return out
