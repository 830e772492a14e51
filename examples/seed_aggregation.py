"""Start a streaming aggregation from the totals a batch job already computed.

A new streaming query counts from zero: its state holds only what it has seen.
When a batch job has already summed the history, ``state_reader.rewrite`` with
``upsert=`` writes those totals into the new query's state. Run the query once,
so that Spark writes its checkpoint (its source offsets, schema files, operator
metadata); read its state; add the history to it; upsert the sums into a new
checkpoint; the query resumes there as if it had seen the history itself.

    python examples/seed_aggregation.py [--keep DIR]
"""

from __future__ import annotations

import os

import pyarrow as pa
from _streaming import add_input, example_arguments, run_query, spark_session, workspace

import state_reader

T0 = 1_700_000_000
SCHEMA = "ts long, customer string, amount long"


def history_totals() -> dict[str, tuple[int, int]]:
    """What a batch job computed over the history: customer -> (purchases, spent)."""
    return {f"c{i}": (5, 50) for i in range(10)}


def first_batch() -> list[dict]:
    """The live input the new query's first run sees: c0..c4 buy for 1 each."""
    return [{"ts": T0, "customer": f"c{i}", "amount": 1} for i in range(5)]


def later_batch() -> list[dict]:
    """The live input after the seed: c0, c5 and c9 buy for 100."""
    return [{"ts": T0 + 10, "customer": c, "amount": 100} for c in ("c0", "c5", "c9")]


def totals(stream):
    from pyspark.sql import functions as F

    return stream.groupBy("customer").agg(F.count(F.lit(1)).alias("purchases"), F.sum("amount").alias("spent"))


def seed_rows(checkpoint: str, history: dict[str, tuple[int, int]]) -> pa.Table:
    """The query's state plus the history, in the shape read_state gives (key, value)."""
    state = state_reader.read_state(checkpoint).drop(["partition_id"])
    value_type = state.schema.field("value").type  # the aggregation buffer: count, sum
    count_name, sum_name = value_type.field(0).name, value_type.field(1).name
    live = {row["key"]["customer"]: row["value"] for row in state.to_pylist()}
    rows = []
    for customer in sorted(set(history) | set(live)):
        purchases, spent = history.get(customer, (0, 0))
        seen = live.get(customer, {count_name: 0, sum_name: 0})
        value = {count_name: purchases + seen[count_name], sum_name: spent + seen[sum_name]}
        rows.append({"key": {"customer": customer}, "value": value})
    return pa.Table.from_pylist(rows, schema=state.schema)


def restart(spark, root: str, checkpoint: str) -> list[tuple]:
    """Run the query from ``checkpoint`` to the end of the input; the rows it emits."""
    from pyspark.sql import functions as F

    emitted: list[tuple] = []
    stream = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(os.path.join(root, "input"))
        .withColumn("ts", F.col("ts").cast("timestamp"))
    )
    query = (
        totals(stream)
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
    with workspace(args.keep, "state-reader-seed-aggregation-") as root:
        spark = spark_session(shuffle_partitions=4)
        try:
            # the new query's first run: Spark writes the checkpoint (offsets, schema files, operator metadata)
            checkpoint = run_query(spark, root, [first_batch()], SCHEMA, totals)
            seed = seed_rows(checkpoint, history_totals())

            # the state with the history added, in a new checkpoint; the dry run says what changes where
            dry = state_reader.rewrite(checkpoint, upsert=seed, dry_run=True).stores[0]
            print(
                f"dry run: {sum(dry.gained_per_partition)} customers gained, {sum(dry.replaced_per_partition)} replaced"
            )
            seeded = os.path.join(root, "checkpoint-seeded")
            report = state_reader.rewrite(checkpoint, seeded, upsert=seed)
            print(f"seeded {report.stores[0].rows} customers into {os.path.basename(seeded)}")

            add_input(root, later_batch())
            print("the query resumed from the seeded checkpoint:")
            for customer, purchases, spent in restart(spark, root, seeded):
                print(f"  {customer}: {purchases} purchases, {spent} spent")
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
