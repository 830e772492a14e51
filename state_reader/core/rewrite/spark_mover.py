"""The rewrite of a checkpoint run by Spark, for states larger than one machine.

:class:`SparkRows` is the row mover of the one rewrite pipeline
(:func:`~state_reader.core.rewrite.pipeline.rewrite_checkpoint`): the driver plans and checks
the rewrite and writes the logs, schema files and metadata at the end, as the Spark-free
rewrite does; the state itself never passes through the driver. Per store, one
Spark job:

1. one task per old partition loads it on an executor, leaves out ``drop_keys``,
   turns the rows into the target provider's encoding and hands them to Spark as
   Arrow batches: the partition key as typed columns, the row's place in the
   Spark-free rewrite's order, and the key and value bytes;
2. ``repartition(N, <partition key columns>)``: Spark's own hash partitioning
   (``pmod(murmur3(key), N)``, the shuffle that feeds the stateful operator)
   sends each row to its new partition; the rows of each are sorted into the
   Spark-free rewrite's order, so both write the same files;
3. one task per new partition frames its rows and writes its snapshot through a
   :class:`~state_reader.io.destination.Destination` opened on the executor, and
   returns a one-row summary (rows, bytes, files) to the driver.

The counts of the old partitions (rows, bytes, dropped rows) travel through the
same shuffle as one extra row per old partition (a null key), so the data is read
once. pyspark is imported inside functions only: importing this module needs no Spark.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_reader import errors
from state_reader.core.key_filter import KeyFilter
from state_reader.core.rewrite.edit import (
    BoundEdit,
    EditCounts,
    FrameRows,
    bind_family_rows,
    edited,
    empty_values,
    encode_table,
)
from state_reader.core.rewrite.edit_families import FamilyMatch
from state_reader.core.rewrite.edit_fit import EditMode
from state_reader.core.rewrite.pipeline import Target
from state_reader.core.rewrite.plan import RewritePlan
from state_reader.core.rewrite.report import StoreReport, store_report
from state_reader.core.rewrite.rows import FamilyStoreRows, StoreRows, store_label
from state_reader.core.rewrite.write import write_partition
from state_reader.core.size import row_bytes
from state_reader.errors import DuplicateEditKeyError, StateReaderError, UnsupportedOptionError, spark_worker_errors
from state_reader.formats.spark_types import StructType, UserDefinedType
from state_reader.formats.unsaferow import RowBuffer
from state_reader.formats.unsaferow_encode import copy_spans, row_runs
from state_reader.io.destination import Destination
from state_reader.providers.hdfs import frame_records

# a batch handed to Spark holds at most this many rows and (about) this many key and value bytes
BATCH_ROWS = 1 << 16
BATCH_BYTES = 8 << 20
# a row's place in the Spark-free rewrite's order: (index of its old partition << 32) | its index there
_ORDER_SHIFT = 32
# the counts row of an old partition: old partition id, rows, bytes, dropped rows (little-endian int64s)
_COUNTS = np.dtype("<i8")
_SUMMARY = pa.schema(
    [
        ("new_layout", pa.bool_()),
        ("partition_id", pa.int32()),
        ("rows", pa.int64()),
        ("bytes", pa.int64()),
        ("dropped", pa.int64()),
        ("files", pa.int64()),
        ("written", pa.int64()),
        ("gained", pa.int64()),
        ("replaced", pa.int64()),
        ("lost", pa.int64()),
    ]
)
_SUMMARY_DDL = (
    "new_layout boolean, partition_id int, rows bigint, bytes bigint, dropped bigint, files bigint, written bigint, "
    "gained bigint, replaced bigint, lost bigint"
)
# the place in a new partition's order of rows written into the store (before every old row and count):
# deleted keys first, then upserted rows, so that a task knows both before the old rows stream past
_UPSERT_ORDER, _DELETE_ORDER = -2, -3
# how a Python worker's error of ours appears in the exception Spark raises on the driver
_WORKER_ERROR = re.compile(r"state_reader\.errors\.(\w+): \[[\w.]+\] (.*)")


class SparkRows:
    """The :class:`~state_reader.core.rewrite.pipeline.RowMover` that moves each store's rows on the
    executors of ``spark`` (a SparkSession), one Spark job a store: the same files as the Spark-free
    rewrite's, and the same counts. A ``transform`` runs on the executors (shipped as Spark ships
    any Python function)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def move(
        self,
        rewrite_plan: RewritePlan,
        rows: StoreRows,
        drop: KeyFilter | None,
        target: Target,
        edit: BoundEdit | None = None,
    ) -> StoreReport:
        """One Spark job: the old partitions read on executors, routed by Spark, each new one written by one task
        (``edit``'s rows, a Spark DataFrame, routed with them and applied there)."""
        if edit is not None and not edit.in_spark and edit.spill is not None:
            raise UnsupportedOptionError("with spark=, give upsert and delete as Spark DataFrames")
        label = store_label(rows.plan, located=True)
        store = store_report(rows.plan)
        pids = list(rows.plan.partitions)
        new_pids = rows.target_partitions(rewrite_plan.new_partitions)
        # checkpoint format 2 names each new partition's files by an id the driver decides (the commit entry lists it)
        unique_ids = {pid: rewrite_plan.unique_id(rows.plan, pid) for pid in new_pids}
        extra = rows.zip_metadata()
        try:
            summaries = _store_job(self.spark, rewrite_plan, rows, drop, unique_ids, extra, target.dest, edit).collect()
        except StateReaderError:
            raise
        except Exception as exc:  # a failed Spark job: the worker's own error when it is one of ours
            raise _job_error(exc, f"rewrote {label}") from exc

        new_rows = dict.fromkeys(new_pids, 0)
        new_bytes = dict.fromkeys(new_pids, 0)
        reported: set[int] = set()
        old_counts: dict[int, tuple[int, int, int]] = {}
        edits: dict[int, tuple[int, int, int]] = {}
        for summary in summaries:
            pid = summary.partition_id
            if not summary.new_layout:
                old_counts[pid] = (summary.rows, summary.bytes, summary.dropped)
                continue
            if pid in reported or pid not in new_rows:
                raise StateReaderError(
                    f"the Spark job that rewrote {label} reported new partition {pid} "
                    f"twice or outside partitions {new_pids}"
                )
            reported.add(pid)
            new_rows[pid] = summary.rows
            new_bytes[pid] = summary.bytes
            edits[pid] = (summary.gained, summary.replaced, summary.lost)
            # written by the executors, not through target.put: counted here
            target.report.files += summary.files
            target.report.bytes += summary.written
        missing = [p for p in pids if p not in old_counts]
        if missing:
            raise StateReaderError(
                f"the Spark job that rewrote {label} reported no counts for old partitions {missing}"
            )
        # every new partition needs a snapshot, even an empty one (a Spark may skip the task of an empty partition)
        for pid in new_pids:
            if pid not in reported:
                write_partition(rows.plan, pid, (), rewrite_plan.to_rocksdb, extra, target.put, unique_ids[pid])
        store.old_rows_per_partition = [old_counts[p][0] for p in pids]
        store.old_bytes_per_partition = [old_counts[p][1] for p in pids]
        store.dropped = sum(old_counts[p][2] for p in pids)
        store.rows_per_partition = [new_rows[p] for p in new_pids]
        store.bytes_per_partition = [new_bytes[p] for p in new_pids]
        store.rows = sum(store.rows_per_partition)
        if edit is not None:
            store.widened = list(edit.widened)
            zero = (0, 0, 0)
            store.gained_per_partition = [edits.get(p, zero)[0] for p in new_pids]
            store.replaced_per_partition = [edits.get(p, zero)[1] for p in new_pids]
            store.lost_per_partition = [edits.get(p, zero)[2] for p in new_pids]
        return store

    def check_edit(self, rewrite_plan: RewritePlan, rows: StoreRows, edit: BoundEdit) -> None:
        """Check rows given as Spark DataFrames before anything is written: each batch against the
        store's schemas on the executors (as it will be encoded), then no key given twice."""
        label = store_label(rows.plan, located=True)
        encoded = {mode: _encoded_edit(self.spark, rewrite_plan, rows, edit, mode) for mode in _modes_in_spark(edit)}
        try:
            if EditMode.UPSERT in encoded:
                twice = encoded[EditMode.UPSERT].groupBy("key").count().where("count > 1").limit(1).collect()
                if twice:
                    raise DuplicateEditKeyError(
                        f"upsert rows for {label} give a key {twice[0]['count']} times; give each key once"
                    )
            # each job below encodes every row it reads, and a row that does not fit stops it
            if len(encoded) == 2:
                both = (
                    encoded[EditMode.UPSERT]
                    .select("key")
                    .intersect(encoded[EditMode.DELETE].select("key"))
                    .limit(1)
                    .count()
                )
                if both:
                    raise DuplicateEditKeyError(f"a key of {label} is both upserted and deleted; give it once")
            elif EditMode.DELETE in encoded:
                encoded[EditMode.DELETE].count()
        except StateReaderError:
            raise
        except Exception as exc:
            raise _job_error(exc, f"checked the rows for {label}") from exc


def _store_job(
    spark: Any,
    rewrite_plan: RewritePlan,
    rows: StoreRows,
    drop: KeyFilter | None,
    unique_ids: dict[int, str | None],
    extra: dict[str, Any],
    dest: Destination,
    edit: BoundEdit | None = None,
) -> Any:
    """The DataFrame whose rows are the summaries of one store's rewrite; collecting it runs the rewrite."""
    key_types, key_json = _partition_key_types(rows)
    names = [f"_k{i}" for i in range(len(key_types))]
    transport = pa.schema(
        [
            *(pa.field(name, t) for name, t in zip(names, key_types, strict=True)),
            ("_order", pa.int64()),
            ("key", pa.binary()),
            ("value", pa.binary()),
        ]
    )
    spark_schema = _transport_spark_schema(names, key_json)
    pids = list(rows.plan.partitions)
    # stage 1: one task per old partition
    old = spark.range(0, len(pids), 1, max(1, len(pids))).mapInArrow(
        _ReadOld(rows, pids, drop, rewrite_plan.to_rocksdb, transport), spark_schema
    )
    for mode in _modes_in_spark(edit):
        assert edit is not None
        old = old.unionByName(_encoded_edit(spark, rewrite_plan, rows, edit, mode))
    # routing: Spark's hash partitioning by the partition key (an explicit count, which adaptive
    # execution keeps); a single-partition store goes to partition 0
    routed = old.coalesce(1) if rows.single or not names else old.repartition(rewrite_plan.new_partitions, *names)
    # the Spark-free rewrite's order within each new partition: the same snapshot bytes whatever the shuffle did
    routed = routed.sortWithinPartitions("_order").select("_order", "key", "value")
    # stage 2: one task per new partition writes it
    return routed.mapInArrow(
        _WriteNew(
            rows,
            unique_ids,
            rewrite_plan.to_rocksdb,
            extra,
            dest.url,
            dict(dest.storage_options),
            edit.match if edit else None,
        ),
        _SUMMARY_DDL,
    )


def _modes_in_spark(edit: BoundEdit | None) -> list[EditMode]:
    """Which of ``upsert`` and ``delete`` an edit gives as Spark DataFrames."""
    if edit is None:
        return []
    given = set(edit.frames).union(*(frames for frames in edit.families.values()))
    return [mode for mode in (EditMode.UPSERT, EditMode.DELETE) if mode in given]


def _transport_spark_schema(names: list[str], key_json: list[Any]) -> Any:
    """The Spark schema of the rows handed from stage 1 to the shuffle."""
    from pyspark.sql.types import StructType as SparkStructType

    columns = [*zip(names, key_json, strict=True), ("_order", "long"), ("key", "binary"), ("value", "binary")]
    return SparkStructType.fromJson(
        {
            "type": "struct",
            "fields": [{"name": name, "type": t, "nullable": True, "metadata": {}} for name, t in columns],
        }
    )


def _encoded_edit(spark: Any, rewrite_plan: RewritePlan, rows: StoreRows, edit: BoundEdit, mode: EditMode) -> Any:
    """``edit``'s ``mode`` rows (a Spark DataFrame) checked and encoded where they are, in the rows
    stage 1 hands to the shuffle, placed before the old rows of their new partition."""
    key_types, key_json = _partition_key_types(rows)
    names = [f"_k{i}" for i in range(len(key_types))]
    transport = pa.schema(
        [
            *(pa.field(name, t) for name, t in zip(names, key_types, strict=True)),
            ("_order", pa.int64()),
            ("key", pa.binary()),
            ("value", pa.binary()),
        ]
    )
    order = _UPSERT_ORDER if mode == EditMode.UPSERT else _DELETE_ORDER
    schema = _transport_spark_schema(names, key_json)
    if not edit.families:
        frame = _rows_frame(edit.frames[mode], rewrite_plan.new_partitions)
        return frame.mapInArrow(_EncodeEdit(rows, mode, order, rewrite_plan.to_rocksdb, transport), schema)
    assert isinstance(rows, FamilyStoreRows)
    out = None
    for name, frames in edit.families.items():
        if mode not in frames:
            continue
        # every row of a key in one task (a list's elements make one value; a key given twice is seen there)
        frame = _rows_frame(frames[mode], rewrite_plan.new_partitions).repartition(rewrite_plan.new_partitions, "key")
        encoded = frame.mapInArrow(_EncodeFamilyEdit(rows, name, mode, order, transport), schema)
        out = encoded if out is None else out.unionByName(encoded)
    assert out is not None
    return out


def _rows_frame(given: FrameRows, n: int) -> Any:
    """The Spark DataFrame of rows written into a store: the user's, or rows derived from the user's
    where they are (every row of a key in one of ``n`` tasks), with the more rows that come along."""
    from pyspark.sql.pandas.types import from_arrow_schema

    frames = []
    for part in (given, *given.more):
        if part.derive is None:
            frames.append(part.frame)
        else:
            derived = _DeriveFromTaskRows(part.derive, part.schema)
            frames.append(part.frame.repartition(n, "key").mapInArrow(derived, from_arrow_schema(part.schema)))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


class _DeriveFromTaskRows:
    """Rows derived from one task's rows, all of them at once (``mapInArrow``)."""

    def __init__(self, derive: Callable[[pa.Table], pa.Table], schema: pa.Schema) -> None:
        self.derive = derive
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with spark_worker_errors("rows written into a store"):
            given = [batch for batch in batches if batch.num_rows]
            if not given:
                return
            yield from self.derive(pa.Table.from_batches(given)).cast(self.schema).to_batches(BATCH_ROWS)


class _EncodeEdit:
    """Rows written into a store (``mapInArrow`` over the user's DataFrame): each batch checked
    against the store's schemas and encoded in the target encoding, with its partition key."""

    def __init__(self, rows: StoreRows, mode: EditMode, order: int, to_rocksdb: bool, transport: pa.Schema) -> None:
        self.rows = rows
        self.mode = mode
        self.order = order
        self.to_rocksdb = to_rocksdb
        self.transport = transport

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        label = f"{self.mode} rows for {store_label(self.rows.plan, located=True)}"
        for batch in batches:
            with spark_worker_errors(label):
                if not batch.num_rows:
                    continue
                rows = self.rows
                _, keys, values = encode_table(rows, pa.Table.from_batches([batch]), self.mode, [])
                columns, _ = rows.partition_key(keys, None)
                n = len(keys.starts)
                k, v = rows.convert(keys, values if values is not None else empty_values(rows, n), self.to_rocksdb)
                yield from _transport_batches(columns, self.order, k, v, self.transport)


class _EncodeFamilyEdit:
    """Rows written into one variable (or join store) of a store with column families (``mapInArrow``
    over the user's DataFrame, repartitioned by its ``key``): the task's rows checked and encoded
    together, with the entries Spark keeps beside them, each entry with its grouping key."""

    def __init__(self, rows: FamilyStoreRows, name: str, mode: EditMode, order: int, transport: pa.Schema) -> None:
        self.rows = rows
        self.name = name
        self.mode = mode
        self.order = order
        self.transport = transport

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        label = f"{self.mode} rows for {self.name} of {store_label(self.rows.plan, located=True)}"
        with spark_worker_errors(label):
            # one partition of the rows in memory, never all the rows given
            given = [batch for batch in batches if batch.num_rows]
            if not given:
                return
            table = pa.Table.from_batches(given)
            keys, values = bind_family_rows(self.rows, self.name, self.mode, table)
            if keys is None:
                return
            columns, _ = self.rows.partition_key(keys, None)
            values = values if values is not None else empty_values(self.rows, len(keys.starts))
            yield from _transport_batches(columns, self.order, keys, values, self.transport)


def _transport_batches(
    columns: list[pa.Array], order: int, keys: RowBuffer, values: RowBuffer, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Encoded rows as the shuffle carries them: the partition key's columns, the edit's order, the key
    and value bytes, in batches of at most ``BATCH_ROWS`` rows."""
    n = len(keys.starts)
    for lo in range(0, n, BATCH_ROWS):
        run = slice(lo, lo + BATCH_ROWS)
        whole = lo == 0 and n <= BATCH_ROWS
        yield pa.RecordBatch.from_arrays(
            [
                *(columns if whole else [c.slice(lo, BATCH_ROWS) for c in columns]),
                pa.array(np.full(len(keys.starts[run]), order, dtype=np.int64)),
                binary_array(keys if whole else keys.take(run)),
                binary_array(values if whole else values.take(run)),
            ],
            schema=schema,
        )


def _partition_key_types(rows: StoreRows) -> tuple[list[pa.DataType], list[Any]]:
    """The Arrow types of the columns :meth:`StoreRows.partition_key` gives, and their Spark types (as
    schema JSON): the key schema's own where they match it, so Spark hashes exactly the types it hashed."""
    from pyspark.sql.pandas.types import from_arrow_type

    empty = np.zeros(0, dtype=np.int64)
    columns, _ = rows.partition_key(RowBuffer(b"", empty, empty, "no rows"), None)
    # the key the store routes by (a store with column families narrows it to the grouping key)
    key_schema = getattr(rows, "key_schema", None) or rows.plan.key_schema
    fields = key_schema.fields
    width = rows.plan.partition_key_fields or len(fields)
    # one struct column holds the whole partition key (Spark hashes a struct as its fields in turn)
    whole = [key_schema, StructType(fields[:width])] if len(columns) == 1 else []
    out = []
    for i, column in enumerate(columns):
        candidates = [*([fields[i].data_type] if i < len(fields) else []), *whole]
        match = next((c for c in candidates if not _has_udt(c) and c.to_arrow() == column.type), None)
        out.append(
            match.to_json()
            if match is not None
            else from_arrow_type(column.type, prefer_timestamp_ntz=True).jsonValue()
        )
    return [c.type for c in columns], out


def _has_udt(data_type: Any) -> bool:
    if isinstance(data_type, UserDefinedType):
        return True
    return isinstance(data_type, StructType) and any(_has_udt(f.data_type) for f in data_type.fields)


def _job_error(exc: BaseException, what: str) -> StateReaderError:
    """The error a failed Spark job stands for: the Python worker's error of ours, as its own class,
    when there is one; else the job's failure in one line."""
    text = str(exc)
    found = _WORKER_ERROR.findall(text)
    if found:
        name, message = found[-1]
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, StateReaderError):
            return cls(message.strip())
    lines = [line for line in text.splitlines() if line.strip()]
    # a Python worker's traceback ends with its exception; anything else says most in its first line
    ends = [line for line in lines if not line[0].isspace()] if "Traceback (most recent call last)" in text else []
    line = (ends or lines or [type(exc).__name__])[-1 if ends else 0].strip()
    return StateReaderError(f"the Spark job that {what} failed: {line[:1000]}")


def binary_array(rows: RowBuffer) -> pa.Array:
    """The rows of ``rows`` as an Arrow binary array (one copy at most, no Python per row)."""
    lengths = rows.lengths
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    first = int(rows.starts[0]) if len(lengths) else 0
    if np.array_equal(rows.starts - first, offsets[:-1]):
        data = rows.buf[first : first + total]  # the rows lie one after another already
    else:
        data = np.empty(total, dtype=np.uint8)
        copy_spans(data, offsets[:-1], rows.buf, rows.starts, lengths)
    return pa.Array.from_buffers(
        pa.binary(), len(lengths), [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )


def row_buffer(array: pa.Array, source: str) -> RowBuffer:
    """The values of an Arrow binary (or large binary) array without nulls as a :class:`RowBuffer`."""
    wide = pa.types.is_large_binary(array.type)
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if wide else np.int32)
    offsets = offsets[array.offset : array.offset + len(array) + 1].astype(np.int64)
    start = int(offsets[0]) if len(offsets) else 0
    end = int(offsets[-1]) if len(offsets) else 0
    data = memoryview(data_buffer)[start:end] if data_buffer is not None else b""
    return RowBuffer(data, offsets[:-1] - start, np.diff(offsets), source)


class _ReadOld:
    """Stage 1 (``mapInArrow`` over one row per old partition): the kept rows of each old partition
    in the target encoding, with their partition key, then one row of the partition's counts."""

    def __init__(
        self, rows: StoreRows, pids: list[int], drop: KeyFilter | None, to_rocksdb: bool, transport: pa.Schema
    ) -> None:
        self.rows = rows
        self.label = store_label(rows.plan, located=True)
        self.pids = pids
        self.drop = drop
        self.to_rocksdb = to_rocksdb
        self.transport = transport

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for position in batch.column(0).to_pylist():
                pid = self.pids[position]
                with spark_worker_errors(f"partition {pid} of {self.label}"):
                    yield from self._read(position, pid)

    def _read(self, position: int, pid: int) -> Iterator[pa.RecordBatch]:
        rows = self.rows
        keys, values, source_sizes = rows.load_sized(pid)
        sizes = row_bytes(keys, values)
        old_rows, old_bytes = len(sizes), int(source_sizes.sum())  # the current size: the source's, not transformed
        kept = 0
        # a run of rows at a time: what is decoded and encoded beyond the loaded partition follows the run
        for lo, hi in row_runs(sizes, BATCH_BYTES, BATCH_ROWS):
            columns, keep = rows.partition_key(keys.take(slice(lo, hi)), self.drop)
            index = np.flatnonzero(keep)
            if not len(index):
                continue
            kept += len(index)
            at = index + lo  # in the partition
            k, v = rows.convert(keys.take(at), values.take(at), self.to_rocksdb)
            taken = pa.array(index)
            yield pa.RecordBatch.from_arrays(
                [
                    *(c.take(taken) for c in columns),
                    pa.array((position << _ORDER_SHIFT) | at, pa.int64()),
                    binary_array(k),
                    binary_array(v),
                ],
                schema=self.transport,
            )
        counts = np.array([pid, old_rows, old_bytes, old_rows - kept], dtype=_COUNTS).tobytes()
        yield pa.RecordBatch.from_arrays(
            [
                *(pa.nulls(1, f.type) for f in list(self.transport)[:-3]),
                pa.array([-1], pa.int64()),
                pa.nulls(1, pa.binary()),
                pa.array([counts], pa.binary()),
            ],
            schema=self.transport,
        )


def _joined(arrays: list[pa.Array]) -> pa.Array:
    """Binary arrays as one (an empty one for none)."""
    return pa.concat_arrays(arrays) if arrays else pa.array([], pa.binary())


class _Writer:
    """Writes through a :class:`Destination` opened where it runs, counting files and bytes."""

    def __init__(self, url: str, storage_options: dict[str, Any]) -> None:
        self.dest = Destination(url, storage_options)
        self.files = 0
        self.bytes = 0

    def __call__(self, rel: str, data: bytes | Iterable[bytes]) -> None:
        self.bytes += self.dest.write(rel, data)
        self.files += 1


class _WriteNew:
    """Stage 2 (``mapInArrow`` over the routed rows): the task's new partition (its Spark partition id)
    framed and written as the snapshot of version B + 1, with the rows written into the store applied
    (``match``: how a store with column families matches old entries); one summary row for it, and
    the counts rows of the old partitions that came along."""

    def __init__(
        self,
        rows: StoreRows,
        unique_ids: dict[int, str | None],
        to_rocksdb: bool,
        extra: dict[str, Any],
        url: str,
        storage_options: dict[str, Any],
        match: FamilyMatch | None = None,
    ) -> None:
        self.rows = rows
        self.label = store_label(rows.plan, located=True)
        # the store's new partitions, each with the unique id its files are named by (format 2)
        self.unique_ids = unique_ids
        self.to_rocksdb = to_rocksdb
        self.extra = extra
        self.url = url
        self.storage_options = storage_options
        self.match = match

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None  # called in a Spark task
        pid = context.partitionId()
        with spark_worker_errors(f"new partition {pid} of {self.label}"):
            yield self._write(pid, batches)

    def _write(self, pid: int, batches: Iterator[pa.RecordBatch]) -> pa.RecordBatch:
        plan = self.rows.plan
        source = f"rows routed to partition {pid} of {self.label}"
        counts: list[np.ndarray] = []
        rows = size = 0
        # rows written into the store come first in the partition's order (deleted keys, then upserts):
        # all of them are read before the first old row
        upserted: list[tuple[pa.Array, pa.Array]] = []
        deleted: list[tuple[pa.Array, pa.Array]] = []
        first: list[tuple[pa.Array, pa.Array]] = []  # the old rows of the batch where the edit rows end
        stream = iter(batches)

        def old_rows(batch: pa.RecordBatch) -> tuple[pa.Array, pa.Array, pa.Array]:
            order, keys, values = batch.column("_order"), batch.column("key"), batch.column("value")
            if keys.null_count:  # an old partition's counts
                marks = keys.is_null()
                counts.extend(np.frombuffer(raw, dtype=_COUNTS) for raw in values.filter(marks).to_pylist())
                keep = pc.invert(marks)
                order, keys, values = order.filter(keep), keys.filter(keep), values.filter(keep)
            return order, keys, values

        for batch in stream:
            order, keys, values = old_rows(batch)
            given = pc.less_equal(order, _UPSERT_ORDER)
            if pc.any(given).as_py():
                up, down = pc.equal(order, _UPSERT_ORDER), pc.equal(order, _DELETE_ORDER)
                upserted.append((keys.filter(up), values.filter(up)))
                deleted.append((keys.filter(down), values.filter(down)))
                old = pc.invert(given)
                keys, values = keys.filter(old), values.filter(old)
            if len(keys):
                first.append((keys, values))
                break

        def framed(parts: list[tuple[pa.Array, pa.Array]], kind: str) -> bytes:
            if not parts:
                return b""
            k = row_buffer(_joined([k for k, _ in parts]), f"{source} {kind} key")
            v = row_buffer(_joined([v for _, v in parts]), f"{source} {kind} value")
            return frame_records(k, v)[0].tobytes() if len(k.starts) else b""

        def framed_old() -> Iterator[np.ndarray]:
            # the old rows stream into the writer batch by batch; the old partitions' counts are picked out
            nonlocal rows, size
            rest = (old_rows(batch)[1:] for batch in stream)
            for keys, values in chain(first, rest):
                if not len(keys):
                    continue
                if pid not in self.unique_ids:
                    raise StateReaderError(
                        f"rows were routed to partition {pid} of {self.label}, which is "
                        f"not among its new partitions {sorted(self.unique_ids)}"
                    )
                k, v = row_buffer(keys, source + " key"), row_buffer(values, source + " value")
                rows += len(k.starts)
                size += int(row_bytes(k, v).sum())
                yield frame_records(k, v)[0]

        ups, downs = framed(upserted, "upserted"), framed(deleted, "deleted")
        edit = EditCounts()
        records = edited(framed_old(), ups, downs, source, edit, self.match) if ups or downs else framed_old()
        writer = _Writer(self.url, self.storage_options)
        if pid in self.unique_ids:
            write_partition(plan, pid, records, self.to_rocksdb, self.extra, writer, self.unique_ids[pid])
        else:
            for _ in records:
                pass
        rows += edit.row_change
        size += edit.added_bytes - edit.removed_bytes
        old = np.array(counts, dtype=_COUNTS).reshape(-1, 4)
        # this partition's row (when it is one of the store's), then the old partitions' counts
        mine = (
            [(True, pid, rows, size, 0, writer.files, writer.bytes, edit.gained, edit.replaced, edit.lost)]
            if pid in self.unique_ids
            else []
        )
        theirs = [(False, p, r, b, d, 0, 0, 0, 0, 0) for p, r, b, d in old.tolist()]
        return pa.RecordBatch.from_pylist(
            [dict(zip(_SUMMARY.names, r, strict=True)) for r in mine + theirs], schema=_SUMMARY
        )
