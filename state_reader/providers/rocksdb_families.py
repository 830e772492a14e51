"""A transformWithState variable read out of a RocksDB store: its column family's rows at a version,
and the changes a version made to it (from its changelog, or by comparing snapshots). The store is
loaded by :mod:`state_reader.providers.rocksdb`; the rows become output columns in
:mod:`state_reader.providers.rocksdb_variables`."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from state_reader.formats import changelog as changelog_format
from state_reader.formats.rocksdb_encoding import VIRTUAL_CF_PREFIX_BYTES, column_family_ids, delete_record_key, select
from state_reader.formats.unsaferow import RowBuffer
from state_reader.model.checkpoint import state_file_name
from state_reader.model.plan import StateReadPlan
from state_reader.providers.rocksdb import family_id_of, load_store, open_store, refuse_delete_range
from state_reader.providers.rocksdb_variables import change_columns, state_columns


def read_variable(plan: StateReadPlan, directory: str, partition_id: int) -> list[pa.Array]:
    """Output columns of a transformWithState variable (its column family) at the plan's version."""
    columns, _ = _read_variable(plan, directory, partition_id, stored=False)
    return columns


def read_variable_rows(
    plan: StateReadPlan, directory: str, partition_id: int
) -> tuple[list[pa.Array], RowBuffer, RowBuffer]:
    """:func:`read_variable`'s columns, and its column family's rows as stored (:func:`load_rows`'), from one
    load."""
    columns, stored = _read_variable(plan, directory, partition_id, stored=True)
    assert stored is not None
    return columns, *stored


def _read_variable(
    plan: StateReadPlan, directory: str, partition_id: int, stored: bool
) -> tuple[list[pa.Array], tuple[RowBuffer, RowBuffer] | None]:
    assert plan.variable is not None
    state = load_store(plan, directory, partition_id)
    source = f"{plan.storage.display(directory)} (version {plan.version})"
    families = state.column_families or open_store(plan, directory).column_families(plan.version)
    family_id = family_id_of(families, plan.variable.family.name)
    wanted = -1 if family_id is None else family_id  # ids are never negative: a missing family holds no rows
    rows = None
    if stored:  # taken before the rows become the dict state_columns reads (their order is kept)
        keys, values = state.row_buffers(source)
        if len(keys.starts):
            mask = column_family_ids(keys) == wanted
            keys, values = select(keys, mask), select(values, mask)
        rows = keys, values
    entries = list(state.entries.items()) if family_id is not None else []
    return state_columns(plan, plan.variable, entries, wanted, source), rows


def read_variable_changes(
    plan: StateReadPlan, directory: str, partition_id: int, version: int
) -> tuple[list[str], list[pa.Array]]:
    """Change types and output columns of the changes ``version`` made to a transformWithState variable."""
    assert plan.variable is not None
    store = open_store(plan, directory)
    if not store.changelogs and plan.change_feed_from_snapshots:
        return _variable_changes_from_snapshots(plan, directory, partition_id, version)
    unique_id = plan.checkpoint.state_unique_id(version - 1, plan.operator_id, partition_id, plan.store_name)
    log = store.read_changelog(version, unique_id, "a change feed is read from changelogs")
    source = plan.storage.display(f"{directory}/{state_file_name(version, 'changelog', unique_id)}")
    refuse_delete_range(log)
    row_checksum = plan.store_conf.row_checksum
    records = [
        (changelog_format.RECORD_TYPE_NAMES[kind], delete_record_key(k, row_checksum) if v is None else k, v)
        for kind, k, v in log.records
    ]
    family_id = family_id_of(store.column_families(version), plan.variable.family.name)
    if family_id is None:  # not created by this version: it changed nothing
        records, family_id = [], -1
    return change_columns(plan, plan.variable, records, family_id, source)


def _variable_changes_from_snapshots(
    plan: StateReadPlan, directory: str, partition_id: int, version: int
) -> tuple[list[str], list[pa.Array]]:
    """The changes ``version`` made to a transformWithState variable, from the snapshots of ``version - 1``
    and ``version`` (a store written without changelogs): as :func:`_changes_from_snapshots`, within the
    variable's column family. A list whose elements changed shows as the whole new list (an update, then
    appends), as a changelog's put of a list does."""
    assert plan.variable is not None
    name = plan.variable.family.name

    def family_entries(at_version: int) -> tuple[dict[bytes, bytes], int | None]:
        """The family's entries at ``at_version`` by key without its family id, and that id."""
        if at_version < 1:
            return {}, None
        state = load_store(replace(plan, batch_id=at_version - 1), directory, partition_id)
        families = state.column_families or open_store(plan, directory).column_families(at_version)
        family_id = family_id_of(families, name)
        if family_id is None:
            return {}, None
        prefix = family_id.to_bytes(VIRTUAL_CF_PREFIX_BYTES, "little", signed=True)
        return {k[len(prefix) :]: v for k, v in state.entries.items() if k[: len(prefix)] == prefix}, family_id

    after, after_id = family_entries(version)
    before, before_id = family_entries(version - 1)
    family_id = after_id if after_id is not None else before_id
    source = f"{plan.storage.display(directory)} (versions {version - 1} and {version})"
    if family_id is None:
        return change_columns(plan, plan.variable, [], -1, source)
    prefix = family_id.to_bytes(VIRTUAL_CF_PREFIX_BYTES, "little", signed=True)
    records: list[tuple[str, bytes, bytes | None]] = [
        ("update", prefix + k, v) for k, v in after.items() if before.get(k) != v
    ]
    records += [("delete", prefix + k, None) for k in before if k not in after]
    return change_columns(plan, plan.variable, records, family_id, source)
