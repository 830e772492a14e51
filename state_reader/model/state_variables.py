"""transformWithState state variables (Spark 4.0+, RocksDB only): what they are and how they are shown.

One store (``default``) holds every state variable of the operator in its own
virtual column family: keys start with the family's int16 id (ids are listed
in each snapshot zip's metadata), followed by the encoded key. Schemas and key
encoders come from the schema v3 files named by operator metadata v2. Families
whose names start with ``$`` are Spark's own indexes, except the timer family
``$procTimers_keyToTimestamp`` / ``$eventTimers_keyToTimestamp``.

Output columns per variable kind, as Spark's reader names them:

==============  ======================================  =====================================
kind            flattenCollectionTypes=true (default)   false
==============  ======================================  =====================================
ValueState      key, value                              (same)
ListState       key, list_element (one row per item)    key, list_value: array
MapState        key, user_map_key, user_map_value       key, map_value: map
timers          key, expiration_timestamp_ms            (same)
==============  ======================================  =====================================
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from state_reader.errors import InvalidOptionError, SchemaReadError
from state_reader.formats.schema_files import ColumnFamilySchema, read_schema_v3
from state_reader.formats.spark_types import LONG, ArrayType, MapType, StructField, StructType
from state_reader.model.checkpoint import CheckpointDir, OperatorMetadata, StoreInfo

VALUE, LIST, MAP, TIMERS = "ValueState", "ListState", "MapState", "TimerState"
# a family whose values are lists, shown one element per row in a ``value`` column (join state format 4)
MULTI_VALUE = "MultiValue"
_TIMER_FAMILIES = {"ProcessingTime": "$procTimers_keyToTimestamp", "EventTime": "$eventTimers_keyToTimestamp"}
# each timer is kept twice: its second index (time, then key), by the first's name
TIMER_INDEXES = {
    "$procTimers_keyToTimestamp": "$procTimers_timestampToKey",
    "$eventTimers_keyToTimestamp": "$eventTimers_timestampToKey",
}
# the families Spark keeps beside a variable, named by a prefix and the variable's name: the TTL index,
# a list's element count, and for a list with TTL its count and earliest expiration per grouping key
TTL_PREFIX, COUNTER_PREFIX, COUNT_PREFIX, MIN_PREFIX = "$ttl_", "$rowCounter_", "$count_", "$min_"


@dataclass(frozen=True)
class StateVariable:
    """The column family of one state variable and how to present it."""

    name: str
    kind: str
    flatten: bool
    family: ColumnFamilySchema
    # value fields left out of the output (the join's internal ``matched`` flag)
    hidden: tuple[str, ...] = ()

    @property
    def shown_value_schema(self) -> StructType:
        """The value schema without the hidden fields."""
        return StructType([f for f in self.family.value_schema.fields if f.name not in self.hidden])

    @property
    def grouping_key(self) -> StructType:
        """The grouping key: the whole family key, or its first (struct) field for map and timer keys."""
        if self.kind in (MAP, TIMERS):
            return self.family.key_schema.fields[0].data_type  # type: ignore[return-value]
        return self.family.key_schema

    def value_columns(self) -> list[StructField]:
        """Output columns between ``key`` and ``partition_id``."""
        value = self.shown_value_schema
        if self.kind == LIST:
            if self.flatten:
                return [StructField("list_element", value)]
            return [StructField("list_value", ArrayType(value, True))]
        if self.kind == MAP:
            user_key = self.family.key_schema.fields[1].data_type
            if self.flatten:
                return [StructField("user_map_key", user_key), StructField("user_map_value", value)]
            return [StructField("map_value", MapType(user_key, value, True))]
        if self.kind == TIMERS:
            return [StructField("expiration_timestamp_ms", LONG)]
        return [StructField("value", value)]

    def change_columns(self) -> list[StructField]:
        """Output columns of a change feed (collections are always one row per item)."""
        return replace(self, flatten=True).value_columns()


def plan_variable(
    cp: CheckpointDir,
    metadata: OperatorMetadata,
    store: StoreInfo,
    state_var_name: str | None,
    read_timers: bool,
    flatten: bool,
) -> StateVariable:
    """Validate stateVarName / readRegisteredTimers and find the variable's schema."""
    properties = metadata.properties
    time_mode = str(properties.get("timeMode", "None"))
    variables = {v.get("stateName"): v for v in properties.get("stateVariables", [])}
    if read_timers:
        if time_mode not in _TIMER_FAMILIES:
            raise InvalidOptionError(
                "Invalid value for option 'readRegisteredTimers': Registered timers are not available in "
                f"TimeMode={time_mode}."
            )
        name = _TIMER_FAMILIES[time_mode]
    else:
        name = state_var_name or ""
        if name.startswith("$"):
            raise InvalidOptionError(
                f"Invalid value for option 'stateVarName': {name!r} is an internal column family name; "
                "names starting with '$' are reserved"
            )
    if name not in variables:
        defined = ", ".join(sorted(n for n in variables if not str(n).startswith("$"))) or "none"
        raise InvalidOptionError(
            f"Invalid value for option 'stateVarName': State variable {name} is not defined for the "
            f"transformWithState operator {metadata.operator_id} (defined: {defined})."
        )
    kind = TIMERS if read_timers else str(variables[name].get("stateVariableType", VALUE))
    family = family_schema(cp, metadata.operator_id, store, name)
    return StateVariable(name, kind, flatten, family)


def user_variables(metadata: OperatorMetadata) -> list[str]:
    """The state variables a transformWithState operator declares, in its metadata's order (no timers)."""
    return [
        str(v.get("stateName"))
        for v in metadata.properties.get("stateVariables", [])
        if not str(v.get("stateName", "")).startswith("$")
    ]


def timer_family(metadata: OperatorMetadata) -> str | None:
    """The column family of the operator's registered timers, None when its time mode has none."""
    return _TIMER_FAMILIES.get(str(metadata.properties.get("timeMode", "None")))


@dataclass(frozen=True)
class DeclaredVariable:
    """A state variable a transformWithState operator declares in its metadata (or its timers)."""

    name: str  # the variable's name; for the timers, their column family (a ``stateVarName`` of stats)
    kind: str  # ValueState, ListState, MapState, or TimerState for the timers
    ttl: bool
    time_mode: str | None = None  # the timers' (ProcessingTime or EventTime)

    def describe(self) -> str:
        """The kind and TTL in a few words: "ValueState, TTL", "timers (ProcessingTime)"."""
        if self.kind == TIMERS:
            return f"timers ({self.time_mode})"
        return f"{self.kind}{', TTL' if self.ttl else ', no TTL'}"


def declared_variables(properties: dict[str, Any]) -> list[DeclaredVariable]:
    """The user's state variables of a transformWithState operator (its metadata's ``operatorProperties``),
    in their declared order, then its timers when its time mode has them."""
    out = [
        DeclaredVariable(str(v.get("stateName")), str(v.get("stateVariableType", VALUE)), bool(v.get("ttlEnabled")))
        for v in properties.get("stateVariables", [])
        if not str(v.get("stateName", "")).startswith("$")
    ]
    mode = str(properties.get("timeMode", "None"))
    if mode in _TIMER_FAMILIES:
        out.append(DeclaredVariable(_TIMER_FAMILIES[mode], TIMERS, False, mode))
    return out


def variables_described(metadata: OperatorMetadata) -> str:
    """The operator's state variables in words, for a message that asks to choose one."""
    kinds = {str(v.get("stateName")): v for v in metadata.properties.get("stateVariables", [])}
    parts = [
        f"{name} ({kinds[name].get('stateVariableType', VALUE)}{', TTL' if kinds[name].get('ttlEnabled') else ''})"
        for name in user_variables(metadata)
    ]
    text = "state variables: " + (", ".join(parts) or "none")
    if str(metadata.properties.get("timeMode", "None")) in _TIMER_FAMILIES:
        text += "; its timers with readRegisteredTimers=true"
    return text


def column_families(cp: CheckpointDir, metadata: OperatorMetadata, store: StoreInfo) -> list[StateVariable]:
    """Every column family of a transformWithState store, each as a variable to decode.

    The user's variables with their kinds, the timers, and Spark's own families
    (TTL indexes ``$ttl_*``, list counters, the timers' second index), which are
    decoded as plain key/value families: what ``verify`` needs to check every byte.
    """
    kinds = {
        str(v.get("stateName")): str(v.get("stateVariableType", VALUE))
        for v in metadata.properties.get("stateVariables", [])
    }
    timer_families = set(_TIMER_FAMILIES.values())
    out = []
    for name, family in sorted(family_schemas(cp, metadata.operator_id, store).items()):
        kind = TIMERS if name in timer_families else kinds.get(name, VALUE) if not name.startswith("$") else VALUE
        out.append(StateVariable(name, kind, True, family))
    return out


def family_schemas(cp: CheckpointDir, operator_id: int, store: StoreInfo) -> dict[str, ColumnFamilySchema]:
    """Every column family's schema, from the schema v3 files operator metadata v2 names."""
    if not store.schema_file_paths:
        raise SchemaReadError(
            f"operator metadata of operator {operator_id} names no schema file",
            path=cp.storage.display(f"state/{operator_id}/_metadata"),
        )
    out: dict[str, ColumnFamilySchema] = {}
    # files are listed oldest first: a family's newest schema wins
    for stored in store.schema_file_paths:
        rel = cp.resolve_schema_path(operator_id, stored)
        shown = cp.storage.display(rel)
        try:
            families = read_schema_v3(cp.read_once(rel), shown)
        except FileNotFoundError:
            raise SchemaReadError(
                f"Failed to read the state schema of operator {operator_id}: {shown} does not exist "
                f"(operator metadata names {stored})",
                path=shown,
            ) from None
        out.update((family.name, family) for family in families)
    return out


def family_schema(cp: CheckpointDir, operator_id: int, store: StoreInfo, name: str) -> ColumnFamilySchema:
    """Schema of column family ``name`` from the schema v3 files operator metadata v2 names."""
    family = family_schemas(cp, operator_id, store).get(name)
    if family is None:
        raise SchemaReadError(
            f"no schema for state variable {name} in the schema files of operator {operator_id}",
            path=cp.storage.display(f"state/{operator_id}/_stateSchema"),
        )
    return family


# -- where Spark's partitioning key sits in each column family's key -------------------------------


@dataclass(frozen=True)
class PartitionKeyPath:
    """Where, in a column family's key, the key Spark's shuffle partitions rows by sits: descend
    the nested struct fields ``path`` (indexes), then keep the ``leading`` fields (all when None)."""

    path: tuple[int, ...] = ()
    leading: int | None = None


def family_partition_key(name: str, family: ColumnFamilySchema, variable_kinds: dict[str, str]) -> PartitionKeyPath:
    """The grouping key (transformWithState) or join key (join formats 3, 4) in family ``name``'s key.

    transformWithState keys lead with the grouping key, except map variables and the timers'
    key-to-time index (``key: struct<G>`` first, prefix-scan encoded), and the range-scan indexes
    (TTL ``$ttl_*`` and the timers' time-to-key: the time first, then the element key, which for
    a map's TTL is ``struct<key: G, userKey>``). Join keys lead the four join families; the
    ``keyWithIndexToValue`` index and format 4's ``__event_time`` end them.
    """
    fields = family.key_schema.fields
    if name.endswith("-keyToNumValues"):
        return PartitionKeyPath()
    if name.endswith(("-keyWithIndexToValue", "-keyWithTsToValues", "-tsWithKey")):
        return PartitionKeyPath(leading=len(fields) - 1)
    kind = str(family.key_encoder.get("keyStateEncoderType", "NoPrefixKeyStateEncoderSpec"))
    if kind == "NoPrefixKeyStateEncoderSpec":
        return PartitionKeyPath()
    if kind == "PrefixKeyScanStateEncoderSpec" and fields and fields[0].data_type.kind == "struct":
        return PartitionKeyPath((0,))
    if kind == "RangeKeyScanStateEncoderSpec" and len(fields) == 2 and fields[1].data_type.kind == "struct":
        if name.startswith(TTL_PREFIX) and variable_kinds.get(name[len(TTL_PREFIX) :]) == MAP:
            return PartitionKeyPath((1, 0))
        return PartitionKeyPath((1,))
    raise SchemaReadError(
        f"cannot tell where the grouping key sits in the key of column family {name} "
        f"(key encoder {kind}, key {[f.name for f in fields]})",
        path=name,
    )


def variable_kinds(metadata: OperatorMetadata) -> dict[str, str]:
    """State variable name -> its type (``ValueState``, ``ListState``, ``MapState``, ``TimerState``)."""
    return {
        str(v.get("stateName")): str(v.get("stateVariableType", VALUE))
        for v in metadata.properties.get("stateVariables", [])
    }
