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
