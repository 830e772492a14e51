"""Decode every retained state version of a checkpoint and report what is damaged.

For each operator, store and partition, every version the files on disk allow
(see :meth:`StoreFiles.retained_versions`: for HDFS every version from the first
delta or oldest snapshot up to the latest committed batch) is rebuilt and
decoded exactly as ``read_state`` would, so a corrupt, truncated or missing
file shows up in every version that needs it. Errors are collected, not
raised: the report lists each failing version with the file and the error.
A checksum sidecar that is not a checksum file (a Git LFS pointer in its place)
is no such error: the file beside it is decoded without that check, and the
report lists the sidecar under ``malformed_checksums``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from state_reader.core.decode import decode_columns
from state_reader.core.options import from_kwargs
from state_reader.core.planner import give_schemas, plan_state_read
from state_reader.core.retained import operator_stores
from state_reader.errors import RequiredOptionError, StateReaderError, UnsupportedOptionError
from state_reader.io.integrity import checksum_report
from state_reader.io.storage import Storage
from state_reader.model import operators
from state_reader.model.checkpoint import DEFAULT_STORE, CheckpointDir
from state_reader.model.plan import StateReadPlan
from state_reader.model.state_variables import column_families, user_variables
from state_reader.progress import progress
from state_reader.providers.store_files import StoreFiles


@dataclass
class Problem:
    """One version (or one store, when ``version`` is None) that could not be read."""

    operator_id: int
    store_name: str
    partition_id: int | None
    version: int | None
    error_class: str
    message: str
    path: str | None

    @property
    def batch_id(self) -> int | None:
        return None if self.version is None else self.version - 1

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "batch_id": self.batch_id}


@dataclass
class VerifyReport:
    """What :func:`verify_checkpoint` checked and found."""

    checkpoint: str
    latest_batch: int
    versions_checked: int = 0
    versions_ok: int = 0
    stores: list[dict[str, Any]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    # checksum sidecars that are not checksum files: the files beside them were decoded unverified,
    # which says nothing against them (``ok`` is about the files decoded, not these)
    malformed_checksums: list[dict[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every store was checked and nothing failed (a store that could not be checked is not OK)."""
        return not self.problems and not self.skipped

    def damaged_files(self) -> dict[str, int]:
        """File -> number of versions it broke, most damaging first."""
        counts: dict[str, int] = {}
        for p in self.problems:
            key = p.path or f"operator {p.operator_id} store {p.store_name}"
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def as_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "latest_batch": self.latest_batch,  # the earlier name, beside the vocabulary's for one release
            "latest_batch_id": self.latest_batch,
            "ok": self.ok,
            "versions_checked": self.versions_checked,
            "versions_ok": self.versions_ok,
            "stores": self.stores,
            "problems": [p.as_dict() for p in self.problems],
            "damaged_files": self.damaged_files(),
            "skipped": self.skipped,
            "malformed_checksums": self.malformed_checksums,
        }


def _problem(op: int, store: str, pid: int | None, version: int | None, exc: BaseException) -> Problem:
    if isinstance(exc, StateReaderError):
        return Problem(op, store, pid, version, exc.error_class, exc.message, exc.path)
    # not one of ours: a decoder met bytes it did not expect; still damage to report
    return Problem(op, store, pid, version, f"UNEXPECTED_{type(exc).__name__.upper()}", str(exc), None)


def _shown_store(plan: StateReadPlan) -> str:
    """The store, or the column family of a transformWithState store, a finding is about."""
    return plan.variable.name if plan.variable is not None and plan.store_name == DEFAULT_STORE else plan.store_name


def _plans(
    checkpoint: str,
    cp: CheckpointDir,
    op: int,
    store: str,
    op_name: str | None,
    batch_id: int,
    storage_options: dict[str, Any] | None,
) -> list[StateReadPlan]:
    """The plans that together read every byte of one store at ``batch_id``.

    One plan per store, except transformWithState: one per column family (every
    state variable, its TTL index and counters, and the timers).
    """
    options = {"operator_id": op, "store_name": store, "batch_id": batch_id, "storage_options": storage_options}
    if not operators.is_transform_with_state(op_name):
        # flatMapGroupsWithState format 1 keeps a long timeout in a slot its schema calls int: the bytes are
        # whole, only Spark's type is too narrow to show them, which is no damage (timeoutTimestampAsLong)
        return [plan_state_read(from_kwargs(checkpoint, {**options, "timeout_timestamp_as_long": True}), cp)]
    meta = cp.operator_metadata(op, batch_id)
    store_meta = meta.store(store) if meta is not None else None
    if meta is None or store_meta is None:
        raise RequiredOptionError(
            f"operator {op} ({op_name}) of {cp.location} has no metadata naming its state variables"
        )
    names = user_variables(meta)
    pick = {"state_var_name": names[0]} if names else {"read_registered_timers": True}
    base = plan_state_read(from_kwargs(checkpoint, {**options, **pick}), cp)
    return [
        dataclasses.replace(base, variable=var, key_schema=var.grouping_key, value_schema=var.family.value_schema)
        for var in column_families(cp, meta, store_meta)
    ]


def verify_checkpoint(
    checkpoint: str,
    *,
    operator_id: int | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    storage_options: dict[str, Any] | None = None,
    show_progress: bool | None = None,
) -> VerifyReport:
    """Rebuild and decode every retained version of every store; collect the failures.

    Raises only when the checkpoint itself cannot be opened (no commit log);
    everything else becomes a :class:`Problem` in the report. Operators this
    reader does not support yet are listed in ``skipped``; checksum sidecars that
    are not checksum files, in ``malformed_checksums`` (no warning is logged). ``key_schema`` and
    ``value_schema``: the schemas of the store ``default`` of ``operator_id`` (default 0) when it has no
    schema file.
    """
    with checksum_report(warn=False) as malformed:
        report = _verify(checkpoint, operator_id, storage_options, show_progress, (key_schema, value_schema))
    report.malformed_checksums = [
        {"sidecar": m.sidecar, "file": m.file, "kind": m.kind, "reason": m.reason} for m in malformed.found()
    ]
    return report


def _verify(
    checkpoint: str,
    operator_id: int | None,
    storage_options: dict[str, Any] | None,
    show_progress: bool | None,
    schemas: tuple[str | None, str | None] = (None, None),
) -> VerifyReport:
    storage = Storage(checkpoint, dict(storage_options or {}))
    cp = CheckpointDir(storage)
    latest = cp.latest_committed_batch()
    give_schemas(cp, *schemas, operator_id)  # every plan below is made over cp
    committed_versions = {b + 1 for b in cp.committed_batches}
    report = VerifyReport(checkpoint=cp.location, latest_batch=latest)

    work: list[tuple[StateReadPlan, int, list[int]]] = []
    targets: list[tuple[int, str | None, StateReadPlan]] = []
    for op, store, op_name in operator_stores(cp, operator_id, None, latest, variables=False):
        try:
            targets.extend(
                (op, op_name, plan) for plan in _plans(checkpoint, cp, op, store, op_name, latest, storage_options)
            )
        except (UnsupportedOptionError, RequiredOptionError) as exc:
            report.skipped.append({"operator_id": op, "store_name": store, "reason": exc.message})
        except StateReaderError as exc:
            report.problems.append(_problem(op, store, None, None, exc))
    for op, op_name, plan in targets:
        store = _shown_store(plan)
        partitions = []
        for pid in plan.partitions:
            try:
                files = StoreFiles(storage, plan.store_dir(pid), plan.provider_class, plan.codec)
                versions = files.retained_versions(plan.version, committed_versions)
            except StateReaderError as exc:
                report.problems.append(_problem(op, store, pid, None, exc))
                continue
            if not versions:
                report.problems.append(
                    Problem(
                        op,
                        store,
                        pid,
                        plan.version,
                        "STATE_READER_NO_STATE_FILES",
                        f"no state file of version {plan.version} or older",
                        storage.display(plan.store_dir(pid)),
                    )
                )
                continue
            work.append((plan, pid, versions))
            partitions.append(
                {
                    "partition_id": pid,
                    "first_version": versions[0],
                    "last_version": versions[-1],
                    "versions": len(versions),
                }
            )
        report.stores.append(
            {
                "operator_id": op,
                "operator_name": op_name,
                "store_name": store,
                "provider": plan.provider_class,
                "partitions": partitions,
            }
        )

    total = sum(len(v) for _, _, v in work)
    with progress("verifying", total, enabled=show_progress) as bar:
        for plan, pid, versions in work:
            for version in versions:
                # same plan, older version: a purged commit log entry must not stop an HDFS check
                at_version = plan if version == plan.version else dataclasses.replace(plan, batch_id=version - 1)
                report.versions_checked += 1
                try:
                    decode_columns(at_version, pid)
                    report.versions_ok += 1
                except Exception as exc:  # every failure is a finding, ours or not
                    report.problems.append(_problem(plan.operator_id, _shown_store(plan), pid, version, exc))
                bar.advance(
                    description=f"verifying operator {plan.operator_id} · {_shown_store(plan)} · partition {pid}"
                )
    return report
