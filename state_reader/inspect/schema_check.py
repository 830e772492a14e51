"""``state-reader schema`` and ``schema-diff``: the stored key and value schema of every store, and
whether a changed query would restart from a checkpoint.

Spark checks, when a query starts from a checkpoint, each store's new key and
value schema against the stored one (``StateSchemaCompatibilityChecker``): equal
schemas pass; otherwise the key, then the value, must match field by field *by
position*, names ignored, with the same types, and a field the checkpoint stores
as non-nullable may not become nullable. Failing the key check raises
``STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE``, failing the value check
``STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE``. Spark 4 also checks that the query's
stateful operators are the ones the checkpoint's operator metadata names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from state_reader.core.planner import store_schema
from state_reader.core.retained import operator_stores
from state_reader.errors import SchemaReadError
from state_reader.formats.spark_types import ArrayType, DataType, MapType, StructType
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import DEFAULT_STORE, CheckpointDir
from state_reader.model.state_variables import family_schemas

KEY_ERROR = "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"
VALUE_ERROR = "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"
OPERATOR_ERROR = "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA"


@dataclass(frozen=True)
class StoreSchema:
    """The stored schema of one store (or one column family of a store)."""

    operator_id: int
    store_name: str
    operator_name: str | None
    key: StructType
    value: StructType

    def as_dict(self) -> dict[str, Any]:
        return {
            "operator_id": self.operator_id,
            "store_name": self.store_name,
            "operator_name": self.operator_name,
            "key": ddl(self.key),
            "value": ddl(self.value),
        }


@dataclass(frozen=True)
class SchemaVerdict:
    """Whether Spark would restart one store of a changed query, and why."""

    operator_id: int
    store_name: str
    compatible: bool
    error_class: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def ddl(typ: DataType) -> str:
    """A Spark type as ``struct<name:type,...>`` text."""
    if isinstance(typ, StructType):
        return (
            "struct<"
            + ",".join(f"{f.name}:{ddl(f.data_type)}{'' if f.nullable else ' not null'}" for f in typ.fields)
            + ">"
        )
    if isinstance(typ, ArrayType):
        return f"array<{ddl(typ.element)}>"
    if isinstance(typ, MapType):
        return f"map<{ddl(typ.key)},{ddl(typ.value)}>"
    json_name = typ.to_json()
    return json_name if isinstance(json_name, str) else str(json_name)


def store_schemas(checkpoint: str, *, storage_options: dict[str, Any] | None = None) -> list[StoreSchema]:
    """Every store's stored key and value schema (column families of schema v3 stores one by one)."""
    cp = CheckpointDir(Storage(checkpoint, dict(storage_options or {})))
    latest = cp.latest_committed_batch()
    out: list[StoreSchema] = []
    for op, store, op_name in operator_stores(cp, batch_id=latest, variables=False):
        try:
            key, value = store_schema(cp, op, store)
            out.append(StoreSchema(op, store, op_name, key, value))
            continue
        except SchemaReadError:
            pass
        # schema v3: the stores are column families of the operator's default store
        meta = cp.operator_metadata(op, latest)
        info = meta.store(DEFAULT_STORE) if meta else None
        if info is None:
            raise SchemaReadError(
                f"operator {op}, store {store} of {cp.location} has no schema file",
                path=cp.storage.display(f"state/{op}"),
            )
        families = family_schemas(cp, op, info)
        for name, family in families.items():
            if store in (DEFAULT_STORE, name):
                out.append(StoreSchema(op, name, op_name, family.key_schema, family.value_schema))
    return out


def _why_not(new: DataType, stored: DataType, where: str) -> str | None:
    """Why ``new`` cannot replace ``stored`` under Spark's rule (names ignored); None when it can."""
    if isinstance(stored, StructType) and isinstance(new, StructType):
        if len(new.fields) != len(stored.fields):
            return (
                f"{where or 'the schema'} has {len(new.fields)} fields where the checkpoint stores "
                f"{len(stored.fields)} ({ddl(new)} against {ddl(stored)})"
            )
        for i, (n, s) in enumerate(zip(new.fields, stored.fields, strict=True)):
            at = f"{where}.{s.name}" if where else s.name
            if n.nullable and not s.nullable:
                return f"field {i} ({at}) becomes nullable; the checkpoint stores it as not null"
            why = _why_not(n.data_type, s.data_type, at)
            if why:
                return why
        return None
    if isinstance(stored, ArrayType) and isinstance(new, ArrayType):
        if new.contains_null and not stored.contains_null:
            return f"{where}: array elements become nullable"
        return _why_not(new.element, stored.element, f"{where}[]")
    if isinstance(stored, MapType) and isinstance(new, MapType):
        if new.value_contains_null and not stored.value_contains_null:
            return f"{where}: map values become nullable"
        return _why_not(new.key, stored.key, f"{where}.key") or _why_not(new.value, stored.value, f"{where}.value")
    if ddl(new) != ddl(stored):
        return f"{where or 'the schema'} changes type from {ddl(stored)} to {ddl(new)}"
    return None


def compare_schemas(
    checkpoint: str, other: str, *, storage_options: dict[str, Any] | None = None
) -> list[SchemaVerdict]:
    """For each store: would the query that wrote ``other`` restart from ``checkpoint``?

    ``other`` is a checkpoint written by the changed query (a short run on a
    little input is enough: it only needs each store's schema).
    """
    stored = {(s.operator_id, s.store_name): s for s in store_schemas(checkpoint, storage_options=storage_options)}
    new = {(s.operator_id, s.store_name): s for s in store_schemas(other, storage_options=storage_options)}
    verdicts: list[SchemaVerdict] = []
    for op, store in sorted(stored.keys() | new.keys()):
        old_s, new_s = stored.get((op, store)), new.get((op, store))
        if old_s is None or new_s is None:
            which = "the changed query" if old_s is None else "the checkpoint"
            verdicts.append(
                SchemaVerdict(
                    op,
                    store,
                    False,
                    OPERATOR_ERROR,
                    f"only {which} has operator {op}, store {store}: the stateful operators "
                    "differ, and Spark refuses the restart",
                )
            )
            continue
        if old_s.operator_name and new_s.operator_name and old_s.operator_name != new_s.operator_name:
            verdicts.append(
                SchemaVerdict(
                    op,
                    store,
                    False,
                    OPERATOR_ERROR,
                    f"operator {op} is {old_s.operator_name} in the checkpoint and "
                    f"{new_s.operator_name} in the changed query",
                )
            )
            continue
        if ddl(new_s.key) == ddl(old_s.key) and ddl(new_s.value) == ddl(old_s.value):
            verdicts.append(SchemaVerdict(op, store, True, None, "identical schemas"))
            continue
        why_key = _why_not(new_s.key, old_s.key, "key")
        if why_key:
            verdicts.append(SchemaVerdict(op, store, False, KEY_ERROR, why_key))
            continue
        why_value = _why_not(new_s.value, old_s.value, "value")
        if why_value:
            verdicts.append(SchemaVerdict(op, store, False, VALUE_ERROR, why_value))
            continue
        verdicts.append(
            SchemaVerdict(
                op,
                store,
                True,
                None,
                "field names or nullability differ in ways Spark accepts (it matches fields "
                "by position and lets a nullable field become not null)",
            )
        )
    return verdicts
