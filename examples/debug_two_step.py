"""Debug a stateful query in two steps: ask the checkpoint which operators and
stores it holds (``state-metadata``), then read the state of the one you care
about (``statestore``), narrowed to the key you are chasing.

The query: clicks counted per user in 10-second windows. A user ("cleo")
complains their count looks wrong; we look at exactly their state.

    python examples/debug_two_step.py [--keep DIR]
"""

from __future__ import annotations

from _streaming import example_arguments, run_query, spark_session, workspace

import state_reader

T0 = 1_700_000_000


def clicks() -> list[list[dict]]:
    users = ["ann", "bob", "cleo", "dan"]
    return [[{"ts": T0 + b * 6 + i, "user": users[(b + i) % 4], "ms": 10 * i} for i in range(8)] for b in range(4)]


def build(stream):
    from pyspark.sql import functions as F

    return (
        stream.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "10 seconds"), "user")
        .agg(F.count(F.lit(1)).alias("clicks"), F.sum("ms").alias("total_ms"))
    )


def main() -> int:
    args = example_arguments(__doc__)
    spark = spark_session()
    with workspace(args.keep, "state-reader-two-step-") as root:
        try:
            checkpoint = run_query(spark, root, clicks(), "ts long, user string, ms int", build)
            state_reader.register(spark)

            print("== step 1: which operators and stores? (state-metadata) ==")
            meta = spark.read.format("state_reader.state-metadata").load(checkpoint)
            meta.show(truncate=False)
            row = meta.where("operatorName = 'stateStoreSave'").first()
            operator_id, store, last_batch = row.operatorId, row.stateStoreName, row.maxBatchId

            print(f"== step 2: operator {operator_id}, store '{store}', batch {last_batch}: cleo's windows ==")
            state = (
                spark.read.format("state_reader.statestore")
                .option("operatorId", operator_id)
                .option("storeName", store)
                .option("batchId", last_batch)
                .load(checkpoint)
            )
            state.where("key.user = 'cleo'").select("key.window", "value.*", "partition_id").show(truncate=False)

            print("== the same without Spark ==")
            table = state_reader.read_state(checkpoint, operator_id=operator_id, key_filter="user = 'cleo'")
            # the value is the aggregation buffer: count and sum, under the buffer's own names
            for r in table.select(["key", "value", "partition_id"]).to_pylist():
                print(
                    f"  window {r['key']['window']['start']:%H:%M:%S}  count={r['value']['count']}  "
                    f"sum(ms)={r['value']['sum']}  partition {r['partition_id']}"
                )
            print("\nFrom a terminal (run this example with --keep DIR to keep the checkpoint):")
            print(f"  state-reader overview {checkpoint}")
            print(f"  state-reader show {checkpoint} --key-filter \"user = 'cleo'\"")
            return 0
        finally:
            spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
