"""Writing a rewrite: the new partitions' snapshots, then the logs, schema files and operator
metadata, and last the real ``metadata`` (the commit point)."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from state_reader.core.rewrite.migrate_checkpoint_format import commit_log_version, format_1_commit
from state_reader.core.rewrite.plan import RewritePlan, offset_batches
from state_reader.core.rewrite.report import RewriteReport
from state_reader.errors import RewriteFailedError, StateReaderError
from state_reader.formats import snapshot_zip
from state_reader.formats.schema_files import nullable_schema_file
from state_reader.io.destination import Destination
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir, is_schema_file, numeric_names, state_file_name
from state_reader.model.plan import StateReadPlan
from state_reader.providers import rocksdb_snapshot
from state_reader.providers.hdfs import framed_rows, snapshot_file

Put = Callable[[str, bytes | Iterable[bytes]], None]


def counting_writer(dest: Destination, report: RewriteReport) -> Put:
    """A ``put(rel, data)`` that writes ``data`` (bytes, or pieces streamed) into ``dest`` and
    counts the files and bytes in ``report``."""

    def put(rel: str, data: bytes | Iterable[bytes]) -> None:
        report.bytes += dest.write(rel, data)
        report.files += 1

    return put


@contextmanager
def failure_marked(rewrite_plan: RewritePlan, dest: Destination) -> Iterator[None]:
    """Turn a failure while writing ``dest`` into a :class:`RewriteFailedError` that says the
    destination is marked incomplete (its ``metadata`` still holds the marker
    :meth:`~state_reader.io.destination.Destination.begin` wrote)."""
    try:
        yield
    except (StateReaderError, OSError) as exc:
        why = getattr(exc, "message", exc)
        raise RewriteFailedError(
            f"rewriting {rewrite_plan.checkpoint.location} into {dest.display()} stopped: {why}. "
            f"{dest.display('metadata')} marks the destination incomplete, so Spark will not start from it; "
            "run the rewrite again into it (it replaces the incomplete attempt)",
            path=dest.display(),
        ) from exc


def write_partition(
    plan: StateReadPlan,
    pid: int,
    framed: Iterable[bytes | np.ndarray],
    to_rocksdb: bool,
    extra: dict[str, Any],
    put: Put,
    unique_id: str | None = None,
) -> None:
    """New partition ``pid`` of a store: its ``framed`` rows (target encoding, in chunks of whole
    records as :func:`~state_reader.providers.hdfs.frame_records` frames them) streamed into the
    snapshot of version B + 1 (named by ``unique_id`` in checkpoint format 2: :meth:`RewritePlan.unique_id`)."""
    directory = plan.checkpoint.store_dir(plan.operator_id, pid, plan.store_name)
    if not to_rocksdb:
        put(posixpath.join(directory, state_file_name(plan.version, "snapshot")), snapshot_file(framed, plan.codec))
        return
    source = f"rows routed to {directory}"
    for sst, data in rocksdb_snapshot.snapshot_files((framed_rows(chunk, source) for chunk in framed), extra):
        if sst is None:
            put(posixpath.join(directory, state_file_name(plan.version, "zip", unique_id)), data)
        else:
            put(posixpath.join(directory, snapshot_zip.SST_DIR, sst), data)


def finish_checkpoint(rewrite_plan: RewritePlan, dest: Destination, put: Put) -> None:
    """Everything but the state: logs, schema files, operator metadata, and last the real ``metadata``
    (the commit point: from then on Spark starts from ``dest``)."""
    _copy_logs(rewrite_plan.checkpoint, put, rewrite_plan.batch_id, rewrite_plan.offset_confs, rewrite_plan.unique_ids)
    source_version = rewrite_plan.checkpoint.commit_entry(rewrite_plan.batch_id)[0]
    version = f"v{commit_log_version(rewrite_plan.unique_ids, source_version)}"
    put(
        f"commits/{rewrite_plan.batch_id}",
        f"{version}\n{json.dumps(rewrite_plan.commit_entry(), separators=(',', ':'))}".encode(),
    )
    own = {
        rows.plan.operator_id: files
        for rows in rewrite_plan.stores
        if (files := rows.state_metadata(rewrite_plan.batch_id, rewrite_plan.new_partitions, dest.qualified))
        is not None
    }
    _copy_state_metadata(
        rewrite_plan.checkpoint,
        put,
        rewrite_plan.new_partitions,
        dest,
        rewrite_plan.schema_files(),
        own,
        rewrite_plan.nullable_operators,
    )
    put("metadata", rewrite_plan.checkpoint.storage.read_bytes("metadata"))


def _copy_logs(cp: CheckpointDir, put: Put, batch: int, confs: dict[str, str], unique_ids: bool) -> None:
    """The offset and commit logs up to ``batch`` (offsets with ``confs`` set; commits without unique ids in
    checkpoint format 1), and the source logs."""
    storage = cp.storage
    for b in offset_batches(cp):
        if b <= batch:
            put(f"offsets/{b}", _with_confs(cp, b, confs).encode("utf-8"))
    for b in numeric_names(storage.list_names("commits")):
        if b < batch:  # the rewritten batch's own entry names the new files: finish_checkpoint writes it
            raw = storage.read_bytes(f"commits/{b}")
            put(f"commits/{b}", raw if unique_ids else format_1_commit(raw))
    for rel in _files_under(storage, "sources"):
        name = posixpath.basename(rel)
        if name.isdigit() and int(name) > batch:
            continue  # a source's log of batches after the one rewritten: the resumed query plans them afresh
        put(rel, storage.read_bytes(rel))


def _copy_state_metadata(
    cp: CheckpointDir,
    put: Put,
    num_partitions: int,
    dest: Destination,
    schema_files: dict[str, bytes],
    own: dict[int, dict[str, bytes]],
    nullable: frozenset[int] = frozenset(),
) -> None:
    """Schema files as they are (or as ``schema_files`` gives them: a transform's new schemas), those of the
    operators in ``nullable`` made nullable throughout; operator metadata with the new partition count. An
    operator in ``own`` (a store in a new layout) gets those files in place of the source's."""
    storage = cp.storage
    for op in cp.operator_ids:
        put_op = _nullable_schemas(put) if op in nullable else put
        if op in own:
            for rel, data in own[op].items():
                put_op(rel, data)
            continue
        for rel in _files_under(storage, f"state/{op}"):
            parts = rel.split("/")
            inside = parts[2]
            if inside.isdigit():
                # a partition directory: only partition 0's schema files (`[store/]_metadata/schema`) come along
                if inside != "0" or "_metadata" not in parts:
                    continue
                put_op(rel, schema_files[rel] if rel in schema_files else storage.read_bytes(rel))
            elif inside == "_metadata" and (parts[-1] == "metadata" or parts[-2] == "v2"):
                put_op(rel, _operator_metadata(cp, rel, op, num_partitions, dest).encode("utf-8"))
            else:
                put_op(rel, storage.read_bytes(rel))


def _nullable_schemas(put: Put) -> Put:
    """``put`` with every schema file it is given made nullable throughout (``alwaysNullableOutput``)."""

    def widened(rel: str, data: bytes | Iterable[bytes]) -> None:
        if is_schema_file(rel):
            data = nullable_schema_file(data if isinstance(data, bytes) else b"".join(data), rel)
        put(rel, data)

    return widened


def _files_under(storage: Storage, rel: str) -> list[str]:
    """The data files under ``rel`` (paths relative to the checkpoint root); no sidecars or temp files."""
    return [
        path
        for path in storage.files_under(rel)
        if not posixpath.basename(path).startswith(".") and not path.endswith((".crc", ".tmp"))
    ]


def _with_confs(cp: CheckpointDir, batch: int, confs: dict[str, str]) -> str:
    """Offset log entry ``batch`` with ``confs`` set among the confs it records (Spark restores them at restart)."""
    lines, meta = cp.offset_lines(batch)
    meta["conf"] = {**(meta.get("conf") or {}), **confs}
    lines[1] = json.dumps(meta, separators=(",", ":"))
    return "\n".join(lines)


def _operator_metadata(cp: CheckpointDir, rel: str, operator_id: int, num_partitions: int, dest: Destination) -> str:
    """Operator metadata file ``rel`` (v1 or v2) with every store's partition count set and its schema
    file paths (v2 records absolute URIs) pointing into ``dest``, wherever the source was written."""
    header, doc = cp.operator_metadata_doc(rel, operator_id)
    for store in doc.get("stateStoreInfo", []):
        store["numPartitions"] = num_partitions
        paths = store.get("stateSchemaFilePaths")
        if paths:
            store["stateSchemaFilePaths"] = [dest.qualified(cp.resolve_schema_path(operator_id, p)) for p in paths]
    return header + "\n" + json.dumps(doc, separators=(",", ":"))
