"""The Spark-free reading functions of the public API: ``read_state``, ``scan_state``, ``read_metadata``,
``diagnose``, ``verdicts``.

``state_reader`` re-exports them; the fronts that build on them (the notebook
object) import them from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from state_reader.core.live import GONE as _GONE
from state_reader.core.live import cleaned_up_during_read as _cleaned_up_during_read
from state_reader.core.live import read_consistently as _read_consistently
from state_reader.core.metadata import read_metadata_table as _read_metadata_table
from state_reader.core.options import from_kwargs as _from_kwargs
from state_reader.core.options import python_api as _public_api
from state_reader.core.planner import give_schemas as _give_schemas
from state_reader.core.planner import plan_state_read as _plan_state_read
from state_reader.core.rewrite import rewrite_checkpoint as _rewrite_checkpoint
from state_reader.core.rewrite.edit import FrameRows as _FrameRows
from state_reader.core.rewrite.edit import StoreEdit as _StoreEdit
from state_reader.core.rewrite.plan import RewriteOptions as _RewriteOptions
from state_reader.core.rewrite.report import RewriteReport
from state_reader.core.rewrite.rows import Transform
from state_reader.core.rewrite.spark_mover import SparkRows as _SparkRows
from state_reader.core.scan import bind_key_filter as _bind_key_filter
from state_reader.core.scan import iter_batches as _iter_batches
from state_reader.core.scan import read_table as _read_table
from state_reader.core.scan import result_metadata as _result_metadata
from state_reader.core.verdicts import read_verdicts as _read_verdicts
from state_reader.core.verdicts import store_selectors
from state_reader.errors import InvalidOptionError as _InvalidOptionError
from state_reader.errors import unexpected_errors_as_ours as _unexpected_errors_as_ours
from state_reader.formats.flatten import renamed_batch as _renamed_batch
from state_reader.formats.flatten import unique_schema as _unique_schema
from state_reader.formats.flatten import with_unique_field_names
from state_reader.inspect.doctor import Diagnosis
from state_reader.inspect.doctor import diagnose as _diagnose
from state_reader.io.destination import Destination as _Destination
from state_reader.io.integrity import with_checksum_report as _with_checksum_report
from state_reader.io.storage import Storage as _Storage
from state_reader.model.checkpoint import CheckpointDir

if TYPE_CHECKING:
    from collections.abc import Iterator

    from state_reader.core.key_filter import KeyFilter, KeyFilterSpec
    from state_reader.model.plan import StateReadPlan


@_public_api
@_with_checksum_report  # one warning for all the files read
def read_state(
    checkpoint: str,
    *,
    batch_id: int | None = None,
    operator_id: int | None = None,
    store_name: str | None = None,
    join_side: str | None = None,
    read_change_feed: bool | None = None,
    change_start_batch_id: int | None = None,
    change_end_batch_id: int | None = None,
    snapshot_start_batch_id: int | None = None,
    snapshot_partition_id: int | None = None,
    state_var_name: str | None = None,
    read_registered_timers: bool | None = None,
    flatten_collection_types: bool | None = None,
    change_feed_from_snapshots: bool | None = None,
    timeout_timestamp_as_long: bool | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    storage_options: dict[str, Any] | None = None,
    verify_checksums: bool | None = None,
    key_filter: KeyFilterSpec | None = None,
    exact_schema: bool = False,
) -> pa.Table:
    """The state of one store as a ``pyarrow.Table``: columns ``key``, ``value``, ``partition_id``.

    The options are those of ``spark.read.format("statestore")`` in snake_case,
    with the same defaults (None = not given): the latest committed batch,
    operator 0, store ``default``. ``checkpoint`` is a local path or an fsspec
    URL (``s3://``, ``s3a://``, ``gs://``, ``abfs://``, ``file://``);
    ``storage_options`` go to fsspec. ``verify_checksums`` (default on) checks every
    file against its ``.crc`` sidecars where there are any.

    ``key_schema`` and ``value_schema`` (DDL, both or neither, e.g. ``"user STRING, window
    STRUCT<start: TIMESTAMP, end: TIMESTAMP>"``) read a store without a schema file (written by
    Spark before 3.1, or lost); given, they are used instead of the store's schema file, and a
    row that cannot fit them raises :class:`~state_reader.errors.RowDecodeError` naming them.

    ``key_filter`` keeps only matching keys, checked partition by partition as
    they are decoded: a callable taking the keys (``pyarrow.StructArray``) and
    returning a boolean mask, or an expression such as
    ``"user = 'ann' and region_id > 3"`` (syntax in :mod:`state_reader.core.key_filter`).

    Struct fields whose names repeat (aggregation buffers: ``count, sum, sum,
    count``) come back renamed ``sum#2``, ``count#2``, so that ``to_pandas()`` and
    ``to_pylist()`` keep every field; ``exact_schema=True`` keeps Spark's own
    names, exactly the schema the data source gives.
    """
    options = dict(locals())
    path = options.pop("checkpoint")
    key_filter = options.pop("key_filter")
    exact = options.pop("exact_schema")
    table = _read_consistently(
        _from_kwargs(path, options), lambda plan: _read_table(plan, key_filter=key_filter, show_progress=False)
    )
    return table if exact else with_unique_field_names(table)


@_public_api
def scan_state(
    checkpoint: str,
    *,
    batch_id: int | None = None,
    operator_id: int | None = None,
    store_name: str | None = None,
    join_side: str | None = None,
    read_change_feed: bool | None = None,
    change_start_batch_id: int | None = None,
    change_end_batch_id: int | None = None,
    snapshot_start_batch_id: int | None = None,
    snapshot_partition_id: int | None = None,
    state_var_name: str | None = None,
    read_registered_timers: bool | None = None,
    flatten_collection_types: bool | None = None,
    change_feed_from_snapshots: bool | None = None,
    timeout_timestamp_as_long: bool | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    storage_options: dict[str, Any] | None = None,
    verify_checksums: bool | None = None,
    key_filter: KeyFilterSpec | None = None,
    exact_schema: bool = False,
) -> pa.RecordBatchReader:
    """The same read as :func:`read_state`, streamed: a ``pyarrow.RecordBatchReader``.

    For state larger than memory: partitions are decoded one at a time as the
    reader is consumed, so memory stays bounded by one partition's state. DuckDB,
    Polars and ``pyarrow.dataset`` query the reader directly::

        reader = state_reader.scan_state(cp, key_filter="user = 'ann'")
        duckdb.sql("select key.user, value.count from reader")

    The read is planned (and every option checked) when this returns; the files
    are read as the batches are. Unlike ``read_state``, a read of the latest batch
    is not planned again when a running query cleans up its files midway (rows
    already handed out cannot be taken back): it fails with
    ``BatchNotRetainedError`` instead.
    """
    options = dict(locals())
    path = options.pop("checkpoint")
    key_filter = options.pop("key_filter")
    exact = options.pop("exact_schema")
    plan = _plan_state_read(_from_kwargs(path, options))
    bound = _bind_key_filter(plan, key_filter)
    schema = plan.arrow_schema.with_metadata(_result_metadata(plan))
    if not exact:
        schema = _unique_schema(schema)
    return pa.RecordBatchReader.from_batches(schema, _streamed(plan, bound, schema, str(path)))


def _streamed(
    plan: StateReadPlan, key_filter: KeyFilter | None, schema: pa.Schema, where: str
) -> Iterator[pa.RecordBatch]:
    # one partition at a time (one thread), so that memory holds one partition's state
    with _unexpected_errors_as_ours(where):
        try:
            for batch in _iter_batches(plan, key_filter=key_filter, threads=1, show_progress=False):
                yield _renamed_batch(batch, schema)
        except _GONE as exc:
            gone = _cleaned_up_during_read(plan, exc)
            if gone is None:
                raise
            raise gone from exc


@_public_api
def diagnose(
    checkpoint: str,
    *,
    thresholds: dict[str, float] | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Diagnosis:
    """What is wrong with the query that wrote ``checkpoint``, from its files alone.

    Returns a :class:`Diagnosis`: ``findings`` (each a :class:`Finding` with ``kind``,
    ``severity``, ``operator_id``, ``store_name``, ``summary``, ``evidence``, ``action``),
    ``healthy``, what was ``checked``, and ``table()`` / ``to_pandas()``. ``thresholds``
    overrides the limits in ``state_reader.inspect.doctor.THRESHOLDS`` by name. ``key_schema`` and
    ``value_schema`` (DDL, both or neither): the schemas of operator 0's store ``default`` when it has no
    schema file (written before Spark 3.1, or lost), as ``read_state`` takes them.
    """
    return _diagnose(
        checkpoint,
        thresholds=thresholds,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options,
    )


@_public_api
@_with_checksum_report  # one warning for all the files read
def read_metadata(
    checkpoint: str,
    *,
    batch_id: int | None = None,
    infer_missing_metadata: bool | None = None,
    include_hidden_columns: bool | None = None,
    storage_options: dict[str, Any] | None = None,
    verify_checksums: bool | None = None,
) -> pa.Table:
    """Operators and stores of a checkpoint, as ``spark.read.format("state-metadata")``.

    Checkpoints written before Spark 4.0 have no operator metadata and give no
    rows, as in Spark, unless ``infer_missing_metadata`` describes them from
    their files. ``include_hidden_columns`` adds the built-in's hidden
    ``_numColsPrefixKey`` column. ``verify_checksums`` as in :func:`read_state`.
    """
    options = dict(locals())
    path = options.pop("checkpoint")
    # unlike the data source (which gives no rows, as Spark's does), say when there is no checkpoint at all
    CheckpointDir(_Storage(path, storage_options or {})).require_checkpoint()
    return _read_metadata_table(_from_kwargs(path, options))


@_public_api
@_with_checksum_report  # one warning for all the files read
def verdicts(
    checkpoint: str,
    *,
    operator_id: int | None = None,
    store_name: str | None = None,
    state_var_name: str | None = None,
    join_side: str | None = None,
    key_filter: KeyFilterSpec | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    storage_options: dict[str, Any] | None = None,
    spark: Any = None,
) -> Any:
    """The verdict of every key in state: how its stay ends and when, and when it last changed.

    A ``pyarrow.Table``, one row per key: ``key`` (as ``read_state`` gives it), ``partition_id``, for a
    stream-stream join only ``join_side`` (a row per join key on each side: the side is part of what the
    row is, and other stores have no column of it), ``last_changed_batch_id`` (the last retained
    batch that inserted or updated it; null when none did), ``event`` (``evict``, ``expire``, ``fire``,
    ``never``), ``when_watermark_ms`` or ``when_time_ms`` (the watermark, or the batch time, at which it
    happens) and ``overdue``: what ``explain`` says of each key, by the same rules. A ``key_filter`` reads
    only the partitions it can match. ``spark``: a SparkSession, to compute the same table as a Spark
    DataFrame on the executors, one task per state partition, no state row through the driver.
    """
    selectors = store_selectors(
        operator_id=operator_id,
        store_name=store_name,
        state_var_name=state_var_name,
        join_side=join_side,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options,
    )
    if spark is not None:
        from state_reader.fronts.verdicts_frame import verdicts_frame  # imports pyspark

        return verdicts_frame(spark, checkpoint, selectors, key_filter)
    return _read_verdicts(checkpoint, selectors, key_filter)


@_public_api
@_with_checksum_report  # one warning for all the files read
def rewrite(
    checkpoint: str,
    destination: str | None = None,
    *,
    num_partitions: int | None = None,
    provider: str | None = None,
    confs: Mapping[str, Any] | None = None,
    drop_keys: KeyFilterSpec | None = None,
    batch_id: int | None = None,
    allow_uncommitted: bool = False,
    dry_run: bool = False,
    transform: Transform | dict[int, Transform] | None = None,
    upsert: Any = None,
    delete: Any = None,
    operator_id: int | None = None,
    store_name: str | None = None,
    state_var_name: str | None = None,
    join_side: str | None = None,
    read_registered_timers: bool = False,
    key_schema: str | None = None,
    value_schema: str | None = None,
    storage_options: dict[str, Any] | None = None,
    destination_storage_options: dict[str, Any] | None = None,
    spark: Any = None,
) -> RewriteReport:
    """Write the state of ``checkpoint`` into a new checkpoint at ``destination`` that the same query
    resumes from (``checkpointLocation=destination``); ``checkpoint`` is only read. Returns a
    :class:`~state_reader.core.rewrite.report.RewriteReport`. Every option is optional
    (docs/rewrite.md shows each at work):

    - the layout: ``num_partitions`` (Spark's frozen ``spark.sql.shuffle.partitions``; each row goes
      to the partition Spark's shuffle sends its key to), ``provider`` (``"hdfs"`` or ``"rocksdb"``),
      ``batch_id`` (the committed batch written; default the last), ``allow_uncommitted`` (rewrite
      a source whose last planned batch has no commit: a running or crashed query).
    - the confs Spark froze into the checkpoint: ``confs`` (Spark's names and values, as set on the session:
      ``{"spark.sql.streaming.aggregation.stateFormatVersion": "2"}``), each migrated or refused with a
      :class:`~state_reader.errors.ConfChangeError` before anything is written; the destination's offset
      log records the new values, so the resumed query runs with them. ``num_partitions`` and ``provider``
      are shorthands for ``spark.sql.shuffle.partitions`` and ``spark.sql.streaming.stateStore.providerClass``.
    - the rows: ``drop_keys`` (a key filter, ``read_state``'s ``key_filter`` grammar, whose keys
      are left out of every store); ``transform`` (a function over ``pyarrow.RecordBatch`` es of
      ``key`` and ``value`` returning the new ones, one row per row, whose types become the new
      schema files; ``{operator_id: function}`` for one of several operators).
    - an edit, rows written into one store: ``upsert`` (rows in the shape ``read_state`` returns:
      a key's value replaced, or the key added) and ``delete`` (keys), as a pyarrow Table, a pandas
      DataFrame or a Spark DataFrame, or dicts ``{store_name or (operator_id, store_name): rows}``
      for several stores; the store chosen as ``read_state`` chooses it (``operator_id``,
      ``store_name``, ``state_var_name``, ``read_registered_timers``; ``join_side`` for one side of
      a stream-stream join). Rows that do not fit raise an
      :class:`~state_reader.errors.InvalidEditError` before anything is written.
    - a store without a schema file: ``key_schema`` and ``value_schema`` (DDL, both or neither), of
      the store ``operator_id`` and ``store_name`` name (operator 0, store ``default`` unless given).
    - where and how: ``storage_options`` (fsspec, both locations unless
      ``destination_storage_options``), ``dry_run`` (write nothing, ``destination`` may be omitted:
      the counts per new partition), ``spark`` (a SparkSession whose executors read, route and write
      the state; executors must import ``state_reader`` and reach both locations).

    ``destination`` must not exist or be empty; a rewrite that fails part-way leaves a destination
    Spark refuses to start from.
    """
    # through Spark (not a dry run), a Spark DataFrame of rows stays there: its rows never reach the driver
    in_spark = spark is not None and not dry_run
    schemas = (key_schema, value_schema) != (None, None)
    edits = _edits(
        upsert, delete, operator_id, store_name, state_var_name, in_spark, join_side, read_registered_timers, schemas
    )
    source = _give_schemas(
        CheckpointDir(_Storage(checkpoint, dict(storage_options or {}))),
        key_schema,
        value_schema,
        operator_id,
        store_name,
    )
    dest = (
        None
        if destination is None
        else _Destination(destination, dict(destination_storage_options or storage_options or {}))
    )
    options = _RewriteOptions(
        num_partitions=num_partitions,
        provider=provider,
        confs=dict(confs) if confs else None,
        batch_id=batch_id,
        allow_uncommitted=allow_uncommitted,
        transform=transform,
        drop_keys=drop_keys,
        edits=tuple(edits),
        dry_run=dry_run,
    )
    return _rewrite_checkpoint(source, dest, options, None if spark is None else _SparkRows(spark))


def _edits(
    upsert: Any,
    delete: Any,
    operator_id: int | None,
    store_name: str | None,
    state_var_name: str | None,
    in_spark: bool = False,
    join_side: str | None = None,
    read_registered_timers: bool = False,
    schemas: bool = False,
) -> list[_StoreEdit]:
    """``rewrite``'s rows to write, one :class:`StoreEdit` per store: the store the selectors name,
    or, given as dicts, each store a key names (a store name, or ``(operator_id, store_name)``);
    with ``join_side``, one edit for that side of a join. ``schemas``: key and value schemas were given,
    for the store ``operator_id`` and ``store_name`` name."""
    chosen = (operator_id, store_name, state_var_name, join_side) != (None, None, None, None) or read_registered_timers
    if upsert is None and delete is None:
        if schemas and (state_var_name, join_side, read_registered_timers) == (None, None, False):
            return []  # operator_id and store_name name the store the schemas are of
        if chosen:
            raise _InvalidOptionError(
                "operator_id, store_name, state_var_name, join_side and read_registered_timers choose the store "
                "upsert or delete write"
                + (" (operator_id and store_name also the store key_schema and value_schema are of)" if schemas else "")
            )
        return []
    if join_side is not None:
        if isinstance(upsert, dict) or isinstance(delete, dict) or (store_name, state_var_name) != (None, None):
            raise _InvalidOptionError(
                "join_side takes the rows of one side as tables (upsert, delete), without store_name or "
                "state_var_name; give the stores of both sides by name as dicts, without join_side"
            )
        return [
            _StoreEdit(
                _as_rows(upsert, in_spark),
                _as_rows(delete, in_spark),
                operator_id,
                join_side=join_side,
            )
        ]
    if not isinstance(upsert, dict) and not isinstance(delete, dict):
        return [
            _StoreEdit(
                _as_rows(upsert, in_spark),
                _as_rows(delete, in_spark),
                operator_id,
                store_name,
                state_var_name,
                read_registered_timers=read_registered_timers,
            )
        ]
    if chosen or not all(isinstance(x, dict | None) for x in (upsert, delete)):
        raise _InvalidOptionError(
            "give upsert and delete as dicts {store_name or (operator_id, store_name): rows}, both of them, "
            "without operator_id, store_name, state_var_name, join_side or read_registered_timers, to write into "
            "several stores"
        )
    by_store: dict[tuple[int | None, str], dict[str, Any]] = {}
    for what, given in (("upsert", upsert), ("delete", delete)):  # the keywords, as the messages name them
        for which, rows in (given or {}).items():
            op, name = which if isinstance(which, tuple) else (None, which)
            if not isinstance(name, str) or not (op is None or isinstance(op, int)):
                raise _InvalidOptionError(
                    f"{what} names a store by {which!r}: give a store name or (operator_id, name)"
                )
            by_store.setdefault((op, name), {})[what] = _as_rows(rows, in_spark)
    return [
        _StoreEdit(rows.get("upsert"), rows.get("delete"), operator_id=op, store_name=name)
        for (op, name), rows in by_store.items()
    ]


def _as_rows(rows: Any, in_spark: bool = False) -> Any:
    """Rows as the rewrite takes them: a Spark DataFrame held in Spark (``in_spark``, a rewrite
    through Spark) or collected as Arrow (Spark-free), anything else as given."""
    if rows is None or not type(rows).__module__.startswith("pyspark"):
        if in_spark and rows is not None:
            raise _InvalidOptionError("with spark=, give upsert and delete as Spark DataFrames")
        return rows
    if in_spark:
        import inspect

        from pyspark.sql.pandas.types import to_arrow_schema

        # timestamps as read_state types them; pyspark 4 asks for the zone, 3.5 always gives UTC
        zone = {"timezone": "UTC"} if "timezone" in inspect.signature(to_arrow_schema).parameters else {}
        return _FrameRows(to_arrow_schema(rows.schema, **zone), rows)
    if hasattr(rows, "toArrow"):
        return rows.toArrow()
    # pyspark 3.5: Arrow batches as toPandas collects them, never through pandas (which bends types)
    from pyspark.sql.pandas.types import to_arrow_schema

    return pa.Table.from_batches(rows._collect_as_arrow(), schema=to_arrow_schema(rows.schema))


@_public_api
def repartition(checkpoint: str, destination: str | None, num_partitions: int, **options: Any) -> RewriteReport:
    """:func:`rewrite` with a new number of state partitions: ``repartition(src, dst, 32)``."""
    return rewrite(checkpoint, destination, num_partitions=num_partitions, **options)
