"""Carry out a plan: decode one partition of one store into Arrow, through its provider.

The provider is looked up in one table (:data:`PROVIDERS`); every provider module
offers ``read_store(plan, directory, partition_id)`` (and ``read_store_rows``, the same
with the rows as stored), ``load_rows(plan, directory, partition_id)`` and
``read_changes(plan, directory, partition_id, version)``. Join sides (formats 1-3)
combine two stores here; state variables of column families go to
:mod:`state_reader.providers.rocksdb_variables` through the RocksDB provider.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from types import ModuleType

import numpy as np
import pyarrow as pa

from state_reader.core.size import StateSize, StoredSizes, state_size
from state_reader.errors import RowDecodeError, UnsupportedOptionError
from state_reader.formats.unsaferow import RowBuffer
from state_reader.grouping import group_ids
from state_reader.model.checkpoint import MATCHED_FIELD
from state_reader.model.conf import HDFS_PROVIDER, ROCKSDB_PROVIDER
from state_reader.model.plan import JoinSidePlan, StateReadPlan
from state_reader.providers import hdfs, rocksdb, rocksdb_families

# Rows per RecordBatch handed out; keeps memory per batch bounded (and Spark's executors').
BATCH_ROWS = 65536

# provider class recorded in the offset log -> the module that reads its files
PROVIDERS: dict[str, ModuleType] = {HDFS_PROVIDER: hdfs, ROCKSDB_PROVIDER: rocksdb}


def _provider(plan: StateReadPlan, directory: str) -> ModuleType:
    try:
        return PROVIDERS[plan.provider_class]
    except KeyError:
        raise UnsupportedOptionError(
            f"state store provider {plan.provider_class} is not supported", path=plan.storage.display(directory)
        ) from None


def _constant_int32(n: int, value: int) -> pa.Array:
    # from_buffers, not pa.array(ndarray): the latter imports pandas on first use (slow cold start)
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(np.full(n, value, dtype=np.int32))])


def _constant_int64(n: int, value: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(np.full(n, value, dtype=np.int64))])


@contextmanager
def _given_schemas_named(plan: StateReadPlan) -> Iterator[None]:
    """A row that does not fit schemas the read options gave (``keySchema``, ``valueSchema``) is a
    wrong schema far more often than damage: say so, and which schemas."""
    try:
        yield
    except RowDecodeError as exc:
        if plan.schemas_given is None:
            raise
        key, value = plan.schemas_given
        raise RowDecodeError(
            f"{exc.message}. The schemas given do not fit the state: keySchema='{key}', valueSchema='{value}' "
            "must be the key and value schemas of the query that wrote it, field for field, in order, with "
            "the same types",
            path=exc.path,
        ) from exc


def decode_partition(plan: StateReadPlan, partition_id: int) -> tuple[pa.StructArray, pa.StructArray]:
    """(keys, values) of one partition's state, decoded by its provider."""
    if plan.join is not None:
        return _decode_join_side(plan, plan.join, partition_id)
    directory = plan.store_dir(partition_id)
    with _given_schemas_named(plan):
        return _provider(plan, directory).read_store(plan, directory, partition_id)


def decode_columns(plan: StateReadPlan, partition_id: int) -> list[pa.Array]:
    """The output columns of one partition, ``partition_id`` excluded."""
    if plan.variable is not None:
        return rocksdb_families.read_variable(plan, plan.store_dir(partition_id), partition_id)
    return list(decode_partition(plan, partition_id))


def stored_rows(plan: StateReadPlan, partition_id: int) -> tuple[RowBuffer, RowBuffer]:
    """Keys and values of one partition at the plan's version as its store keeps them, not decoded (a
    variable's: its column family's alone); not for a join side, whose rows join two stores."""
    if plan.join is not None:
        raise UnsupportedOptionError("a join side's rows are not stored rows: measure each of its stores")
    directory = plan.store_dir(partition_id)
    return _provider(plan, directory).load_rows(plan, directory, partition_id)


def decode_measured(plan: StateReadPlan, partition_id: int) -> tuple[list[pa.Array], StoredSizes | None]:
    """:func:`decode_columns`, and the sizes of the same partition's :func:`stored_rows`, from one load of its
    files (None for a join side, whose rows are not stored rows)."""
    if plan.join is not None:
        return decode_columns(plan, partition_id), None
    directory = plan.store_dir(partition_id)
    if plan.variable is not None:
        columns, keys, values = rocksdb_families.read_variable_rows(plan, directory, partition_id)
        return columns, StoredSizes.of(keys, values)
    with _given_schemas_named(plan):
        key_column, value_column, keys, values = _provider(plan, directory).read_store_rows(
            plan, directory, partition_id
        )
    return [key_column, value_column], StoredSizes.of(keys, values)


def measure_partition(plan: StateReadPlan, partition_id: int) -> StateSize:
    """Rows and state bytes (:mod:`state_reader.core.size`) of one partition at the plan's version.

    The bytes are the rows' as stored; the rows as a read returns them, so a
    variable (its list elements, its map entries) is decoded to count them.
    """
    if plan.join is not None:
        stored = sum(measure_partition(_join_store_plan(plan, plan.join, i), partition_id).bytes for i in (0, 1))
        return StateSize(len(decode_partition(plan, partition_id)[0]), stored)
    size = state_size(*stored_rows(plan, partition_id))
    if plan.variable is not None:
        return StateSize(len(decode_columns(plan, partition_id)[0]), size.bytes)
    return size


def decode_changes(
    plan: StateReadPlan, partition_id: int, version: int
) -> tuple[list[str], pa.StructArray, pa.StructArray]:
    """(change types, keys, values) that ``version`` made in one partition."""
    directory = plan.store_dir(partition_id)
    with _given_schemas_named(plan):
        return _provider(plan, directory).read_changes(plan, directory, partition_id, version)


def decode_change_columns(plan: StateReadPlan, partition_id: int, version: int) -> tuple[list[str], list[pa.Array]]:
    """Change types and output columns (``key`` first) of the changes ``version`` made."""
    if plan.variable is not None:
        return rocksdb_families.read_variable_changes(plan, plan.store_dir(partition_id), partition_id, version)
    kinds, keys, values = decode_changes(plan, partition_id, version)
    return kinds, [keys, values]


def read_partition(
    plan: StateReadPlan, partition_id: int, stored_sizes: dict[int, StoredSizes] | None = None
) -> Iterator[pa.RecordBatch]:
    """Record batches of the state (or the changes) of one partition, in the plan's output schema.

    ``stored_sizes``: given, it gets the partition's stored row sizes (:func:`decode_measured`), measured from
    the rows the read loads, not read again (a change feed's are not measured)."""
    schema = plan.arrow_schema
    if plan.is_change_feed:
        assert plan.change_start_batch_id is not None
        for batch_id in range(plan.change_start_batch_id, plan.batch_id + 1):
            kinds, columns = decode_change_columns(plan, partition_id, batch_id + 1)
            rows = len(kinds)
            for lo in range(0, rows, BATCH_ROWS):
                n = min(BATCH_ROWS, rows - lo)
                yield pa.RecordBatch.from_arrays(
                    [
                        _constant_int64(n, batch_id),
                        pa.array(kinds[lo : lo + n], pa.string()),
                        *(c.slice(lo, n) for c in columns),
                        _constant_int32(n, partition_id),
                    ],
                    schema=schema,
                )
        return
    if stored_sizes is None:
        columns = decode_columns(plan, partition_id)
    else:
        columns, sizes = decode_measured(plan, partition_id)
        if sizes is not None:
            stored_sizes[partition_id] = sizes
    rows = len(columns[0])
    for lo in range(0, rows, BATCH_ROWS):
        n = min(BATCH_ROWS, rows - lo)
        yield pa.RecordBatch.from_arrays(
            [c.slice(lo, n) for c in columns] + [_constant_int32(n, partition_id)], schema=schema
        )


def _join_store_plan(plan: StateReadPlan, join: JoinSidePlan, index: int) -> StateReadPlan:
    """The plan of one of the two stores of a join side."""
    key_schema = (join.count_key_schema, join.row_key_schema)[index]
    value_schema = (join.count_value_schema, join.row_value_schema)[index]
    if join.families is not None:
        return replace(plan, join=None, variable=join.families[index], key_schema=key_schema, value_schema=value_schema)
    return replace(plan, join=None, store_name=join.store_name(index), key_schema=key_schema, value_schema=value_schema)


def _decode_join_side(
    plan: StateReadPlan, join: JoinSidePlan, partition_id: int
) -> tuple[pa.StructArray, pa.StructArray]:
    """The live buffered rows of one join side: each row whose index is below its join key's count."""
    count_keys, count_values = decode_columns(_join_store_plan(plan, join, 0), partition_id)
    row_keys, row_values = decode_columns(_join_store_plan(plan, join, 1), partition_id)
    n_key = len(join.count_key_schema.fields)
    join_keys = [
        pa.StructArray.from_arrays([keys.field(i) for i in range(n_key)], fields=list(join.count_key_schema.to_arrow()))
        for keys in (count_keys, row_keys)
    ]
    ids = group_ids(pa.concat_arrays(join_keys))
    count_ids, row_ids = ids[: len(count_keys)], ids[len(count_keys) :]
    count_of = np.zeros(int(ids.max(initial=-1)) + 1, dtype=np.int64)
    count_of[count_ids] = count_values.field(0).fill_null(0).to_numpy(zero_copy_only=False)
    index = row_keys.field(n_key).fill_null(-1).to_numpy(zero_copy_only=False)
    live = (index >= 0) & (index < count_of[row_ids])
    keys = pa.StructArray.from_arrays(
        [row_keys.field(i) for i in range(n_key)], fields=list(plan.key_schema.to_arrow())
    )
    shown = [i for i, f in enumerate(join.row_value_schema.fields) if f.name != MATCHED_FIELD]
    values = pa.StructArray.from_arrays([row_values.field(i) for i in shown], fields=list(plan.value_schema.to_arrow()))
    mask = pa.array(live)
    return keys.filter(mask), values.filter(mask)
