"""Decode every retained state version of a checkpoint and report what is damaged.

For each operator, store and partition, every version the files on disk allow
(see :meth:`StoreFiles.retained_versions`: for HDFS every version from the first
delta or oldest snapshot up to the latest committed batch) is rebuilt and
decoded exactly as ``read_state`` would, so a corrupt, truncated or missing
file shows up in every version that needs it. Errors are collected, not
raised: the report lists each failing version with the file and the error.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from state_reader.core.decode import decode_columns
from state_reader.core.options import from_kwargs
from state_reader.core.planner import plan_state_read
from state_reader.errors import RequiredOptionError, StateReaderError, UnsupportedOptionError
from state_reader.fronts.stats import operator_stores
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import Checkpoint
from state_reader.model.plan import StateReadPlan
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

    @property
    def ok(self) -> bool:
        return not self.problems

    def damaged_files(self) -> dict[str, int]:
        """File -> number of versions it broke, most damaging first."""
        counts: dict[str, int] = {}
        for p in self.problems:
            key = p.path or f"operator {p.operator_id} store {p.store_name}"
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def as_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint, "latest_batch": self.latest_batch, "ok": self.ok,
            "versions_checked": self.versions_checked, "versions_ok": self.versions_ok,
            "stores": self.stores, "problems": [p.as_dict() for p in self.problems],
            "damaged_files": self.damaged_files(), "skipped": self.skipped,
        }


def _problem(op: int, store: str, pid: int | None, version: int | None, exc: BaseException) -> Problem:
    if isinstance(exc, StateReaderError):
        return Problem(op, store, pid, version, exc.error_class, exc.message, exc.path)
    # not one of ours: a decoder met bytes it did not expect; still damage to report
    return Problem(op, store, pid, version, f"UNEXPECTED_{type(exc).__name__.upper()}", str(exc), None)


def verify_checkpoint(checkpoint: str, *, operator_id: int | None = None,
                      storage_options: dict[str, Any] | None = None,
                      show_progress: bool | None = None) -> VerifyReport:
    """Rebuild and decode every retained version of every store; collect the failures.

    Raises only when the checkpoint itself cannot be opened (no commit log);
    everything else becomes a :class:`Problem` in the report. Operators this
    reader does not support yet are listed in ``skipped``.
    """
    storage = Storage(checkpoint, dict(storage_options or {}))
    cp = Checkpoint(storage)
    latest = cp.latest_committed_batch()
    committed_versions = {b + 1 for b in cp.committed_batches}
    report = VerifyReport(checkpoint=cp.location, latest_batch=latest)

    work: list[tuple[StateReadPlan, int, list[int]]] = []
    for op, store, op_name in operator_stores(cp, operator_id, None, latest):
        try:
            plan = plan_state_read(from_kwargs(checkpoint, {
                "operator_id": op, "store_name": store, "batch_id": latest, "storage_options": storage_options}),
                cp)
        except (UnsupportedOptionError, RequiredOptionError) as exc:
            report.skipped.append({"operator_id": op, "store_name": store, "reason": exc.message})
            continue
        except StateReaderError as exc:
            report.problems.append(_problem(op, store, None, None, exc))
            continue
        partitions = []
        for pid in plan.partitions:
            try:
                files = StoreFiles(storage, plan.store_dir(pid), plan.provider, plan.codec)
                versions = files.retained_versions(plan.version, committed_versions)
            except StateReaderError as exc:
                report.problems.append(_problem(op, store, pid, None, exc))
                continue
            if not versions:
                report.problems.append(Problem(
                    op, store, pid, plan.version, "STATE_READER_NO_STATE_FILES",
                    f"no state file of version {plan.version} or older", storage.display(plan.store_dir(pid))))
                continue
            work.append((plan, pid, versions))
            partitions.append({"partition_id": pid, "first_version": versions[0], "last_version": versions[-1],
                               "versions": len(versions)})
        report.stores.append({"operator_id": op, "operator_name": op_name, "store_name": store,
                              "provider": plan.provider, "partitions": partitions})

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
                    report.problems.append(_problem(plan.operator_id, plan.store_name, pid, version, exc))
                bar.advance(description=f"verifying operator {plan.operator_id} · {plan.store_name} · "
                                        f"partition {pid}")
    return report
