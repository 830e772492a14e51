"""Shared by the examples: a local SparkSession and a helper that runs a real
streaming query over JSON files, one file per micro-batch, into a checkpoint."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

os.environ.setdefault("TZ", "UTC")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def spark_session(shuffle_partitions: int = 2):
    """A small local session; state is snapshotted often so the examples show snapshots too."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("state-reader-example")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "3")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_query(spark, root: str, batches: list[list[dict]], schema: str, build: Callable,
              output_mode: str = "update") -> str:
    """Write one JSON file per batch under ``root/input``, run ``build(stream)`` over them
    to the end (one micro-batch per file) and return the checkpoint path."""
    from pyspark.sql import functions as F

    source_dir = os.path.join(root, "input")
    os.makedirs(source_dir, exist_ok=True)
    for i, rows in enumerate(batches):
        with open(os.path.join(source_dir, f"{i:04d}.json"), "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in rows)
    checkpoint = os.path.join(root, "checkpoint")
    stream = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(source_dir)
              .withColumn("ts", F.col("ts").cast("timestamp")))
    query = (build(stream).writeStream.format("noop").outputMode(output_mode)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    return checkpoint
