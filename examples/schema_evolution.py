"""Add an aggregate to a running streaming aggregation without losing its state.

A stateful query's checkpoint records the schema of its state. Change the
query - here, one more aggregate - and Spark refuses to restart it on the old
checkpoint (``STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE``): the usual way out is a
new checkpoint and the state rebuilt from all the input. ``state_reader.rewrite``
with ``transform=`` writes the old state, with the new column added, into a new
checkpoint whose schema files say so; the changed query resumes from it. The
old aggregates carry on, and the new one is computed from the rows that arrive
after the rewrite.

    python examples/schema_evolution.py [--keep DIR]
"""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
from _streaming import add_input, example_arguments, run_query, spark_session, workspace

import state_reader

T0 = 1_700_000_000
SCHEMA = "ts long, customer string, amount long"


def purchases() -> list[list[dict]]:
    """Three batches before the change: customers c0..c9 buy for i + batch."""
    return [[{"ts": T0 + b, "customer": f"c{i}", "amount": i + b} for i in range(10)] for b in range(3)]


def later_purchases() -> list[dict]:
    """One batch after the change: c0..c4 buy for 100 + i."""
    return [{"ts": T0 + 10, "customer": f"c{i}", "amount": 100 + i} for i in range(5)]


def before(stream):
    from pyspark.sql import functions as F

    return stream.groupBy("customer").agg(F.count(F.lit(1)).alias("purchases"), F.sum("amount").alias("spent"))


def after(stream):
    """The changed query: one more aggregate, the largest purchase."""
    from pyspark.sql import functions as F

    return stream.groupBy("customer").agg(
        F.count(F.lit(1)).alias("purchases"), F.sum("amount").alias("spent"), F.max("amount").alias("largest")
    )


def add_largest(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The state of `before` as `after` keeps it: the aggregation buffer gains `max`, unknown so far."""
    value = batch.column("value")
    fields = [value.type.field(i) for i in range(value.type.num_fields)]
    columns = [value.field(i) for i in range(value.type.num_fields)]
    new_value = pa.StructArray.from_arrays(
        [*columns, pa.nulls(len(value), pa.int64())], fields=[*fields, pa.field("max", pa.int64())]
    )
    return pa.RecordBatch.from_arrays([batch.column("key"), new_value], names=["key", "value"])


def restart(spark, root: str, checkpoint: str) -> list[tuple]:
    """Run the changed query from ``checkpoint`` to the end of the input; the rows it emits."""
    from pyspark.sql import functions as F

    emitted: list[tuple] = []
    stream = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(os.path.join(root, "input"))
        .withColumn("ts", F.col("ts").cast("timestamp"))
    )
    query = (
        after(stream)
        .writeStream.outputMode("update")
        .option("checkpointLocation", checkpoint)
        .foreachBatch(lambda df, _: emitted.extend(tuple(r) for r in df.collect()))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sorted(emitted)


def main() -> int:
    args = example_arguments(__doc__)
    with workspace(args.keep, "state-reader-evolution-") as root:
        spark = spark_session(shuffle_partitions=4)
        try:
            checkpoint = run_query(spark, root, purchases(), SCHEMA, before)
            add_input(root, later_purchases())

            # the changed query on (a copy of) the old checkpoint: Spark refuses it
            attempt = os.path.join(root, "attempt")
            shutil.copytree(checkpoint, attempt)
            try:
                restart(spark, root, attempt)
                print("the changed query restarted on the old checkpoint (not expected)")
            except Exception as exc:
                reason = next(
                    (w for w in str(exc).replace("[", " ").replace("]", " ").split() if w.startswith("STATE_STORE_")),
                    str(exc).splitlines()[0],
                )
                print(f"the changed query on the old checkpoint: refused ({reason})")

            # the old state with the new aggregate added, in a new checkpoint
            evolved = os.path.join(root, "checkpoint-evolved")
            report = state_reader.rewrite(checkpoint, evolved, transform=add_largest)
            print(f"rewrote {report.stores[0].rows} groups into {os.path.basename(evolved)}")

            print("the changed query on the rewritten checkpoint:")
            for customer, count, spent, largest in restart(spark, root, evolved):
                print(f"  {customer}: {count} purchases, {spent} spent, largest since the change {largest}")
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
