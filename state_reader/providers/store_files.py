"""Which state files one store version needs, and which versions the files allow.

Only file names and sizes are looked at (plus, for RocksDB, the small
``metadata`` entry of a snapshot zip naming its SSTs and, with checkpoint
format 2, the lineage header of a changelog); decoding stays with the
providers. Used by ``stats`` (files, bytes on disk, delta chain per version)
and ``verify`` (every version to decode).

HDFS: version V = the newest ``S.snapshot`` with S <= V (or the empty state)
plus ``S+1.delta`` … ``V.delta``. RocksDB, checkpoint format 1: the newest
``S.zip`` (and the SSTs it lists) plus ``S+1.changelog`` … ``V.changelog``;
checkpoint format 2: the files named by the commit log's unique ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from state_reader.errors import StateReaderError
from state_reader.formats import changelog as changelog_format
from state_reader.formats import snapshot_zip
from state_reader.formats.codecs import decompress
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir, first_missing, state_file_name
from state_reader.model.conf import ROCKSDB_PROVIDER
from state_reader.model.plan import StateReadPlan
from state_reader.providers.hdfs import HDFSStore
from state_reader.providers.rocksdb import RocksDBStore


@dataclass
class VersionFiles:
    """The files one version of one store is rebuilt from."""

    version: int
    files: list[str] = field(default_factory=list)  # relative to the store directory
    bytes_on_disk: int = 0
    snapshot_version: int | None = None  # None: rebuilt from the empty state
    delta_chain: int = 0  # deltas / changelogs replayed after the snapshot
    complete: bool = True  # False when a file the version needs is not there
    # the keys the version's own snapshot zip records (RocksDB's numKeys); None when it has no zip of its own
    recorded_keys: int | None = None

    @property
    def batch_id(self) -> int:
        return self.version - 1


class StoreFiles:
    """The state files of one store directory (one operator, partition and store)."""

    def __init__(
        self,
        storage: Storage,
        directory: str,
        provider: str,
        codec: str | None = None,
        keep_fetched: bool = False,
        checked: bool = True,
    ) -> None:
        """``checked`` False: the files looked into are not checked against their checksum sidecars
        (nor are those fetched), for sizes alone (the notebook display)."""
        self.storage = storage
        # the files looked into (a zip's SST list, a changelog's lineage) kept for the read that follows
        self._fetch = storage.peek_bytes if keep_fetched else storage.read_bytes if checked else storage.read_unchecked
        self.checked = checked
        # what a file looked into says is kept for the operation's other readers once read checked
        # (peeked bytes are checked by the read that takes them, which keeps what they say then)
        self._remember = checked and not keep_fetched
        self.directory = directory
        self.provider = provider
        self.codec = codec
        self.sizes: dict[str, int] = storage.list_sizes(directory) or {}
        self._sst_sizes: dict[str, int] | None = None
        self._zip_members: dict[str, list[tuple[str, int]]] = {}
        self._zip_keys: dict[str, int] = {}  # numKeys of each zip looked into
        if provider == ROCKSDB_PROVIDER:
            store = RocksDBStore(storage, directory, codec)
            self.snapshots = {v for v, u in store.zips if u is None}
            self.deltas = {v for v, u in store.changelogs if u is None}
            self.zips_with_ids = {(v, u) for v, u in store.zips if u is not None}
            self.changelogs_with_ids = {(v, u) for v, u in store.changelogs if u is not None}
        else:
            store_h = HDFSStore(storage, directory, codec)
            self.snapshots = set(store_h.snapshots)
            self.deltas = set(store_h.deltas)
            self.zips_with_ids = set()
            self.changelogs_with_ids = set()

    @property
    def rocksdb(self) -> bool:
        return self.provider == ROCKSDB_PROVIDER

    @property
    def has_unique_ids(self) -> bool:
        """Checkpoint format 2 (RocksDB files named ``<version>_<uuid>``)."""
        return bool(self.zips_with_ids or self.changelogs_with_ids)

    def _snapshot_name(self, version: int, unique_id: str | None = None) -> str:
        return state_file_name(version, "zip" if self.rocksdb else "snapshot", unique_id)

    def _delta_name(self, version: int, unique_id: str | None = None) -> str:
        return state_file_name(version, "changelog" if self.rocksdb else "delta", unique_id)

    # -- versions ------------------------------------------------------------

    def retained_versions(self, last_version: int, committed_versions: set[int] | None = None) -> list[int]:
        """Every version up to ``last_version`` the files on disk should rebuild.

        From version 1 when the first delta/changelog is there, else from the
        oldest snapshot. RocksDB without changelogs: the versions with a zip.
        ``committed_versions`` (batch + 1 of each commit log entry) limits RocksDB
        versions, whose files are chosen through the commit log.
        """
        if self.has_unique_ids:
            on_disk = {v for v, _ in self.zips_with_ids | self.changelogs_with_ids}
            versions = sorted(v for v in on_disk if v <= last_version)
        elif self.rocksdb and not self.deltas:
            versions = sorted(v for v in self.snapshots if v <= last_version)
        else:
            everything = self.snapshots | self.deltas
            if not everything:
                return []
            first = 1 if 1 in self.deltas else min(self.snapshots or everything)
            if last_version - first <= len(everything):
                versions = list(range(first, last_version + 1))
            else:  # a commit far past the files: the versions they hold, the first one missing, and the last
                gap = first_missing(self.deltas, first + 1, last_version)
                versions = sorted(
                    {v for v in everything if first <= v <= last_version}
                    | {last_version}
                    | ({gap} if gap is not None else set())
                )
        if self.rocksdb and committed_versions is not None:
            versions = [v for v in versions if v in committed_versions]
        return versions

    def version_files(self, version: int, unique_id: str | None = None, zip_data: bool = True) -> VersionFiles:
        """The files ``version`` is rebuilt from (``unique_id``: checkpoint format 2).

        ``zip_data`` False: a snapshot zip's SSTs are left out (and the zip is not opened for them),
        which leaves ``complete`` as it is: whether the version is rebuildable, from the listing alone
        (but for a format 2 changelog, whose lineage names the files before it)."""
        if unique_id is not None:
            return self._version_files_v2(version, unique_id, zip_data)
        out = VersionFiles(version)
        start = max((s for s in self.snapshots if s <= version), default=0)
        if start:
            out.snapshot_version = start
            self._add(out, self._snapshot_name(start))
            if self.rocksdb and zip_data:
                self._add_zip_data(out, self._snapshot_name(start))
                if start == version:
                    out.recorded_keys = self._zip_keys.get(self._snapshot_name(start))
        elif self.rocksdb and not self.deltas:
            out.complete = False  # every RocksDB version without changelogs has its own zip
        out.delta_chain += version - start
        if version - start <= len(self.deltas) + 1:
            wanted: Iterable[int] = range(start + 1, version + 1)
        else:  # more versions than files (a commit far past them): the files there are, and the first gap
            gap = first_missing(self.deltas, start + 1, version)
            wanted = sorted({v for v in self.deltas if start < v <= version} | ({gap} if gap is not None else set()))
        for v in wanted:
            self._add(out, self._delta_name(v))
        return out

    def _version_files_v2(self, version: int, unique_id: str, zip_data: bool = True) -> VersionFiles:
        out = VersionFiles(version)
        if (version, unique_id) in self.zips_with_ids:
            out.snapshot_version = version
            self._add(out, self._snapshot_name(version, unique_id))
            if not zip_data:
                return out
            self._add_zip_data(out, self._snapshot_name(version, unique_id))
            out.recorded_keys = self._zip_keys.get(self._snapshot_name(version, unique_id))
            return out
        last = self._delta_name(version, unique_id)
        chain: list[tuple[int, str]] = []
        rel = f"{self.directory}/{last}"
        lineage = self.storage.recall(rel)  # read already, by a read of this operation or another look
        try:
            if not isinstance(lineage, list):
                raw = self._fetch(rel)
                shown = self.storage.display(rel)
                _, lineage = changelog_format.read_lineage(decompress(raw, self.codec, shown), shown)
                if self._remember:
                    self.storage.remember(rel, lineage)
            chain = sorted({(i.version, i.unique_id) for i in lineage})
        except (FileNotFoundError, StateReaderError):
            out.complete = False
        base = next((i for i in range(len(chain) - 1, -1, -1) if chain[i] in self.zips_with_ids), None)
        if base is not None:
            out.snapshot_version = chain[base][0]
            self._add(out, self._snapshot_name(*chain[base]))
            if zip_data:
                self._add_zip_data(out, self._snapshot_name(*chain[base]))
        for v, u in chain[(base + 1) if base is not None else 0 :]:
            out.delta_chain += 1
            self._add(out, self._delta_name(v, u))
        out.delta_chain += 1
        self._add(out, last)
        return out

    def looked_into(self, version: int, unique_id: str | None = None) -> str | None:
        """The file :meth:`version_files` fetches to find the rest (a RocksDB snapshot zip's list of SSTs,
        a format 2 changelog's lineage), relative to the checkpoint; None when it needs none or has it."""
        if not self.rocksdb:
            return None
        if unique_id is None:
            start = max((s for s in self.snapshots if s <= version), default=0)
            name = self._snapshot_name(start) if start else None
        elif (version, unique_id) in self.zips_with_ids:
            name = self._snapshot_name(version, unique_id)
        else:
            name = self._delta_name(version, unique_id)
        if name is None or name in self._zip_members or name not in self.sizes:
            return None
        rel = f"{self.directory}/{name}"
        return None if self.storage.recall(rel) is not None else rel

    # -- sizes ---------------------------------------------------------------

    def _add(self, out: VersionFiles, name: str) -> None:
        out.files.append(name)
        size = self.sizes.get(name)
        if size is None:
            out.complete = False  # listed as needed but not on disk: verify will say which
        out.bytes_on_disk += size or 0

    def _add_zip_data(self, out: VersionFiles, zip_name: str) -> None:
        """Add the SST/log files a snapshot zip lists (they hold the data)."""
        for rel, size in self._zip_data_files(zip_name):
            out.files.append(rel)
            out.bytes_on_disk += size

    def snapshot_data_files(self, zip_name: str) -> list[str]:
        """The SST and log files (relative to the store directory) a RocksDB snapshot zip lists."""
        return [rel for rel, _ in self._zip_data_files(zip_name)]

    def _zip_data_files(self, zip_name: str) -> list[tuple[str, int]]:
        if zip_name in self._zip_members:
            return self._zip_members[zip_name]
        files: list[tuple[str, int]] = []
        rel = f"{self.directory}/{zip_name}"
        shown = self.storage.display(rel)
        meta = self.storage.recall(rel)  # read already, by a read of this operation or another look
        if not isinstance(meta, snapshot_zip.SnapshotMetadata):
            try:
                raw = self._fetch(rel)
                meta = snapshot_zip.parse_metadata(snapshot_zip.read_metadata_entry(raw, shown)[0], shown)
            except (FileNotFoundError, StateReaderError):
                meta = None  # damaged or missing: verify reports it, stats counts the zip alone
            if meta is not None and self._remember:
                self.storage.remember(rel, meta)
        if meta is not None:
            if meta.num_keys >= 0:  # -1: the writer did not record it
                self._zip_keys[zip_name] = meta.num_keys
            if self._sst_sizes is None:
                self._sst_sizes = self.storage.list_sizes(f"{self.directory}/{snapshot_zip.SST_DIR}") or {}
            for f in meta.sst_files:
                files.append((f"{snapshot_zip.SST_DIR}/{f.dfs_name}", self._sst_sizes.get(f.dfs_name, max(f.size, 0))))
            files.extend((f"{snapshot_zip.LOG_DIR}/{f.dfs_name}", max(f.size, 0)) for f in meta.log_files)
        self._zip_members[zip_name] = files
        return files


def unique_id_for(
    cp: CheckpointDir, files: StoreFiles, version: int, operator_id: int, partition_id: int, store_name: str
) -> str | None:
    """The unique id the commit log gives ``version`` (checkpoint format 2), else None."""
    if not files.has_unique_ids:
        return None
    try:
        return cp.state_unique_id(version - 1, operator_id, partition_id, store_name)
    except StateReaderError:
        return None


def look_ahead(items: Iterable[tuple[StoreFiles, int, str | None]], zips: bool = True) -> None:
    """Start fetching, all at once, what :meth:`StoreFiles.version_files` of each (files, version, unique id)
    will look into, so that a loop over many partitions costs one round trip, not one per partition.
    ``zips`` False: only what ``version_files(..., zip_data=False)`` looks into (format 2 changelogs).

    Files looked into for sizes alone (``checked`` False) are small and go to the wider bound of
    :meth:`Storage.prefetch` ``small=True``: the zips of hundreds of partitions in one or two round trips."""
    for files, version, unique_id in items:
        rel = files.looked_into(version, unique_id)
        if rel is not None and (zips or not rel.endswith(".zip")):
            files.storage.prefetch([rel], sidecars=files.checked, small=not files.checked)


def files_to_read(plan: StateReadPlan, partition_id: int) -> tuple[list[str], int] | None:
    """The files a read of one partition at the plan's version fetches (relative to the checkpoint, only
    those the listing shows) and their bytes, or None for a read of other versions (a change feed, a
    replay from a snapshot), which fetches as it goes.

    Found from the listing; for RocksDB also from the snapshot zip's list of SSTs (or, with checkpoint
    format 2, the changelog's lineage), which is fetched for that and kept for the read.
    """
    if plan.is_change_feed or plan.snapshot_start_version is not None:
        return None
    join = plan.join
    stores = (
        [join.store_name(0), join.store_name(1)] if join is not None and join.families is None else [plan.store_name]
    )
    rels: list[str] = []
    nbytes = 0
    for store in stores:
        directory = plan.checkpoint.store_dir(plan.operator_id, partition_id, store)
        files = StoreFiles(plan.storage, directory, plan.provider_class, plan.codec, keep_fetched=True)
        unique_id = unique_id_for(plan.checkpoint, files, plan.version, plan.operator_id, partition_id, store)
        needed = files.version_files(plan.version, unique_id)
        for name in needed.files:
            rel = f"{directory}/{name}"
            size = files.sizes.get(name) if "/" not in name else plan.storage.size(rel)
            if size is not None:  # a file not there is for the read to report
                rels.append(rel)
                nbytes += size
    return rels, nbytes


__all__ = ["StoreFiles", "VersionFiles", "files_to_read", "look_ahead", "unique_id_for"]
