"""Write a checkpoint with a real streaming aggregation, then read its state back
both ways: through Spark (``state_reader.statestore``) and without Spark
(``state_reader.read_state``).

    python examples/demo.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TZ", "UTC")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import state_reader


def write_checkpoint(spark, root: str) -> str:
    """Three micro-batches of click events, counted per 10-second window and user."""
    from pyspark.sql import functions as F

    src = os.path.join(root, "input")
    os.makedirs(src)
    users = ["ann", "bob", "cleo"]
    for batch in range(3):
        with open(os.path.join(src, f"{batch}.json"), "w") as fh:
            for i in range(6):
                ts = 1_700_000_000 + batch * 7 + i
                fh.write(json.dumps({"ts": ts, "user": users[(batch + i) % 3], "ms": 10 * i}) + "\n")
    checkpoint = os.path.join(root, "checkpoint")
    events = (
        spark.readStream.schema("ts long, user string, ms int")
        .option("maxFilesPerTrigger", 1)
        .json(src)
        .withColumn("ts", F.col("ts").cast("timestamp"))
    )
    counts = (
        events.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "10 seconds"), "user")
        .agg(F.count(F.lit(1)).alias("clicks"), F.sum("ms").alias("total_ms"))
    )
    query = (
        counts.writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return checkpoint


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", help="write the checkpoint here and keep it")
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("state-reader-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    root = args.keep or tempfile.mkdtemp(prefix="state-reader-demo-")
    try:
        checkpoint = write_checkpoint(spark, root)
        print(f"checkpoint written to {checkpoint}\n")

        state_reader.register(spark)
        print("== spark.read.format('state_reader.state-metadata') ==")
        spark.read.format("state_reader.state-metadata").load(checkpoint).show(truncate=False)
        print("== spark.read.format('state_reader.statestore') ==")
        spark.read.format("state_reader.statestore").load(checkpoint).show(truncate=False)
        print("== the same at batch 1 ==")
        spark.read.format("state_reader.statestore").option("batchId", 1).load(checkpoint).show(truncate=False)

        start = time.perf_counter()
        table = state_reader.read_state(checkpoint)
        took = time.perf_counter() - start
        batch = table.schema.metadata[b"state_reader.batch_id"].decode()
        print(
            f"== state_reader.read_state(checkpoint): the state after batch {batch}, {table.num_rows} rows "
            f"in {took * 1000:.1f} ms, no Spark =="
        )
        print(
            "key: the window and user the query groups by; value: its aggregation buffer per key "
            "(clicks = count, total_ms = sum)"
        )
        flat = table
        while any(str(t).startswith("struct") for t in flat.schema.types):
            flat = flat.flatten()
        print(flat.to_pandas().to_string(index=False))
        builtin = spark.read.format("statestore").load(checkpoint).count()
        print(f"\nSpark's built-in reader sees {builtin} rows; state_reader sees {table.num_rows}.")
        if args.keep:
            print(
                f"\nNext, from a terminal: .venv/bin/state-reader overview {checkpoint}\n"
                f"                      .venv/bin/state-reader stats {checkpoint}\n"
                "(or `. .venv/bin/activate` once, then state-reader ...)"
            )
        else:
            print(
                "\nThe checkpoint is deleted now; run `make demo KEEP=DIR` (or examples/demo.py --keep DIR) to keep "
                "it and try the state-reader command line on it."
            )
        return 0 if builtin == table.num_rows else 1
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
