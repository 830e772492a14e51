"""What a rewrite wrote, or would write in a dry run: rows and bytes per store and partition."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from state_reader.core.skew import partition_skew
from state_reader.model.plan import StateReadPlan
from state_reader.units import human_bytes

# the two layouts a report compares, by the one name each goes by (text, --json, tables, plots), and
# whether it is the new one
CURRENT, NEW = "current", "new"
LAYOUTS = ((CURRENT, False), (NEW, True))


@dataclass
class StoreReport:
    """What a rewrite wrote (or, in a dry run, would write) for one store of one operator.

    Rows and bytes are a state's size as :mod:`state_reader.core.size` defines it (the key and
    value bytes as the store keeps them, uncompressed): in the destination provider's encoding
    (after any transform) for the new partitions, the source's as stored for the current ones.
    """

    operator_id: int
    operator_name: str | None
    store_name: str
    rows: int = 0
    dropped: int = 0
    rows_per_partition: list[int] = field(default_factory=list)
    bytes_per_partition: list[int] = field(default_factory=list)
    old_rows_per_partition: list[int] = field(default_factory=list)
    old_bytes_per_partition: list[int] = field(default_factory=list)
    # rows written into the store (upsert, delete): keys each new partition gains, replaces and loses
    gained_per_partition: list[int] = field(default_factory=list)
    replaced_per_partition: list[int] = field(default_factory=list)
    lost_per_partition: list[int] = field(default_factory=list)
    # the safe widenings applied to the types of those rows, one sentence each
    widened: list[str] = field(default_factory=list)

    @property
    def edited(self) -> bool:
        """Whether rows were written into this store (``upsert`` or ``delete``)."""
        return bool(self.gained_per_partition)

    def add_edit(
        self, index: int, gained: int, replaced: int, lost: int, byte_change: int, row_change: int | None = None
    ) -> None:
        """Count what an edit did to the ``index``-th new partition (its rows and bytes follow; ``row_change``:
        the rows it added less those it took out, when the keys counted are not all of them)."""
        change = gained - lost if row_change is None else row_change
        if not self.gained_per_partition:
            width = len(self.rows_per_partition)
            self.gained_per_partition, self.replaced_per_partition, self.lost_per_partition = (
                [0] * width,
                [0] * width,
                [0] * width,
            )
        self.gained_per_partition[index] += gained
        self.replaced_per_partition[index] += replaced
        self.lost_per_partition[index] += lost
        self.rows_per_partition[index] += change
        self.bytes_per_partition[index] += byte_change
        self.rows += change


@dataclass
class RewriteReport:
    """What :func:`~state_reader.core.rewrite.rewrite_checkpoint` wrote, or would write (``dry_run``)."""

    source: str
    destination: str
    batch_id: int
    provider: str
    old_partitions: int
    new_partitions: int
    source_provider: str = ""
    dry_run: bool = False
    stores: list[StoreReport] = field(default_factory=list)
    # the frozen confs asked for: conf, old, new, recorded, changed, migration (core/rewrite/migrate.ConfChange)
    confs: list[dict[str, Any]] = field(default_factory=list)
    files: int = 0
    bytes: int = 0

    def table(self) -> pa.Table:
        """One row per (operator, store, new partition): the rows and bytes written there."""
        rows = [
            {
                "operator_id": s.operator_id,
                "store_name": s.store_name,
                "partition_id": p,
                "rows": n,
                "bytes": s.bytes_per_partition[p],
            }
            for s in self.stores
            for p, n in enumerate(s.rows_per_partition)
        ]
        schema = pa.schema(
            [
                ("operator_id", pa.int32()),
                ("store_name", pa.string()),
                ("partition_id", pa.int32()),
                ("rows", pa.int64()),
                ("bytes", pa.int64()),
            ]
        )
        return pa.Table.from_pylist(rows, schema=schema)

    def partition_sizes(self, new: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Rows and bytes of every partition summed over all stores, in the new layout or the current one.

        A partition of every store runs in one task, so these are the loads a task gets.
        """
        count = self.new_partitions if new else self.old_partitions
        rows = np.zeros(max(count, 1), dtype=np.int64)
        size = np.zeros(max(count, 1), dtype=np.int64)
        for s in self.stores:
            r = s.rows_per_partition if new else s.old_rows_per_partition
            b = s.bytes_per_partition if new else s.old_bytes_per_partition
            rows[: len(r)] += r
            size[: len(b)] += b
        return rows[:count], size[:count]

    def skew(self, new: bool = True) -> float:
        """Largest partition's bytes over the median partition's (1.0 = even; inf when the median is empty)."""
        return partition_skew(self.partition_sizes(new)[1].tolist())

    def layout(self) -> pa.Table:
        """The current and the new per-partition rows and bytes (all stores), one row per (layout, partition)."""
        out: dict[str, list[Any]] = {"layout": [], "partition_id": [], "rows": [], "bytes": []}
        for label, new in LAYOUTS:
            rows, size = self.partition_sizes(new)
            out["layout"] += [label] * len(rows)
            out["partition_id"] += list(range(len(rows)))
            out["rows"] += rows.tolist()
            out["bytes"] += size.tolist()
        schema = pa.schema(
            [("layout", pa.string()), ("partition_id", pa.int32()), ("rows", pa.int64()), ("bytes", pa.int64())]
        )
        return pa.Table.from_pydict(out, schema=schema)

    def summary(self) -> dict[str, Any]:
        """The report as plain data (the CLI's ``--json``)."""

        def side(new: bool) -> dict[str, Any]:
            rows, size = self.partition_sizes(new)
            return {
                "partitions": len(rows),
                "rows": int(rows.sum()),
                "bytes": int(size.sum()),
                "rows_per_partition": rows.tolist(),
                "bytes_per_partition": size.tolist(),
                "skew": skew if np.isfinite(skew := self.skew(new)) else None,
            }

        return {
            "source": self.source,
            "destination": self.destination or None,
            "batch_id": self.batch_id,
            "dry_run": self.dry_run,
            "source_provider": self.source_provider,
            "provider": self.provider,
            "files": self.files,
            "bytes": self.bytes,
            "confs": self.confs,
            CURRENT: side(False),
            NEW: side(True),
            "stores": [
                {
                    "operator_id": s.operator_id,
                    "operator_name": s.operator_name,
                    "store_name": s.store_name,
                    "rows": s.rows,
                    "dropped": s.dropped,
                    "rows_per_partition": s.rows_per_partition,
                    "bytes_per_partition": s.bytes_per_partition,
                    **(
                        {
                            "gained": sum(s.gained_per_partition),
                            "replaced": sum(s.replaced_per_partition),
                            "lost": sum(s.lost_per_partition),
                            "gained_per_partition": s.gained_per_partition,
                            "replaced_per_partition": s.replaced_per_partition,
                            "lost_per_partition": s.lost_per_partition,
                            "widened": s.widened,
                        }
                        if s.edited
                        else {}
                    ),
                }
                for s in self.stores
            ],
        }

    def __str__(self) -> str:
        """One line: what was rewritten into what (the command line's ``render_rewrite`` says the rest)."""
        span = f"{self.old_partitions} -> {self.new_partitions} partitions"
        rows = sum(s.rows for s in self.stores)
        if self.dry_run:
            return f"dry run of a rewrite of {self.source} at batch {self.batch_id}: {span}, {rows:,} rows"
        return (
            f"rewrite of {self.source} at batch {self.batch_id} into {self.destination}: {span}, {rows:,} rows, "
            f"{self.files} files, {human_bytes(self.bytes)}"
        )


def store_report(plan: StateReadPlan) -> StoreReport:
    meta = plan.checkpoint.operator_metadata(plan.operator_id, plan.batch_id)
    return StoreReport(plan.operator_id, meta.operator_name if meta is not None else None, plan.store_name)
