"""RocksDBStateStoreProvider files -> the state of one store at one version.

Files in a store directory (a partition directory, or a join store's sub-directory)::

    <v>.zip                  snapshot of version v: RocksDB's CURRENT, MANIFEST-*, OPTIONS-*
                             (and possibly an empty *.log) plus Spark's ``metadata``:
                             a ``v1`` line, then JSON with ``sstFiles`` / ``logFiles``
                             ([{localFileName, dfsSstFileName | dfsLogFileName, sizeBytes}]),
                             ``numKeys`` and, from Spark 4.0, ``columnFamilyMapping``
                             ({name: virtual column family id}) and related fields
    SSTs/<n>-<uuid>.sst      data files named by the zips' sstFiles, shared between zips
    logs/<n>-<uuid>.log      WAL files named by logFiles (localFileName may be archive/<name>)
    <v>.changelog            changes made by version v (changelog checkpointing), see
                             :mod:`state_reader.formats.changelog`
    <v>_<uuid>.zip, <v>_<uuid>.changelog   the same, checkpoint format version 2

Version V with checkpoint format 1: the newest zip S <= V (none: the empty state),
then the changelogs S+1..V applied in order (the entries and what each record does to
them: :mod:`state_reader.providers.rocksdb_state`).

Checkpoint format 2: ``commits/<V-1>`` names the unique id u of V in
``stateUniqueIds[operator][partition][store index]``. ``V_u.zip`` is the state if it
exists; otherwise the lineage of ``V_u.changelog`` lists the (version, id) pairs
back to a snapshot: the newest of them with a zip is loaded and the changelogs of
the later ones, then ``V_u.changelog``, are applied. Files of retried tasks carry
other ids and are never used.

A snapshot's SST files are read directly when numba is there (see "reading SST
files directly" below). Otherwise, or for what that reader leaves aside, the
snapshot is rebuilt in a private temporary directory (zip entries checked before
anything is written, SSTs copied under their local names), opened read-only with
rocksdict, iterated, closed and deleted. The checkpoint itself is only read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace

import numpy as np
import pyarrow as pa

from state_reader.errors import (
    CorruptFileError,
    InvalidOptionError,
    MissingStateFileError,
    UnsafeArchiveError,
    UnsupportedOptionError,
)
from state_reader.formats import changelog as changelog_format
from state_reader.formats import kernels, rocksdict_db, snapshot_zip
from state_reader.formats.codecs import decompress
from state_reader.formats.rocksdb_encoding import (
    KeyEncoderSpec,
    changed_rows,
    column_family_ids,
    decode_keys,
    decode_values,
    delete_record_key,
    select,
    strip_column_family,
)
from state_reader.formats.sst import SstNotSupportedError, read_sst_changes, read_sst_rows
from state_reader.formats.unsaferow import RowBuffer
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import (
    first_missing,
    parse_state_file_name,
    state_file_name,
    version_ranges,
)
from state_reader.model.plan import StateReadPlan
from state_reader.providers.rocksdb_state import StoreState

# (version, unique id or None) of a zip or changelog
FileId = tuple[int, "str | None"]


# snapshots read by one read_state at least this big (in entries, scaled) load numba; see kernels.NUMBA_MIN_RECORDS:
# rocksdict costs about ten times more per entry than the HDFS Python walk
_ROCKSDICT_COST_SCALE = 8


# -- one store ----------------------------------------------------------------


class RocksDBStore:
    """The files of one store (operator, partition, store name) of the RocksDB provider."""

    def __init__(
        self,
        storage: Storage,
        directory: str,
        codec: str | None,
        row_checksum: bool = False,
        delimiter: bytes = b",",
        records_hint_scale: int = 1,
    ) -> None:
        self.storage = storage
        # stores the whole read loads (its partitions): scales the size that decides on numba
        self.records_hint_scale = records_hint_scale
        self.directory = directory
        self.codec = codec
        self.row_checksum = row_checksum
        self.delimiter = delimiter
        self.zips: set[FileId] = set()
        self.changelogs: set[FileId] = set()
        for name in storage.list_names(directory) or []:
            parsed = parse_state_file_name(name)
            if parsed is not None and parsed[2] in ("zip", "changelog"):
                version, unique_id, ext = parsed
                (self.zips if ext == "zip" else self.changelogs).add((version, unique_id))

    # -- messages --

    def _shown(self, name: str) -> str:
        return self.storage.display(f"{self.directory}/{name}")

    def _present(self) -> str:
        def summary(files: set[FileId]) -> str:
            plain = {v for v, u in files if u is None}
            with_ids = {v for v, u in files if u is not None}
            parts = []
            if plain:
                parts.append(version_ranges(plain))
            if with_ids:
                parts.append(f"{version_ranges(with_ids)} with unique ids")
            return "; ".join(parts) or "none"

        return (
            f"Files present in {self.storage.display(self.directory)}: zips {summary(self.zips)}, "
            f"changelogs {summary(self.changelogs)}"
        )

    def _missing(self, version: int, unique_id: str | None, kind: str, why: str) -> MissingStateFileError:
        shown = self._shown(state_file_name(version, kind, unique_id))
        return MissingStateFileError(f"{shown} does not exist; {why}. {self._present()}", path=shown)

    # -- files --

    def _read(self, name: str, on_missing: MissingStateFileError) -> bytes:
        try:
            return self.storage.read_bytes(f"{self.directory}/{name}")
        except FileNotFoundError:
            raise on_missing from None

    def read_changelog(self, version: int, unique_id: str | None, why: str) -> changelog_format.Changelog:
        """Download, decompress and parse one changelog."""
        name = state_file_name(version, "changelog", unique_id)
        raw = self._read(name, self._missing(version, unique_id, "changelog", why))
        shown = self._shown(name)
        log = changelog_format.parse_changelog(decompress(raw, self.codec, shown), shown)
        if log.lineage:  # the files before it (checkpoint format 2), which StoreFiles looks for
            self.storage.remember(f"{self.directory}/{name}", log.lineage)
        return log

    def load_snapshot(self, version: int, unique_id: str | None, why: str, as_dict: bool = False) -> StoreState:
        """Read all of one zip's RocksDB: its SST files directly, or rebuilt in a temporary directory.

        ``as_dict``: changelogs will be applied, so keep the state as a dict from the start.
        """
        name = state_file_name(version, "zip", unique_id)
        shown = self._shown(name)
        raw = self._read(name, self._missing(version, unique_id, "zip", why))
        metadata, wal_bytes = snapshot_zip.read_metadata_entry(raw, shown)
        meta = snapshot_zip.parse_metadata(metadata, shown)
        self.storage.remember(f"{self.directory}/{name}", meta)  # the files it lists (StoreFiles)
        ssts: dict[snapshot_zip.DataFile, bytes] = {}
        if self._sst_wanted(meta, wal_bytes):
            ssts = self._read_data_files(snapshot_zip.SST_DIR, meta.sst_files, shown)
            try:
                sst_dir = f"{self.directory}/{snapshot_zip.SST_DIR}"
                # handed over one by one (the reader lets each file's bytes go once decompressed);
                # what the fallback below needs again, it reads again
                rows = read_sst_rows(
                    ((ssts.pop(f), self.storage.display(f"{sst_dir}/{f.dfs_name}")) for f in list(ssts)), shown
                )
            except (SstNotSupportedError, ImportError):
                pass  # left to rocksdict
            else:
                state = StoreState(None, meta.column_families, bool(meta.column_families), rows=rows)
                if as_dict:
                    state.entries  # noqa: B018 - converts the rows now, before changelogs land on them
                return state
        workdir = tempfile.mkdtemp(prefix="state_reader_rocksdb_")
        try:
            snapshot_zip.extract(raw, workdir, shown)
            del raw
            for sub, files in ((snapshot_zip.SST_DIR, meta.sst_files), (snapshot_zip.LOG_DIR, meta.log_files)):
                for f in files:  # one at a time: each is written out before the next is fetched
                    data = ssts.pop(f, None) if sub == snapshot_zip.SST_DIR else None
                    if data is None:
                        data = self._read_data_files(sub, [f], shown)[f]
                    self._write_data_file(data, f, workdir, shown)
            keys, values = rocksdict_db.read_db(workdir, shown)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        families = meta.column_families
        if as_dict:
            return StoreState(dict(zip(keys, values, strict=True)), families, bool(families))
        rows = (RowBuffer.from_rows(keys, shown), RowBuffer.from_rows(values, shown))
        return StoreState(None, families, bool(families), rows=rows)

    def snapshot_changes(self, old: FileId, new: FileId, source: str) -> tuple[RowBuffer, RowBuffer, RowBuffer] | None:
        """What the snapshot zip ``new`` changed from the zip ``old`` (both (version, unique id)), each SST
        file read once (:func:`read_sst_changes`): the keys and values added or changed, and the keys
        dropped. None when the SST files are not read directly (no numba wanted, a WAL, what the
        reader leaves to rocksdict): the two versions are then loaded and compared whole."""
        if old not in self.zips or new not in self.zips:
            return None
        listed = []
        for version, unique_id in (new, old):
            name = state_file_name(version, "zip", unique_id)
            shown = self._shown(name)
            why = f"the change feed of version {new[0]} compares it with version {old[0]}"
            raw = self._read(name, self._missing(version, unique_id, "zip", why))
            metadata, wal_bytes = snapshot_zip.read_metadata_entry(raw, shown)
            meta = snapshot_zip.parse_metadata(metadata, shown)
            if not self._sst_wanted(meta, wal_bytes):
                return None
            listed.append((meta.sst_files, shown))
        (new_files, new_shown), (old_files, _) = listed
        files = list(dict.fromkeys([*new_files, *old_files]))  # the new version's first, in its order
        at = {f: i for i, f in enumerate(files)}
        data = self._read_data_files(snapshot_zip.SST_DIR, files, new_shown)
        sst_dir = f"{self.directory}/{snapshot_zip.SST_DIR}"
        try:
            return read_sst_changes(
                ((data.pop(f), self.storage.display(f"{sst_dir}/{f.dfs_name}")) for f in files),
                [at[f] for f in old_files],
                [at[f] for f in new_files],
                source,
            )
        except (SstNotSupportedError, ImportError):
            return None

    def _sst_wanted(self, meta: snapshot_zip.SnapshotMetadata, wal_bytes: int) -> bool:
        """Whether to read the SST files directly: numba wanted for a read this big, and nothing in a WAL."""
        if wal_bytes or any(f.size != 0 for f in meta.log_files):
            return False
        entries = meta.num_keys if meta.num_keys >= 0 else sum(f.size for f in meta.sst_files) // 32
        return kernels.numba_wanted(entries * self.records_hint_scale * _ROCKSDICT_COST_SCALE)

    def column_families(self, version: int) -> dict[str, int]:
        """Virtual column family ids as of ``version``, from the metadata of the newest zip at or
        below it (or, when there is none, the oldest later one: ids are never reassigned)."""
        candidates = sorted(self.zips, key=lambda f: (f[0], f[1] or ""))
        below = [f for f in candidates if f[0] <= version]
        chosen = below[-1] if below else (candidates[0] if candidates else None)
        if chosen is None:
            raise MissingStateFileError(
                f"no snapshot zip in {self.storage.display(self.directory)} names the column family ids "
                f"of version {version}. {self._present()}",
                path=self.storage.display(self.directory),
            )
        name = state_file_name(chosen[0], "zip", chosen[1])
        shown = self._shown(name)
        raw = self._read(name, self._missing(*chosen, "zip", "it names the column family ids"))
        return snapshot_zip.read_column_families(raw, shown)

    def _read_data_files(
        self, sub: str, files: list[snapshot_zip.DataFile], zip_shown: str
    ) -> dict[snapshot_zip.DataFile, bytes]:
        """The SST or log files a snapshot lists (fetched at once), each checked against its recorded size."""
        rels = [f"{self.directory}/{sub}/{f.dfs_name}" for f in files]
        try:
            contents = self.storage.read_many(rels)
        except FileNotFoundError as exc:
            f = files[rels.index(exc.filename)]
            shown = self.storage.display(exc.filename)
            raise MissingStateFileError(
                f"{shown} does not exist; the snapshot {zip_shown} lists it as {f.local_name}", path=shown
            ) from None
        for f, rel, data in zip(files, rels, contents, strict=True):
            if f.size >= 0 and len(data) != f.size:
                shown = self.storage.display(rel)
                raise CorruptFileError(
                    f"{shown} has {len(data)} bytes but the snapshot {zip_shown} records {f.size}", path=shown
                )
        return dict(zip(files, contents, strict=True))

    def _write_data_file(self, data: bytes, f: snapshot_zip.DataFile, workdir: str, zip_shown: str) -> None:
        """Write a data file under its local name into the private temporary directory."""
        dest = os.path.join(workdir, *f.local_name.split("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            with open(dest, "xb") as out:
                out.write(data)
        except FileExistsError:
            raise UnsafeArchiveError(
                f"{zip_shown}: {f.local_name!r} is both a zip entry and a data file, or listed twice", path=zip_shown
            ) from None

    # -- versions --

    def load(self, version: int, unique_id: str | None = None) -> StoreState:
        """The store at ``version``; ``unique_id`` (checkpoint format 2) selects its files."""
        return self._load_v1(version) if unique_id is None else self._load_v2(version, unique_id)

    def _load_v1(self, version: int) -> StoreState:
        plain_zips = {v for v, u in self.zips if u is None}
        plain_logs = {v for v, u in self.changelogs if u is None}
        if not plain_zips and not plain_logs and (self.zips or self.changelogs):
            raise self._missing(
                version,
                None,
                "zip",
                f"the state files carry unique ids (checkpoint format version 2) but commits/{version - 1} "
                "records none to choose them by",
            )
        start = max((v for v in plain_zips if v <= version), default=0)
        gap = first_missing(plain_logs, start + 1, version)
        if gap is not None:
            base = f"{start}.zip" if start else "the empty state"
            if not plain_logs:  # no changelog checkpointing: every version has its own zip
                raise self._missing(version, None, "zip", f"it holds version {version} of this store")
            raise self._missing(
                gap,
                None,
                "changelog",
                f"version {version} is rebuilt from {base} and the changelogs {start + 1}..{version}",
            )
        why = f"version {version} is rebuilt from it"
        state = self.load_snapshot(start, None, why, as_dict=start < version) if start else StoreState({})
        for v in range(start + 1, version + 1):
            state.apply(self.read_changelog(v, None, why), self.row_checksum, self.delimiter)
        return state

    def _load_v2(self, version: int, unique_id: str) -> StoreState:
        why = f"commits/{version - 1} names it for version {version}"
        if (version, unique_id) in self.zips:
            return self.load_snapshot(version, unique_id, why)
        if (version, unique_id) not in self.changelogs:
            others = sorted(u for v, u in self.zips | self.changelogs if v == version and u)
            raise self._missing(
                version,
                unique_id,
                "changelog",
                f"{why} and there is no {state_file_name(version, 'zip', unique_id)} either"
                + (f" (files of version {version} with other ids: {', '.join(others)})" if others else ""),
            )
        last = self.read_changelog(version, unique_id, why)
        chain = sorted({(i.version, i.unique_id) for i in last.lineage} | {(version, unique_id)})
        shown = self._shown(state_file_name(version, "changelog", unique_id))
        versions = [v for v, _ in chain]
        if versions != list(range(versions[0], version + 1)):
            raise CorruptFileError(
                f"{shown}: its lineage does not list each version from {versions[0]} to {version - 1} once "
                f"(lists {versions[:-1]})",
                path=shown,
            )
        base = next((i for i in range(len(chain) - 1, -1, -1) if chain[i] in self.zips), None)
        if base is None and versions[0] != 1:
            first_v, first_u = chain[0]
            raise self._missing(
                first_v,
                first_u,
                "zip",
                f"the lineage in {shown} starts at version {first_v}, so its snapshot is needed",
            )
        replay = chain[base + 1 :] if base is not None else chain
        missing = next(((v, u) for v, u in replay if (v, u) not in self.changelogs), None)
        if missing is not None:
            raise self._missing(
                missing[0], missing[1], "changelog", f"the lineage in {shown} needs it to rebuild version {version}"
            )
        lineage_why = f"the lineage in {shown} needs it"
        state = self.load_snapshot(*chain[base], lineage_why, as_dict=True) if base is not None else StoreState({})
        for v, u in replay[:-1]:
            state.apply(self.read_changelog(v, u, lineage_why), self.row_checksum, self.delimiter)
        state.apply(last, self.row_checksum, self.delimiter)
        return state

    def load_from_snapshot(self, start: int, version: int, ids: dict[int, str | None]) -> StoreState:
        """The store at ``version`` replayed from the zip of version ``start`` and every later changelog.

        ``ids`` gives the unique id of each version ``start..version`` (None with checkpoint format 1).
        """
        if (start, ids[start]) not in self.zips:
            shown = self._shown(state_file_name(start, "zip", ids[start]))
            raise MissingStateFileError(
                f"Cannot replay from the snapshot of version {start}: {shown} does not exist. {self._present()}",
                path=shown,
            )
        why = f"replaying the snapshot of version {start} up to version {version} needs it"
        missing = next((v for v in range(start + 1, version + 1) if (v, ids[v]) not in self.changelogs), None)
        if missing is not None:
            raise self._missing(missing, ids[missing], "changelog", why)
        state = self.load_snapshot(start, ids[start], why, as_dict=start < version)
        for v in range(start + 1, version + 1):
            state.apply(self.read_changelog(v, ids[v], why), self.row_checksum, self.delimiter)
        return state


# -- the provider's entry point ---------------------------------------------------


def open_store(plan: StateReadPlan, directory: str) -> RocksDBStore:
    conf = plan.store_conf
    return RocksDBStore(
        plan.storage, directory, plan.codec, conf.row_checksum, conf.merge_delimiter, max(len(plan.partitions), 1)
    )


def load_store(plan: StateReadPlan, directory: str, partition_id: int) -> StoreState:
    """Encoded keys and values of one store at the plan's version (from its snapshot start, if any)."""
    store = open_store(plan, directory)
    cp = plan.checkpoint

    def unique_id(version: int) -> str | None:
        return cp.state_unique_id(version - 1, plan.operator_id, partition_id, plan.store_name)

    start = plan.snapshot_start_version
    if start is not None:
        gap = first_missing({v for v, _ in store.changelogs}, start + 1, plan.version)
        if gap is not None:  # before the unique ids of every version in between are looked up
            raise store._missing(
                gap,
                unique_id(gap),
                "changelog",
                f"replaying the snapshot of version {start} up to version {plan.version} needs it",
            )
        return store.load_from_snapshot(start, plan.version, {v: unique_id(v) for v in range(start, plan.version + 1)})
    return store.load(plan.version, unique_id(plan.version))


def store_column_families(plan: StateReadPlan, directory: str, state: StoreState) -> dict[str, int]:
    """Virtual column family name -> id of a loaded store (from its snapshot, else its newest zip)."""
    return state.column_families or open_store(plan, directory).column_families(plan.version)


def read_store(
    plan: StateReadPlan, directory: str, partition_id: int, column_family: str | None = None
) -> tuple[pa.StructArray, pa.StructArray]:
    """Keys and values of one RocksDB store at the plan's version, decoded as Arrow.

    ``column_family`` selects one virtual column family of a store that has them.
    """
    keys, values, _, _ = read_store_rows(plan, directory, partition_id, column_family)
    return keys, values


def read_store_rows(
    plan: StateReadPlan, directory: str, partition_id: int, column_family: str | None = None
) -> tuple[pa.StructArray, pa.StructArray, RowBuffer, RowBuffer]:
    """:func:`read_store`'s keys and values, and the same store's rows as stored (:func:`load_rows`'), from one
    load."""
    state = load_store(plan, directory, partition_id)
    source = f"{plan.storage.display(directory)} (version {plan.version})"
    stored_keys, stored_values = keys, values = state.row_buffers(source)
    state.entries = {}
    if state.uses_column_families or column_family is not None:
        keys, values = _column_family(keys, values, state, column_family, source)
    spec = KeyEncoderSpec.from_plan(plan.key_encoder, plan.num_cols_prefix_key)
    return (
        decode_keys(keys, plan.key_schema, spec, plan.store_conf.avro),
        plan.declared_values(decode_values(values, plan.stored_value_schema, plan.store_conf.row_checksum), source),
        stored_keys,
        stored_values,
    )


def read_changes(
    plan: StateReadPlan, directory: str, partition_id: int, version: int
) -> tuple[list[str], pa.StructArray, pa.StructArray]:
    """The records of the changelog of ``version`` in file order: change types, keys, values (null for deletes).

    Without changelog checkpointing (every version a full snapshot) Spark keeps no
    change feed; with the ``changeFeedFromSnapshots`` option it is computed by
    comparing the snapshots of ``version - 1`` and ``version`` instead.
    """
    store = open_store(plan, directory)
    if not store.changelogs and plan.change_feed_from_snapshots:
        return _changes_from_snapshots(plan, directory, partition_id, version)
    unique_id = plan.checkpoint.state_unique_id(version - 1, plan.operator_id, partition_id, plan.store_name)
    why = "a change feed is read from changelogs" + (
        ""
        if store.changelogs
        else ", which exist only with changelog checkpointing "
        "(spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled); the option "
        "changeFeedFromSnapshots=true computes one by comparing snapshots"
    )
    log = store.read_changelog(version, unique_id, why)
    name = state_file_name(version, "changelog", unique_id)
    source = plan.storage.display(f"{directory}/{name}")
    refuse_delete_range(log)
    if changelog_format.has_column_families(log.format_version):
        raise UnsupportedOptionError(
            f"{source}: the store keeps virtual column families; reading its changes needs stateVarName"
        )
    row_checksum = plan.store_conf.row_checksum
    kinds = [changelog_format.RECORD_TYPE_NAMES[kind] for kind, _, _ in log.records]
    keys = [delete_record_key(k, row_checksum) if v is None else k for _, k, v in log.records]
    valid = np.fromiter((v is not None for _, _, v in log.records), dtype=bool, count=len(log.records))
    values = [v or b"" for _, _, v in log.records]
    spec = KeyEncoderSpec.from_plan(plan.key_encoder, plan.num_cols_prefix_key)
    return (
        kinds,
        decode_keys(RowBuffer.from_rows(keys, source + " key"), plan.key_schema, spec, plan.store_conf.avro),
        plan.declared_values(
            decode_values(
                RowBuffer.from_rows(values, source + " value"), plan.stored_value_schema, row_checksum, valid
            ),
            source,
        ),
    )


def refuse_delete_range(log: changelog_format.Changelog) -> None:
    """A change feed shows keys one by one; a delete range names none of the keys it removes, so a
    changelog holding one has no change feed (Spark's refuses it too, whichever variable is read)."""
    at = next((i for i, (kind, _, _) in enumerate(log.records) if kind == changelog_format.DELETE_RANGE), None)
    if at is not None:
        raise UnsupportedOptionError(
            f"{log.path}: record {at} is a delete range (Spark 4.3's range deletion), which names no keys: the "
            "changes of this version cannot be shown key by key (Spark's change feed refuses them too); read the "
            "state at the batches before and after it instead"
        )


def _changes_from_snapshots(
    plan: StateReadPlan, directory: str, partition_id: int, version: int
) -> tuple[list[str], pa.StructArray, pa.StructArray]:
    """Keys added or changed by ``version`` are updates (in the order of ``version``'s rows), keys it
    dropped are deletes (in the order of ``version - 1``'s).

    Several changes of one key within a batch show as one, and a key rewritten
    with identical bytes does not show: only the net effect is visible. The two
    versions are compared as stored bytes; only the rows that differ are decoded.
    """
    source = f"{plan.storage.display(directory)} (versions {version - 1} and {version})"
    found = None
    if version > 1 and plan.snapshot_start_version is None:
        cp = plan.checkpoint

        def zip_of(v: int) -> FileId:
            return v, cp.state_unique_id(v - 1, plan.operator_id, partition_id, plan.store_name)

        found = open_store(plan, directory).snapshot_changes(zip_of(version - 1), zip_of(version), source)
    if found is not None:  # only the rows that differ, from one read of each SST file
        new_keys, new_values, old_keys = found
        after, before = (new_keys, new_values), (old_keys, old_keys)  # no value of a deleted key is read
        updated, deleted = np.arange(len(new_keys.starts)), np.arange(len(old_keys.starts))
    else:
        after = load_store(replace(plan, batch_id=version - 1), directory, partition_id).row_buffers(source)
        if version > 1:
            before = load_store(replace(plan, batch_id=version - 2), directory, partition_id).row_buffers(source)
        else:
            before = (RowBuffer.from_rows([], source + " key"), RowBuffer.from_rows([], source + " value"))
        updated, deleted = changed_rows(before, after)
    spec = KeyEncoderSpec.from_plan(plan.key_encoder, plan.num_cols_prefix_key)

    def keys_of(rows: RowBuffer, at: np.ndarray) -> pa.StructArray:
        return decode_keys(rows.take(at), plan.key_schema, spec, plan.store_conf.avro)

    keys = keys_of(after[0], updated)
    if len(deleted):
        keys = pa.concat_arrays([keys, keys_of(before[0], deleted)])
    nothing = np.zeros(len(deleted), dtype=np.int64)  # a delete's value: null, no bytes
    values = RowBuffer.wrap(
        after[1].buf,
        after[1].size,
        np.concatenate([after[1].starts[updated], nothing]),
        np.concatenate([after[1].lengths[updated], nothing]),
        source + " value",
    )
    valid = np.concatenate([np.ones(len(updated), dtype=bool), np.zeros(len(deleted), dtype=bool)])
    return (
        ["update"] * len(updated) + ["delete"] * len(deleted),
        keys,
        plan.declared_values(
            decode_values(values, plan.stored_value_schema, plan.store_conf.row_checksum, valid), source
        ),
    )


def family_id_of(families: dict[str, int], name: str) -> int | None:
    """The id of the column family ``name``; None when the version's files hold no such family.

    The variable was checked against the operator's metadata while planning, so a family missing
    here is one Spark has not created (yet) or never writes (a TTL list keeps ``$count_``/``$min_``,
    not the ``$rowCounter_`` its schema file names): Spark's reader creates it empty and reads no
    rows from it, and so do these readers.
    """
    return families.get(name)


def load_rows(plan: StateReadPlan, directory: str, partition_id: int) -> tuple[RowBuffer, RowBuffer]:
    """Keys and values of one RocksDB store at the plan's version as stored (column family id and all),
    not decoded; of the plan's variable's column family alone when it reads one."""
    state = load_store(plan, directory, partition_id)
    source = f"{plan.storage.display(directory)} (version {plan.version})"
    keys, values = state.row_buffers(source)
    if plan.variable is None or not len(keys.starts):
        return keys, values
    families = state.column_families or open_store(plan, directory).column_families(plan.version)
    family_id = family_id_of(families, plan.variable.family.name)
    mask = column_family_ids(keys) == (-1 if family_id is None else family_id)  # ids are never negative
    return select(keys, mask), select(values, mask)


def _column_family(
    keys: RowBuffer, values: RowBuffer, state: StoreState, name: str | None, source: str
) -> tuple[RowBuffer, RowBuffer]:
    known = ", ".join(sorted(state.column_families)) or "unknown: no snapshot names them"
    if name is None:
        raise UnsupportedOptionError(
            f"{source}: the store keeps several virtual column families ({known}); reading one needs stateVarName"
        )
    if name not in state.column_families:
        raise InvalidOptionError(f"{source}: no column family '{name}' (column families: {known})")
    mask = column_family_ids(keys) == state.column_families[name]
    return strip_column_family(select(keys, mask)), select(values, mask)
