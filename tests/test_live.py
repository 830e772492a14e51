"""Reading the checkpoint of a query that is still running returns the state of a
committed batch, exactly: never a half-written file, never a version whose batch
has not committed yet. For both providers, through both fronts.

A thread of the test feeds a file source, one file per micro-batch, while the
query runs with a processing-time trigger and Spark's maintenance writes
snapshots in the background (the suite runs it every 100 ms). The test reads in
a loop meanwhile; once the query has stopped, every read is compared with
Spark's built-in reader for the batch it used.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from oracle import arrow_rows, spark_rows
from pyspark.sql import functions as F
from streaming_queries import HDFS, ROCKSDB_CHANGELOG

import state_reader

INPUT_FILES = 12
FILE_EVERY_SECONDS = 0.4
LIVE_SECONDS_MAX = 60  # the loop ends when the query has taken all input; this only bounds a stuck run
SPARK_READ_EVERY = 8  # one read in this many goes through the data source (they cost ~0.5 s)


def _committed(cp: Path) -> list[int]:
    try:
        return sorted(int(n) for n in os.listdir(cp / "commits") if n.isdigit())
    except FileNotFoundError:
        return []


def _feed(input_dir: Path, staging: Path, stop: threading.Event) -> None:
    """Write the input files one by one, each atomically (a file source may list a file being written)."""
    for i in range(INPUT_FILES):
        if stop.wait(FILE_EVERY_SECONDS):
            return
        rows = [{"k": f"k{(i * 7 + j) % 23}", "v": i * 100 + j, "tag": "x" * (j % 5)} for j in range(9)]
        tmp = staging / f"part-{i:04d}.json"
        tmp.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        os.replace(tmp, input_dir / tmp.name)


@pytest.mark.parametrize("confs", [HDFS, ROCKSDB_CHANGELOG], ids=["hdfs", "rocksdb"])
def test_reads_of_a_running_query(spark, tmp_path, confs):
    input_dir, staging, cp = tmp_path / "input", tmp_path / "staging", tmp_path / "checkpoint"
    input_dir.mkdir()
    staging.mkdir()
    saved = {k: spark.conf.get(k, None) for k in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        stream = (spark.readStream.schema("k string, v long, tag string").option("maxFilesPerTrigger", 1)
                  .json(str(input_dir)).groupBy("k")
                  .agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("total"), F.max("tag").alias("tag")))
        query = (stream.writeStream.format("noop").outputMode("update").option("checkpointLocation", str(cp))
                 .trigger(processingTime="100 milliseconds").start())
    finally:
        for key, value in saved.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)

    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(input_dir, staging, stop), daemon=True)
    feeder.start()
    pinned: list[tuple[int, list[str]]] = []  # (batch id we asked for, rows)
    latest: list[tuple[int, int, list[str]]] = []  # (committed before, committed after, rows) of default reads
    via_spark: list[tuple[int, list[str]]] = []
    failures: list[str] = []
    deadline = time.monotonic() + LIVE_SECONDS_MAX
    reads = 0
    try:
        while time.monotonic() < deadline:
            committed = _committed(cp)
            done = bool(committed) and committed[-1] >= INPUT_FILES - 1  # one file per batch
            if committed:
                batch = committed[-1]
                try:
                    pinned.append((batch, arrow_rows(state_reader.read_state(str(cp), batch_id=batch))))
                    before = _committed(cp)[-1]
                    rows = arrow_rows(state_reader.read_state(str(cp)))
                    latest.append((before, _committed(cp)[-1], rows))
                    if reads % SPARK_READ_EVERY == 0:
                        df = spark.read.format("state_reader.statestore").option("batchId", batch).load(str(cp))
                        via_spark.append((batch, spark_rows(df)))
                except Exception as exc:  # every failure of a live read is a finding
                    failures.append(f"batch {batch}: {exc!r}"[:500])
                reads += 1
            if done:
                break
            time.sleep(0.01)
    finally:
        stop.set()
        feeder.join(timeout=10)
        query.stop()
    assert not failures, failures[:3]
    assert time.monotonic() < deadline, "the query did not take all its input in time"

    batches = sorted({b for b, _ in pinned} | {b for lo, hi, _ in latest for b in range(lo, hi + 1)})
    assert len({b for b, _ in pinned}) >= 5, f"reads saw only batches {batches}: not a live test"
    builtin = {b: spark_rows(spark.read.format("statestore").option("batchId", b).load(str(cp))) for b in batches}
    for batch, rows in pinned:
        assert rows == builtin[batch], f"live read of batch {batch} differs from the built-in reader"
    for batch, rows in via_spark:
        assert rows == builtin[batch], f"live data source read of batch {batch} differs from the built-in reader"
    for lo, hi, rows in latest:
        assert any(builtin[b] == rows for b in range(lo, hi + 1)), \
            f"a default read during batches {lo}..{hi} returned the state of none of them"
    assert via_spark and len(pinned) >= 20, f"only {len(pinned)} live reads, {len(via_spark)} through Spark"
