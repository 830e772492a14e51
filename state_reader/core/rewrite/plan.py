"""The plan of a rewrite: what is asked checked against the checkpoint, and every store planned,
before anything is written."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from state_reader.core.key_filter import KeyFilterSpec
from state_reader.core.planner import detect_provider, join_column_families, store_names_on_disk
from state_reader.core.rewrite.edit import StoreEdit
from state_reader.core.rewrite.migrate import (
    ConfChange,
    asked_confs,
    migrate_stores,
    nullable_operators,
    offset_log_confs,
    plan_conf_changes,
)
from state_reader.core.rewrite.migrate_checkpoint_format import UNIQUE_IDS, names_files_by_unique_id
from state_reader.core.rewrite.migrate_join import SEPARATE_STORES
from state_reader.core.rewrite.report import RewriteReport
from state_reader.core.rewrite.rows import FamilyStoreRows, StoreRows, Transform, TransformedStoreRows, store_plan
from state_reader.errors import InvalidOptionError, UncommittedBatchError, UnsupportedOptionError
from state_reader.formats.schema_files import write_schema_v2
from state_reader.io.storage import Storage
from state_reader.model import operators
from state_reader.model.checkpoint import JOIN_STORES, CheckpointDir, OperatorMetadata, numeric_names
from state_reader.model.conf import (
    CONF_CHECKPOINT_FORMAT,
    CONF_JOIN_FORMAT,
    CONF_PROVIDER,
    CONF_ROW_CHECKSUM,
    CONF_SHUFFLE_PARTITIONS,
    PROVIDER_NAMES,
    provider_name,
)
from state_reader.model.plan import StateReadPlan
from state_reader.model.state_variables import user_variables

# operators whose state lives in one partition whatever the shuffle partitions (their input is one partition)
SINGLE_PARTITION_OPERATORS = ("globalLimit",)


@dataclass(frozen=True)
class RewriteOptions:
    """What a rewrite is asked to do, built once (by ``state_reader.rewrite``) and read by each step:
    the plan (partitions, provider, batch, transform), the rows left out and written, and whether
    anything is written at all."""

    num_partitions: int | None = None
    provider: str | None = None
    batch_id: int | None = None
    allow_uncommitted: bool = False
    transform: Transform | dict[int, Transform] | None = None
    # keys left out of every store (a key filter)
    drop_keys: KeyFilterSpec | None = None
    # rows written into stores (``upsert``, ``delete``)
    edits: tuple[StoreEdit, ...] = ()
    dry_run: bool = False
    show_progress: bool | None = None
    # frozen confs to change, Spark's names and values (``num_partitions`` and ``provider`` are shorthands for two)
    confs: Mapping[str, object] | None = None


def offset_batches(cp: CheckpointDir) -> list[int]:
    return numeric_names(cp.storage.list_names("offsets"))


@dataclass
class RewritePlan:
    """What a rewrite will do, checked before anything is written."""

    checkpoint: CheckpointDir
    batch_id: int
    old_partitions: int
    new_partitions: int
    source_provider: str
    provider: str
    # every store of every stateful operator, with how its rows are found and routed
    stores: list[StoreRows]
    # RocksDB checkpoint format 2: state files named by unique ids that the commit entry of the batch lists
    unique_ids: bool = False
    # seeds the destination's unique ids, so that any process writing a partition names it alike
    rewrite_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    # the frozen confs asked for, each old value against the new
    conf_changes: list[ConfChange] = field(default_factory=list)
    # the operators whose schema files are written nullable throughout (alwaysNullableOutput turned on)
    nullable_operators: frozenset[int] = frozenset()

    @property
    def to_rocksdb(self) -> bool:
        return self.provider == "rocksdb"

    def unique_id(self, plan: StateReadPlan, pid: int) -> str | None:
        """The unique id of a new partition's files (checkpoint format 2), None in format 1."""
        if not self.unique_ids:
            return None
        return str(uuid.uuid5(uuid.UUID(self.rewrite_id), f"{plan.operator_id}/{pid}/{plan.store_name}"))

    def schema_files(self) -> dict[str, bytes]:
        """The schema files a transform changes: path -> the bytes of a v2 file with the new schemas."""
        return {
            self.checkpoint.schema_file(rows.plan.operator_id, rows.plan.store_name): write_schema_v2(
                rows.plan.key_schema, rows.plan.value_schema
            )
            for rows in self.stores
            if rows.writes_schema
        }

    def commit_entry(self) -> dict[str, Any]:
        """The destination's commit entry of the rewritten batch: the source's, with (format 2) the new
        partitions' unique ids, one list per partition holding each store's id in Spark's store order."""
        _, entry = self.checkpoint.commit_entry(self.batch_id)
        entry = dict(entry)
        entry.pop(UNIQUE_IDS, None)  # format 1 lists none; format 2 the new ones
        if self.unique_ids:
            by_operator: dict[int, list[StoreRows]] = {}
            for rows in self.stores:
                by_operator.setdefault(rows.plan.operator_id, []).append(rows)
            ids: dict[str, list[list[str]]] = {}
            for op, stores in by_operator.items():
                stores = sorted(
                    stores,
                    key=lambda r: JOIN_STORES.index(r.plan.store_name) if r.plan.store_name in JOIN_STORES else 0,
                )
                ids[str(op)] = [
                    [self.unique_id(r.plan, pid) or "" for r in stores]
                    for pid in stores[0].target_partitions(self.new_partitions)
                ]
            entry[UNIQUE_IDS] = ids
        return entry

    @property
    def offset_confs(self) -> dict[str, str]:
        """The confs the destination's offset log records differently from the source's."""
        confs = {CONF_SHUFFLE_PARTITIONS: str(self.new_partitions)}
        if self.provider != self.source_provider:
            confs[CONF_PROVIDER] = PROVIDER_NAMES[self.provider]
        return {**offset_log_confs(self.conf_changes), **confs}

    def report(self, destination: str, dry_run: bool) -> RewriteReport:
        return RewriteReport(
            self.checkpoint.location,
            destination,
            self.batch_id,
            self.provider,
            self.old_partitions,
            self.new_partitions,
            source_provider=self.source_provider,
            dry_run=dry_run,
            confs=[c.summary() for c in self.conf_changes],
        )


def plan_rewrite(source: Storage | CheckpointDir, options: RewriteOptions | None = None) -> RewritePlan:
    """Check that ``source`` can be rewritten as ``options`` ask and plan every store; reads logs and
    metadata only. ``source``: its storage, or a view of it with the schemas of a store without a schema
    file (:func:`~state_reader.core.planner.give_schemas`)."""
    options = options or RewriteOptions()
    # every conf asked checked first (names, values); the shorthands are two of them
    asked = asked_confs(options.confs, options.num_partitions, options.provider)
    num_partitions = int(asked[CONF_SHUFFLE_PARTITIONS]) if CONF_SHUFFLE_PARTITIONS in asked else None
    provider = provider_name(asked[CONF_PROVIDER]) if CONF_PROVIDER in asked else None
    batch_id = options.batch_id
    cp = source if isinstance(source, CheckpointDir) else CheckpointDir(source)
    cp.require_checkpoint()
    committed = cp.committed_batches
    latest = cp.latest_committed_batch()
    planned = offset_batches(cp)
    if planned and planned[-1] > latest and not options.allow_uncommitted:
        raise UncommittedBatchError(
            f"batch {planned[-1]} of {cp.location} was planned (offsets/{planned[-1]}) but never committed: its "
            "query is running or stopped in the middle of it. A query resumed from a rewrite would plan that batch "
            "again, which can duplicate or lose output in exactly-once sinks. Stop the query cleanly (or let it "
            "finish the batch) and rewrite again, or pass allow_uncommitted=True to rewrite the last committed "
            f"batch ({latest}) anyway",
            path=cp.location,
        )
    batch = latest if batch_id is None else batch_id
    if batch not in committed:
        cp.require_committed(batch)
    conf = cp.offset_conf(batch)
    old_partitions = cp.num_partitions(conf)
    new_partitions = old_partitions if num_partitions is None else num_partitions
    # the provider each read is planned with: recorded, else told by the state files (not assumed HDFS)
    source_class = detect_provider(cp, conf.get(CONF_PROVIDER), cp.operator_ids[0] if cp.operator_ids else None)
    source_provider = provider_name(source_class) or source_class
    target_provider = source_provider if provider is None else provider.lower()
    moving = target_provider != source_provider
    # a checkpoint in format 2 moves to the HDFS-backed provider when it is asked into format 1 on the way
    to_format_1 = asked.get(CONF_CHECKPOINT_FORMAT) == "1"

    stores: list[StoreRows] = []
    operator_names: dict[int, str | None] = {}
    for op in cp.operator_ids:
        meta = cp.operator_metadata(op, batch)
        name = meta.operator_name if meta is not None else None
        operator_names[op] = name
        families = operators.is_transform_with_state(name) or operators.join_in_column_families(meta)
        # a join split out of its column families into format 1 or 2 may move to the HDFS-backed provider
        split = operators.join_in_column_families(meta) and asked.get(CONF_JOIN_FORMAT) in SEPARATE_STORES
        if families and target_provider == "hdfs" and not split:
            raise UnsupportedOptionError(
                f"operator {op} ({name}) of {cp.location} keeps its state in RocksDB column families "
                "(transformWithState, join state formats 3 and 4), which Spark runs on the RocksDB provider only; "
                "it cannot move to the HDFS-backed provider (a join can, rewritten into format 2 on the way: "
                f"{CONF_JOIN_FORMAT}=2)",
                path=cp.location,
            )
        if families:
            assert meta is not None
            plan = store_plan(cp, batch, op, **_family_plan_options(cp, meta))
            _require_rewritable(cp, plan, batch, moving, to_format_1)
            stores.append(FamilyStoreRows(plan, meta))
            continue
        for store_name in store_names_on_disk(cp, op):
            plan = store_plan(cp, batch, op, store_name)
            _require_rewritable(cp, plan, batch, moving, to_format_1)
            if moving and target_provider == "rocksdb" and meta is None and plan.num_cols_prefix_key:
                # without operator metadata (Spark 3.5) Spark's RocksDB store reads keys with the no-prefix
                # encoder, so the prefix-key layout a session window needs there fails its key validation
                raise UnsupportedOptionError(
                    f"operator {op} of {cp.location} (a session window written by Spark 3.5, without operator "
                    "metadata) cannot move to RocksDB: Spark restarts such a store on RocksDB with the wrong key "
                    "encoder. Rewrite it on the HDFS-backed provider",
                    path=cp.location,
                )
            if name is None:
                operator_names[op] = operators.infer_operator_name(store_names_on_disk(cp, op), plan.value_schema)
            stores.append(StoreRows(plan, name in SINGLE_PARTITION_OPERATORS or plan.partition_key_fields == 0))
    changes = plan_conf_changes(cp, batch, conf, asked, operator_names, source_provider, target_provider)
    if options.transform is not None:
        stores = _transformed(cp, batch, stores, options.transform)
    stores = migrate_stores(stores, changes, operator_names, target_provider)
    return RewritePlan(
        cp,
        batch,
        old_partitions,
        new_partitions,
        source_provider,
        target_provider,
        stores,
        unique_ids=names_files_by_unique_id(cp, batch, changes),
        conf_changes=changes,
        nullable_operators=nullable_operators(changes, operator_names),
    )


def _transformed(
    cp: CheckpointDir, batch: int, stores: list[StoreRows], transform: Transform | dict[int, Transform]
) -> list[StoreRows]:
    """``stores`` with the transformed operators' store wrapped in :class:`TransformedStoreRows`."""
    operator_ids = sorted({rows.plan.operator_id for rows in stores})
    if callable(transform):
        if len(operator_ids) != 1:
            raise InvalidOptionError(
                f"{cp.location} has {len(operator_ids)} stateful operators ({operator_ids}); pass transform as "
                "{operator_id: function} to say which one it changes"
            )
        transform = {operator_ids[0]: transform}
    unknown = sorted(set(transform) - set(operator_ids))
    if unknown:
        raise InvalidOptionError(
            f"transform names operators {unknown}, which {cp.location} does not have "
            f"(its stateful operators: {operator_ids})"
        )
    out = []
    for rows in stores:
        fn = transform.get(rows.plan.operator_id)
        if fn is None:
            out.append(rows)
            continue
        plan = rows.plan
        where = f"operator {plan.operator_id} of {cp.location}"
        if isinstance(rows, FamilyStoreRows) or sum(r.plan.operator_id == plan.operator_id for r in stores) != 1:
            raise UnsupportedOptionError(
                f"{where} keeps several stores (a join, transformWithState); transform "
                "supports operators with one store for now",
                path=cp.location,
            )
        if plan.store_conf.row_checksum or plan.store_conf.avro:
            raise UnsupportedOptionError(
                f"{where} keeps row checksums or Avro-encoded state; transform does not support those yet",
                path=cp.location,
            )
        meta = cp.operator_metadata(plan.operator_id, batch)
        store = meta.store(plan.store_name) if meta is not None else None
        if store is not None and store.schema_file_paths:
            raise UnsupportedOptionError(
                f"{where} keeps its schema in schema v3 files; transform does not support those yet", path=cp.location
            )
        out.append(TransformedStoreRows(rows, fn))
    return out


def _family_plan_options(cp: CheckpointDir, meta: OperatorMetadata) -> dict[str, Any]:
    """Read options that plan a store with column families: its first variable, or its first join family."""
    if operators.is_transform_with_state(meta.operator_name):
        names = user_variables(meta)
        return {"state_var_name": names[0]} if names else {"read_registered_timers": True}
    names = join_column_families(cp, meta)
    return {"store_name": next((n for n in names if n.endswith("-keyToNumValues")), names[0])}


def _require_rewritable(
    cp: CheckpointDir, plan: StateReadPlan, batch: int, moving: bool, to_format_1: bool = False
) -> None:
    """Refuse what the rewrite does not support yet, before anything is written."""
    if moving and cp.names_files_by_unique_id(batch) and not to_format_1:
        raise UnsupportedOptionError(
            f"{cp.location} uses RocksDB checkpoint format 2, which the HDFS-backed provider does not support "
            "(Spark refuses checkpointFormatVersion 2 with it); it cannot move to the HDFS-backed provider "
            f"unless it is rewritten into format 1 on the way ({CONF_CHECKPOINT_FORMAT}=1)",
            path=cp.location,
        )
    if moving and plan.store_conf.row_checksum:
        raise UnsupportedOptionError(
            f"{cp.location} keeps row checksums ({CONF_ROW_CHECKSUM}); moving it to another provider "
            "is not supported yet",
            path=cp.location,
        )
    if moving and plan.store_conf.avro:
        raise UnsupportedOptionError(
            f"{cp.location} encodes its state with Avro; moving it to another provider is not supported yet",
            path=cp.location,
        )
