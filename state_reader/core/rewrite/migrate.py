"""The frozen confs a rewrite changes (``confs=``, ``--conf``, and the shorthands ``num_partitions=``,
``provider=``), each checked against the table of frozen confs (``model/conf.FROZEN_CONFS``) and against the
checkpoint before anything is written, and the migration of each decided here, once: :data:`MIGRATIONS`.

A migration changes how a store's rows are written, much as a transform does: :class:`MigratedStoreRows`
loads the old rows, turns each value into the new format's (columnar, with pyarrow) and writes them under the
new plan (new schemas, new codec). The destination's offset log records the new values, so the query resumed
there runs in the new format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from state_reader.core.rewrite.migrate_encoding import STORE_CONF_FIELDS, transcoded_stores
from state_reader.core.rewrite.migrate_join import into_families, join_values, out_of_families
from state_reader.core.rewrite.migrate_join_families import JoinFamilyRows, join_family_rows
from state_reader.core.rewrite.migrate_join_split import SplitJoinRows, split_join_rows
from state_reader.core.rewrite.rows import FamilyStoreRows, StoreRows, TransformedStoreRows, store_label
from state_reader.core.size import row_bytes
from state_reader.errors import (
    ConflictingOptionsError,
    InvalidOptionError,
    RewriteFailedError,
    UnsupportedConfChangeError,
)
from state_reader.formats.spark_types import INTEGER, LONG, StructField, StructType
from state_reader.formats.unsaferow import RowBuffer, decode_rows
from state_reader.formats.unsaferow_encode import encode_rows, splice_rows
from state_reader.model.checkpoint import CheckpointDir
from state_reader.model.conf import (
    CONF_AGG_FORMAT,
    CONF_ALWAYS_NULLABLE_OUTPUT,
    CONF_CHECKPOINT_FORMAT,
    CONF_CODEC,
    CONF_DEDUP_KEY_ORDER,
    CONF_ENCODING,
    CONF_FMGWS_FORMAT,
    CONF_JOIN_FORMAT,
    CONF_MERGE_OPERATOR,
    CONF_PROVIDER,
    CONF_ROW_CHECKSUM,
    CONF_SHUFFLE_PARTITIONS,
    FROZEN,
    OFFSET_LOG,
    PROVIDER_NAMES,
    conf_value,
    frozen_conf,
    recorded_conf,
)
from state_reader.model.operators import is_transform_with_state
from state_reader.model.plan import StateReadPlan

TIMEOUT_FIELD = "timeoutTimestamp"
GROUP_STATE_FIELD = "groupState"


@dataclass(frozen=True)
class ConfChange:
    """One frozen conf a rewrite was asked for: its value in the source (recorded, or what Spark assumes
    when the offset log does not record it) and the new one; ``migration`` names what changes it."""

    key: str
    old: str | None
    new: str
    recorded: bool
    migration: str | None

    @property
    def changed(self) -> bool:
        return self.old != self.new

    def summary(self) -> dict[str, object]:
        """The change as plain data (a rewrite's ``--json``)."""
        return {"conf": self.key, "old": self.old, "new": self.new, "recorded": self.recorded,
                "changed": self.changed, "migration": self.migration if self.changed else None}  # fmt: skip


def asked_confs(confs: Mapping[str, object] | None, num_partitions: int | None, provider: str | None) -> dict[str, str]:
    """``confs`` as Spark records them (unknown keys and values Spark does not have refused), with the shorthands
    ``num_partitions`` and ``provider`` folded in; a shorthand and its conf with different values conflict."""
    asked = {frozen_conf(key).key: conf_value(key, value) for key, value in (confs or {}).items()}
    for key, value in ((CONF_SHUFFLE_PARTITIONS, num_partitions), (CONF_PROVIDER, provider)):
        if value is None:
            continue
        # the shorthands' own words, as before there were confs
        if key == CONF_SHUFFLE_PARTITIONS and int(value) < 1:
            raise InvalidOptionError(f"num_partitions must be at least 1, got {value}")
        if key == CONF_PROVIDER and str(value).lower() not in PROVIDER_NAMES:
            raise InvalidOptionError(f"provider must be one of {', '.join(PROVIDER_NAMES)}, got {value!r}")
        given = conf_value(key, value)
        if key in asked and asked[key] != given:
            raise ConflictingOptionsError(
                f"{key} is asked for twice, as {given!r} and as {asked[key]!r} (a shorthand for it and the conf "
                "itself); give one of them"
            )
        asked[key] = given
    return asked


def plan_conf_changes(
    cp: CheckpointDir,
    batch: int,
    conf: Mapping[str, str],
    asked: Mapping[str, str],
    operator_names: Mapping[int, str | None],
    source_provider: str,
    target_provider: str,
) -> list[ConfChange]:
    """Each conf asked, old value against new, and the migration that makes the change; refused
    (:class:`UnsupportedConfChangeError`) when the table has no migration for it, the query's operators do not
    keep the state it shapes, or the new value needs another provider."""
    changes = []
    for key, new in asked.items():
        spec = FROZEN[key]
        old, recorded = _current(cp, batch, conf, key, source_provider)
        if old == new:
            changes.append(ConfChange(key, old, new, recorded, None))
            continue
        where = f"{key} {old or 'unset'} -> {new} ({cp.location})"
        if spec.operators:
            unknown = sorted(op for op, name in operator_names.items() if name is None)
            if not any(name in spec.operators for name in operator_names.values()):
                if unknown:
                    raise UnsupportedConfChangeError(
                        f"{where}: operators {unknown} have no operator metadata (written before Spark 4.0), so "
                        "which of them keeps the state this conf shapes cannot be told",
                        conf=key,
                        path=cp.location,
                    )
                names = sorted({str(n) for n in operator_names.values()}) or ["none"]
                raise UnsupportedConfChangeError(
                    f"{where}: not applicable, the query has no operator whose state it shapes "
                    f"({', '.join(spec.operators)}); its stateful operators: {', '.join(names)}",
                    conf=key,
                    path=cp.location,
                )
        needed = (spec.needs_provider or {}).get(new)
        if needed is not None and needed != target_provider:
            raise UnsupportedConfChangeError(
                f"{where}: Spark runs {key}={new} on the {needed} provider only, and the rewrite writes "
                f"{target_provider}; add {CONF_PROVIDER}={needed}",
                conf=key,
                path=cp.location,
            )
        if spec.refusal is not None or key not in MIGRATIONS:
            raise UnsupportedConfChangeError(
                f"{where}: refused, {spec.refusal or 'no migration is written for it'}", conf=key, path=cp.location
            )
        changes.append(ConfChange(key, old, new, recorded, spec.migration))
    return changes


def _current(
    cp: CheckpointDir, batch: int, conf: Mapping[str, str], key: str, source_provider: str
) -> tuple[str | None, bool]:
    """The source's value of ``key``: the partitions and provider as the reads find them, the checkpoint format
    from the commit log, the rest as the offset log records it (or Spark assumes it)."""
    if key == CONF_SHUFFLE_PARTITIONS:
        return str(cp.num_partitions(conf)), key in conf
    if key == CONF_PROVIDER:
        return PROVIDER_NAMES.get(source_provider, source_provider), key in conf
    if key == CONF_CHECKPOINT_FORMAT:
        return ("2" if cp.names_files_by_unique_id(batch) else "1"), True
    return recorded_conf(conf, key)


def offset_log_confs(changes: list[ConfChange]) -> dict[str, str]:
    """The confs the destination's offset log records anew (Spark restores them at restart)."""
    return {c.key: c.new for c in changes if c.changed and FROZEN[c.key].recorded_in == OFFSET_LOG}


# --- the migrations ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValueMigration:
    """A store's values turned into another format's: the new value schema (as the schema file declares it, and
    the fields whose slots hold longs), and a function of (keys, values, old plan, new plan) -> new values, all
    as plain UnsafeRows."""

    value_schema: StructType
    convert: Callable[[RowBuffer, RowBuffer, StateReadPlan, StateReadPlan, str], RowBuffer]
    value_long_slots: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Decoded:
    """A migration of decoded values (pyarrow, columnar): decoded with the old schemas, ``fn`` of (keys or None,
    values), encoded with the new value schema."""

    fn: Callable[[pa.StructArray | None, pa.StructArray], pa.StructArray]
    needs_keys: bool = False

    def __call__(
        self, keys: RowBuffer, values: RowBuffer, old: StateReadPlan, new: StateReadPlan, source: str
    ) -> RowBuffer:
        decoded_keys = decode_rows(keys, old.key_schema) if self.needs_keys else None
        out = self.fn(decoded_keys, decode_rows(values, old.stored_value_schema))
        return encode_rows(out, new.stored_value_schema, source)


@dataclass(frozen=True)
class _DropKeyColumns:
    """Aggregation format 1 -> 2: the value loses the grouping columns it starts with (moved as bytes)."""

    key_fields: int

    def __call__(
        self, keys: RowBuffer, values: RowBuffer, old: StateReadPlan, new: StateReadPlan, source: str
    ) -> RowBuffer:
        schema = old.stored_value_schema
        return splice_rows([(values, schema, self.key_fields, len(schema.fields))], source)


def _prepend_keys(keys: RowBuffer, values: RowBuffer, old: StateReadPlan, new: StateReadPlan, source: str) -> RowBuffer:
    """Aggregation format 2 -> 1: the value is the whole input row, grouping columns first (moved as bytes)."""
    key_schema, value_schema = old.key_schema, old.stored_value_schema
    return splice_rows(
        [(keys, key_schema, 0, len(key_schema.fields)), (values, value_schema, 0, len(value_schema.fields))], source
    )


@dataclass(frozen=True)
class _NestGroupState:
    """flatMapGroupsWithState format 1 -> 2: the state's fields nested in ``groupState``, the timeout (a long)
    after it when the query has timeouts."""

    state_fields: int
    timeout: bool

    def __call__(self, keys: pa.StructArray | None, values: pa.StructArray) -> pa.StructArray:
        fields = [values.type.field(i) for i in range(self.state_fields)]
        state = pa.StructArray.from_arrays([values.field(i) for i in range(self.state_fields)], fields=fields)
        arrays: list[pa.Array] = [state]
        if self.timeout:
            arrays.append(values.field(self.state_fields).cast(pa.int64()))
        return pa.StructArray.from_arrays(arrays, names=[GROUP_STATE_FIELD, TIMEOUT_FIELD][: len(arrays)])


@dataclass(frozen=True)
class _FlattenGroupState:
    """flatMapGroupsWithState format 2 -> 1: ``groupState``'s fields at the top, the timeout after them (a long
    in the slot format 1 declares ``int``) when the query has timeouts."""

    timeout: bool
    where: str

    def __call__(self, keys: pa.StructArray | None, values: pa.StructArray) -> pa.StructArray:
        state = values.field(0)
        if state.null_count:
            # format 2 keeps a timeout for a group without state; format 1 has no way to say "no state"
            raise RewriteFailedError(
                f"{self.where}: {state.null_count} groups hold a timeout but no state, which "
                f"{CONF_FMGWS_FORMAT}=1 cannot hold",
                path=self.where,
            )
        arrays = list(state.flatten())
        names = [state.type.field(i).name for i in range(state.type.num_fields)]
        if self.timeout:
            arrays.append(values.field(1).cast(pa.int64()))
            names.append(TIMEOUT_FIELD)
        return pa.StructArray.from_arrays(arrays, names=names)


def _aggregation_format(rows: StoreRows, change: ConfChange) -> ValueMigration:
    plan = rows.plan
    keys = plan.key_schema.fields
    if change.new == "2":
        head = plan.value_schema.fields[: len(keys)]
        if [f.data_type.to_json() for f in head] != [f.data_type.to_json() for f in keys]:
            raise UnsupportedConfChangeError(
                f"{store_label(plan, located=True)}: its value does not start with its grouping columns, as "
                f"{CONF_AGG_FORMAT}=1 keeps them; it is not format 1 state",
                conf=change.key,
                path=plan.checkpoint.location,
            )
        return ValueMigration(StructType(list(plan.value_schema.fields[len(keys) :])), _DropKeyColumns(len(keys)))
    return ValueMigration(StructType([*keys, *plan.value_schema.fields]), _prepend_keys)


def _fmgws_format(rows: StoreRows, change: ConfChange) -> ValueMigration:
    plan = rows.plan
    fields = plan.value_schema.fields
    if change.new == "2":
        timeout = bool(fields) and fields[-1].name == TIMEOUT_FIELD and fields[-1].data_type.kind == "integer"
        state = fields[:-1] if timeout else fields
        new = [StructField(GROUP_STATE_FIELD, StructType(list(state)), True)]
        if timeout:
            new.append(StructField(TIMEOUT_FIELD, LONG, True))
        return ValueMigration(StructType(new), _Decoded(_NestGroupState(len(state), timeout)))
    if not fields or fields[0].name != GROUP_STATE_FIELD or fields[0].data_type.kind != "struct":
        raise UnsupportedConfChangeError(
            f"{store_label(plan, located=True)}: its value has no {GROUP_STATE_FIELD} struct first, as "
            f"{CONF_FMGWS_FORMAT}=2 keeps it; it is not format 2 state",
            conf=change.key,
            path=plan.checkpoint.location,
        )
    # format 2 keeps timeoutTimestamp only for a query with timeouts (as format 1 does): the schema says which
    timeout = len(fields) > 1 and fields[1].name == TIMEOUT_FIELD
    if timeout:
        raise UnsupportedConfChangeError(
            f"{store_label(plan, located=True)}: the query has timeouts, and Spark 4.3 cannot restart "
            f"{CONF_FMGWS_FORMAT}=1 state with timeouts (its own such checkpoints fail validating the long timeout "
            "in the slot format 1 declares int, on either provider); it stays on format 2",
            conf=change.key,
            path=plan.checkpoint.location,
        )
    state_type = fields[0].data_type
    assert isinstance(state_type, StructType)
    new = list(state_type.fields)
    long_slots: tuple[str, ...] = ()
    if timeout:
        # format 1 declares the timeout an int and writes the long into its slot
        new.append(StructField(TIMEOUT_FIELD, INTEGER, True))
        long_slots = (TIMEOUT_FIELD,)
    where = store_label(plan, located=True)
    return ValueMigration(StructType(new), _Decoded(_FlattenGroupState(timeout, where)), value_long_slots=long_slots)


# Spark Classic's old order of dedup key columns is a Scala set's of their names: up to four elements a set keeps
# the order they were added in (the query's), from five on a hash set's order, and the query's own order is
# recorded in no file of the checkpoint
_ORDER_KEPT_UP_TO = 4


def _dedup_key_order(rows: StoreRows, change: ConfChange) -> None:
    """``dropDuplicates.deterministicKeyOrder.enabled``: the key columns keep their order under both values where
    there are at most four of them, each named once (only the offset log changes); other keys are refused."""
    names = rows.plan.key_schema.names
    if len(names) <= _ORDER_KEPT_UP_TO and len(set(names)) == len(names):
        return None
    raise UnsupportedConfChangeError(
        f"{store_label(rows.plan, located=True)}: {change.key} {change.old} -> {change.new} refused: its "
        f"key has {len(names)} columns ({', '.join(names)}). With more than {_ORDER_KEPT_UP_TO}, or a "
        "name given twice, Spark orders them differently under the two values (Spark Classic's old order is a hash "
        "set's of their names), and the order the query names them in is recorded nowhere in the checkpoint",
        conf=change.key,
        path=rows.plan.checkpoint.location,
    )


def _join_format(rows: StoreRows, change: ConfChange) -> ValueMigration | None:
    """Stream-stream join formats: decided in :mod:`~state_reader.core.rewrite.migrate_join`."""
    values = join_values(rows.plan, change.old, change.new)
    return None if values is None else ValueMigration(*values)


# the one place each conf's change is decided: the confs a rewrite can change, and how. The partitions and the
# provider are the rewrite's own layout (plan_rewrite); the formats turn each value of the operators the table
# names (FrozenConf.operators); the codec rewrites every file the provider compresses. A conf added here needs
# its FrozenConf's refusal taken away (tests check the two agree).
LAYOUT = "layout"
RECOMPRESS = "recompress"
# the schema files written anew, the rows as they are (the write step: RewritePlan.nullable_operators)
SCHEMAS = "schemas"
# every row decoded under the source's store conf and encoded under the new one (migrate_encoding)
TRANSCODE = "transcode"
MIGRATIONS: dict[str, str | Callable[[StoreRows, ConfChange], ValueMigration | None]] = {
    CONF_SHUFFLE_PARTITIONS: LAYOUT,
    CONF_PROVIDER: LAYOUT,
    CONF_CODEC: RECOMPRESS,
    CONF_AGG_FORMAT: _aggregation_format,
    CONF_FMGWS_FORMAT: _fmgws_format,
    CONF_JOIN_FORMAT: _join_format,
    CONF_ENCODING: TRANSCODE,
    # the names of the new files and the commit log's ids (migrate_checkpoint_format)
    CONF_CHECKPOINT_FORMAT: LAYOUT,
    CONF_ROW_CHECKSUM: TRANSCODE,
    CONF_MERGE_OPERATOR: TRANSCODE,
    CONF_ALWAYS_NULLABLE_OUTPUT: SCHEMAS,
    CONF_DEDUP_KEY_ORDER: _dedup_key_order,
}


def nullable_operators(changes: list[ConfChange], operator_names: Mapping[int, str | None]) -> frozenset[int]:
    """The operators whose schema files a rewrite makes nullable throughout: every one but transformWithState
    (whose schemas are the user's, and Spark leaves them) when ``alwaysNullableOutput`` is turned on. Turned off,
    the schemas stay as they are: Spark accepts stored schemas more nullable than the query's, and the narrower
    ones are recorded nowhere."""
    if not any(c.key == CONF_ALWAYS_NULLABLE_OUTPUT and c.changed and c.new == "true" for c in changes):
        return frozenset()
    return frozenset(op for op, name in operator_names.items() if not is_transform_with_state(name))


def migrate_stores(
    stores: list[StoreRows],
    changes: list[ConfChange],
    operator_names: Mapping[int, str | None],
    target_provider: str,
) -> list[StoreRows]:
    """``stores`` with each store a change rewrites wrapped in :class:`MigratedStoreRows`."""
    changed = {c.key: c for c in changes if c.changed}
    codec = changed.get(CONF_CODEC)
    join = changed.get(CONF_JOIN_FORMAT)
    if join is not None and into_families(join.old, join.new):
        # a join into formats 3 and 4 is one new store of column families, whatever the source's stores
        stores = _join_rewritten(
            stores, join, operator_names, lambda own: [join_family_rows(own, str(join.old), join.new)]
        )
    elif join is not None and out_of_families(join.old, join.new):
        # a join out of formats 3 and 4 is the four separate stores, on either provider
        new_codec = codec.new if codec is not None else None
        stores = _join_rewritten(
            stores, join, operator_names, lambda own: _split(own, str(join.old), join.new, target_provider, new_codec)
        )
    transcode = {k: c.new for k, c in changed.items() if MIGRATIONS.get(k) == TRANSCODE and k in STORE_CONF_FIELDS}
    if transcode:
        stores = transcoded_stores(stores, transcode)
    out: list[StoreRows] = []
    for rows in stores:
        if isinstance(rows, (JoinFamilyRows, SplitJoinRows)):
            out.append(rows)
            continue
        plan, values = rows.plan, None
        name = operator_names.get(plan.operator_id)
        for key, change in changed.items():
            migration = MIGRATIONS.get(key)
            if not callable(migration) or name not in FROZEN[key].operators:
                continue
            # the migration says first whether the direction is written at all (None: this store keeps its rows)
            migrated = migration(rows, change)
            if migrated is None:
                continue
            _require_migratable(rows, change)
            values = migrated
            plan = replace(plan, value_schema=values.value_schema, value_long_slots=values.value_long_slots)
        if codec is not None and not isinstance(rows, FamilyStoreRows):
            # RocksDB compresses its changelogs with the codec, not the snapshots a rewrite writes: its stores are
            # written as they are, and only the offset log changes
            plan = replace(plan, store_conf=replace(plan.store_conf, codec=codec.new))
        out.append(rows if plan is rows.plan else MigratedStoreRows(rows, plan, values))
    return out


def _split(own: list[StoreRows], old: str, new: str, provider: str, codec: str | None) -> list[StoreRows]:
    (source,) = own
    assert isinstance(source, FamilyStoreRows)
    return split_join_rows(source, old, new, provider, codec)


def _join_rewritten(
    stores: list[StoreRows],
    change: ConfChange,
    operator_names: Mapping[int, str | None],
    build: Callable[[list[StoreRows]], list[StoreRows]],
) -> list[StoreRows]:
    """``stores`` with each join operator's stores replaced by the stores ``build`` writes it as in the new
    format."""
    joins = [op for op, name in operator_names.items() if name in FROZEN[CONF_JOIN_FORMAT].operators]
    out: list[StoreRows] = []
    for op in sorted({rows.plan.operator_id for rows in stores}):
        own = [rows for rows in stores if rows.plan.operator_id == op]
        if op not in joins:
            out.extend(own)
            continue
        for rows in own:
            plan = rows.plan
            if plan.store_conf.row_checksum or plan.store_conf.avro or isinstance(rows, TransformedStoreRows):
                raise UnsupportedConfChangeError(
                    f"{store_label(plan, located=True)}: {change.key} {change.old} -> {change.new}: the store keeps "
                    "row checksums or Avro-encoded rows, or is transformed, which a join format change does not "
                    "support yet",
                    conf=change.key,
                    path=plan.checkpoint.location,
                )
        out.extend(build(own))
    return out


def _require_migratable(rows: StoreRows, change: ConfChange) -> None:
    plan = rows.plan
    where = f"{store_label(plan, located=True)}: {change.key} {change.old} -> {change.new}"
    if isinstance(rows, (FamilyStoreRows, TransformedStoreRows)):
        raise UnsupportedConfChangeError(
            f"{where}: a format change and a transform of one operator in one rewrite are not supported; rewrite twice",
            conf=change.key,
            path=plan.checkpoint.location,
        )
    if plan.store_conf.row_checksum or plan.store_conf.avro:
        raise UnsupportedConfChangeError(
            f"{where}: the store keeps row checksums or Avro-encoded rows, which a format change does not support yet",
            conf=change.key,
            path=plan.checkpoint.location,
        )
    meta = plan.checkpoint.operator_metadata(plan.operator_id, plan.batch_id)
    store = meta.store(plan.store_name) if meta is not None else None
    if store is not None and store.schema_file_paths:
        raise UnsupportedConfChangeError(
            f"{where}: the store keeps its schema in schema v3 files, which a format change does not support yet",
            conf=change.key,
            path=plan.checkpoint.location,
        )


class MigratedStoreRows(StoreRows):
    """A store written under a new plan: its values turned into a new format's (``values``), or its files
    compressed with another codec (the plan's), or both. Keys keep their bytes, so every row goes where it did."""

    def __init__(self, inner: StoreRows, plan: StateReadPlan, values: ValueMigration | None) -> None:
        self.inner = inner
        self.values = values
        super().__init__(plan, inner.single)
        self.writes_schema = values is not None
        if values is not None:
            self.rocksdb = False  # rows leave load() as plain UnsafeRows
        self.where = store_label(inner.plan)

    def load(self, pid: int) -> tuple[RowBuffer, RowBuffer]:
        return self.load_sized(pid)[:2]

    def load_sized(self, pid: int) -> tuple[RowBuffer, RowBuffer, np.ndarray]:
        """The rows in the new format, and each row's state bytes as the source stores it."""
        inner = self.inner
        keys, values = inner.load(pid)
        sizes = row_bytes(keys, values)
        if self.values is None:
            return keys, values, sizes
        plain_keys, plain_values = inner.convert(keys, values, to_rocksdb=False)
        source = f"{self.where}, partition {pid}, in the new format"
        return plain_keys, self.values.convert(plain_keys, plain_values, inner.plan, self.plan, source), sizes


__all__ = [
    "MIGRATIONS",
    "ConfChange",
    "MigratedStoreRows",
    "asked_confs",
    "migrate_stores",
    "nullable_operators",
    "offset_log_confs",
    "plan_conf_changes",
]
