"""Shared by the examples: a local SparkSession and a helper that runs a real
streaming query over JSON files, one file per micro-batch, into a checkpoint."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

os.environ.setdefault("TZ", "UTC")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def example_arguments(doc: str, extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """The command line of an example: ``--keep DIR`` and whatever ``extra`` adds."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--keep", help="write the checkpoint here and keep it")
    if extra is not None:
        extra(parser)
    return parser.parse_args()


@contextlib.contextmanager
def workspace(keep: str | None, prefix: str) -> Iterator[str]:
    """Where the example writes its input and checkpoint: ``keep`` (kept), else a temporary directory."""
    root = keep or tempfile.mkdtemp(prefix=prefix)
    try:
        yield root
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def cli_hint(checkpoint: str, kept: bool) -> str:
    """The lines that end an example: the same look from a terminal, on a checkpoint that is still there."""
    if kept:
        return (
            f"From a terminal: state-reader stats {checkpoint}\n"
            f"                 state-reader show {checkpoint} --limit 10"
        )
    return "The checkpoint is deleted now; run with --keep DIR to keep it and look at it with state-reader."


def spark_session(shuffle_partitions: int = 2):
    """A small local session; state is snapshotted often so the examples show snapshots too."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("state-reader-example")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "3")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def add_input(root: str, rows: list[dict]) -> None:
    """One more input file, newer than the others (the file source takes files oldest first)."""
    path = os.path.join(root, "input", "9999.json")
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in rows)
    now = time.time() + 5
    os.utime(path, (now, now))


def run_query(
    spark, root: str, batches: list[list[dict]], schema: str, build: Callable, output_mode: str = "update"
) -> str:
    """Write one JSON file per batch under ``root/input``, run ``build(stream)`` over them
    to the end (one micro-batch per file) and return the checkpoint path."""
    from pyspark.sql import functions as F

    source_dir = os.path.join(root, "input")
    os.makedirs(source_dir, exist_ok=True)
    start = time.time() - len(batches)
    for i, rows in enumerate(batches):
        path = os.path.join(source_dir, f"{i:04d}.json")
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in rows)
        os.utime(path, (start + i, start + i))  # a file source takes files oldest first: batch i reads file i
    checkpoint = os.path.join(root, "checkpoint")
    stream = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .json(source_dir)
        .withColumn("ts", F.col("ts").cast("timestamp"))
    )
    query = (
        build(stream)
        .writeStream.format("noop")
        .outputMode(output_mode)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return checkpoint
