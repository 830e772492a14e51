"""A one-look description of a checkpoint: batches, provider, codec, state
format versions, operators and their stores.

Built from ``read_metadata`` (with ``infer_missing_metadata`` for checkpoints
written before Spark 4.0, which have no operator metadata) and the SQL confs
pinned in the offset log of the latest committed batch.
"""

from __future__ import annotations

import json
from typing import Any

from state_reader.core.metadata import metadata_rows
from state_reader.core.planner import detect_provider
from state_reader.errors import OffsetLogUnavailableError, OffsetMetadataUnavailableError, StateReaderError
from state_reader.formats.codecs import DEFAULT_CODEC
from state_reader.io.calls import with_one_listing
from state_reader.io.integrity import with_checksum_report
from state_reader.io.storage import Storage
from state_reader.model import operators as operator_names
from state_reader.model.checkpoint import CheckpointDir
from state_reader.model.conf import (
    CONF_AGG_FORMAT,
    CONF_CHANGELOG,
    CONF_CODEC,
    CONF_ENCODING,
    CONF_FMGWS_FORMAT,
    CONF_JOIN_FORMAT,
    CONF_MERGE_OPERATOR,
    CONF_SHUFFLE_PARTITIONS,
    StoreConf,
    conf_flag,
    frozen_values,
    provider_name,
)
from state_reader.model.state_variables import declared_variables
from state_reader.providers.store_files import StoreFiles

# state format conf of each kind of operator, and the operator names of that kind
STATE_FORMAT_CONFS = {
    "aggregation": (CONF_AGG_FORMAT, (operator_names.AGGREGATION,)),
    "join": (CONF_JOIN_FORMAT, (operator_names.JOIN,)),
    "flatMapGroupsWithState": (CONF_FMGWS_FORMAT, operator_names.FLAT_MAP_GROUPS_WITH_STATE),
}


def _state_files(
    cp: CheckpointDir, op: int, entry: dict[str, Any], latest: int, provider: str
) -> tuple[dict[str, int] | None, bool]:
    """(the batches whose state of an operator is on disk, whether it has changelogs), as partition 0 of its
    first store shows them; ``provider``: the class that wrote them."""
    stores = [s["store_name"] for s in entry["stores"]] or ["default"]
    try:
        files = StoreFiles(cp.storage, cp.store_dir(op, 0, stores[0]), provider)
        versions = files.retained_versions(latest + 1, {b + 1 for b in cp.committed_batches})
    except StateReaderError:
        return None, False
    changelogs = files.rocksdb and bool(files.deltas or files.changelogs_with_ids)
    if not versions:
        return None, changelogs
    first, last = versions[0] - 1, versions[-1] - 1
    # first and last: the earlier names, beside the vocabulary's for one release
    return {"first": first, "first_batch_id": first, "last": last, "last_batch_id": last}, changelogs


def _properties(text: str | None) -> dict[str, Any]:
    try:
        doc = json.loads(text) if text else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


@with_one_listing  # each directory of a remote checkpoint listed once
@with_checksum_report  # one warning for all the files read
def describe_checkpoint(checkpoint: str, *, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything ``state-reader overview`` shows, as a JSON-ready dict."""
    storage = Storage(checkpoint, dict(storage_options or {}))
    cp = CheckpointDir(storage)
    # remote: the logs and the state listed at once, not one after the other (operator 0, the one
    # almost every stateful query has, listed recursively ahead of knowing it is there)
    storage.list_ahead(["commits", "offsets", "state", "state/0"])
    if storage.remote and cp.committed_batches:
        storage.prefetch([f"offsets/{cp.committed_batches[-1]}"])  # with the commit entry read next
    latest = cp.latest_committed_batch()  # a clear error for a missing or empty checkpoint
    batches = cp.committed_batches
    if storage.remote:  # every operator's metadata at once (and its listing, begun before it is known)
        storage.list_ahead(f"state/{op}" for op in cp.operator_ids)
        for op in cp.operator_ids:
            cp.fetch_ahead(latest, op)
    try:
        conf = cp.offset_conf(latest)
        conf_source = f"offsets/{latest}"
    except (OffsetLogUnavailableError, OffsetMetadataUnavailableError):
        conf, conf_source = cp.latest_conf(), "latest offset log entry"
    store_conf = StoreConf.parse(conf)

    meta = metadata_rows({"path": checkpoint, "storageOptions": storage_options or {}}, cp)
    inferred = False
    if not meta and cp.operator_ids:
        meta = metadata_rows(
            {"path": checkpoint, "inferMissingMetadata": True, "storageOptions": storage_options or {}}, cp
        )
        inferred = True

    operators: dict[int, dict[str, Any]] = {}
    classes: dict[int, str] = {}  # the provider class of each operator's state
    for row in meta:
        op = row["operatorId"]
        if op not in operators:
            classes[op] = detect_provider(cp, store_conf.provider_class, op)
            operators[op] = {
                "operator_id": op,
                "operator_name": row["operatorName"],
                "operator_properties": row["operatorProperties"],
                "partitions_on_disk": len(cp.partition_ids(op)),
                "provider": provider_name(classes[op]) or "unknown",
                "stores": [],
            }
        entry = operators[op]
        entry["stores"].append({"store_name": row["stateStoreName"], "num_partitions": row["numPartitions"]})
    for entry in operators.values():
        if operator_names.is_transform_with_state(entry["operator_name"]):
            # the user's variables (one store holds them all, a column family each) and the timers
            entry["state_variables"] = [
                {"name": v.name, "kind": v.kind, "ttl": v.ttl, "described": v.describe()}
                for v in declared_variables(_properties(entry["operator_properties"]))
            ]
    changelogs = False
    for op, entry in operators.items():
        entry["batches"], has_changelogs = _state_files(cp, op, entry, latest, classes[op])
        changelogs = changelogs or has_changelogs

    provider = provider_name(store_conf.provider_class)
    if provider is None and operators:
        provider = next(iter(operators.values()))["provider"]
    return {
        "checkpoint": cp.location,
        # first, last and latest_committed: the earlier names, beside the vocabulary's for one release
        "batches": {
            "first": batches[0],
            "first_batch_id": batches[0],
            "last": batches[-1],
            "last_batch_id": batches[-1],
            "count": len(batches),
            "latest_committed": latest,
            "latest_batch_id": latest,
        },
        "provider": provider or provider_name(detect_provider(cp, None, None)),  # no state: Spark's default
        "provider_class": store_conf.provider_class,
        "codec": store_conf.codec or DEFAULT_CODEC,  # what a conf missing from the offset log means
        "codec_recorded": CONF_CODEC in conf,
        # only for the kinds of operator the query has: the confs are recorded for every query
        "state_format_versions": {
            kind: int(conf[key])
            for kind, (key, names) in STATE_FORMAT_CONFS.items()
            if conf.get(key, "").isdigit() and any(o["operator_name"] in names for o in operators.values())
        },
        "shuffle_partitions": store_conf.shuffle_partitions,
        "encoding_format": store_conf.encoding,  # as for the codec
        "encoding_recorded": CONF_ENCODING in conf,
        "row_checksum": store_conf.row_checksum,
        # Spark does not pin this conf in the offset log: the changelog files tell
        "changelog_checkpointing": (conf_flag(conf, CONF_CHANGELOG) or changelogs) if provider == "rocksdb" else None,
        # the offset log does not record the format: the commit log's unique ids tell
        "checkpoint_format_version": 2 if cp.names_files_by_unique_id(latest) else 1,
        "rocksdb_merge_operator_version": conf.get(CONF_MERGE_OPERATOR),
        "conf_source": conf_source,
        # what Spark froze into the checkpoint, and whether a rewrite changes each (docs/rewrite.md)
        "frozen_confs": frozen_values(
            conf,
            [o["operator_name"] for o in operators.values()],
            2 if cp.names_files_by_unique_id(latest) else 1,
        ),
        "conf": {
            k: v
            for k, v in sorted(conf.items())
            if "stateStore" in k or "stateFormatVersion" in k or k == CONF_SHUFFLE_PARTITIONS
        },
        "operator_metadata": "inferred from files (written before Spark 4.0)"
        if inferred
        else ("recorded" if operators else "none"),
        "operators": [operators[k] for k in sorted(operators)],
    }
