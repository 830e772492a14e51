"""Plan a state read: validate the options against a checkpoint, find schemas, parse confs.

Both fronts (the Spark data source and the Spark-free functions) go through
:func:`plan_state_read`, so they validate and resolve identically. Planning
reads only logs, metadata and schema files; the state files are read when
:mod:`state_reader.core.decode` carries the plan out, wherever that runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from state_reader.core.options import (
    BATCH_ID,
    CHANGE_END_BATCH_ID,
    CHANGE_START_BATCH_ID,
    NO_JOIN_SIDE,
    READ_REGISTERED_TIMERS,
    SNAPSHOT_START_BATCH_ID,
    STATE_VAR_NAME,
    StateStoreOptions,
    check_given_schemas,
    from_kwargs,
)
from state_reader.errors import (
    InvalidOptionError,
    MissingSchemaFileError,
    MissingStateFileError,
    NoPartitionError,
    RequiredOptionError,
    SchemaReadError,
)
from state_reader.formats.schema_files import ColumnFamilySchema, read_schema_v1v2
from state_reader.formats.spark_types import StructType, parse_ddl
from state_reader.io.storage import Storage
from state_reader.model import operators
from state_reader.model.checkpoint import (
    DEFAULT_STORE,
    JOIN_STORES,
    JOIN_V4_STORES,
    MATCHED_FIELD,
    CheckpointDir,
    OperatorMetadata,
    join_side_stores,
    parse_state_file_name,
)
from state_reader.model.conf import CONF_CHANGELOG, HDFS_PROVIDER, ROCKSDB_PROVIDER, StoreConf, conf_flag
from state_reader.model.plan import JoinSidePlan, StateReadPlan
from state_reader.model.state_variables import (
    MULTI_VALUE,
    VALUE,
    StateVariable,
    family_schemas,
    plan_variable,
    variables_described,
)


def detect_provider(cp: CheckpointDir, recorded: str | None, operator_id: int | None) -> str:
    """The provider class that wrote an operator's state: the one recorded in the offset log, else by file
    names; Spark's default (HDFS-backed) when nothing tells (no operator, or no state files)."""
    if recorded:
        return recorded
    # no conf recorded (very old checkpoints): the file names tell
    for pid in [] if operator_id is None else cp.partition_ids(operator_id)[:1]:
        base = f"state/{operator_id}/{pid}"
        names = cp.storage.list_names(base) or []
        # join formats 1/2 keep their files in one sub-directory per store
        for store in [n for n in names if n in JOIN_STORES]:
            names += cp.storage.list_names(f"{base}/{store}") or []
        if any(name.endswith((".zip", ".changelog")) for name in names):
            return ROCKSDB_PROVIDER
    return HDFS_PROVIDER


# what the error for a store without a schema file says to do; Spark's names, which each front turns into its own
# (core/options.in_python_names, fronts/cli_flags.in_flags): every reader and command that reads a store takes them
GIVE_SCHEMAS = (
    "give the key and value schemas as DDL with keySchema and valueSchema, e.g. "
    "keySchema='user STRING' valueSchema='count BIGINT'"
)


def store_schema(cp: CheckpointDir, operator_id: int, store_name: str) -> tuple[StructType, StructType]:
    """(key, value) schema of one store, from its v1/v2 schema file."""
    rel = cp.schema_file(operator_id, store_name)
    shown = cp.storage.display(rel)
    try:
        data = cp.read_once(rel)
    except FileNotFoundError:
        _require_operator(cp, operator_id, store_name, shown)
        stores = store_names_on_disk(cp, operator_id)
        if store_name in stores:  # the state is there, its schema file is not
            raise MissingSchemaFileError(
                f"Failed to read the state schema of operator {operator_id}, store '{store_name}': {shown} does "
                "not exist (Spark writes schema files from 3.1 on: state that no query of Spark 3.1 or later ran "
                f"on has none, and Spark's reader cannot read it). To read this store, {GIVE_SCHEMAS}",
                path=shown,
            ) from None
        join = any(s in JOIN_STORES for s in stores)
        hint = "; read one with storeName, or the buffered rows of a side with joinSide=left|right" if join else ""
        raise SchemaReadError(
            f"Failed to read the state schema of operator {operator_id}, store '{store_name}': "
            f"{shown} does not exist (stores of this operator: {', '.join(stores) or 'none'}){hint}",
            path=shown,
        ) from None
    return read_schema_v1v2(data, shown)


def given_schema(
    cp: CheckpointDir, operator_id: int, store_name: str, key: str, value: str
) -> tuple[StructType, StructType]:
    """(key, value) schema of one store as the options ``keySchema`` and ``valueSchema`` give them, in place
    of its schema file; the store must be on disk."""
    shown = cp.storage.display(cp.schema_file(operator_id, store_name))
    _require_operator(cp, operator_id, store_name, shown)
    stores = store_names_on_disk(cp, operator_id)
    if stores and store_name not in stores:
        join = any(s in JOIN_STORES for s in stores)
        raise InvalidOptionError(
            f"Invalid value for option 'storeName': operator {operator_id} of {cp.location} has no store "
            f"'{store_name}' (stores: {', '.join(stores)})"
            + (
                "; keySchema and valueSchema give the schemas of one store of a join: read each with storeName"
                if join
                else ""
            ),
            path=shown,
        )
    return parse_ddl(key), parse_ddl(value)


def give_schemas(
    cp: CheckpointDir,
    key_schema: str | None,
    value_schema: str | None,
    operator_id: int | None = None,
    store_name: str | None = None,
) -> CheckpointDir:
    """``cp``, whose plans read one store with the schemas given (DDL) in place of its schema file: the store
    ``operator_id`` and ``store_name`` name (operator 0 and store ``default`` unless given, as in a read of one
    store). How the commands that read several stores (``stats``, ``doctor``, ``verify``, ``rewrite``) take
    ``keySchema`` and ``valueSchema``; checked here, before anything is read. Neither given: ``cp`` as it is."""
    key, value = check_given_schemas(key_schema, value_schema)
    if key is None or value is None:
        return cp
    cp.require_checkpoint()  # a location that is no checkpoint fails as such, not for want of an operator
    op = 0 if operator_id is None else operator_id
    store = DEFAULT_STORE if store_name is None else store_name
    given_schema(cp, op, store, key, value)  # the operator and the store are on disk
    metadata = cp.operator_metadata(op, None)
    name = metadata.operator_name if metadata is not None else None
    if operators.is_transform_with_state(name) or _join_families(cp, metadata) is not None:
        raise _families_keep_schemas(cp, op, name)
    cp.given_schemas[(op, store)] = (key, value)
    return cp


def _families_keep_schemas(cp: CheckpointDir, operator_id: int, operator_name: str | None) -> InvalidOptionError:
    return InvalidOptionError(
        f"Invalid value for option 'keySchema': operator {operator_id} ({operator_name}) of {cp.location} "
        "keeps its stores as column families whose schemas are in its schema files (state schema v3); "
        "keySchema and valueSchema stand in for the schema file of a store of its own (schema v1 and v2)"
    )


def _require_operator(cp: CheckpointDir, operator_id: int, store_name: str, shown: str) -> None:
    if operator_id not in cp.operator_ids:
        known = ", ".join(map(str, cp.operator_ids)) or "none"
        raise SchemaReadError(
            f"Failed to read the state schema of operator {operator_id}, store '{store_name}': "
            f"the checkpoint {cp.location} has no state for operator {operator_id} "
            f"(operators: {known})",
            path=shown,
        )


def store_names_on_disk(cp: CheckpointDir, operator_id: int) -> list[str]:
    names = cp.storage.list_names(f"state/{operator_id}/0") or []
    stores = [n for n in names if n in JOIN_STORES]
    if "_metadata" in names or any(n.endswith((".delta", ".snapshot", ".zip", ".changelog")) for n in names):
        stores.insert(0, DEFAULT_STORE)
    return stores


def store_read_options(
    operator_id: int,
    store_name: str,
    batch_id: int | None,
    storage_options: dict[str, Any] | None,
    operator_name: str | None,
) -> dict[str, Any]:
    """The read options (snake_case) of one store; for transformWithState, of one of its variables or,
    for its timer family's name (``$...``), its timers."""
    options: dict[str, Any] = {
        "operator_id": operator_id,
        "store_name": store_name,
        "batch_id": batch_id,
        "storage_options": storage_options,
    }
    if operators.is_transform_with_state(operator_name):
        options.pop("store_name")
        if store_name.startswith("$"):  # the timer family
            options["read_registered_timers"] = True
        else:
            options["state_var_name"] = store_name
    return options


def plan_store_read(
    cp: CheckpointDir,
    operator_id: int,
    store_name: str,
    batch_id: int | None = None,
    operator_name: str | None = None,
    **options: Any,
) -> StateReadPlan:
    """The plan of one store of an open checkpoint at ``batch_id`` (default: the latest committed), as
    :func:`store_read_options` names it; ``options``: more read options (snake_case), which win."""
    kwargs = {
        **store_read_options(operator_id, store_name, batch_id, cp.storage.storage_options, operator_name),
        **options,
    }
    return plan_state_read(from_kwargs(cp.storage.url, kwargs), cp)


def plan_state_read(
    options: Mapping[str, Any] | StateStoreOptions, checkpoint: CheckpointDir | None = None
) -> StateReadPlan:
    """Validate ``statestore`` options against a checkpoint and plan the read.

    ``checkpoint``: an open view of the checkpoint the options name, shared by a
    caller that plans many reads of it (its logs and schema files are read once).
    """
    opts = options if isinstance(options, StateStoreOptions) else StateStoreOptions.parse(options)
    cp = checkpoint or CheckpointDir(Storage(opts.path, opts.storage_options, verify_checksums=opts.verify_checksums))
    storage = cp.storage
    # remote: the operator's state (one recursive listing) and the offset log listed while the commit log is read
    storage.list_ahead([f"state/{opts.operator_id}", "offsets"])
    if opts.read_change_feed:
        batch_id = opts.change_end_batch_id
        if batch_id is None:
            batch_id = cp.latest_committed_batch()
    else:
        batch_id = opts.batch_id if opts.batch_id is not None else cp.latest_committed_batch()
    cp.require_committed(batch_id, CHANGE_END_BATCH_ID if opts.read_change_feed else BATCH_ID)
    cp.fetch_ahead(batch_id, opts.operator_id)  # logs, metadata and schemas at once on an object store
    if opts.change_start_batch_id is not None and opts.change_start_batch_id > batch_id:  # a change feed
        # an end the caller gave was checked against the start with the options; this one defaulted
        have = cp.committed_batches
        raise InvalidOptionError(
            f"Invalid value for option 'changeStartBatchId': batch {opts.change_start_batch_id} is after the "
            f"latest committed batch of {cp.location} ({batch_id}), where the change feed ends unless "
            f"changeEndBatchId says otherwise (committed batches: {have[0]}..{have[-1]})"
        )
    if opts.snapshot_start_batch_id is not None and opts.snapshot_start_batch_id > batch_id:
        raise InvalidOptionError(
            f"Invalid value for option 'snapshotStartBatchId': value should be less than or equal to {batch_id}"
        )

    metadata = cp.operator_metadata(opts.operator_id, batch_id)
    store_meta = metadata.store(opts.store_name) if metadata else None
    operator_name = metadata.operator_name if metadata and store_meta else None
    if opts.state_var_name is not None or opts.read_registered_timers:
        if not operators.is_transform_with_state(operator_name):
            # named as given: a read of timers names its own option, not the variable's
            option, what = (
                (STATE_VAR_NAME, "Providing state variable names")
                if opts.state_var_name is not None
                else (READ_REGISTERED_TIMERS, "Reading registered timers")
            )
            raise InvalidOptionError(
                f"Invalid value for option '{option}': {what} is only supported "
                f"with the transformWithState operator. Found operator={operator_name} "
                f"(operator {opts.operator_id} of {cp.location})."
            )
    elif metadata is not None and operators.is_transform_with_state(operator_name):
        raise RequiredOptionError(
            f"'stateVarName' must be specified to read operator {opts.operator_id} ({operator_name}) "
            f"of {cp.location}: {variables_described(metadata)}."
        )

    join = None
    variable = None
    join_families = _join_families(cp, metadata)
    store_name = opts.store_name
    given = (
        (opts.key_schema, opts.value_schema) if opts.key_schema is not None and opts.value_schema is not None else None
    )
    if given is not None and (operators.is_transform_with_state(operator_name) or join_families is not None):
        raise _families_keep_schemas(cp, opts.operator_id, operator_name)
    if (
        given is None
        and opts.state_var_name is None
        and not opts.read_registered_timers
        and opts.join_side == NO_JOIN_SIDE
    ):
        # a walk over several stores: the schemas given for this one (give_schemas), checked when given
        given = cp.given_schemas.get((opts.operator_id, opts.store_name))
    if operators.is_transform_with_state(operator_name) and metadata is not None and store_meta is not None:
        variable = plan_variable(
            cp, metadata, store_meta, opts.state_var_name, opts.read_registered_timers, opts.flatten_collection_types
        )
        key_schema, value_schema = variable.grouping_key, variable.family.value_schema
    elif join_families is not None:
        # join formats 3 and 4: the stores are column families of the default store
        store_name = DEFAULT_STORE
        side_rows = join_side_stores(opts.join_side, v4=True)[0] if opts.join_side != NO_JOIN_SIDE else None
        if side_rows is not None and side_rows in join_families.names:
            # format 4: the side's rows are the values of keyWithTsToValues, one element per row
            variable = replace(join_families(side_rows), hidden=(MATCHED_FIELD,))
            key_schema, value_schema = variable.grouping_key, variable.shown_value_schema
        elif opts.join_side != NO_JOIN_SIDE:
            count, rows = (join_families(name) for name in join_side_stores(opts.join_side))
            join = JoinSidePlan(
                opts.join_side,
                count.family.key_schema,
                count.family.value_schema,
                rows.family.key_schema,
                rows.family.value_schema,
                (count, rows),
            )
            key_schema, value_schema = join.count_key_schema, join.shown_value_schema
        else:
            variable = join_families(opts.store_name)
            key_schema, value_schema = variable.family.key_schema, variable.family.value_schema
    elif opts.join_side != NO_JOIN_SIDE:
        join = _join_side_plan(cp, opts.operator_id, opts.join_side)
        key_schema, value_schema = join.count_key_schema, join.shown_value_schema
    elif given is not None:
        key_schema, value_schema = given_schema(cp, opts.operator_id, opts.store_name, *given)
    else:
        key_schema, value_schema = store_schema(cp, opts.operator_id, opts.store_name)

    conf = cp.offset_conf(batch_id)
    store_conf = StoreConf.parse(conf)
    long_slots: tuple[str, ...] = ()
    if variable is None and join is None:
        long_slots = operators.fmgws_long_slots(operator_name, conf, value_schema)
        if opts.timeout_timestamp_as_long:  # shown as the longs they hold, not as Spark types them
            value_schema, long_slots = operators.widened(value_schema, long_slots), ()
    if metadata is not None and store_meta is not None and metadata.version == 1:
        num_cols_prefix_key = store_meta.num_cols_prefix_key
    else:  # no metadata (written before Spark 4.0): recognise session windows by their schema
        inferred = operators.infer_operator_name([opts.store_name], value_schema)
        num_cols_prefix_key = operators.infer_num_cols_prefix_key(inferred, key_schema)
    if given is not None and num_cols_prefix_key >= len(key_schema.fields):
        raise InvalidOptionError(
            f"Invalid value for option 'keySchema': {given[0]!r} has {len(key_schema.fields)} fields, and operator "
            f"{opts.operator_id} of {cp.location} is a session window, whose key is its first "
            f"{num_cols_prefix_key} fields (the grouping) and a session's start time after them"
        )
    partitions = cp.partition_ids(opts.operator_id)
    if not partitions:
        raise NoPartitionError(
            f"No partition directory found under {storage.display(f'state/{opts.operator_id}')}",
            path=storage.display(f"state/{opts.operator_id}"),
        )
    snapshot_start_version = None
    if opts.snapshot_start_batch_id is not None:
        if opts.snapshot_partition_id not in partitions:
            raise InvalidOptionError(
                f"Invalid value for option 'snapshotPartitionId': partition {opts.snapshot_partition_id} "
                f"does not exist under {storage.display(f'state/{opts.operator_id}')} "
                f"(partitions: {', '.join(map(str, partitions))})"
            )
        partitions = [opts.snapshot_partition_id]
        snapshot_start_version = opts.snapshot_start_batch_id + 1
    provider = detect_provider(cp, store_conf.provider_class, opts.operator_id)
    if opts.change_start_batch_id is not None:  # a change feed
        _require_retained_start(
            cp,
            opts.change_start_batch_id,
            CHANGE_START_BATCH_ID,
            cp.store_dir(opts.operator_id, partitions[0], store_name),
        )
    if opts.snapshot_start_batch_id is not None:
        _require_retained_start(
            cp,
            opts.snapshot_start_batch_id,
            SNAPSHOT_START_BATCH_ID,
            cp.store_dir(opts.operator_id, partitions[0], store_name),
        )
    if provider == ROCKSDB_PROVIDER:
        replays = snapshot_start_version is not None and snapshot_start_version < batch_id + 1
        if (opts.read_change_feed and not opts.change_feed_from_snapshots) or replays:
            # a join side of formats 1 and 2 reads its side's stores; the first tells for both
            checked = join.store_name(0) if join is not None and join.families is None else store_name
            _require_changelogs(
                cp,
                cp.store_dir(opts.operator_id, partitions[0], checked),
                conf,
                "a change feed"
                if opts.read_change_feed
                else f"rebuilding version {batch_id + 1} from the snapshot of version {snapshot_start_version}",
            )
    return StateReadPlan(
        checkpoint=cp,
        operator_id=opts.operator_id,
        store_name=store_name,
        batch_id=batch_id,
        provider_class=provider,
        partitions=partitions,
        key_schema=key_schema,
        value_schema=value_schema,
        conf=dict(conf),
        store_conf=store_conf,
        num_cols_prefix_key=num_cols_prefix_key,
        snapshot_start_version=snapshot_start_version,
        change_start_batch_id=opts.change_start_batch_id if opts.read_change_feed else None,
        join=join,
        variable=variable,
        change_feed_from_snapshots=opts.change_feed_from_snapshots,
        value_long_slots=long_slots,
        num_partitions=store_meta.num_partitions if store_meta is not None else cp.num_partitions(conf),
        schemas_given=given,
    )


def keeps_changelogs(cp: CheckpointDir, store_dir: str, conf: Mapping[str, str]) -> bool:
    """Whether a RocksDB store keeps changelogs: its query ran with changelog checkpointing (the offset
    log's conf), or one partition's directory ``store_dir`` holds a changelog file (one listing)."""
    if conf_flag(conf, CONF_CHANGELOG):
        return True
    names = cp.storage.list_sizes(store_dir) or {}
    return any(name.endswith(".changelog") for name in names)


def snapshots_give_the_change_feed(plan: StateReadPlan) -> bool:
    """Whether the change feed of the store ``plan`` reads (one store: not a join side) has to be computed
    by comparing snapshots: a RocksDB store without changelogs, its query run without changelog
    checkpointing (Spark's default)."""
    if plan.provider_class != ROCKSDB_PROVIDER or not plan.partitions:
        return False
    return not keeps_changelogs(plan.checkpoint, plan.store_dir(plan.partitions[0]), plan.conf)


def _require_changelogs(cp: CheckpointDir, store_dir: str, conf: Mapping[str, str], what: str) -> None:
    """Refuse, while planning, a RocksDB read that needs changelogs of a store written without them.

    Without changelog checkpointing a RocksDB store has snapshots only; a task
    would find that out file by file, and Spark shows a task's error under a
    generic first line. One listing of one partition tells.
    """
    if keeps_changelogs(cp, store_dir, conf):
        return
    remedy = (
        "the option changeFeedFromSnapshots=true computes one by comparing consecutive snapshots"
        if what == "a change feed"
        else "read the batch without snapshotStartBatchId"
    )
    raise MissingStateFileError(
        f"{what} needs changelog files, and {cp.storage.display(store_dir)} has none: the query ran without "
        f"changelog checkpointing ({CONF_CHANGELOG}), so its RocksDB store keeps snapshots only; {remedy}",
        path=cp.storage.display(store_dir),
    )


def _require_retained_start(cp: CheckpointDir, start: int, option: str, store_dir: str) -> None:
    """Refuse, while planning, a read that starts at a batch older than the oldest in the commit log.

    The same rule as for ``batchId`` (``CheckpointDir.require_committed``) and as Spark's reader: a batch
    without its commit entry is not read, even while state files of its version are still on disk. The
    message says so when they are, so nobody takes the refusal for lost data.
    """
    committed = cp.committed_batches
    if not committed or start >= committed[0]:
        return
    names = cp.storage.list_names(store_dir) or []
    versions = [parsed[0] for parsed in map(parse_state_file_name, names) if parsed is not None]
    kept = [v for v in versions if v <= start + 1]
    why = (
        f"; {cp.storage.display(store_dir)} still holds state files of versions from {min(kept)} "
        f"(batch {min(kept) - 1}), which nothing in the commit log vouches for any longer"
        if kept
        else ""
    )
    raise cp.not_retained(start, option, why)


@dataclass
class _JoinFamilies:
    """The join stores of format 3 or 4, kept as column families of the default store."""

    operator_id: int
    schemas: dict[str, ColumnFamilySchema]

    @property
    def names(self) -> list[str]:
        return [n for n in (*JOIN_STORES, *JOIN_V4_STORES) if n in self.schemas]

    def __call__(self, name: str) -> StateVariable:
        if name not in self.names:
            raise SchemaReadError(
                f"Failed to read the state schema of store '{name}': join operator {self.operator_id} keeps "
                f"its state in column families {', '.join(self.names)}; read one with storeName, or use joinSide",
                path=f"state/{self.operator_id}/_stateSchema",
            )
        # format 4 values are lists of rows (several input rows can share a key and event time)
        kind = MULTI_VALUE if name in JOIN_V4_STORES else VALUE
        return StateVariable(name, kind, True, self.schemas[name])


def join_column_families(cp: CheckpointDir, metadata: OperatorMetadata | None) -> list[str]:
    """The join stores kept as column families (join formats 3 and 4), else an empty list."""
    families = _join_families(cp, metadata)
    return families.names if families is not None else []


def _join_families(cp: CheckpointDir, metadata: OperatorMetadata | None) -> _JoinFamilies | None:
    """For join formats 3 and 4 (stores as column families): the families, else None."""
    if not operators.join_in_column_families(metadata):
        return None
    default = metadata.store(DEFAULT_STORE)
    if default is None:
        return None
    return _JoinFamilies(metadata.operator_id, family_schemas(cp, metadata.operator_id, default))


def _join_side_plan(cp: CheckpointDir, operator_id: int, side: str) -> JoinSidePlan:
    count_store, row_store = join_side_stores(side)
    if not cp.storage.exists(cp.schema_file(operator_id, count_store)):
        rel = cp.schema_file(operator_id, count_store)
        raise SchemaReadError(
            f"Failed to read the state schema for joinSide={side}: operator {operator_id} of "
            f"{cp.location} holds no stream-stream join state ({cp.storage.display(rel)} does not exist)",
            path=cp.storage.display(rel),
        )
    count_key, count_value = store_schema(cp, operator_id, count_store)
    row_key, row_value = store_schema(cp, operator_id, row_store)
    return JoinSidePlan(side, count_key, count_value, row_key, row_value)
