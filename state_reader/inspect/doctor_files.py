"""``doctor``'s checks on a store's files: chains of deltas or changelogs too long to replay, files no
retained batch needs (storage waste), files of versions past the last commit, and checksum files that
are not checksum files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from state_reader.formats.snapshot_zip import SST_DIR
from state_reader.inspect.doctor_findings import Finding, Store, plural
from state_reader.io.integrity import MalformedChecksum
from state_reader.model.checkpoint import CheckpointDir, numeric_names, parse_state_file_name, version_ranges
from state_reader.model.conf import ROCKSDB_PROVIDER
from state_reader.providers.store_files import StoreFiles, look_ahead, unique_id_for
from state_reader.units import human_bytes


def long_chain(cp: CheckpointDir, store: Store, limit: float) -> list[Finding]:
    plan = store.plan
    chains = {}
    stores = {
        pid: StoreFiles(cp.storage, plan.store_dir(pid), plan.provider_class, plan.codec) for pid in plan.partitions
    }
    uids = {
        pid: unique_id_for(cp, f, plan.version, store.operator_id, pid, plan.store_name) for pid, f in stores.items()
    }
    # a chain is told by file names alone (and a format 2 changelog's lineage): no snapshot zip is looked into
    look_ahead(((stores[pid], plan.version, uids[pid]) for pid in stores), zips=False)
    for pid in plan.partitions:
        chains[pid] = stores[pid].version_files(plan.version, uids[pid], zip_data=False)
    worst = max(chains, key=lambda p: chains[p].delta_chain)
    if chains[worst].delta_chain < limit:
        return []
    kind = "changelog" if plan.provider_class == ROCKSDB_PROVIDER else "delta"
    return [
        Finding(
            "long-chain",
            "warning",
            store.operator_id,
            store.store_name,
            f"partition {worst} replays {chains[worst].delta_chain} {kind} files "
            + (
                f"after its last snapshot (version {chains[worst].snapshot_version})"
                if chains[worst].snapshot_version
                else "from the first version on, as it has no snapshot"
            )
            + f" to load version {plan.version}",
            {
                "partition": worst,
                "chain": chains[worst].delta_chain,
                "snapshot_version": chains[worst].snapshot_version,
                "files_to_replay": sum(v.delta_chain for v in chains.values()),
                "version": plan.version,
                "partitions_over_limit": sum(v.delta_chain >= limit for v in chains.values()),
            },
            "restarts and task retries replay every file of the chain: snapshot maintenance is not keeping up. "
            "Check spark.sql.streaming.stateStore.minDeltasForSnapshot and maintenanceInterval, and executor "
            "time for maintenance",
        )
    ]


@dataclass
class UnusedFiles:
    """A store's state files no committed batch reads, by why: older than every retained batch, or newer."""

    old: dict[str, int] = field(default_factory=dict)  # path -> bytes
    past_commit: dict[str, int] = field(default_factory=dict)
    past_versions: set[int] = field(default_factory=set)
    past_partitions: set[int] = field(default_factory=set)
    unique_ids: bool = False  # checkpoint format 2: the commit log names each version's files


def unused_files(cp: CheckpointDir, store: Store) -> UnusedFiles:
    """Sort out the files of every partition of ``store`` that no batch in the commit log needs.

    Old: older than the oldest retained batch's base snapshot, and SSTs no retained
    snapshot lists. Past the commit: versions after the last committed batch's
    (``batch + 1``), with the SSTs only their snapshots list. Files at or after the
    oldest retained batch's base snapshot are kept on purpose (a delta beside a
    snapshot of the same version, say) and are neither.
    """
    plan = store.plan
    committed = cp.committed_batches
    last_version = committed[-1] + 1
    out = UnusedFiles()
    stores = {
        pid: StoreFiles(cp.storage, plan.store_dir(pid), plan.provider_class, plan.codec) for pid in plan.partitions
    }
    look_ahead(
        (f, batch + 1, unique_id_for(cp, f, batch + 1, store.operator_id, pid, plan.store_name))
        for pid, f in stores.items()
        for batch in committed
    )  # the snapshots of every batch, at once
    for pid in plan.partitions:
        files = stores[pid]
        out.unique_ids |= files.has_unique_ids
        needed: set[str] = set()
        oldest_base: int | None = None
        for batch in committed:
            uid = unique_id_for(cp, files, batch + 1, store.operator_id, pid, plan.store_name)
            version = files.version_files(batch + 1, uid)
            needed.update(version.files)
            if oldest_base is None:
                oldest_base = version.snapshot_version or 0
        past_data: set[str] = set()
        for name, size in files.sizes.items():
            parsed = parse_state_file_name(name)
            if parsed is None or name in needed:
                continue
            if parsed[0] > last_version:
                out.past_commit[f"{plan.store_dir(pid)}/{name}"] = size
                out.past_versions.add(parsed[0])
                out.past_partitions.add(pid)
                if files.rocksdb and parsed[2] == "zip":
                    past_data.update(files.snapshot_data_files(name))
            elif parsed[0] < (oldest_base or 0):
                out.old[f"{plan.store_dir(pid)}/{name}"] = size
        if files.rocksdb:
            ssts = cp.storage.list_sizes(f"{plan.store_dir(pid)}/{SST_DIR}") or {}
            for name, size in ssts.items():
                rel = f"{SST_DIR}/{name}"
                if name.startswith(".") or rel in needed:
                    continue
                (out.past_commit if rel in past_data else out.old)[f"{plan.store_dir(pid)}/{rel}"] = size
    return out


def storage_waste(cp: CheckpointDir, store: Store, unused: UnusedFiles, limit: float) -> list[Finding]:
    """State files older than any committed batch in the logs can use, and SSTs no retained snapshot lists.

    Spark's maintenance deletes them; their piling up means it is not running or not
    keeping up.
    """
    committed = cp.committed_batches
    wasted = unused.old
    if len(wasted) < limit:
        return []
    return [
        Finding(
            "storage-waste",
            "warning",
            store.operator_id,
            store.store_name,
            f"{len(wasted)} state files ({human_bytes(sum(wasted.values()))}) are needed by no batch the logs "
            f"still hold ({committed[0]}..{committed[-1]})",
            {
                "files": len(wasted),
                "bytes": sum(wasted.values()),
                "retained_batches": [committed[0], committed[-1]],
                "examples": sorted(wasted)[:3],
            },
            "Spark deletes old state files in its maintenance task, which is not keeping up or not running: check "
            "spark.sql.streaming.stateStore.maintenanceInterval and the executors' logs for maintenance errors. "
            "No batch the query can restart from reads them",
        )
    ]


def files_past_commit(cp: CheckpointDir, store: Store, unused: UnusedFiles) -> list[Finding]:
    """State files of versions after the last committed batch's: a batch that did not commit, or was undone.

    A batch that is planned (``offsets/<n>``) but not committed wrote them, or is
    writing them now: the query runs it again on restart, so that is only worth
    knowing. Any other version is left from a run the logs no longer record: commits
    (and offsets) removed to reprocess, or a checkpoint rolled back to a copy of its logs.
    """
    if not unused.past_commit:
        return []
    committed = cp.committed_batches
    last = committed[-1]
    planned = {b for b in numeric_names(cp.storage.list_names("offsets")) if b > last}
    versions = sorted(unused.past_versions)
    in_flight = all(v - 1 in planned for v in versions)
    batches = version_ranges({v - 1 for v in versions})
    size = sum(unused.past_commit.values())
    evidence: dict[str, Any] = {
        "files": len(unused.past_commit),
        "bytes": size,
        "versions": versions,
        "batches": [v - 1 for v in versions],
        "last_committed_batch": last,  # the earlier name, beside the vocabulary's for one release
        "latest_batch_id": last,
        "planned_batches": sorted(planned),
        "partitions": len(unused.past_partitions),
        "examples": sorted(unused.past_commit)[:3],
    }
    several = len(versions) > 1
    summary = (
        f"{plural(len(unused.past_commit), 'state file')} ({human_bytes(size)}) of version{'s' if several else ''} "
        f"{version_ranges(set(versions))} (batch{'es' if several else ''} {batches}) lie past the last "
        f"committed batch, {last} (version {last + 1})"
    )
    kinds = _file_kinds(unused.past_commit)
    which = f"the files of version{'s' if several else ''} {version_ranges(set(versions))}"
    # a snapshot of a version the query runs again may not be written again, and loading that version prefers it
    stale_snapshot = not unused.unique_ids and any(n.endswith((".snapshot", ".zip")) for n in unused.past_commit)
    if in_flight:
        return [
            Finding(
                "files-past-commit",
                "info",
                store.operator_id,
                store.store_name,
                summary,
                evidence,
                f"batch {batches} is planned but not committed: its tasks wrote these {kinds} before the query "
                "stopped (or are writing them now). On restart the query runs the batch again from the same offsets "
                "and writes its files anew"
                + (
                    f". If you change the query before it runs the batch again, first delete {which} from every "
                    "partition of this store: a snapshot among them would stand in for the new run's state"
                    if stale_snapshot
                    else "; nothing reads these in the meantime"
                ),
            )
        ]
    if unused.unique_ids:
        harm = (
            "Spark takes the files the commit log names, so it never reads these, but tools that list the "
            "store see versions that were never committed. "
        )
    else:
        harm = "When the query runs those batches again it writes their deltas or changelogs anew"
        if stale_snapshot:
            harm += (
                ", but a snapshot among these files can stay (snapshots are written only now and then), and "
                "a restarted query that loads that version takes the snapshot over the new file: the "
                "earlier run's state"
            )
        harm += ". "
        if store.plan.provider_class != ROCKSDB_PROVIDER:
            harm += "Spark's cleanup also counts the versions it keeps back from the newest file on disk. "
    return [
        Finding(
            "files-past-commit",
            "warning",
            store.operator_id,
            store.store_name,
            summary,
            evidence,
            f"these {kinds} belong to batches the commit and offset logs no longer record: commits removed to "
            "reprocess, a checkpoint rolled back, or a batch whose files outlived its log entries. No read of a "
            f"committed batch uses them, and they cost storage. {harm}With the query stopped, delete {which} from "
            "every partition of this store",
        )
    ]


def _file_kinds(paths: dict[str, int]) -> str:
    """'.delta and .snapshot files' for the kinds of state files among ``paths``."""
    kinds = sorted(
        {"SST" if f"/{SST_DIR}/" in p else "." + p.rsplit(".", 1)[-1] for p in paths}, key=lambda k: (k == "SST", k)
    )
    return (", ".join(kinds[:-1]) + " and " + kinds[-1] if len(kinds) > 1 else kinds[0]) + " files"


def malformed_checksums(found: list[MalformedChecksum]) -> Finding:
    """Checksum sidecars the reads met that are not checksum files: not damage (the files beside them
    were read, unverified), but Spark fails on its own sidecars (checkpoint format 2) when they are."""
    spark_own = [f for f in found if f.kind == "spark"]
    reasons = list(dict.fromkeys(f.reason for f in found))
    one = len(found) == 1
    action = (
        "restore the real checksum files (a repository that keeps *.crc in Git LFS holds pointers in their "
        "place until `git lfs pull`), or delete these with the query stopped: a missing checksum file is "
        "skipped by Spark and by state_reader alike"
    )
    if spark_own:
        action = (
            f"Spark cannot load the {plural(len(spark_own), 'RocksDB file')} whose own <name>.crc is not a checksum "
            f"file (a restarted query and Spark's statestore reader fail on them): {action}"
        )
    return Finding(
        "malformed-checksum-file",
        "warning" if spark_own else "info",
        None,
        None,
        f"{plural(len(found), '.crc file')} read {'is not a checksum file' if one else 'are not checksum files'} "
        f"({'; '.join(reasons[:3])}): the file{'' if one else 's'} beside {'it was' if one else 'them were'} read "
        f"without verification, and nothing says {'it is' if one else 'they are'} damaged",
        {
            "checksum_files": len(found),
            "spark_checksum_files": len(spark_own),
            "examples": [f.sidecar for f in found[:5]],
            "reasons": reasons,
        },
        action,
    )
