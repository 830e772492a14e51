"""Following a running query's state changes: the streaming source, ``state_reader.follow`` and
``state-reader changes --follow``.

A producer query runs on a processing-time trigger while a thread feeds its input directory one
file at a time; a streaming query reads the producer's state changes with
``spark.readStream.format("state_reader.statestore")`` into a Parquet sink, is stopped and started
again on its own checkpoint mid-way, and finally catches up with ``Trigger.AvailableNow``. What it
wrote must equal Spark's built-in change feed over the same batches, row for row (nothing twice,
nothing missing), and replaying it must give the built-in's state at the last batch.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import pytest
from oracle import arrow_rows, canon, spark_rows
from pyspark.sql import functions as F
from streaming_queries import HDFS, QUERIES, ROCKSDB, ROCKSDB_CHANGELOG, T0, run_query, session_confs

import state_reader

pytestmark = pytest.mark.skipif(
    not hasattr(__import__("pyspark.sql.datasource", fromlist=["x"]), "DataSourceStreamReader"),
    reason="Python streaming data sources need pyspark 4.0+")

FILES = 8
FILE_EVERY_SECONDS = 0.3
SOURCE = "state_reader.statestore"


def _committed(cp: Path) -> list[int]:
    try:
        return sorted(int(n) for n in os.listdir(cp / "commits") if n.isdigit())
    except FileNotFoundError:
        return []


def _rows(i: int) -> list[dict]:
    """Input file ``i``: keys that come back (updates), event times that advance (evictions)."""
    return [{"k": f"k{(i * 5 + j) % 13}", "v": i * 100 + j,
             "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 + i * 4 + j))} for j in range(6)]


def _feed(input_dir: Path, staging: Path, files: range) -> None:
    for i in files:
        time.sleep(FILE_EVERY_SECONDS)
        tmp = staging / f"part-{i:04d}.json"
        tmp.write_text("\n".join(json.dumps(r) for r in _rows(i)) + "\n")
        os.replace(tmp, input_dir / tmp.name)  # whole files only: the source may list one being written


def _aggregate(df):
    return df.groupBy("k").agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("total"))


def _dedup(df):
    return df.withWatermark("ts", "8 seconds").dropDuplicates(["k", "ts"])


class Producer:
    """A query committing a batch per input file on a 100 ms trigger, fed files by a thread."""

    def __init__(self, spark, base: Path, build, confs: dict[str, str], mode: str = "update") -> None:
        self.input, self.staging, self.cp = base / "input", base / "staging", base / "checkpoint"
        self.input.mkdir(parents=True)
        self.staging.mkdir()
        self.fed = 0
        self.feeder: threading.Thread | None = None
        with session_confs(spark, confs):
            stream = build(spark.readStream.schema("k string, v long, ts timestamp")
                           .option("maxFilesPerTrigger", 1).json(str(self.input)))
            self.query = (stream.writeStream.format("noop").outputMode(mode)
                          .option("checkpointLocation", str(self.cp))
                          .trigger(processingTime="100 milliseconds").start())

    def feed(self, files: int) -> None:
        """Write the next ``files`` input files, one every FILE_EVERY_SECONDS, in the background."""
        self.wait_fed()
        self.feeder = threading.Thread(target=_feed, args=(self.input, self.staging,
                                                           range(self.fed, self.fed + files)), daemon=True)
        self.fed += files
        self.feeder.start()

    def wait_fed(self, timeout: float = 90.0) -> None:
        """Until the files fed so far are written and committed."""
        if self.feeder is not None:
            self.feeder.join()
        deadline = time.monotonic() + timeout
        while len(_committed(self.cp)) < self.fed:
            if self.query.exception() is not None:
                raise self.query.exception()
            assert time.monotonic() < deadline, f"the producer committed {_committed(self.cp)} in {timeout} s"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.feeder is not None:
            self.feeder.join()
        self.query.stop()


def _reader(spark, producer_cp: Path, out: Path, own_cp: Path, trigger: dict, **options):
    reader = spark.readStream.format(SOURCE).option("readChangeFeed", "true")
    for key, value in options.items():
        reader = reader.option(key, value)
    return (reader.load(str(producer_cp)).writeStream.format("parquet").option("path", str(out))
            .option("checkpointLocation", str(own_cp)).trigger(**trigger).start())


def _end_offset(query) -> int | None:
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return None
    end = progress["sources"][0]["endOffset"]
    return json.loads(end)["batch_id"] if isinstance(end, str) else end["batch_id"]


def _builtin_changes(spark, cp, first: int, last: int, **options) -> list[str]:
    reader = (spark.read.format("statestore").option("readChangeFeed", "true")
              .option("changeStartBatchId", first).option("changeEndBatchId", last))
    for key, value in options.items():
        reader = reader.option(key, value)
    return spark_rows(reader.load(str(cp)))


def _replay(rows: list[str]) -> list[str]:
    """The state the change rows leave: each key's last change, in batch order (a snapshot first)."""
    state: dict[str, dict] = {}
    ordered = sorted((json.loads(r) for r in rows), key=lambda r: (r["batch_id"], r["change_type"] != "snapshot"))
    seen: set[tuple[int, str]] = set()
    for row in ordered:
        key = canon(row["key"])
        assert (row["batch_id"], key) not in seen, f"two changes of key {key} in batch {row['batch_id']}"
        seen.add((row["batch_id"], key))
        if row["change_type"] == "delete":
            state.pop(key, None)
        else:
            state[key] = {"key": row["key"], "value": row["value"], "partition_id": row["partition_id"]}
    return sorted(canon(v) for v in state.values())


def _follow_live(spark, tmp_path, build, confs, mode, **options):
    """Run a producer and a reading stream stopped and started again; return (producer checkpoint, rows
    the stream wrote, last producer batch)."""
    producer = Producer(spark, tmp_path / "producer", build, confs, mode)
    out, own = tmp_path / "out", tmp_path / "reader"
    every = {"processingTime": "200 milliseconds"}
    try:
        producer.feed(1)
        producer.wait_fed()  # a reader needs a first commit (see test_a_follower_needs_a_checkpoint...)
        first = _reader(spark, producer.cp, out, own, every, **options)
        producer.feed(3)  # committing while the reader runs
        producer.wait_fed()
        first.processAllAvailable()
        stopped_at = _end_offset(first)
        first.stop()
        producer.feed(2)  # committing while no reader runs
        second = _reader(spark, producer.cp, out, own, every, **options)
        producer.feed(FILES - producer.fed)
        producer.wait_fed()
        second.processAllAvailable()
        second.stop()
        producer.feed(2)  # a last few for AvailableNow
        producer.wait_fed()
    finally:
        producer.stop()
    assert first.exception() is None and second.exception() is None
    last = _committed(producer.cp)[-1]
    # catch up with AvailableNow, two producer batches per micro-batch where Spark has read limits
    limits = {"maxBatchesPerTrigger": "2"} if _read_limits() else {}
    final = _reader(spark, producer.cp, out, own, {"availableNow": True}, **options, **limits)
    final.awaitTermination(120)
    assert final.exception() is None
    assert _end_offset(final) == last
    assert stopped_at is not None and 0 < stopped_at < last, "the reader was not stopped mid-way"
    return producer.cp, spark_rows(spark.read.parquet(str(out))), last


def _read_limits() -> bool:
    from state_reader.fronts.stream_source import READ_LIMITS

    return READ_LIMITS


@pytest.mark.parametrize("case", ["hdfs_aggregation", "rocksdb_changelog_dedup"])
def test_a_stream_of_a_running_query_equals_the_builtin_change_feed(spark, tmp_path, case):
    build, confs, mode = {"hdfs_aggregation": (_aggregate, HDFS, "update"),
                          "rocksdb_changelog_dedup": (_dedup, ROCKSDB_CHANGELOG, "append")}[case]
    cp, rows, last = _follow_live(spark, tmp_path, build, confs, mode)
    assert rows, "the stream wrote no changes"
    builtin = _builtin_changes(spark, cp, 0, last)
    assert len(rows) == len(set(rows)) or sorted(rows) == builtin
    assert rows == builtin  # multisets: both sorted, duplicates kept
    state = spark_rows(spark.read.format("statestore").option("batchId", last).load(str(cp)))
    assert _replay(rows) == state
    if case == "rocksdb_changelog_dedup":
        assert any('"change_type":"delete"' in r for r in rows), "no eviction was followed"
