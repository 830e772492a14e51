"""Rows written into a store by a rewrite: ``upsert`` (a key's value replaced, or a key added) and
``delete`` (keys taken out), given as tables in the shape ``read_state`` returns.

The rows are checked against the store's schemas before anything is written
(:mod:`~state_reader.core.rewrite.edit_fit`: columns and fields, types and safe widenings, nulls,
no key twice). They are then encoded as the source store keeps its rows (UnsafeRows, framed for
RocksDB; a store with column families: :mod:`~state_reader.core.rewrite.edit_families`), so that
the rewrite routes them with the store's own rows: each to the partition Spark's hash gives its
key. A given ``partition_id`` column is checked against that hash, never used.

A new partition is edited as it is written (:func:`edited`): the old rows whose key is upserted or
deleted are left out, the upserted rows follow. Keys are compared as bytes in the destination's
encoding, which is Spark's own (Spark compares state keys as bytes too).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_reader.core.rewrite.edit_families import FamilyMatch, bind_families, family_targets
from state_reader.core.rewrite.edit_fit import (
    EditMode,
    check_partitions,
    conform_column,
    key_bytes,
    require_columns,
    require_non_null,
    require_unique,
    typed_table,
)
from state_reader.core.rewrite.route import Spill
from state_reader.core.rewrite.rows import FamilyStoreRows, StoreRows, TransformedStoreRows, store_label
from state_reader.core.size import row_bytes
from state_reader.errors import (
    DuplicateEditKeyError,
    InvalidOptionError,
    StateReaderError,
    UnknownEditStoreError,
    UnsupportedOptionError,
)
from state_reader.formats.rocksdb_encode import encode_keys, encode_values, with_row_checksums
from state_reader.formats.unsaferow import PAD, RowBuffer
from state_reader.formats.unsaferow_encode import encode_rows
from state_reader.io.memory import release_free_memory
from state_reader.model.checkpoint import DEFAULT_STORE
from state_reader.model.state_variables import TIMER_INDEXES
from state_reader.providers.hdfs import frame_records, framed_rows


@dataclass(frozen=True)
class StoreEdit:
    """What to write into one store, chosen by ``read_state``'s selectors: ``upsert`` rows (columns
    ``key`` and ``value``) and ``delete`` keys (a ``key`` column), each a pyarrow Table or RecordBatch
    or a pandas DataFrame. With ``join_side``, the rows of that side of a join (two stores)."""

    upsert: Any = None
    delete: Any = None
    operator_id: int | None = None
    store_name: str | None = None
    state_var_name: str | None = None
    # rows of one side of a stream-stream join in ``read_state``'s joinSide shape (``left`` or ``right``),
    # written into that side's two stores (:mod:`~state_reader.core.rewrite.edit_join`)
    join_side: str | None = None
    # the rows are a transformWithState operator's timers, as ``read_state(read_registered_timers=True)``
    read_registered_timers: bool = False

    def rows(self) -> dict[EditMode, Any]:
        """The rows given, by what they do (``upsert`` first)."""
        given = {EditMode.UPSERT: self.upsert, EditMode.DELETE: self.delete}
        return {mode: rows for mode, rows in given.items() if rows is not None}


@dataclass(frozen=True)
class FrameRows:
    """Rows held in Spark (a Spark DataFrame) that stay there, with their Arrow schema: checked and
    written by the Spark row mover, on the executors."""

    schema: pa.Schema
    frame: Any
    # rows derived from ``frame`` where they are: called on one task's rows (a table of ``frame``'s, every row
    # of a key among them), it returns rows of ``schema`` (a join side's rows as one of its stores')
    derive: Callable[[pa.Table], pa.Table] | None = None
    # more rows of the same schema, written with these (a join side's stale entries, from upserts and deletes)
    more: tuple[FrameRows, ...] = ()


@dataclass
class BoundEdit:
    """A :class:`StoreEdit` bound to one store of a rewrite: its rows checked and encoded as the source store
    keeps them."""

    rows: StoreRows
    # the rows given here, checked and encoded, each in its new partition's local file until it is written
    spill: EditSpill | None = None
    # the safe widenings applied to the given types, one sentence each
    widened: list[str] = field(default_factory=list)
    # rows held in Spark (``upsert``, ``delete``): only their schema is checked here
    frames: dict[EditMode, FrameRows] = field(default_factory=dict)
    # a store with column families: how old entries are matched and which the counts count
    match: FamilyMatch | None = None
    # a store with column families, rows held in Spark: each variable's (or join store's)
    # ``upsert`` and ``delete`` rows, bound on the executors a grouping key's rows at a time
    families: dict[str, dict[EditMode, FrameRows]] = field(default_factory=dict)

    @property
    def in_spark(self) -> bool:
        """The rows are held in Spark (Spark DataFrames), for the Spark row mover to check and write."""
        return bool(self.frames or self.families)


@dataclass
class EditCounts:
    """What the edit did to one new partition: keys gained, replaced and lost, and the bytes it moved."""

    gained: int = 0
    replaced: int = 0
    lost: int = 0
    added_bytes: int = 0
    removed_bytes: int = 0
    # rows added less rows taken out, every column family's (the counts above count the user's only)
    row_change: int = 0


@dataclass(frozen=True)
class SpillTo:
    """Where a rewrite's edit rows wait for their new partitions: a local temporary directory, the
    destination's partition count and whether it is RocksDB (the encoding the rows are kept in)."""

    workdir: str
    num_partitions: int
    to_rocksdb: bool

    def spill(self, name: str) -> EditSpill:
        return EditSpill(_subdir(self.workdir, name), self.num_partitions, self.to_rocksdb)


def bind_edits(
    stores: Sequence[StoreRows], edits: Sequence[StoreEdit], location: str, to: SpillTo
) -> list[BoundEdit | None]:
    """Each store's bound edit (None where no edit names it), every edit checked, encoded and routed to its
    new partitions in ``to``; refuses before anything is written. Edits for the variables (or join
    stores) of one store with column families make one edit of that store."""
    out: list[BoundEdit | None] = [None] * len(stores)
    by_family: dict[int, dict[str, StoreEdit]] = {}
    for edit in edits:
        if edit.upsert is None and edit.delete is None:
            continue
        index, family = _find_store(stores, edit, location)
        if family is not None:
            named = by_family.setdefault(index, {})
            if family in named:
                raise InvalidOptionError(
                    f"{family} of {store_label(stores[index].plan)} is given rows twice; give each variable once"
                )
            named[family] = edit
            continue
        if out[index] is not None:
            raise InvalidOptionError(f"{store_label(stores[index].plan)} is given rows twice; give each store once")
        out[index] = _bind(stores[index], edit, location, to.spill(str(index)))
    for index, named in by_family.items():
        rows = stores[index]
        assert isinstance(rows, FamilyStoreRows)
        out[index] = _bind_families(rows, named, location, to.spill(str(index)))
    return out


def _find_store(stores: Sequence[StoreRows], edit: StoreEdit, location: str) -> tuple[int, str | None]:
    """The store an edit is for, and (a store with column families) the variable or join store it names."""
    operator_ids = sorted({rows.plan.operator_id for rows in stores})
    op = edit.operator_id
    if op is None:
        if len(operator_ids) != 1:
            raise InvalidOptionError(
                f"{location} has {len(operator_ids)} stateful operators ({operator_ids}); pass operator_id to say "
                "which one the rows are for"
            )
        op = operator_ids[0]
    if op not in operator_ids:
        raise UnknownEditStoreError(
            f"the rows are for operator {op}, which {location} does not have (its stateful operators: {operator_ids})",
            path=location,
        )
    mine = [(i, rows) for i, rows in enumerate(stores) if rows.plan.operator_id == op]
    for i, rows in mine:
        if isinstance(rows, FamilyStoreRows):
            return i, _find_family(rows, edit, location)
    if edit.state_var_name is not None or edit.read_registered_timers:
        what = "timers" if edit.read_registered_timers else f"state variable {edit.state_var_name!r}"
        raise UnknownEditStoreError(
            f"the rows are for {what}, but operator {op} of {location} keeps no state variables or timers (only "
            "transformWithState does)",
            path=location,
        )
    name = edit.store_name or DEFAULT_STORE
    for i, rows in mine:
        if rows.plan.store_name == name:
            return i, None
    names = ", ".join(rows.plan.store_name for _, rows in mine)
    raise UnknownEditStoreError(
        f"the rows are for store '{name}' of operator {op}, which {location} does not have (its stores: {names})",
        path=location,
    )


def _find_family(rows: FamilyStoreRows, edit: StoreEdit, location: str) -> str:
    """The variable (transformWithState: ``state_var_name``, or a dict's key) or join store (``store_name``)
    an edit names in a store with column families."""
    op = rows.plan.operator_id
    known = family_targets(rows)
    tws = rows.variable_kinds is not None
    if edit.state_var_name is not None and edit.store_name not in (None, DEFAULT_STORE):
        raise InvalidOptionError("give state_var_name or store_name, not both")
    if edit.read_registered_timers:
        if edit.state_var_name is not None:
            raise InvalidOptionError("give state_var_name or read_registered_timers, not both")
        timers = [name for name in TIMER_INDEXES if name in known]
        if not timers:
            raise UnknownEditStoreError(
                f"the rows are for timers, but operator {op} of {location} registers none (its "
                f"{'state variables' if tws else 'join stores'}: {', '.join(known)})",
                path=location,
            )
        return timers[0]
    name = edit.state_var_name if edit.state_var_name is not None else edit.store_name
    what = "state variables" if tws else "join stores"
    listed = ", ".join(f"{n} ({t.kind}{', TTL' if t.ttl else ''})" if tws else n for n, t in known.items())
    if name in (None, DEFAULT_STORE):
        raise InvalidOptionError(
            f"operator {op} of {location} keeps its state in RocksDB column families: name the "
            f"{'state variable (state_var_name, or the key of a dict of rows)' if tws else 'join store (store_name)'}"
            f" the rows are for (its {what}: {listed})"
        )
    assert name is not None
    if name not in known:
        raise UnknownEditStoreError(
            f"the rows are for {name!r} of operator {op}, which {location} does not have (its {what}: {listed})",
            path=location,
        )
    return name


# edit rows are checked, encoded and routed this many at a time: beyond the rows given, memory holds one
# run of them, then one new partition's while it is written
_EDIT_ROWS = 1 << 18


def _bind(rows: StoreRows, edit: StoreEdit, location: str, spill: EditSpill) -> BoundEdit:
    plan = rows.plan
    where = store_label(plan, located=True)
    if isinstance(rows, TransformedStoreRows):
        raise InvalidOptionError(f"{where} is changed by transform; give it rows or a transform, not both")
    if plan.store_conf.avro:
        raise UnsupportedOptionError(
            f"{where} keeps Avro-encoded state; writing rows into it is not supported yet", path=location
        )
    if plan.join is not None:
        raise UnsupportedOptionError(f"{where} is a join side; writing rows into it is not supported yet")
    bound = BoundEdit(rows)
    given = edit.rows()
    for mode, rows_given in given.items():
        if isinstance(rows_given, FrameRows):
            # the rows are checked where they are (a Spark job); their columns and types are checked here
            encode_table(rows, pa.Table.from_batches([], schema=rows_given.schema), mode, bound.widened)
            bound.frames[mode] = rows_given
    if bound.frames:
        return bound
    tables = {mode: _edit_table(rows, mode, rows_given) for mode, rows_given in given.items()}
    for mode, table in tables.items():
        for lo in range(0, table.num_rows, _EDIT_ROWS):
            try:
                _, keys, values = encode_table(rows, table.slice(lo, _EDIT_ROWS), mode, bound.widened)
            except StateReaderError:
                encode_table(rows, table, mode, [])  # the whole table: the error names the row among all
                raise
            spill.add(rows, mode, keys, values)
    if not spill.keys_unique():
        _refuse_repeated_keys(rows, tables)
    bound.spill = spill
    return bound


def _edit_table(rows: StoreRows, mode: EditMode, given: Any) -> pa.Table:
    plan = rows.plan
    typed = [("key", plan.key_schema), ("value", plan.value_schema)]
    if mode == EditMode.UPSERT:
        table = typed_table(given, mode, typed)
        require_columns(table, ("key", "value"), mode, store_label(plan, located=True), typed=typed)
    else:
        table = typed_table(given, mode, typed[:1])
        require_columns(table, ("key",), mode, store_label(plan, located=True), optional=("value",), typed=typed)
    return table


def _refuse_repeated_keys(rows: StoreRows, tables: dict[EditMode, pa.Table]) -> None:
    """A key upserted twice, or both upserted and deleted, refused naming the rows (the edit encoded
    whole: an error is rare, and its message names rows of the whole table)."""
    encoded = {mode: encode_table(rows, table, mode, []) for mode, table in tables.items()}
    if EditMode.UPSERT in encoded:
        keys, upsert_keys, _ = encoded[EditMode.UPSERT]
        require_unique(upsert_keys, keys, EditMode.UPSERT)
    if EditMode.DELETE in encoded and EditMode.UPSERT in encoded:
        keys, delete_keys, _ = encoded[EditMode.DELETE]
        both = pc.is_in(key_bytes(delete_keys), value_set=key_bytes(encoded[EditMode.UPSERT][1]))
        first = int(np.flatnonzero(both.to_numpy(zero_copy_only=False))[0])
        raise DuplicateEditKeyError(
            f"key {keys[first].as_py()} (delete row {first}) is both upserted and deleted; give it once"
        )
    raise AssertionError("a repeated key was found in the routed rows but not in the rows given")


def _bind_families(rows: FamilyStoreRows, named: dict[str, StoreEdit], location: str, spill: EditSpill) -> BoundEdit:
    """One edit of a store with column families from the edits of its variables (or join stores)."""
    where = store_label(rows.plan, located=True)
    given = {name: edit.rows() for name, edit in named.items()}
    if any(isinstance(frame, FrameRows) for frames in given.values() for frame in frames.values()):
        return _frame_families(rows, given, where)
    bound = bind_families(rows, {name: (edit.upsert, edit.delete) for name, edit in named.items()})
    # checked whole (a variable's rows against its others'), then routed
    if bound.upsert_keys is not None and bound.upsert_values is not None:
        spill.add(rows, EditMode.UPSERT, bound.upsert_keys, bound.upsert_values)
    if bound.delete_keys is not None:
        spill.add(rows, EditMode.DELETE, bound.delete_keys, None)
    return BoundEdit(rows, spill, bound.widened, match=bound.match)


def _frame_families(rows: FamilyStoreRows, given: dict[str, dict[EditMode, Any]], where: str) -> BoundEdit:
    """The edit of a store with column families whose rows are Spark DataFrames: their columns and
    types checked here (on no rows), their rows checked and encoded where they are."""
    for name, frames in given.items():
        if not all(isinstance(frame, FrameRows) for frame in frames.values()):
            raise UnsupportedOptionError(
                f"rows for {name} of {where} mix Spark DataFrames and local rows; give both as Spark DataFrames"
            )

    def empty(frames: dict[EditMode, Any], mode: EditMode) -> pa.Table | None:
        return pa.Table.from_batches([], schema=frames[mode].schema) if mode in frames else None

    bound = bind_families(
        rows,
        {name: (empty(frames, EditMode.UPSERT), empty(frames, EditMode.DELETE)) for name, frames in given.items()},
    )
    return BoundEdit(rows, None, bound.widened, match=bound.match, families=given)


def bind_family_rows(
    rows: FamilyStoreRows, name: str, mode: EditMode, given: pa.Table
) -> tuple[RowBuffer | None, RowBuffer | None]:
    """The ``mode`` rows of one variable (or join store) checked and encoded with the entries Spark
    keeps beside them: the keys, and (``upsert``) their values; every row of a grouping key must be
    among ``given`` (a list's elements make one value, a key given twice is refused)."""
    bound = bind_families(rows, {name: (given, None) if mode == EditMode.UPSERT else (None, given)})
    if mode == EditMode.UPSERT:
        return bound.upsert_keys, bound.upsert_values
    return bound.delete_keys, None


def encode_table(
    rows: StoreRows, given: Any, mode: EditMode, widened: list[str]
) -> tuple[pa.Array, RowBuffer, RowBuffer | None]:
    """Rows for ``mode`` (``upsert``: key and value; ``delete``: key) checked against the store's
    schemas and encoded as the store keeps its rows: the keys as given (typed as the store's),
    their bytes, and the values' bytes (None for ``delete``). A ``partition_id`` is checked here.
    The widenings applied are added to ``widened``."""
    plan = rows.plan
    source = f"{mode} rows for {store_label(plan, located=True)}"
    table = _edit_table(rows, mode, given)
    notes: list[str] = []
    keys = conform_column(table.column("key"), plan.key_schema, "key", mode, notes)
    require_non_null(keys, plan.key_schema, "key", mode)
    encoded_keys = _encode_keys(rows, keys, source)
    encoded_values = None
    if mode == EditMode.UPSERT:
        values = conform_column(table.column("value"), plan.value_schema, "value", mode, notes)
        require_non_null(values, plan.value_schema, "value", mode)
        stored = values.cast(plan.stored_value_schema.to_arrow()) if plan.value_long_slots else values
        encoded_values = _encode_values(rows, stored, source)
        if plan.store_conf.row_checksum:
            encoded_values = with_row_checksums(encoded_keys, encoded_values, with_length=rows.rocksdb)
    check_partitions(rows, table, encoded_keys, mode)
    widened += [note for note in notes if note not in widened]
    return keys, encoded_keys, encoded_values


# -- encoding ----------------------------------------------------------------------------------------


def _encode_keys(rows: StoreRows, keys: pa.Array, source: str) -> RowBuffer:
    """Keys as the source store keeps them (UnsafeRows, floats normalized as Spark's grouping does)."""
    plan = rows.plan
    encoded = encode_rows(keys, plan.key_schema, source + " key", normalize_floats=True)
    return encode_keys(encoded, plan.key_schema, rows.spec) if rows.rocksdb else encoded


def _encode_values(rows: StoreRows, values: pa.Array, source: str) -> RowBuffer:
    encoded = encode_rows(values, rows.plan.stored_value_schema, source + " value")
    return encode_values(encoded) if rows.rocksdb else encoded


# -- routing and editing -------------------------------------------------------------------------------


class EditSpill:
    """A store's upserted rows and deleted keys, each routed to its new partition in the destination's
    encoding and held in local temporary files until that partition is written."""

    def __init__(self, workdir: str, num_partitions: int, to_rocksdb: bool) -> None:
        self.num_partitions = num_partitions
        self.to_rocksdb = to_rocksdb
        self.upserts = Spill(_subdir(workdir, EditMode.UPSERT), num_partitions)
        self.deletes = Spill(_subdir(workdir, EditMode.DELETE), num_partitions)

    def add(self, rows: StoreRows, mode: EditMode, keys: RowBuffer, values: RowBuffer | None) -> None:
        """Route encoded ``upsert`` rows (``values`` given) or ``delete`` keys to their new partitions."""
        if values is None:
            values = empty_values(rows, len(keys.starts))
        spill = self.upserts if mode == EditMode.UPSERT else self.deletes
        _spill(rows, keys, values, self.num_partitions, self.to_rocksdb, spill)

    def keys_unique(self) -> bool:
        """No key upserted twice, nor both upserted and deleted: checked one new partition at a time (a
        key's rows all go to one partition)."""
        for pid in range(self.num_partitions):
            up = _spilled_keys(self.upserts, pid)
            if len(pc.unique(up)) != len(up):
                return False
            gone = _spilled_keys(self.deletes, pid)
            if len(up) and len(gone) and pc.any(pc.is_in(gone, value_set=up)).as_py():
                return False
            del up, gone
            release_free_memory()  # a partition's keys, not every partition's, held at a time
        return True

    def take(self, pid: int) -> tuple[bytes, bytes]:
        """New partition ``pid``'s upserted records and deleted keys (framed records), read once."""
        return b"".join(self.upserts.take(pid)), b"".join(self.deletes.take(pid))


def _spilled_keys(spill: Spill, pid: int) -> pa.Array:
    data = b"".join(spill.read(pid))
    return key_bytes(framed_rows(data, "routed edit rows")[0]) if data else pa.array([], pa.large_binary())


def _subdir(workdir: str, name: str) -> str:
    path = os.path.join(workdir, name)
    os.makedirs(path, exist_ok=True)
    return path


def empty_values(rows: StoreRows, n: int) -> RowBuffer:
    """``n`` empty values in the store's encoding (what deleted keys are framed with)."""
    empty = RowBuffer.wrap(np.zeros(PAD, dtype=np.uint8), 0, np.zeros(n, np.int64), np.zeros(n, np.int64), "deleted")
    return encode_values(empty) if rows.rocksdb and n else empty


# edit rows are routed this many at a time: what routing holds beyond a run of encoded rows follows this
_SPILL_ROWS = 1 << 16


def _spill(rows: StoreRows, keys: RowBuffer, values: RowBuffer, n: int, to_rocksdb: bool, spill: Spill) -> None:
    for lo in range(0, len(keys.starts), _SPILL_ROWS):
        run = slice(lo, lo + _SPILL_ROWS)
        part_keys, part_values = keys.take(run), values.take(run)
        target = rows.route(part_keys, n, None)[0]
        order = np.argsort(target, kind="stable")
        k, v = rows.convert(part_keys.take(order), part_values.take(order), to_rocksdb)
        counts = np.bincount(target[order], minlength=n)
        framed, lengths = frame_records(k, v)
        spill.add(framed, np.r_[0, np.cumsum(lengths)][np.r_[0, np.cumsum(counts)]], counts)


def edited(
    old: Iterable[bytes | np.ndarray],
    upserts: bytes,
    deletes: bytes,
    source: str,
    counts: EditCounts,
    match: FamilyMatch | None = None,
) -> Iterator[bytes | np.ndarray]:
    """One new partition's records with the edit applied: the old ``old`` records (chunks of whole
    framed records) less those whose key is upserted or deleted, then the upserted records.
    ``counts`` says what changed once the records have been consumed. ``match`` (a store with
    column families) matches TTL index entries by their element and counts the user's entries only."""
    up_keys, up_values = framed_rows(upserts, source + " upserted") if upserts else (None, None)
    up = _match_bytes(up_keys, match) if up_keys is not None else pa.array([], pa.large_binary())
    gone, groups = _deleted(framed_rows(deletes, source + " deleted")[0] if deletes else None, match)
    for chunk in old:
        keys, values = framed_rows(chunk, source)
        as_bytes = _match_bytes(keys, match)
        replaced = pc.is_in(as_bytes, value_set=up).to_numpy(zero_copy_only=False) if len(up) else None
        lost = pc.is_in(as_bytes, value_set=gone).to_numpy(zero_copy_only=False) if len(gone) else None
        if len(groups) and match is not None:
            # maps deleted whole: their entries and TTL index entries, matched by grouping key
            whole = pc.is_in(match.group_bytes(keys), value_set=groups).fill_null(False)
            hit = whole.to_numpy(zero_copy_only=False)
            lost = hit if lost is None else lost | hit
        if lost is not None and replaced is not None:
            lost = lost & ~replaced  # an entry of a map deleted whole and upserted again is replaced
        out = np.zeros(len(as_bytes), dtype=bool)
        for hit in (replaced, lost):
            if hit is not None:
                out |= hit
        if not out.any():
            yield chunk
            continue
        counted = match.counted_mask(keys) if match is not None else None
        for hit, attr in ((replaced, "replaced"), (lost, "lost")):
            if hit is not None:
                setattr(counts, attr, getattr(counts, attr) + int((hit if counted is None else hit & counted).sum()))
        counts.removed_bytes += int(row_bytes(keys, values)[out].sum())
        counts.row_change -= int(out.sum())
        kept = np.flatnonzero(~out)
        if len(kept):
            yield frame_records(keys.take(kept), values.take(kept))[0]
    if up_keys is not None and up_values is not None:
        counted = match.counted_mask(up_keys) if match is not None else None
        counts.gained += (len(up) if counted is None else int(counted.sum())) - counts.replaced
        counts.added_bytes += int(row_bytes(up_keys, up_values).sum())
        counts.row_change += len(up)
        yield upserts


def _deleted(keys: RowBuffer | None, match: FamilyMatch | None) -> tuple[pa.Array, pa.Array]:
    """What deleted keys take out: the bytes old entries are matched by, and the maps' grouping keys deleted
    whole (:meth:`~state_reader.core.rewrite.edit_families.FamilyMatch.group_bytes`)."""
    none = pa.array([], pa.large_binary())
    if keys is None:
        return none, none
    whole = match.group_deletes(keys) if match is not None else None
    if whole is None:
        return _match_bytes(keys, match), none
    return _match_bytes(keys.take(np.flatnonzero(~whole)), match), key_bytes(keys.take(np.flatnonzero(whole)))


def _match_bytes(keys: RowBuffer, match: FamilyMatch | None) -> pa.Array:
    """What an edit matches old entries by: each key's bytes, a TTL index entry's element key."""
    as_bytes = key_bytes(keys)
    found = match.element_keys(keys) if match is not None else None
    if found is None:
        return as_bytes
    index, elements = found
    take = np.arange(len(as_bytes))
    take[index] = len(as_bytes) + np.arange(len(index))
    return pa.concat_arrays([as_bytes, key_bytes(elements)]).take(pa.array(take))
