"""A one-look description of a checkpoint: batches, provider, codec, state
format versions, operators and their stores.

Built from ``read_metadata`` (with ``infer_missing_metadata`` for checkpoints
written before Spark 4.0, which have no operator metadata) and the SQL confs
pinned in the offset log of the latest committed batch.
"""

from __future__ import annotations

from typing import Any

from state_reader.core.metadata import read_metadata_table
from state_reader.core.planner import detect_provider
from state_reader.errors import OffsetLogUnavailableError, OffsetMetadataUnavailableError
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import Checkpoint
from state_reader.model.conf import (
    CONF_AGG_FORMAT,
    CONF_CODEC,
    CONF_ENCODING,
    CONF_FMGWS_FORMAT,
    CONF_JOIN_FORMAT,
    CONF_MERGE_OPERATOR,
    CONF_PROVIDER,
    CONF_ROW_CHECKSUM,
    CONF_SHUFFLE_PARTITIONS,
    HDFS_PROVIDER,
    ROCKSDB_PROVIDER,
)

STATE_FORMAT_CONFS = {
    "aggregation": CONF_AGG_FORMAT,
    "join": CONF_JOIN_FORMAT,
    "flatMapGroupsWithState": CONF_FMGWS_FORMAT,
}
PROVIDER_NAMES = {HDFS_PROVIDER: "hdfs", ROCKSDB_PROVIDER: "rocksdb"}
# What a conf missing from the offset log means (older writers record fewer).
CODEC_DEFAULT = "lz4"


def describe_checkpoint(checkpoint: str, *, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything ``state-reader metadata`` shows, as a JSON-ready dict."""
    storage = Storage(checkpoint, dict(storage_options or {}))
    cp = Checkpoint(storage)
    latest = cp.latest_committed_batch()  # a clear error for a missing or empty checkpoint
    batches = cp.committed_batches
    try:
        conf = cp.offset_conf(latest)
        conf_source = f"offsets/{latest}"
    except (OffsetLogUnavailableError, OffsetMetadataUnavailableError):
        conf, conf_source = cp.latest_conf(), "latest offset log entry"

    meta = read_metadata_table({"path": checkpoint, "storageOptions": storage_options or {}})
    inferred = False
    if meta.num_rows == 0 and cp.operator_ids:
        meta = read_metadata_table({"path": checkpoint, "inferMissingMetadata": True,
                                    "storageOptions": storage_options or {}})
        inferred = True

    operators: dict[int, dict[str, Any]] = {}
    for row in meta.to_pylist():
        op = row["operatorId"]
        entry = operators.setdefault(op, {
            "operator_id": op, "operator_name": row["operatorName"],
            "operator_properties": row["operatorProperties"],
            "partitions_on_disk": len(cp.partition_ids(op)),
            "provider": PROVIDER_NAMES.get(detect_provider(cp, conf.get(CONF_PROVIDER), op), "unknown"),
            "stores": [],
        })
        entry["stores"].append({"store_name": row["stateStoreName"], "num_partitions": row["numPartitions"]})

    provider_class = conf.get(CONF_PROVIDER)
    provider = PROVIDER_NAMES.get(provider_class or "", None)
    if provider is None and operators:
        provider = next(iter(operators.values()))["provider"]
    return {
        "checkpoint": cp.location,
        "batches": {"first": batches[0], "last": batches[-1], "count": len(batches), "latest_committed": latest},
        "provider": provider or "hdfs",
        "provider_class": provider_class,
        "codec": conf.get(CONF_CODEC) or CODEC_DEFAULT,
        "codec_recorded": CONF_CODEC in conf,
        "state_format_versions": {name: int(conf[key]) for name, key in STATE_FORMAT_CONFS.items()
                                  if conf.get(key, "").isdigit()},
        "shuffle_partitions": int(conf[CONF_SHUFFLE_PARTITIONS]) if conf.get(CONF_SHUFFLE_PARTITIONS, "").isdigit()
        else None,
        "encoding_format": conf.get(CONF_ENCODING),
        "row_checksum": conf.get(CONF_ROW_CHECKSUM),
        "rocksdb_merge_operator_version": conf.get(CONF_MERGE_OPERATOR),
        "conf_source": conf_source,
        "conf": {k: v for k, v in sorted(conf.items()) if "stateStore" in k or "stateFormatVersion" in k
                 or k == CONF_SHUFFLE_PARTITIONS},
        "operator_metadata": "inferred from files (written before Spark 4.0)" if inferred
        else ("recorded" if operators else "none"),
        "operators": [operators[k] for k in sorted(operators)],
    }
