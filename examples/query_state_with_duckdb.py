"""Query a streaming query's state with DuckDB, without loading it into memory.

``state_reader.scan_state`` streams the state as a ``pyarrow.RecordBatchReader``,
one state partition at a time, so DuckDB (or Polars, or ``pyarrow.dataset``)
runs SQL over state larger than memory. A key filter that fixes the whole
grouping key reads only the one partition Spark put that key in.

    pip install duckdb
    python examples/query_state_with_duckdb.py [--keep DIR]
"""

from __future__ import annotations

import duckdb
from _streaming import cli_hint, example_arguments, run_query, spark_session, workspace

import state_reader

T0 = 1_700_000_000
PARTITIONS = 8


def purchases() -> list[list[dict]]:
    """Three batches of purchases by 500 customers in 5 countries; customer c7 buys in every batch."""
    return [
        [
            {"ts": T0 + b, "country": f"country-{i % 5}", "customer": f"c{i}", "amount": (i * 7 + b) % 100}
            for i in range(500)
            if i % (b + 1) == 0 or i == 7
        ]
        for b in range(3)
    ]


def build(stream):
    from pyspark.sql import functions as F

    return stream.groupBy("country", "customer").agg(
        F.count(F.lit(1)).alias("purchases"), F.sum("amount").alias("spent")
    )


def main() -> int:
    args = example_arguments(__doc__)
    with workspace(args.keep, "state-reader-duckdb-") as root:
        spark = spark_session(shuffle_partitions=PARTITIONS)
        try:
            schema = "ts long, country string, customer string, amount long"
            checkpoint = run_query(spark, root, purchases(), schema, build)
        finally:
            spark.stop()

            # SQL over the whole state, streamed partition by partition; the value is the aggregation
        # buffer, whose fields are named after the functions (count, sum), not the aliases
        state = state_reader.scan_state(checkpoint)  # noqa: F841 - DuckDB finds it by its name
        print("spend per country, from the state:")
        for country, customers, spent in duckdb.sql(
            "select key.country, count(*), sum(value.sum) from state group by all order by 1"
        ).fetchall():
            print(f"  {country}: {customers} customers, {spent} spent")

        # one key: only the partition Spark hashed it to is read
        one = state_reader.scan_state(checkpoint, key_filter="country = 'country-2' and customer = 'c7'")
        row = one.read_all().to_pylist()
        print(
            f"\ncustomer c7: {row[0]['value']['count']} purchases, {row[0]['value']['sum']} spent, "
            f"in state partition {row[0]['partition_id']} of {PARTITIONS}"
        )
        print("\n" + cli_hint(checkpoint, kept=bool(args.keep)))
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
