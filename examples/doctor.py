"""What ``state-reader doctor`` says about queries that have a problem, and about their healthy twins.

Each case is a small real streaming query over a few JSON files, run to the end
of its input; ``doctor`` then reads its checkpoint. The problem and its twin
differ in the one thing that causes the problem.

    python examples/doctor.py [--keep DIR] [--only expired-rows,never-evicted,...]
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

from state_reader.fronts.cli import main as cli

T0 = 1_700_000_000


def _input(root: str, batches: list[list[dict]]) -> str:
    src = os.path.join(root, "input")
    os.makedirs(src)
    start = time.time() - len(batches)
    for b, rows in enumerate(batches):
        path = os.path.join(src, f"{b:04d}.json")
        with open(path, "w") as fh:
            for row in rows:
                fh.write(json.dumps({**row, "ts": T0 + row["ts"]}) + "\n")
        os.utime(path, (start + b, start + b))  # a file source takes files oldest first: batch b reads file b
    return src


def _run(spark, root: str, batches: list[list[dict]], build, mode: str = "update") -> str:
    from pyspark.sql import functions as F

    src = _input(root, batches)
    events = (
        spark.readStream.schema("ts long, k string, v long")
        .option("maxFilesPerTrigger", 1)
        .json(src)
        .withColumn("ts", F.col("ts").cast("timestamp"))
    )
    checkpoint = os.path.join(root, "checkpoint")
    query = (
        build(events)
        .writeStream.format("noop")
        .outputMode(mode)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return checkpoint


def _partition(key: str) -> int:
    """The state partition (of 4) Spark's hash partitioning gives a string key: pmod(murmur3(key), 4)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    cache = _partition.__dict__.setdefault("cache", {})
    if not cache:
        rows = spark.range(8000).selectExpr("concat('key', id) AS k", "pmod(hash(concat('key', id)), 4) AS p")
        cache.update((r.k, r.p) for r in rows.collect())
    return cache[key]


def _cases():
    from pyspark.sql import functions as F

    ten = range(10)

    def windowed(df):
        return df.withWatermark("ts", "5 seconds").groupBy(F.window("ts", "10 seconds")).count()

    moving = [[{"ts": b * 10 + i, "k": f"k{b}-{i}", "v": i} for i in range(5)] for b in ten]
    stalled = [[{"ts": min(b, 2) * 10 + i, "k": f"k{b}-{i}", "v": i} for i in range(5)] for b in ten]
    # keyed by k alone, so that hash(k) places it (both also show never-evicted: no watermark)
    dedup = lambda df: df.dropDuplicates(["k"])  # noqa: E731
    # keys that Spark's hash() puts in state partition 0 of 4, and keys spread over all
    hot = [f"key{i}" for i in range(8000) if _partition(f"key{i}") == 0][:1500]
    spread = [f"key{i}" for i in range(1500)]
    return {
        # name: (what differs, problem (batches, query, mode), healthy twin)
        "skew": (
            "every key hashes to state partition 0 of 4",
            ([[{"ts": b, "k": k, "v": 1} for k in hot[b * 150 : (b + 1) * 150]] for b in ten], dedup, "append"),
            ([[{"ts": b, "k": k, "v": 1} for k in spread[b * 150 : (b + 1) * 150]] for b in ten], dedup, "append"),
        ),
        "expired-rows": (
            "complete output mode keeps every window",
            (moving, windowed, "complete"),
            (moving, windowed, "update"),
        ),
        "never-evicted": (
            "dropDuplicates without a watermark",
            (moving, lambda df: df.dropDuplicates(["k"]), "append"),
            (moving, lambda df: df.withWatermark("ts", "5 seconds").dropDuplicates(["k", "ts"]), "append"),
        ),
        "watermark-stalled": (
            "event time stops moving after batch 2 while rows keep coming",
            (stalled, windowed, "update"),
            (moving, windowed, "update"),
        ),
        "large-rows": (
            "a 1.2 MB string kept in the aggregation buffer",
            (
                [[{"ts": b, "k": "one", "v": b}] for b in ten],
                lambda df: df.groupBy("k").agg(F.max(F.repeat(F.lit("x"), 1_200_000)).alias("p")),
                "update",
            ),
            (
                [[{"ts": b, "k": "one", "v": b}] for b in ten],
                lambda df: df.groupBy("k").agg(F.max(F.lit("x")).alias("p")),
                "update",
            ),
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", help="write the checkpoints under this directory and keep them")
    parser.add_argument("--only", help="comma-separated finding kinds to show")
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("state-reader-doctor")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    root = args.keep or tempfile.mkdtemp(prefix="state-reader-doctor-")
    wanted = set(args.only.split(",")) if args.only else None
    try:
        for kind, (why, problem, healthy) in _cases().items():
            if wanted and kind not in wanted:
                continue
            for label, (batches, build, mode) in (("problem", problem), ("healthy twin", healthy)):
                checkpoint = _run(spark, os.path.join(root, kind, label.replace(" ", "_")), batches, build, mode)
                print(
                    f"\n=== {kind}, {label}{': ' + why if label == 'problem' else ''}\n$ state-reader doctor "
                    f"{checkpoint}",
                    flush=True,
                )
                cli(["doctor", checkpoint])
        return 0
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
