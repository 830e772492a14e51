"""Make a new ``dropDuplicates`` query know the ids that were already delivered.

A deduplicating query remembers the ids it has seen in its state. A new query
(a rewritten pipeline, a new sink) starts with none, so an id the old pipeline
delivered is delivered again when it shows up. ``state_reader.rewrite`` with
``upsert=`` writes the delivered ids into the new query's state: run the query
once so that Spark writes its checkpoint, upsert one row per id (the key; the
value as read_state shows an empty one), and resume from the new checkpoint.

    python examples/seed_dedup.py [--keep DIR]
"""

from __future__ import annotations

import os

import pyarrow as pa
from _streaming import add_input, example_arguments, run_query, spark_session, workspace

import state_reader

T0 = 1_700_000_000
SCHEMA = "ts long, id long, payload string"


def delivered_ids() -> list[int]:
    """The ids the old pipeline already delivered."""
    return list(range(100))


def first_batch() -> list[dict]:
    """The first live events the new query sees."""
    return [{"ts": T0, "id": i, "payload": f"event {i}"} for i in (100, 101)]


def later_batch() -> list[dict]:
    """Events after the seed: three delivered long ago, two new ones, one seen in the first run."""
    return [{"ts": T0 + 10, "id": i, "payload": f"event {i}"} for i in (7, 42, 99, 100, 200, 201)]


def deduplicated(stream):
    return stream.dropDuplicates(["id"])


def seed_rows(checkpoint: str, ids: list[int]) -> pa.Table:
    """One row per id in the shape read_state gives the store: the key, and the (empty) value."""
    schema = state_reader.read_state(checkpoint).drop(["partition_id"]).schema
    value_type = schema.field("value").type
    empty = {value_type.field(i).name: None for i in range(value_type.num_fields)}
    return pa.Table.from_pylist([{"key": {"id": i}, "value": empty} for i in ids], schema=schema)


def restart(spark, root: str, checkpoint: str) -> list[int]:
    """Run the query from ``checkpoint`` to the end of the input; the ids it emits."""
    from pyspark.sql import functions as F

    emitted: list[int] = []
    stream = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(os.path.join(root, "input"))
        .withColumn("ts", F.col("ts").cast("timestamp"))
    )
    query = (
        deduplicated(stream)
        .writeStream.outputMode("append")
        .option("checkpointLocation", checkpoint)
        .foreachBatch(lambda df, _: emitted.extend(r.id for r in df.collect()))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sorted(emitted)


def main() -> int:
    args = example_arguments(__doc__)
    with workspace(args.keep, "state-reader-seed-dedup-") as root:
        spark = spark_session(shuffle_partitions=4)
        try:
            # the new query's first run: Spark writes the checkpoint (offsets, schema files, operator metadata)
            checkpoint = run_query(spark, root, [first_batch()], SCHEMA, deduplicated, output_mode="append")
            seeded = os.path.join(root, "checkpoint-seeded")
            report = state_reader.rewrite(checkpoint, seeded, upsert=seed_rows(checkpoint, delivered_ids()))
            store = report.stores[0]
            print(f"seeded {sum(store.gained_per_partition)} delivered ids; the state holds {store.rows}")

            add_input(root, later_batch())
            print(f"the query resumed from the seeded checkpoint emits ids {restart(spark, root, seeded)}")
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
