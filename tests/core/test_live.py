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

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import functions as F

import state_reader
from tests.support.oracle import arrow_rows, spark_rows
from tests.support.streaming_queries import HDFS, ROCKSDB_CHANGELOG

INPUT_FILES = 12
FILE_EVERY_SECONDS = 0.4
LIVE_SECONDS_MAX = 90  # the loop ends when the query has taken all input; this only bounds a stuck run
SPARK_READ_EVERY = 8  # one read in this many goes through the data source (they cost ~0.5 s)


def _committed(cp: Path) -> list[int]:
    try:
        return sorted(int(n) for n in os.listdir(cp / "commits") if n.isdigit())
    except FileNotFoundError:
        return []


def _feed(
    input_dir: Path, staging: Path, stop: threading.Event, files: int = INPUT_FILES, every: float = FILE_EVERY_SECONDS
) -> None:
    """Write the input files one by one, each atomically (a file source may list a file being written)."""
    for i in range(files):
        if stop.wait(every):
            return
        rows = [{"k": f"k{(i * 7 + j) % 23}", "v": i * 100 + j, "tag": "x" * (j % 5)} for j in range(9)]
        tmp = staging / f"part-{i:04d}.json"
        tmp.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        os.replace(tmp, input_dir / tmp.name)


@contextlib.contextmanager
def _fed(
    query, input_dir: Path, staging: Path, files: int = INPUT_FILES, every: float = FILE_EVERY_SECONDS
) -> Iterator[None]:
    """The input fed to the running ``query`` file by file while the block runs; then the feeding and the
    query stop, however the block ends."""
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(input_dir, staging, stop, files, every), daemon=True)
    feeder.start()
    try:
        yield
    finally:
        stop.set()
        feeder.join(timeout=10)
        query.stop()


def _start_query(spark, tmp_path: Path, confs: dict[str, str]):
    """(input dir, staging dir, checkpoint, running query): an aggregation over a file source, one file a batch,
    started with ``confs`` (which the checkpoint pins) and a 100 ms trigger."""
    input_dir, staging, cp = tmp_path / "input", tmp_path / "staging", tmp_path / "checkpoint"
    input_dir.mkdir()
    staging.mkdir()
    saved = {k: spark.conf.get(k, None) for k in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        stream = (
            spark.readStream.schema("k string, v long, tag string")
            .option("maxFilesPerTrigger", 1)
            .json(str(input_dir))
            .groupBy("k")
            .agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("total"), F.max("tag").alias("tag"))
        )
        query = (
            stream.writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(cp))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
    finally:
        for key, value in saved.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    return input_dir, staging, cp, query


@pytest.mark.parametrize("confs", [HDFS, ROCKSDB_CHANGELOG], ids=["hdfs", "rocksdb"])
def test_reads_of_a_running_query(spark, tmp_path, confs):
    input_dir, staging, cp, query = _start_query(spark, tmp_path, confs)

    pinned: list[tuple[int, list[str]]] = []  # (batch id we asked for, rows)
    latest: list[tuple[int, int, list[str]]] = []  # (committed before, committed after, rows) of default reads
    via_spark: list[tuple[int, list[str]]] = []
    failures: list[str] = []
    deadline = time.monotonic() + LIVE_SECONDS_MAX
    reads = 0
    with _fed(query, input_dir, staging):
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
        assert any(builtin[b] == rows for b in range(lo, hi + 1)), (
            f"a default read during batches {lo}..{hi} returned the state of none of them"
        )
    assert via_spark and len(pinned) >= 20, f"only {len(pinned)} live reads, {len(via_spark)} through Spark"


# -- a query that cleans up fast, read through a filesystem as slow as an object store -------------

RETAIN = 4
SLOW_SECONDS = 0.03
# opening a state file takes longer still, which widens the window between listing a store and
# reading its files, where the query's cleanup deletes them
SLOW_STATE_FILE_SECONDS = 0.05
CLEANUP_BATCHES = 36  # batches the fast-cleaning query runs at least (one input file each)
CLEANUP_FILES = 120  # ... and at most: on a loaded machine, until reads have seen three batches
CLEANUP_EVERY = 0.4


def _slow_filesystem() -> str:
    """Register ``slowfile://``: the local filesystem with latency added to every open, listing and info
    (a recursive listing is one request, as on an object store)."""
    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    inside = threading.local()

    def request(seconds: float, call, *args, **kwargs):
        # one round trip per request, as an object store charges: the calls the local implementation
        # makes inside one (``ls`` asking ``info`` of each entry, ``find`` walking directories) are free
        if getattr(inside, "depth", 0) == 0:
            time.sleep(seconds)
        inside.depth = getattr(inside, "depth", 0) + 1
        try:
            return call(*args, **kwargs)
        finally:
            inside.depth -= 1

    class SlowFileSystem(LocalFileSystem):
        protocol = "slowfile"

        def _open(self, path, *args, **kwargs):
            state_file = str(path).endswith((".delta", ".snapshot", ".zip", ".changelog"))
            return request(
                SLOW_STATE_FILE_SECONDS if state_file else SLOW_SECONDS, super()._open, path, *args, **kwargs
            )

        def ls(self, *args, **kwargs):
            return request(SLOW_SECONDS, super().ls, *args, **kwargs)

        def info(self, *args, **kwargs):
            return request(SLOW_SECONDS, super().info, *args, **kwargs)

        def find(self, *args, **kwargs):
            return request(SLOW_SECONDS, super().find, *args, **kwargs)

    fsspec.register_implementation("slowfile", SlowFileSystem, clobber=True)
    return "slowfile://"


def _true_state(batch: int) -> list[tuple]:
    """The aggregation's state after ``batch``: batch b took input files 0..b, one per batch (see _feed)."""
    state: dict[str, tuple[int, int, str]] = {}
    for i in range(batch + 1):
        for j in range(9):
            k, v, tag = f"k{(i * 7 + j) % 23}", i * 100 + j, "x" * (j % 5)
            n, total, top = state.get(k, (0, 0, ""))
            state[k] = (n + 1, total + v, max(top, tag))
    return sorted((k, *v) for k, v in state.items())


def _rows(table) -> list[tuple]:
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    # the aggregation buffer's fields, by position: count, sum, max
    return sorted((k["k"], *v.values()) for k, v in zip(keys, values, strict=True))


@pytest.mark.parametrize("confs", [HDFS, ROCKSDB_CHANGELOG], ids=["hdfs", "rocksdb"])
def test_latest_reads_of_a_query_that_cleans_up_never_fail(spark, tmp_path, confs):
    """minBatchesToRetain=2 and maintenance every 100 ms: files of the batch a read planned get deleted
    while it reads. Each latest read must still succeed and equal the true state of the batch its
    schema metadata names; an explicit batch that is gone says which batches are retained."""
    scheme = _slow_filesystem()
    input_dir, staging, cp, query = _start_query(
        spark, tmp_path, {**confs, "spark.sql.streaming.minBatchesToRetain": str(RETAIN)}
    )
    results: list[tuple[int, list[tuple]]] = []
    stats_batches: list[list[int]] = []
    failures: list[str] = []
    purged_errors: list[str] = []
    deadline = time.monotonic() + LIVE_SECONDS_MAX
    with _fed(query, input_dir, staging, CLEANUP_FILES, CLEANUP_EVERY):
        while time.monotonic() < deadline:
            committed = _committed(cp)
            if committed:
                try:
                    table = state_reader.read_state(scheme + str(cp))
                    results.append((int(table.schema.metadata[b"state_reader.batch_id"]), _rows(table)))
                    if len(results) % 4 == 1:  # stats walks every retained batch: the widest window to race
                        measured = state_reader.stats(scheme + str(cp), show_progress=False)
                        stats_batches.append(sorted(set(measured.column("batch_id").to_pylist())))
                except Exception as exc:  # every failure of a live read is a finding
                    failures.append(repr(exc)[:500])
                if committed[-1] > RETAIN + 2:
                    with pytest.raises(state_reader.BatchNotRetainedError) as caught:
                        state_reader.read_state(str(cp), batch_id=0)
                    purged_errors.append(str(caught.value))
                seen = len({b for b, _ in results})
                if committed[-1] >= CLEANUP_FILES - 1 or (committed[-1] >= CLEANUP_BATCHES - 1 and seen >= 3):
                    break
            time.sleep(0.01)
    assert not failures, failures[:3]
    assert len({b for b, _ in results}) >= 3, f"reads saw only batches {sorted({b for b, _ in results})}"
    for batch, rows in results:
        assert rows == _true_state(batch), f"a live read reported batch {batch} but holds other state"
    assert purged_errors and all("minBatchesToRetain" in m and "committed batches" in m.lower() for m in purged_errors)
    assert stats_batches and all(stats_batches), "stats of the running query measured no batch"


def test_a_spark_read_of_a_batch_cleaned_up_after_planning_says_so(spark, checkpoints, tmp_path):
    """The driver plans one batch; when the query commits on and deletes its files before the tasks read
    them, the task fails with the batches still kept, not only a missing file."""
    import shutil

    cp = tmp_path / "agg"
    shutil.copytree(checkpoints("agg_window"), cp)
    latest = _committed(cp)[-1]
    df = spark.read.format("state_reader.statestore").load(str(cp))  # planned here, at the latest batch
    for part in (cp / "state" / "0").iterdir():  # the query's cleanup, and a batch committed after it
        for f in part.glob(f"{latest + 1}.*"):
            f.unlink()
    (cp / "commits" / str(latest + 1)).write_bytes((cp / "commits" / str(latest)).read_bytes())
    with pytest.raises(Exception, match=rf"STATE_READER_BATCH_NOT_RETAINED.*batch {latest} .*no longer retained"):
        df.collect()
