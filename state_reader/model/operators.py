"""What each stateful operator keeps in state, as far as a reader must know.

Operator names are the ``operatorName`` strings of operator metadata. Checkpoints
written before Spark 4.0 have no metadata; :func:`infer_operator_name` recognises
the operators whose state layout gives them away.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeGuard

from state_reader.formats.spark_types import LONG, StructField, StructType
from state_reader.model.checkpoint import JOIN_STORES, OperatorMetadata
from state_reader.model.conf import CONF_FMGWS_FORMAT

TRANSFORM_WITH_STATE = ("transformWithStateExec", "transformWithStateInPandasExec", "transformWithStateInPySparkExec")
JOIN = "symmetricHashJoin"
SESSION_WINDOW = "sessionWindowStateStoreSaveExec"
FLAT_MAP_GROUPS_WITH_STATE = ("flatMapGroupsWithState", "applyInPandasWithState")
AGGREGATION = "stateStoreSave"
DEDUP = "dedupe"
DEDUP_WITHIN_WATERMARK = "dedupeWithinWatermark"

# field metadata Spark puts on a session window column
_SESSION_WINDOW_METADATA = "spark.sessionWindow"


def is_transform_with_state(operator_name: str | None) -> bool:
    return operator_name in TRANSFORM_WITH_STATE


def join_in_column_families(metadata: OperatorMetadata | None) -> TypeGuard[OperatorMetadata]:
    """Whether a join keeps its four stores as column families of one RocksDB store (join state formats 3
    and 4): its operator metadata says so. The conf (``join.stateFormatVersion``) is the whole query's
    and not recorded per operator; the metadata is written by the operator that wrote the state."""
    return (
        metadata is not None
        and metadata.operator_name == JOIN
        and bool(metadata.properties.get("useVirtualColumnFamilies"))
    )


def infer_operator_name(store_names: list[str], value_schema: StructType | None) -> str | None:
    """Operator name for a store layout without metadata, when the layout tells."""
    if set(store_names) >= set(JOIN_STORES):
        return JOIN
    if value_schema is None:
        return None
    if any(_SESSION_WINDOW_METADATA in f.metadata for f in value_schema.fields):
        return SESSION_WINDOW
    shape = [(f.name, f.data_type.kind) for f in value_schema.fields]
    # the values these operators store are fixed by Spark, not by the query
    if shape == [("__dummy__", "void")]:
        return DEDUP
    if shape == [("expiresAtMicros", "long")]:
        return DEDUP_WITHIN_WATERMARK
    if shape[:1] == [("groupState", "struct")]:  # state format 2 (format 1 stores the user's state as is)
        return FLAT_MAP_GROUPS_WITH_STATE[0]
    return None


def infer_num_cols_prefix_key(operator_name: str | None, key_schema: StructType | None) -> int:
    """Session windows scan keys by the grouping columns: all key columns but the start time."""
    if operator_name == SESSION_WINDOW and key_schema is not None:
        return max(len(key_schema.fields) - 1, 0)
    return 0


def fmgws_long_slots(operator_name: str | None, conf: Mapping[str, str], value_schema: StructType) -> tuple[str, ...]:
    """Value fields flatMapGroupsWithState declares ``int`` but fills with a long.

    State format 1 declares its trailing ``timeoutTimestamp`` as an integer but
    writes the timeout (epoch milliseconds) as a long into that 8-byte slot.
    Spark's reader shows the declared ``int`` (the slot's low four bytes), which is
    the whole value only while the timeout fits an int. Checkpoints without
    operator metadata (before Spark 4.0) are recognised by the format conf and the
    field alone.
    """
    fields = value_schema.fields
    if not fields or fields[-1].name != "timeoutTimestamp" or fields[-1].data_type.kind != "integer":
        return ()
    if operator_name is not None and operator_name not in FLAT_MAP_GROUPS_WITH_STATE:
        return ()
    if conf.get(CONF_FMGWS_FORMAT, "2").strip() != "1":
        return ()
    return (fields[-1].name,)


def widened(schema: StructType, names: tuple[str, ...]) -> StructType:
    """``schema`` with the top-level fields ``names`` typed ``bigint``: how their slots are filled."""
    if not names:
        return schema
    return StructType(
        [StructField(f.name, LONG, f.nullable, f.metadata) if f.name in names else f for f in schema.fields]
    )
