"""Rows of one side of a stream-stream join, in the shape ``read_state(join_side=...)`` returns
(``key``: the join key, ``value``: one buffered input row), turned into the rows of the two stores
Spark keeps for that side, so that the per-store path writes them.

Spark buffers a side as two stores: ``<side>-keyToNumValues`` (join key -> how many rows it holds)
and ``<side>-keyWithIndexToValue`` (join key and an index 0..n-1 -> one row, with a ``matched``
flag from state format 2 on). An upsert gives a join key's whole buffer: its rows, in the order
given, become indices 0..n-1 and its count n; the entries the source holds at indices n and above
are deleted, so the source's counts of the upserted keys are read first. A delete takes join keys
and removes every index of each, and its count.

State format 4 keeps a side as ``<side>-keyWithTsToValues`` (join key and event time -> the rows
at that time, each with its ``matched`` flag) and ``<side>-tsWithKey`` (event time first, one
entry per row), and ``read_state`` shows a key as the join key with its ``__event_time``. The
rows are written into both stores by their names
(:mod:`~state_reader.core.rewrite.edit_families`); an upserted join key's entries at other event
times, and a deleted join key's at every event time, are deleted from both, so the source's keys
of that side are read first.

Rows given as Spark DataFrames stay where they are: each store's rows are derived on the executors
(:class:`SideRows`, one task's join keys at a time, every row of a key in one task), the source's
counts read there from the partitions that hold the task's keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_reader.core.planner import plan_store_read
from state_reader.core.rewrite.edit import FrameRows, StoreEdit
from state_reader.core.rewrite.edit_fit import (
    PARTITION_COLUMN,
    EditMode,
    as_table,
    conform_column,
    key_bytes,
    require_columns,
    require_non_null,
    typed_table,
)
from state_reader.core.rewrite.plan import RewritePlan
from state_reader.core.rewrite.rows import FamilyStoreRows, StoreRows
from state_reader.core.scan import read_table
from state_reader.errors import (
    DuplicateEditKeyError,
    EditSchemaError,
    InvalidEditError,
    InvalidOptionError,
    UnknownEditStoreError,
    UnsupportedOptionError,
)
from state_reader.formats.spark_hash import partition_ids
from state_reader.formats.spark_types import DataType, StructField, StructType
from state_reader.formats.unsaferow_encode import encode_rows
from state_reader.model.checkpoint import (
    EVENT_TIME_FIELD,
    JOIN_SIDES,
    MATCHED_FIELD,
    WATERMARK_METADATA,
    join_side_stores,
)
from state_reader.model.plan import StateReadPlan

# the flag a side's row may carry (else False)
MATCHED = StructField(MATCHED_FIELD, DataType("boolean", json_name="boolean"))


def expand_join_sides(rewrite_plan: RewritePlan, edits: Sequence[StoreEdit]) -> list[StoreEdit]:
    """``edits`` with each join side's edit (``join_side``) replaced by the edits of its two stores."""
    out: list[StoreEdit] = []
    for edit in edits:
        if edit.join_side is None or (edit.upsert is None and edit.delete is None):
            out.append(edit)
        else:
            out.extend(_side_edits(rewrite_plan, edit))
    return out


def _side_edits(rewrite_plan: RewritePlan, edit: StoreEdit) -> list[StoreEdit]:
    """The edits of a side's two stores: each upserted join key's count and its rows at indices
    0..n-1, the source's entries at indices n and above deleted; a deleted join key's count and
    every index it holds in the source deleted."""
    side = edit.join_side
    location = rewrite_plan.checkpoint.location
    if side not in JOIN_SIDES:
        raise InvalidOptionError(f"join_side is {side!r}; give 'left' or 'right'")
    if edit.store_name is not None or edit.state_var_name is not None:
        raise InvalidOptionError("join_side names the side's stores itself; give join_side or store_name, not both")
    op = _operator(rewrite_plan, edit.operator_id, location)
    shapes = _store_shapes([rows for rows in rewrite_plan.stores if rows.plan.operator_id == op])
    if join_side_stores(side, v4=True)[0] in shapes:
        if any(isinstance(given, FrameRows) for given in (edit.upsert, edit.delete)):
            raise UnsupportedOptionError(
                f"operator {op} of {location} is a join in state format 4: through Spark, rows of its sides are not "
                "written yet; collect them (toArrow) and rewrite without spark=, or write its stores by name",
                path=location,
            )
        return _event_time_side_edits(rewrite_plan, edit, op, shapes)
    counts_name, values_name = join_side_stores(side)
    if counts_name not in shapes or values_name not in shapes:
        raise UnknownEditStoreError(
            f"the rows are for the {side} side of a join, but operator {op} of {location} is not a stream-stream "
            f"join (its stores: {', '.join(shapes)})",
            path=location,
        )
    join_key, count_type = shapes[counts_name]
    values_key, values_value = shapes[values_name]
    side_rows = SideRows(
        plan_store_read(rewrite_plan.checkpoint, op, counts_name, rewrite_plan.batch_id),
        join_key,
        count_type,
        values_key,
        values_value,
    )
    where = f"the {side} side of operator {op}"
    given = edit.rows()
    in_spark = [mode for mode, rows in given.items() if isinstance(rows, FrameRows)]
    if in_spark:
        if len(in_spark) != len(given):
            raise UnsupportedOptionError(f"rows for {where} mix Spark DataFrames and local rows; give both as either")
        return _frame_edits(side_rows, edit, where, op, counts_name, values_name)
    upsert = delete = None
    if edit.upsert is not None:
        upsert = side_rows.typed(edit.upsert, EditMode.UPSERT, where)
    if edit.delete is not None:
        delete = side_rows.typed(edit.delete, EditMode.DELETE, where)
    old = side_rows.old_counts(None)
    counts_up = values_up = counts_down = None
    stale: list[pa.Table] = []
    if upsert is not None:
        counts_up, values_up, gone = side_rows.upserted(upsert, old)
        stale.append(gone)
    if delete is not None:
        counts_down, gone = side_rows.deleted(delete, old)
        stale.append(gone)
    stale = [t for t in stale if t.num_rows]
    values_down = pa.concat_tables(stale) if stale else None
    return [
        StoreEdit(counts_up, counts_down, operator_id=op, store_name=counts_name),
        StoreEdit(values_up, values_down, operator_id=op, store_name=values_name),
    ]


@dataclass(frozen=True)
class SideRows:
    """How one side's rows become its two stores' rows (what a Spark task runs too, on its share of
    the rows: every row of a join key among them)."""

    counts_plan: StateReadPlan  # the read of the side's keyToNumValues store in the source
    join_key: StructType
    count_type: StructType
    values_key: StructType
    values_value: StructType

    def typed(self, given: Any, mode: EditMode, where: str) -> pa.Table:
        """``mode`` rows as a pyarrow Table with the columns they need."""
        if mode == EditMode.UPSERT:
            table = _typed_upsert(given, self.join_key, self.values_value)
            require_columns(table, ("key", "value"), EditMode.UPSERT, where)
        else:
            table = as_table(given, EditMode.DELETE, self.join_key, None)
            require_columns(table, ("key",), EditMode.DELETE, where, optional=("value",))
        return table

    def old_counts(self, keys: pa.Array | None, mode: EditMode = EditMode.UPSERT) -> tuple[pa.Array, np.ndarray]:
        """The source's join keys of the side (their bytes) and how many rows each holds: all of them, or
        (``keys`` given) those of the partitions Spark's hash puts ``keys`` in."""
        plan = self.counts_plan
        partitions = None
        if keys is not None:
            if not len(keys):
                return pa.array([], pa.large_binary()), np.zeros(0, np.int64)
            n = plan.num_partitions or len(plan.partitions) or 1
            hashed = partition_ids([_conformed(keys, self.join_key, mode)], n)
            partitions = sorted(set(np.asarray(hashed).tolist()) & set(plan.partitions))
        table = read_table(plan, partitions=partitions)
        found = table.column("key").combine_chunks()
        counts = table.column("value").combine_chunks().field(0)
        return _join_key_bytes(found, self.join_key), np.asarray(counts.to_numpy(zero_copy_only=False), np.int64)

    def upserted(self, upsert: pa.Table, old: tuple[pa.Array, np.ndarray]) -> tuple[pa.Table, pa.Table, pa.Table]:
        """Upserted rows as the counts store's rows, the values store's, and the values store's
        entries to delete (the source's indices past each join key's new count)."""
        keys = _column(upsert, "key")
        groups, first = _groups(keys, self.join_key, EditMode.UPSERT)
        n = np.bincount(groups, minlength=len(first)).astype(np.int64)
        index = _index_in_group(groups)
        owners = keys.take(pa.array(first))
        counts_up = _store_table(owners, _count_values(n, self.count_type), upsert, first)
        values_up = _store_table(
            _with_index(keys, index, self.values_key),
            _with_matched(_column(upsert, "value"), self.values_value),
            upsert,
            None,
        )
        conformed = _conformed(owners, self.join_key, EditMode.UPSERT)
        stale = _stale_entries(conformed, n, _lookup(old, _join_key_bytes(owners, self.join_key)), self.values_key)
        return counts_up, values_up, stale

    def deleted(self, delete: pa.Table, old: tuple[pa.Array, np.ndarray]) -> tuple[pa.Table, pa.Table]:
        """Deleted join keys as the counts store's keys, and the values store's keys of every index they hold."""
        keys = _column(delete, "key")
        counts_down = _store_table(keys, None, delete, None)
        _, first = _groups(keys, self.join_key, EditMode.DELETE)
        owners = _conformed(keys.take(pa.array(first)), self.join_key, EditMode.DELETE)
        ends = _lookup(old, _join_key_bytes(owners, self.join_key, EditMode.DELETE))
        return counts_down, _stale_entries(owners, np.zeros(len(first), np.int64), ends, self.values_key)


@dataclass(frozen=True)
class _Expand:
    """One Spark task's share of a side's rows (every row of a join key) as one of its stores' rows.
    ``upsert``: ``part`` 0 the counts store's rows, 1 the values store's, 2 the values store's entries
    to delete (past each key's new count); ``delete``: 0 the counts store's keys, 1 the values
    store's. Called with the task's rows as one table."""

    side: SideRows
    mode: EditMode
    part: int
    where: str

    def __call__(self, given: pa.Table) -> pa.Table:
        given = self.side.typed(given, self.mode, self.where)
        stale = self.part == (2 if self.mode == EditMode.UPSERT else 1)
        # the source's counts are needed for the entries to delete only, and of this task's keys only
        keys = _column(given, "key") if stale and given.num_rows else pa.array([])
        old = self.side.old_counts(keys, self.mode)
        if self.mode == EditMode.UPSERT:
            return self.side.upserted(given, old)[self.part]
        return self.side.deleted(given, old)[self.part]


def _frame_edits(
    side: SideRows, edit: StoreEdit, where: str, op: int, counts_name: str, values_name: str
) -> list[StoreEdit]:
    """A side's edits from Spark DataFrames: each store's rows derived on the executors from the rows
    of the join keys a task holds (their schemas found here, on no rows)."""

    def derived(mode: EditMode, part: int) -> FrameRows:
        given = edit.rows()[mode]
        assert isinstance(given, FrameRows)
        expand = _Expand(side, mode, part, where)
        empty = pa.Table.from_batches([], schema=given.schema)
        return FrameRows(expand(empty).schema, given.frame, derive=expand)

    counts_up = values_up = counts_down = values_down = None
    if edit.upsert is not None:
        counts_up, values_up = derived(EditMode.UPSERT, 0), derived(EditMode.UPSERT, 1)
        values_down = derived(EditMode.UPSERT, 2)
    if edit.delete is not None:
        counts_down = derived(EditMode.DELETE, 0)
        gone = derived(EditMode.DELETE, 1)
        values_down = gone if values_down is None else replace(values_down, more=(gone,))
    return [
        StoreEdit(counts_up, counts_down, operator_id=op, store_name=counts_name),
        StoreEdit(values_up, values_down, operator_id=op, store_name=values_name),
    ]


def _event_time_side_edits(
    rewrite_plan: RewritePlan, edit: StoreEdit, op: int, shapes: dict[str, tuple[StructType, StructType]]
) -> list[StoreEdit]:
    """The edits of a side's two stores in state format 4, where a key is a join key and an event time:
    ``keyWithTsToValues`` (the rows of each, with their ``matched`` flags) and ``tsWithKey`` (one entry
    per row), both given the upserted rows. The source's entries of an upserted join key at event
    times the upsert does not give, and every entry of a deleted join key, are deleted from both."""
    side = edit.join_side
    assert side is not None
    rows_name, index_name = join_side_stores(side, v4=True)
    key_type, stored = shapes[rows_name]
    index_value = shapes[index_name][1]
    join_key = StructType(key_type.fields[:-1])
    where = f"the {side} side of operator {op}"
    old = _old_keys(rewrite_plan, op, index_name, key_type)
    old_join = _join_key_bytes(_join_keys(old, join_key), join_key)
    stale = np.zeros(len(old), dtype=bool)
    rows_up = index_up = up_join = None
    if edit.upsert is not None:
        table = _typed_upsert(edit.upsert, key_type, stored)
        require_columns(table, ("key", "value"), EditMode.UPSERT, where)
        keys = _conformed(_column(table, "key"), key_type, EditMode.UPSERT)
        values = _with_matched(_column(table, "value"), stored)
        _require_event_times(keys, values, stored, where)
        rows_up = _store_table(keys, values, table, None)
        index_up = _store_table(keys, _null_values(index_value, len(keys)), table, None)
        up_join = _join_key_bytes(_join_keys(keys, join_key), join_key)
        # the join key's entries at event times the upsert does not give (those it gives are replaced)
        kept = pc.is_in(_join_key_bytes(old, key_type), value_set=_join_key_bytes(keys, key_type)).to_numpy(
            zero_copy_only=False
        )
        stale |= pc.is_in(old_join, value_set=up_join).to_numpy(zero_copy_only=False) & ~kept
    if edit.delete is not None:
        table = as_table(edit.delete, EditMode.DELETE, key_type, None)
        require_columns(table, ("key",), EditMode.DELETE, where, optional=("value",))
        gone = _delete_join_keys(_column(table, "key"), key_type, join_key)
        gone_bytes = _join_key_bytes(gone, join_key, EditMode.DELETE)
        if up_join is not None:
            both = pc.is_in(gone_bytes, value_set=up_join).to_numpy(zero_copy_only=False)
            if both.any():
                first = int(np.flatnonzero(both)[0])
                raise DuplicateEditKeyError(
                    f"join key {gone[first].as_py()} of {where} (delete row {first}) is both upserted and "
                    "deleted; give it once"
                )
        stale |= pc.is_in(old_join, value_set=gone_bytes).to_numpy(zero_copy_only=False)
    down = pa.table({"key": old.filter(pa.array(stale))}) if stale.any() else None
    return [
        StoreEdit(rows_up, down, operator_id=op, store_name=rows_name),
        StoreEdit(index_up, down, operator_id=op, store_name=index_name),
    ]


def _old_keys(rewrite_plan: RewritePlan, op: int, index_name: str, key_type: StructType) -> pa.StructArray:
    """The source's keys (join key and event time) of one side in state format 4, each once."""
    table = read_table(plan_store_read(rewrite_plan.checkpoint, op, index_name, rewrite_plan.batch_id))
    # the store's own keys fit its key type: the mode only names rows in errors these cannot raise
    keys = _conformed(_column(table, "key"), key_type, EditMode.UPSERT)
    if not len(keys):
        return keys
    _, first = _groups(keys, key_type, EditMode.UPSERT)
    return keys.take(pa.array(first))


def _join_keys(keys: pa.Array, join_key: StructType) -> pa.StructArray:
    """Keys of state format 4 without their last field, the event time: the join keys."""
    assert isinstance(keys, pa.StructArray)
    arrow = join_key.to_arrow()
    return pa.StructArray.from_arrays([keys.field(i) for i in range(arrow.num_fields)], fields=list(arrow))


def _delete_join_keys(keys: pa.Array, key_type: StructType, join_key: StructType) -> pa.Array:
    """The join keys a delete names: its keys as ``read_state`` shows them (the event time last,
    which a delete does not need) or the join keys alone."""
    names = [keys.type.field(i).name for i in range(keys.type.num_fields)] if pa.types.is_struct(keys.type) else []
    if names and names[-1] == EVENT_TIME_FIELD:
        return _join_keys(_conformed(keys, key_type, EditMode.DELETE), join_key)
    return _conformed(keys, join_key, EditMode.DELETE)


def _require_event_times(keys: pa.StructArray, values: pa.StructArray, stored: StructType, where: str) -> None:
    """Each key's event time must be its row's, as Spark takes it: the row's event-time column (the
    one with a watermark), or the end of a window there."""
    at = next((i for i, f in enumerate(stored.fields) if WATERMARK_METADATA in (f.metadata or {})), None)
    if at is None:
        return
    column = values.field(at)
    if pa.types.is_struct(column.type):
        column = column.field(1)  # a window: its end
    times = column.cast(pa.int64())
    given = keys.field(keys.type.num_fields - 1)
    differ = pc.fill_null(pc.not_equal(times, given), True).to_numpy(zero_copy_only=False)
    if differ.any():
        first = int(np.flatnonzero(differ)[0])
        raise InvalidEditError(
            f"upsert row {first} for {where} has key.{EVENT_TIME_FIELD} {given[first].as_py()}, but its row's "
            f"event time ({stored.fields[at].name}) is {times[first].as_py()} µs: Spark files each row under its "
            f"own event time ({int(differ.sum())} rows differ)"
        )


def _null_values(schema: StructType, n: int) -> pa.StructArray:
    """``n`` values of a store that keeps none (its one void field, null)."""
    arrow = schema.to_arrow()
    return pa.StructArray.from_arrays([pa.nulls(n, f.type) for f in arrow], fields=list(arrow))


def _typed_upsert(given: Any, join_key: StructType, stored: StructType) -> pa.Table:
    """Upsert rows as a pyarrow Table; rows that carry no Arrow types (pandas, a file's) typed as the
    side's rows, with or without a ``matched`` flag (whichever they give)."""
    if isinstance(given, (pa.Table, pa.RecordBatch)):
        return as_table(given, EditMode.UPSERT, join_key, None)
    row = (
        [f for f in stored.fields if f.name != MATCHED_FIELD]
        if stored.fields[-1].name == MATCHED_FIELD
        else list(stored.fields)
    )
    try:
        return typed_table(given, EditMode.UPSERT, [("key", join_key), ("value", StructType(row))])
    except EditSchemaError as without:
        try:
            return typed_table(given, EditMode.UPSERT, [("key", join_key), ("value", StructType([*row, MATCHED]))])
        except EditSchemaError:
            raise without from None


def _operator(rewrite_plan: RewritePlan, given: int | None, location: str) -> int:
    operator_ids = sorted({rows.plan.operator_id for rows in rewrite_plan.stores})
    if given is None:
        if len(operator_ids) != 1:
            raise InvalidOptionError(
                f"{location} has {len(operator_ids)} stateful operators ({operator_ids}); pass operator_id to say "
                "which join the rows are for"
            )
        return operator_ids[0]
    if given not in operator_ids:
        raise UnknownEditStoreError(
            f"the rows are for operator {given}, which {location} does not have (its stateful operators: "
            f"{operator_ids})",
            path=location,
        )
    return given


def _store_shapes(stores: Sequence[StoreRows]) -> dict[str, tuple[StructType, StructType]]:
    """Each store (or join store kept as a column family) of one operator: its key and value schemas."""
    out: dict[str, tuple[StructType, StructType]] = {}
    for rows in stores:
        if isinstance(rows, FamilyStoreRows):
            if rows.variable_kinds is None:
                for name, family in rows.families.items():
                    if not name.startswith("$"):
                        out[name] = (family.key_schema, family.value_schema)
        else:
            out[rows.plan.store_name] = (rows.plan.key_schema, rows.plan.value_schema)
    return out


def _column(table: pa.Table, name: str) -> pa.Array:
    column = table.column(name)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _conformed(keys: pa.Array, join_key: StructType, mode: EditMode) -> pa.Array:
    """Join keys typed as the store's key (the widenings are noted by the per-store path, which sees them again)."""
    conformed = conform_column(pa.chunked_array([keys], keys.type), join_key, "key", mode, [])
    require_non_null(conformed, join_key, "key", mode)
    return conformed


def _join_key_bytes(keys: pa.Array, join_key: StructType, mode: EditMode = EditMode.UPSERT) -> pa.Array:
    """Join keys as the bytes Spark compares them by (typed as the store's key, floats normalized)."""
    return key_bytes(encode_rows(_conformed(keys, join_key, mode), join_key, "join side key", normalize_floats=True))


def _groups(keys: pa.Array, join_key: StructType, mode: EditMode) -> tuple[np.ndarray, np.ndarray]:
    """Each row's join key as a group number (in order of first appearance), and each group's first row."""
    encoded = pc.dictionary_encode(_join_key_bytes(keys, join_key, mode))
    groups = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), np.int64)
    _, first = np.unique(groups, return_index=True)
    return groups, first


def _index_in_group(groups: np.ndarray) -> np.ndarray:
    """Each row's place among the rows of its group, in the order given (0, 1, ...)."""
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_groups)) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, len(groups)]))
    index = np.empty(len(groups), np.int64)
    index[order] = np.arange(len(groups)) - run_start
    return index


def _lookup(old: tuple[pa.Array, np.ndarray], wanted: pa.Array) -> np.ndarray:
    """The source's count of each wanted join key (0 for a key it does not hold)."""
    old_keys, old_counts = old
    at = pc.index_in(wanted, value_set=old_keys)
    found = at.is_valid().to_numpy(zero_copy_only=False)
    out = np.zeros(len(wanted), np.int64)
    out[found] = old_counts[np.asarray(at.fill_null(0).to_numpy(zero_copy_only=False), np.int64)[found]]
    return out


def _count_values(n: np.ndarray, count_type: StructType) -> pa.StructArray:
    field = count_type.fields[0]
    return pa.StructArray.from_arrays([pa.array(n, pa.int64())], names=[field.name])


def _with_index(keys: pa.Array, index: np.ndarray, values_key: StructType) -> pa.StructArray:
    """The keyWithIndexToValue key: the join key's fields, then the index."""
    assert isinstance(keys, pa.StructArray)
    children = [keys.field(i) for i in range(keys.type.num_fields)]
    names = [keys.type.field(i).name for i in range(keys.type.num_fields)]
    return pa.StructArray.from_arrays(
        [*children, pa.array(index, pa.int64())], names=[*names, values_key.fields[-1].name]
    )


def _with_matched(values: pa.Array, stored: StructType) -> pa.StructArray:
    """The rows as the store keeps them: from state format 2 on with ``matched`` last, taken from an
    extra boolean ``matched`` field of the value when it has one (a field past the input row's), else False."""
    assert isinstance(values, pa.StructArray)
    names = [values.type.field(i).name for i in range(values.type.num_fields)]
    children = [values.field(i) for i in range(values.type.num_fields)]
    keeps_flag = stored.fields[-1].name == MATCHED_FIELD
    row_width = len(stored.fields) - (1 if keeps_flag else 0)
    flag = None
    if len(names) == row_width + 1 and MATCHED_FIELD in names:
        at = len(names) - 1 - names[::-1].index(MATCHED_FIELD)
        flag, _ = children.pop(at), names.pop(at)
    if not keeps_flag:  # state format 1 keeps no flag
        return pa.StructArray.from_arrays(children, names=names)
    flag = pa.array(np.zeros(len(values), bool)) if flag is None else flag
    return pa.StructArray.from_arrays([*children, flag], names=[*names, MATCHED_FIELD])


def _store_table(keys: pa.Array, values: pa.Array | None, given: pa.Table, rows: np.ndarray | None) -> pa.Table:
    """A store's rows as the per-store path takes them, with the given ``partition_id`` (to be checked)."""
    columns: dict[str, Any] = {"key": keys}
    if values is not None:
        columns["value"] = values
    if PARTITION_COLUMN in given.column_names:
        pids = _column(given, PARTITION_COLUMN)
        columns[PARTITION_COLUMN] = pids if rows is None else pids.take(pa.array(rows))
    return pa.table(columns)


def _stale_entries(owners: pa.Array, start: np.ndarray, end: np.ndarray, values_key: StructType) -> pa.Table:
    """The keyWithIndexToValue keys at indices from each join key's new count up to its old count."""
    width = np.maximum(end - start, 0)
    owner = np.repeat(np.arange(len(owners)), width)
    offsets = np.r_[0, np.cumsum(width)[:-1]] if len(width) else np.zeros(0, np.int64)
    index = np.arange(int(width.sum())) - np.repeat(offsets, width) + np.repeat(start, width)
    return pa.table({"key": _with_index(owners.take(pa.array(owner, pa.int64())), index, values_key)})
