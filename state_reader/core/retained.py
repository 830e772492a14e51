"""What a checkpoint still holds, as every analysis sees it: the stores of each operator, the committed
batches whose state every partition can still rebuild, and the offset log's entries of those batches
(each batch's watermark and time).

``stats``, ``doctor``, ``why`` (``explain``), ``verify``, ``schema_check`` and the notebook's display
take these facts from here rather than deciding them again, so that they agree on which batches are
retained and which stores there are.
"""

from __future__ import annotations

from collections.abc import Iterable

from state_reader.core.metadata import infer_operator_metadata
from state_reader.core.planner import join_column_families
from state_reader.errors import SchemaReadError, StateReaderError
from state_reader.model import operators
from state_reader.model.checkpoint import CheckpointDir, OffsetEntry
from state_reader.model.plan import StateReadPlan
from state_reader.model.state_variables import timer_family, user_variables
from state_reader.providers.store_files import StoreFiles


def operator_stores(
    cp: CheckpointDir,
    operator_id: int | None = None,
    store_name: str | None = None,
    batch_id: int | None = None,
    variables: bool = True,
) -> list[tuple[int, str, str | None]]:
    """(operator id, store name, operator name) of every store to look at.

    Stores come from operator metadata, or from the files for checkpoints
    written before Spark 4.0. With ``variables``, a transformWithState
    operator's "stores" are its state variables and its timers.
    """
    known = cp.operator_ids
    if operator_id is not None and operator_id not in known:
        raise SchemaReadError(
            f"the checkpoint {cp.location} has no state for operator {operator_id} "
            f"(operators: {', '.join(map(str, known)) or 'none'})",
            path=cp.storage.display("state"),
        )
    out: list[tuple[int, str, str | None]] = []
    for op in [operator_id] if operator_id is not None else known:
        try:
            meta = cp.operator_metadata(op, batch_id)
        except StateReaderError:
            meta = None
        if meta is None:
            meta = infer_operator_metadata(cp, op)
        # join formats 3 and 4 keep their four stores as column families of one store
        names = join_column_families(cp, meta) or ([s.name for s in meta.stores] if meta else [])
        op_name = meta.operator_name if meta else None
        if variables and meta is not None and operators.is_transform_with_state(op_name):
            timers = timer_family(meta)
            names = user_variables(meta) + ([timers] if timers else [])
        if store_name is not None:
            if names and store_name not in names:
                raise SchemaReadError(
                    f"operator {op} of {cp.location} has no store '{store_name}' (stores: {', '.join(names)})",
                    path=cp.storage.display(f"state/{op}"),
                )
            names = [store_name]
        out.extend((op, name, op_name) for name in names)
    return out


def name_of_operator(cp: CheckpointDir, operator_id: int, batch_id: int | None = None) -> str | None:
    """The name of operator ``operator_id`` (None when nothing records it)."""
    return next((name for _, _, name in operator_stores(cp, operator_id, batch_id=batch_id)), None)


def retained_batches(cp: CheckpointDir, files: Iterable[StoreFiles], version: int | None = None) -> list[int]:
    """The committed batches whose state every partition (``files``, one per partition of a store) can
    still rebuild from the files on disk, oldest first; none when a partition can rebuild no version.

    ``version``: the newest version looked at (by default the latest committed batch's). Cleanup takes
    the oldest versions first, so the batches from the oldest every partition still holds are retained.
    """
    committed = cp.committed_batches
    if not committed:
        return []
    upto = committed[-1] + 1 if version is None else version
    committed_versions = {b + 1 for b in committed}  # RocksDB's files are chosen through the commit log
    oldest = 1
    for store_files in files:
        versions = store_files.retained_versions(upto, committed_versions)
        if not versions:
            return []
        oldest = max(oldest, min(versions))
    return [b for b in committed if b + 1 >= oldest]


def first_retained(cp: CheckpointDir, plan: StateReadPlan) -> int | None:
    """The oldest committed batch whose state every partition of ``plan``'s store can still rebuild."""
    files = (StoreFiles(cp.storage, plan.store_dir(pid), plan.provider_class, plan.codec) for pid in plan.partitions)
    batches = retained_batches(cp, files, plan.version)
    return batches[0] if batches else None


def offset_entries(cp: CheckpointDir, batches: Iterable[int]) -> dict[int, OffsetEntry]:
    """The offset log's entry (watermark, batch time, sources) of each of ``batches`` that still has one:
    a batch purged by the query's cleanup, or damaged, is left out and the others still tell."""
    wanted = list(batches)
    cp.storage.prefetch([f"offsets/{b}" for b in wanted], small=True)  # at once, remotely
    out: dict[int, OffsetEntry] = {}
    for batch in wanted:
        try:
            out[batch] = cp.offset_entry(batch)
        except StateReaderError:
            continue
    return out
