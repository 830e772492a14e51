"""Read a planned store partition by partition: key filter, row limit, progress.

The fronts that show or write state (``read_state(key_filter=...)``, the CLI,
exports, the Spark data source with pushed filters) all read through
:func:`iter_batches`, so filtering happens in one place: on each partition's
record batches as soon as the partition is decoded.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from state_reader.core.key_filter import KeyFilter, KeyFilterSpec, as_key_filter
from state_reader.core.planner import StateReadPlan
from state_reader.errors import InvalidOptionError
from state_reader.progress import progress


def key_arrow_type(plan: StateReadPlan) -> pa.StructType:
    """Arrow type of the ``key`` column the plan produces."""
    return plan.arrow_schema.field("key").type


def bind_key_filter(plan: StateReadPlan, spec: KeyFilterSpec | KeyFilter | None) -> KeyFilter | None:
    """``spec`` checked against the plan's key (unknown fields fail before any file is read)."""
    return as_key_filter(spec, key_arrow_type(plan))


def select_partitions(plan: StateReadPlan, partitions: Sequence[int] | None) -> list[int]:
    """The plan's partitions, or those of ``partitions`` (each must exist)."""
    if partitions is None:
        return list(plan.partitions)
    missing = [p for p in partitions if p not in plan.partitions]
    if missing:
        where = plan.storage.display(f"state/{plan.operator_id}")
        have = ", ".join(map(str, plan.partitions)) or "none"
        raise InvalidOptionError(
            f"partition {', '.join(map(str, missing))} of operator {plan.operator_id} does not exist "
            f"under {where} (partitions: {have})", path=where)
    return list(dict.fromkeys(partitions))


def iter_batches(plan: StateReadPlan, *, key_filter: KeyFilterSpec | KeyFilter | None = None,
                 partitions: Sequence[int] | None = None, limit: int | None = None,
                 show_progress: bool | None = None, label: str | None = None) -> Iterator[pa.RecordBatch]:
    """Record batches of the planned read, filtered, at most ``limit`` rows in all.

    Reading stops as soon as ``limit`` rows are out (later partitions are not
    decoded). ``show_progress`` None draws a bar on terminals for slow reads.
    """
    flt = bind_key_filter(plan, key_filter)
    chosen = select_partitions(plan, partitions)
    remaining = limit
    what = label or f"operator {plan.operator_id} · batch {plan.batch_id}"
    with progress(f"reading {what}", len(chosen), enabled=show_progress) as bar:
        for pid in chosen:
            for batch in plan.read_partition(pid):
                if flt is not None:
                    batch = flt.apply(batch)
                if remaining is not None:
                    if batch.num_rows > remaining:
                        batch = batch.slice(0, remaining)
                    remaining -= batch.num_rows
                if batch.num_rows:
                    yield batch
                if remaining is not None and remaining <= 0:
                    return
            bar.advance()


def read_table(plan: StateReadPlan, **kwargs: Any) -> pa.Table:
    """:func:`iter_batches` collected into one table with the plan's schema."""
    return pa.Table.from_batches(list(iter_batches(plan, **kwargs)), schema=plan.arrow_schema)
