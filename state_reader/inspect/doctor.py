"""``state-reader doctor`` and :func:`state_reader.diagnose`: what is wrong with a stateful query,
decided from its checkpoint alone.

Each check reads the logs (offsets, commits), the file listings and the state of
the latest committed batch (plus, for growth, the oldest batch still on disk and the
change feed since), and turns what it finds into :class:`Finding` objects with a
severity, the operator and store concerned, the evidence in numbers and what to do. The thresholds are named
in :data:`THRESHOLDS` and can be overridden per call.

This module holds the diagnosis and runs the checks; the checks on the files are in
:mod:`~state_reader.inspect.doctor_files`, those on the logs and the state in
:mod:`~state_reader.inspect.doctor_state`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from state_reader.core import live
from state_reader.core.options import from_kwargs
from state_reader.core.planner import give_schemas, store_read_options
from state_reader.core.retained import offset_entries, operator_stores
from state_reader.core.scan import read_table
from state_reader.core.size import StoredSizes
from state_reader.errors import (
    InvalidOptionError,
    OffsetLogUnavailableError,
    OffsetMetadataUnavailableError,
    StateReaderError,
)
from state_reader.inspect.doctor_files import (
    files_past_commit,
    long_chain,
    malformed_checksums,
    storage_waste,
    unused_files,
)
from state_reader.inspect.doctor_findings import Finding, Store, plural
from state_reader.inspect.doctor_state import (
    expired_rows,
    large_rows,
    never_evicted,
    overdue_timers,
    skewed_partition,
    store_verdicts,
    uncommitted,
    unreadable,
    waiting_for_the_watermark,
    watermark_stalled,
)
from state_reader.inspect.doctor_thresholds import THRESHOLDS
from state_reader.inspect.doctor_upgrades import (
    ENCODING_AVRO,
    JOIN_FORMAT_UPGRADE,
    encoding_avro,
    join_format_upgrade,
)
from state_reader.io.calls import with_one_listing
from state_reader.io.integrity import checksum_report
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from state_reader.model.conf import CONF_PROVIDER, frozen_values, provider_name
from state_reader.model.plan import StateReadPlan

SEVERITIES = ("error", "warning", "info")
KINDS = (
    "unreadable-store",
    "watermark-stalled",
    "never-evicted",
    "expired-rows",
    "skew",
    "long-chain",
    "storage-waste",
    "files-past-commit",
    "uncommitted-batch",
    "large-rows",
    "overdue-timers",
    "malformed-checksum-file",
    JOIN_FORMAT_UPGRADE,
    ENCODING_AVRO,
)


@dataclass
class Diagnosis:
    """What :func:`diagnose` found in one checkpoint, and what it checked."""

    checkpoint: str
    batch_id: int | None
    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    thresholds: dict[str, float] = field(default_factory=dict)
    # what Spark froze into the checkpoint (model/conf.frozen_values): the value of each, and whether a rewrite
    # changes it
    frozen_confs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        """True when nothing is a warning or worse."""
        return not any(f.severity in ("error", "warning") for f in self.findings)

    def table(self) -> pa.Table:
        """The findings as a table (``evidence`` as JSON text), worst first."""
        rows = [{**asdict(f), "evidence": json.dumps(f.evidence, sort_keys=True, default=str)} for f in self.findings]
        schema = pa.schema(
            [
                ("kind", pa.string()),
                ("severity", pa.string()),
                ("operator_id", pa.int32()),
                ("store_name", pa.string()),
                ("summary", pa.string()),
                ("evidence", pa.string()),
                ("action", pa.string()),
            ]
        )
        return pa.Table.from_pylist(rows, schema=schema)

    def to_pandas(self) -> Any:
        return self.table().to_pandas()

    def as_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "batch_id": self.batch_id,
            "healthy": self.healthy,
            "findings": [asdict(f) for f in self.findings],
            "checked": self.checked,
            "thresholds": self.thresholds,
            "frozen_confs": self.frozen_confs,
        }


def parse_thresholds(given: dict[str, Any] | None) -> dict[str, float]:
    """:data:`THRESHOLDS`' defaults with ``given`` applied; unknown names and non-numbers refused."""
    values = {name: float(default) for name, (default, _) in THRESHOLDS.items()}
    for name, value in (given or {}).items():
        if name not in THRESHOLDS:
            raise InvalidOptionError(f"doctor has no threshold '{name}' (thresholds: {', '.join(THRESHOLDS)})")
        try:
            values[name] = float(value)
        except (TypeError, ValueError):
            raise InvalidOptionError(f"threshold '{name}' must be a number, not {value!r}") from None
    return values


# --- the whole diagnosis ---------------------------------------------------------------------------


@with_one_listing  # each directory of a remote checkpoint listed once
def diagnose(
    checkpoint: str,
    *,
    thresholds: dict[str, Any] | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Diagnosis:
    """Check a checkpoint for the problems in :data:`KINDS`; see the module docstring. ``key_schema`` and
    ``value_schema``: the schemas of operator 0's store ``default`` when it has no schema file."""
    with checksum_report(warn=False) as malformed:  # a finding of its own, not a warning
        result = _diagnose(
            checkpoint,
            thresholds=thresholds,
            key_schema=key_schema,
            value_schema=value_schema,
            storage_options=storage_options,
        )
    found = malformed.found()
    if found:
        result.findings.append(malformed_checksums(found))
        _sort(result.findings)
    result.checked.append("the checksum files beside every file read")
    return result


def _provider(cp: CheckpointDir, latest: int) -> str | None:
    """The short name of the provider the checkpoint records (None: not recorded, Spark's default HDFS)."""
    try:
        conf = cp.offset_conf(latest)
    except (OffsetLogUnavailableError, OffsetMetadataUnavailableError):
        conf = cp.latest_conf()
    return provider_name(conf.get(CONF_PROVIDER))


def _frozen_confs(cp: CheckpointDir, latest: int, operator_names: list[str | None]) -> list[dict[str, Any]]:
    try:
        conf = cp.offset_conf(latest)
    except (OffsetLogUnavailableError, OffsetMetadataUnavailableError):
        conf = cp.latest_conf()
    return frozen_values(conf, operator_names, 2 if cp.names_files_by_unique_id(latest) else 1)


def upgrade_suggestions(
    frozen_confs: list[dict[str, Any]],
    checkpoint: str = "CHECKPOINT",
    join_rows: dict[int, int] | None = None,
    limits: dict[str, Any] | None = None,
    provider: str | None = None,
) -> list[Finding]:
    """Findings that suggest rewriting into a better format, each with the ``state-reader rewrite --conf``
    command that does it, and only for a conf whose migration exists (``migration`` set) (doctor_upgrades):
    a transformWithState query on UnsafeRow whose schema the user may want to evolve (Avro), and a join on
    format 3 or less whose eviction scans at least ``join-eviction-rows`` buffered rows (``join_rows``: per
    join operator) (join format 4)."""
    threshold = int((limits or {}).get("join-eviction-rows", THRESHOLDS["join-eviction-rows"][0]))
    return encoding_avro(frozen_confs, checkpoint) + join_format_upgrade(
        frozen_confs, checkpoint, join_rows or {}, threshold, provider
    )


def _sort(findings: list[Finding]) -> None:
    """Worst first, then in the order of :data:`KINDS`, then by operator."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (order[f.severity], KINDS.index(f.kind), f.operator_id or 0))


def _diagnose(
    checkpoint: str,
    *,
    thresholds: dict[str, Any] | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Diagnosis:
    limits = parse_thresholds(thresholds)
    storage = Storage(checkpoint, dict(storage_options or {}))
    cp = CheckpointDir(storage)
    latest = cp.latest_committed_batch()
    give_schemas(cp, key_schema, value_schema)  # every read below plans over cp
    committed = cp.committed_batches
    result = Diagnosis(cp.location, latest, thresholds=limits)
    result.findings += uncommitted(cp, committed)
    result.checked.append("batches planned but not committed")

    cp.fetch_logs_ahead(committed)  # at once, remotely
    entries = offset_entries(cp, committed)
    watermark = entries[latest].watermark_ms if latest in entries else 0

    event_time: int | None = None
    file_checked: set[str | None] = set()
    feeds: dict[tuple[int, str, int, int], int | None] = {}  # deletes per change feed read
    waiting = 0  # keys whose verdict waits for the watermark to move
    join_rows: dict[int, int] = {}  # the rows each join buffers (what its eviction scans before format 4)
    for op, store_name, op_name in operator_stores(cp, batch_id=latest):
        planned: list[StateReadPlan] = []
        sizes: dict[int, StoredSizes] = {}

        def read(
            plan: StateReadPlan, planned: list[StateReadPlan] = planned, sizes: dict[int, StoredSizes] = sizes
        ) -> pa.Table:
            planned.append(plan)
            sizes.clear()  # a read planned again measures afresh
            # the rows' sizes as stored (large-rows, skew) measured as they are read, not read again
            return read_table(plan, show_progress=False, stored_sizes=sizes)

        try:
            # the latest batch, planned again should a running query clean it up under the read
            table = live.read_consistently(
                from_kwargs(checkpoint, store_read_options(op, store_name, None, storage_options, op_name)),
                read,
                checkpoint=cp,
            )
        except StateReaderError as exc:
            result.checked.append(f"operator {op}, store {store_name}: not read ({exc.message})")
            result.findings.append(unreadable(op, store_name, latest, exc))
            continue
        plan = planned[-1]
        store = Store(op, store_name, op_name, plan, table, sizes)
        if store_name.endswith("-keyWithIndexToValue"):
            join_rows[op] = join_rows.get(op, 0) + table.num_rows
        result.findings += skewed_partition(store, limits)
        expired, held = expired_rows(store, watermark)
        if len(cp.operator_ids) == 1:
            # with several stateful operators, each later one evicts by a watermark Spark derives from the
            # operator before it, which the offset log does not hold
            result.findings += expired
        if held is not None:
            event_time = held if event_time is None else max(event_time, held)
        result.findings += large_rows(store, limits["large-row-bytes"])
        result.findings += overdue_timers(store, entries.get(plan.batch_id))
        store_dir = plan.store_dir(plan.partitions[0]) if plan.partitions else None
        if store_dir not in file_checked:  # transformWithState variables share their store's files
            file_checked.add(store_dir)
            result.findings += long_chain(cp, store, limits["long-chain"])
            unused = unused_files(cp, store)
            result.findings += storage_waste(cp, store, unused, limits["waste-files"])
            result.findings += files_past_commit(cp, store, unused)
        result.findings += never_evicted(cp, store, entries, limits["growth-batches"], feeds)
        waiting += waiting_for_the_watermark(store_verdicts(store, entries))
        result.checked.append(
            f"operator {op} ({op_name or 'unknown'}), store {store_name}: "
            f"{plural(table.num_rows, 'row')} in {plural(len(plan.partitions), 'partition')} at batch "
            f"{plan.batch_id}"
        )
    if len(cp.operator_ids) > 1:
        result.checked.append(
            "expired rows: not checked, as each of several stateful operators evicts by its own watermark"
        )
    result.frozen_confs = _frozen_confs(cp, latest, [name for _, _, name in operator_stores(cp, batch_id=latest)])
    provider = _provider(cp, latest)
    result.findings += upgrade_suggestions(result.frozen_confs, cp.location, join_rows, limits, provider)
    result.findings += watermark_stalled(entries, limits["stalled-batches"], event_time, waiting)
    result.checked.append(f"the watermark over batches {min(entries, default=latest)}..{latest}")
    _sort(result.findings)
    return result
