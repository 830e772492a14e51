"""``state_reader.verdicts(cp, spark=spark)``: every key's verdict as a Spark DataFrame, computed on the
executors for stores larger than one machine.

The driver decides what the verdicts are taken against (:func:`state_reader.core.verdicts.plan_verdicts`:
the plan, the retained batches, the clocks) and which partitions a key filter can match; each state
partition is then one task of a ``spark.range`` whose ``mapInArrow`` reads that partition's rows, timers
and change feed and gives its keys' verdicts (:func:`state_reader.core.verdicts.partition_verdicts`). No
state row passes through the driver.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from state_reader.core.key_filter import KeyFilterSpec
from state_reader.core.options import from_kwargs
from state_reader.core.planner import plan_state_read
from state_reader.core.scan import bind_key_filter, partitions_to_read
from state_reader.core.verdicts import VerdictPlan, partition_verdicts, plan_verdicts
from state_reader.errors import unexpected_errors_as_ours
from state_reader.fronts.spark_shared import spark_worker_errors


class _PartitionVerdicts:
    """The ``mapInArrow`` function: for each task number it gets, its partition's verdicts."""

    def __init__(
        self,
        plans: list[VerdictPlan],
        tasks: list[tuple[int, int]],
        schema: pa.Schema,
        key_filter: KeyFilterSpec | None,
    ) -> None:
        self.plans = plans
        self.tasks = tasks  # (the plan's index, the partition)
        self.schema = schema
        self.key_filter = key_filter

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column(0).to_pylist():
                index, pid = self.tasks[task]
                vp = self.plans[index]
                with spark_worker_errors(f"the verdicts of partition {pid} of {vp.checkpoint}"):
                    table = partition_verdicts(vp, [pid], self.key_filter)
                    yield from table.cast(self.schema).to_batches()


def verdicts_frame(spark: Any, checkpoint: str, selectors: dict[str, Any], key_filter: KeyFilterSpec | None) -> Any:
    """The table of ``state_reader.verdicts`` as a Spark DataFrame, one task per state partition (those the
    key filter can match)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    with unexpected_errors_as_ours(checkpoint):
        plans, _ = plan_verdicts(checkpoint, selectors)
        tasks: list[tuple[int, int]] = []
        schema: pa.Schema | None = None
        for index, vp in enumerate(plans):
            plan = plan_state_read(from_kwargs(checkpoint, vp.at_latest))
            bound = bind_key_filter(plan, key_filter)
            tasks += [(index, pid) for pid in partitions_to_read(plan, bound)]
            # the schema of the result: the verdicts of no partition
            schema = schema or partition_verdicts(vp, [], key_filter).schema
    assert schema is not None
    frame = spark.range(0, len(tasks), 1, max(1, len(tasks))).mapInArrow(
        _PartitionVerdicts(plans, tasks, schema, key_filter), from_arrow_schema(schema)
    )
    return frame
