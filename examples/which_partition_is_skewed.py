"""Which partition is skewed, and by which keys?

The query keeps the list of recent order ids per customer
(``collect_list``). One customer ("bigco") places most of the orders, so the
partition its key hashes to holds far more bytes than the others although every
partition holds about as many keys. ``state_reader.stats`` shows rows and
state bytes per partition; ``batch_summary`` names the largest partition and
its skew (largest / median); ``read_state`` then shows which keys make it big.

    python examples/which_partition_is_skewed.py [--keep DIR]
"""

from __future__ import annotations

import pyarrow.compute as pc
from _streaming import cli_hint, example_arguments, run_query, spark_session, workspace

import state_reader
from state_reader.inspect.stats import batch_summary

T0 = 1_700_000_000
PARTITIONS = 8


def orders() -> list[list[dict]]:
    batches = []
    for b in range(5):
        rows = [{"ts": T0 + b * 10, "customer": "bigco", "order_id": f"o{b}-{i}"} for i in range(400)]
        rows += [{"ts": T0 + b * 10, "customer": f"c{j}", "order_id": f"o{b}-s{j}"} for j in range(24)]
        batches.append(rows)
    return batches


def build(stream):
    from pyspark.sql import functions as F

    return stream.groupBy("customer").agg(F.count(F.lit(1)).alias("orders"), F.collect_list("order_id").alias("recent"))


def main() -> int:
    args = example_arguments(__doc__)
    with workspace(args.keep, "state-reader-skew-") as root:
        spark = spark_session(shuffle_partitions=PARTITIONS)
        try:
            checkpoint = run_query(spark, root, orders(), "ts long, customer string, order_id string", build)
        finally:
            spark.stop()
        table = state_reader.stats(checkpoint)
        last = batch_summary(table).to_pylist()[-1]
        batch = last["batch_id"]
        print(f"batch {batch}: {last['rows']} keys in {last['partitions']} partitions")
        print("partition  rows    state bytes")
        for r in sorted((r for r in table.to_pylist() if r["batch_id"] == batch), key=lambda r: -r["state_bytes"]):
            print(f"{r['partition_id']:>9}  {r['rows']:>4}  {r['state_bytes']:>13}")
        rows_skew, bytes_skew = last["rows_skew"] or 0.0, last["bytes_skew"] or 0.0
        print(f"\nby rows:  largest partition {last['max_partition']}, largest/median {rows_skew:.1f}x")
        print(f"by bytes: largest partition {last['max_bytes_partition']}, largest/median {bytes_skew:.1f}x")
        if bytes_skew > 4 * max(rows_skew, 1.0):
            print("bytes are far more skewed than rows: a few keys carry huge values")

        hot = last["max_bytes_partition"]
        state = state_reader.read_state(checkpoint, batch_id=batch)
        in_hot = state.filter(pc.equal(state.column("partition_id"), hot))
        # the value is the aggregation buffer: the count, and collect_list's serialized list
        value = in_hot.column("value")
        sizes = pc.binary_length(pc.struct_field(value, [1]))
        order = pc.array_sort_indices(sizes, order="descending")
        print(f"\nbiggest keys in partition {hot}:")
        for i in order.to_pylist()[:3]:
            key = in_hot.column("key")[i].as_py()
            count = pc.struct_field(value, [0])[i].as_py()
            print(f"  {key}: {count} orders, collect_list buffer of {sizes[i].as_py()} bytes")
        print("\n" + cli_hint(checkpoint, kept=bool(args.keep)))
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
