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
from pyspark.sql import functions as F

import state_reader
from tests.support.oracle import arrow_rows, canon, spark_rows
from tests.support.streaming_queries import HDFS, QUERIES, ROCKSDB_CHANGELOG, T0, run_query, session_confs

pytestmark = pytest.mark.skipif(
    not hasattr(__import__("pyspark.sql.datasource", fromlist=["x"]), "DataSourceStreamReader"),
    reason="Python streaming data sources need pyspark 4.0+",
)

FILES = 8
RETAIN = "spark.sql.streaming.minBatchesToRetain"
FILE_EVERY_SECONDS = 0.3
SOURCE = "state_reader.statestore"


def _committed(cp: Path) -> list[int]:
    try:
        return sorted(int(n) for n in os.listdir(cp / "commits") if n.isdigit())
    except FileNotFoundError:
        return []


def _rows(i: int) -> list[dict]:
    """Input file ``i``: keys that come back (updates), event times that advance (evictions)."""
    return [
        {
            "k": f"k{(i * 5 + j) % 13}",
            "v": i * 100 + j,
            "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 + i * 4 + j)),
        }
        for j in range(6)
    ]


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
            stream = build(
                spark.readStream.schema("k string, v long, ts timestamp")
                .option("maxFilesPerTrigger", 1)
                .json(str(self.input))
            )
            self.query = (
                stream.writeStream.format("noop")
                .outputMode(mode)
                .option("checkpointLocation", str(self.cp))
                .trigger(processingTime="100 milliseconds")
                .start()
            )

    def feed(self, files: int) -> None:
        """Write the next ``files`` input files, one every FILE_EVERY_SECONDS, in the background."""
        self.wait_fed()
        self.feeder = threading.Thread(
            target=_feed, args=(self.input, self.staging, range(self.fed, self.fed + files)), daemon=True
        )
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
    return (
        reader.load(str(producer_cp))
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(own_cp))
        .trigger(**trigger)
        .start()
    )


def _end_offset(query) -> int | None:
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return None
    end = progress["sources"][0]["endOffset"]
    return json.loads(end)["batch_id"] if isinstance(end, str) else end["batch_id"]


def _builtin_changes(spark, cp, first: int, last: int, **options) -> list[str]:
    reader = (
        spark.read.format("statestore")
        .option("readChangeFeed", "true")
        .option("changeStartBatchId", first)
        .option("changeEndBatchId", last)
    )
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
    assert final.awaitTermination(300), "the query did not end"
    assert final.exception() is None
    assert _end_offset(final) == last
    assert stopped_at is not None and 0 < stopped_at < last, "the reader was not stopped mid-way"
    return producer.cp, spark_rows(spark.read.parquet(str(out))), last


def _read_limits() -> bool:
    from state_reader.fronts.stream_source import READ_LIMITS

    return READ_LIMITS


@pytest.mark.parametrize("case", ["hdfs_aggregation", "rocksdb_changelog_dedup"])
def test_a_stream_of_a_running_query_equals_the_builtin_change_feed(spark, tmp_path, case):
    build, confs, mode = {
        "hdfs_aggregation": (_aggregate, HDFS, "update"),
        "rocksdb_changelog_dedup": (_dedup, ROCKSDB_CHANGELOG, "append"),
    }[case]
    cp, rows, last = _follow_live(spark, tmp_path, build, confs, mode)
    assert rows, "the stream wrote no changes"
    builtin = _builtin_changes(spark, cp, 0, last)
    assert len(rows) == len(set(rows)) or sorted(rows) == builtin
    assert rows == builtin  # multisets: both sorted, duplicates kept
    state = spark_rows(spark.read.format("statestore").option("batchId", last).load(str(cp)))
    assert _replay(rows) == state
    if case == "rocksdb_changelog_dedup":
        assert any('"change_type":"delete"' in r for r in rows), "no eviction was followed"


# -- Spark-free follow, snapshots, data loss ----------------------------------------------------------


def _followed(cp: str, last: int, **kwargs) -> list[tuple[int, object]]:
    """The items of ``state_reader.follow`` up to producer batch ``last``."""
    items = []
    for batch, table in state_reader.follow(cp, poll_seconds=0.05, **kwargs):
        items.append((batch, table))
        if batch >= last:
            break
    return items


def _rows_of(items) -> list[str]:
    import pyarrow as pa

    tables = [t for _, t in items if t.num_rows]
    return arrow_rows(pa.concat_tables(tables)) if tables else []


@pytest.mark.parametrize(
    "name, options",
    [
        ("tws", {"state_var_name": "profile"}),
        ("join_inner", {"store_name": "left-keyToNumValues"}),
        ("join_inner", {"store_name": "right-keyWithIndexToValue"}),
    ],
)
def test_follow_a_variable_and_a_join_store(spark, checkpoints, name, options):
    cp = checkpoints(name)
    last = _committed(Path(cp))[-1]
    items = _followed(cp, last, **options)
    assert [b for b, _ in items] == list(range(0, last + 1)), "every batch once, in order, empty ones too"
    spark_options = (
        {"stateVarName": options["state_var_name"]}
        if "state_var_name" in options
        else {"storeName": options["store_name"]}
    )
    builtin = _builtin_changes(spark, cp, 0, last, **spark_options)
    assert builtin and _rows_of(items) == builtin


def _kept_two(spark, out: Path, cleaned, **query) -> str:
    """The checkpoint of the plain aggregation run to its end keeping 2 batches, once ``cleaned(cp)`` says
    maintenance (in the background) has deleted what it should."""
    from tests.support.streaming_queries import Query

    cp = run_query(spark, Query(QUERIES["agg_fmt2"].build, confs={**HDFS, RETAIN: "2"}, **query), out)
    for _ in range(50):
        if cleaned(cp):
            break
        time.sleep(0.1)
    return cp


@pytest.fixture(scope="module")
def short_retention(spark, tmp_path_factory):
    """A finished aggregation that kept 2 batches: its first batches' files are gone."""
    return _kept_two(
        spark,
        tmp_path_factory.mktemp("retention"),
        lambda cp: not any(n.startswith("1.") for n in os.listdir(Path(cp) / "state" / "0" / "0")),
    )


def test_a_follower_behind_retention_fails_naming_the_lost_batches(short_retention):
    cp = short_retention
    committed = _committed(Path(cp))
    assert committed[0] > 1, committed
    with pytest.raises(state_reader.ChangesLostError) as caught:
        _followed(cp, committed[-1], change_start_batch_id=0)
    message = str(caught.value)
    assert "batches 0.." in message and "spark.sql.streaming.minBatchesToRetain" in message
    assert "fail_on_data_loss=False" in message  # the Python keyword


def test_a_follower_behind_retention_skips_ahead_when_told(spark, short_retention, caplog):
    cp = short_retention
    committed = _committed(Path(cp))
    with caplog.at_level(logging.WARNING, logger="state_reader.follow"):
        items = _followed(cp, committed[-1], change_start_batch_id=0, fail_on_data_loss=False)
    first = items[0][0]
    assert 0 < first <= committed[0]
    assert [b for b, _ in items] == list(range(first, committed[-1] + 1))
    assert any(f"skipping batches 0..{first - 1}" in r.getMessage() for r in caplog.records), caplog.text
    assert _rows_of(items) == _builtin_changes(spark, cp, first, committed[-1])
    # the streaming source: the same error, or the same rows
    with pytest.raises(Exception, match="STATE_READER_CHANGES_LOST"):
        spark.readStream.format(SOURCE).option("readChangeFeed", "true").option("changeStartBatchId", 0).load(
            cp
        ).writeStream.format("noop").trigger(availableNow=True).start().awaitTermination(300)


@pytest.fixture(scope="module")
def long_past_retention(spark, tmp_path_factory):
    """A finished aggregation of 30 batches that kept 2: cleanup passed batch 5 by far more batches than a
    follower reads at once, so a follower started at 5 has to skip (or report) batches 5..26 in one go."""

    def batches():
        return [
            [{"ts": T0 + b * 8 + i, "grp": "abc"[(b + i) % 3], "amount": i, "user": f"u{i}"} for i in range(3)]
            for b in range(30)
        ]

    return _kept_two(
        spark, tmp_path_factory.mktemp("long_past_retention"), lambda cp: _committed(Path(cp))[0] > 20, batches=batches
    )


def test_a_follower_far_behind_retention_names_every_lost_batch(long_past_retention):
    cp = long_past_retention
    committed = _committed(Path(cp))
    with pytest.raises(state_reader.ChangesLostError, match=f"batches 5..{committed[0] - 1} of"):
        _followed(cp, committed[-1], change_start_batch_id=5)


def test_a_follower_far_behind_retention_skips_to_the_oldest_batch(spark, long_past_retention, caplog, tmp_path):
    cp = long_past_retention
    committed = _committed(Path(cp))
    with caplog.at_level(logging.WARNING, logger="state_reader.follow"):
        items = _followed(cp, committed[-1], change_start_batch_id=5, fail_on_data_loss=False)
    assert [b for b, _ in items] == committed
    assert f"skipping batches 5..{committed[0] - 1}" in caplog.text
    builtin = _builtin_changes(spark, cp, committed[0], committed[-1])
    assert builtin and _rows_of(items) == builtin
    # the command line: the same batches, the skip named on stderr and, with --json, in a record of its own
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "state_reader",
            "changes",
            cp,
            "--follow",
            "--json",
            "--skip-lost",
            "--from",
            "5",
            "--to",
            str(committed[-1]),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0] == {
        "skipped": {
            "first_batch_id": 5,
            "first_batch": 5,
            "last_batch_id": committed[0] - 1,
            "last_batch": committed[0] - 1,
        },
        "reason": "the query cleaned them up before they were read",
    }
    assert f"skipped batches 5..{committed[0] - 1}" in done.stderr
    assert sorted(canon(r) for r in lines[1:]) == builtin
    failed = subprocess.run(
        [sys.executable, "-m", "state_reader", "changes", cp, "--follow", "--from", "5", "--to", str(committed[-1])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert failed.returncode != 0 and f"batches 5..{committed[0] - 1}" in failed.stderr
    # the streaming source skips the same batches
    assert _skipping_stream(spark, cp, tmp_path, 5) == builtin


def _skipping_stream(spark, cp: str, tmp_path: Path, start: int) -> list[str]:
    """What the streaming source writes from ``start`` with ``failOnDataLoss=false``, run to the end."""
    query = _reader(
        spark,
        Path(cp),
        tmp_path / "out",
        tmp_path / "own",
        {"availableNow": True},
        changeStartBatchId=str(start),
        failOnDataLoss="false",
    )
    assert query.awaitTermination(300), "the query did not end"
    assert query.exception() is None
    return spark_rows(spark.read.parquet(str(tmp_path / "out")))


def test_a_stream_that_skips_lost_batches(spark, short_retention, tmp_path):
    cp = short_retention
    committed = _committed(Path(cp))
    rows = _skipping_stream(spark, cp, tmp_path, 0)
    first = min(json.loads(r)["batch_id"] for r in rows)
    assert rows == _builtin_changes(spark, cp, first, committed[-1])


def test_a_history_starts_with_a_snapshot(spark, short_retention, tmp_path):
    """startWithSnapshot: the state at the batch before the first change, then every change: replaying
    them rebuilds the state at the last batch, though the checkpoint no longer holds the early batches."""
    cp = short_retention
    committed = _committed(Path(cp))
    items = _followed(cp, committed[-1], start_with_snapshot=True)
    assert items[0][0] == committed[0]
    snapshot = items[0][1]
    assert set(snapshot.column("change_type").to_pylist()) == {"snapshot"}
    state_then = state_reader.read_state(cp, batch_id=committed[0])
    assert arrow_rows(snapshot.drop_columns(["batch_id", "change_type"])) == arrow_rows(state_then)
    last_state = spark_rows(spark.read.format("statestore").option("batchId", committed[-1]).load(cp))
    assert _replay(_rows_of(items)) == last_state
    # the streaming source writes the same history
    query = _reader(
        spark, Path(cp), tmp_path / "out", tmp_path / "own", {"availableNow": True}, startWithSnapshot="true"
    )
    assert query.awaitTermination(300), "the query did not end"
    assert query.exception() is None
    assert spark_rows(spark.read.parquet(str(tmp_path / "out"))) == _rows_of(items)


def test_the_diff_based_change_feed_equals_the_changelog(spark, checkpoints):
    """RocksDB without changelog checkpointing: changes computed from consecutive snapshots equal what
    the changelog of the same query, run with changelog checkpointing, says."""
    plain, logged = checkpoints("rocksdb_dedup"), checkpoints("rocksdb_cl_dedup")
    last = _committed(Path(logged))[-1]
    assert _committed(Path(plain))[-1] == last
    builtin = _builtin_changes(spark, logged, 0, last)
    assert any('"change_type":"delete"' in r for r in builtin)
    ours = spark_rows(
        spark.read.format(SOURCE)
        .option("readChangeFeed", "true")
        .option("changeStartBatchId", 0)
        .option("changeFeedFromSnapshots", "true")
        .load(plain)
    )
    assert ours == builtin
    assert _rows_of(_followed(plain, last, change_feed_from_snapshots=True)) == builtin


# -- started too early, pointed wrong ------------------------------------------------------------------


def test_a_follower_needs_a_checkpoint_a_first_commit_and_the_operator(spark, checkpoints, tmp_path):
    nothing = tmp_path / "nothing"
    nothing.mkdir()
    with pytest.raises(state_reader.StateReaderError, match="nothing"):
        state_reader.follow(str(nothing))
    # a query that has not committed its first batch (its input is still empty)
    producer = Producer(spark, tmp_path / "early", _aggregate, HDFS)
    try:
        time.sleep(1)
        with pytest.raises(state_reader.CommittedBatchUnavailableError, match="completed a batch"):
            state_reader.follow(str(producer.cp))
        with pytest.raises(Exception, match="completed a batch"):
            spark.readStream.format(SOURCE).option("readChangeFeed", "true").load(str(producer.cp))
    finally:
        producer.stop()
    with pytest.raises(state_reader.SchemaReadError, match="operator 7"):
        state_reader.follow(checkpoints("agg_fmt2"), operator_id=7)
    with pytest.raises(Exception, match="readChangeFeed"):
        spark.readStream.format(SOURCE).load(checkpoints("agg_fmt2")).writeStream.format("noop").trigger(
            availableNow=True
        ).start().awaitTermination(300)
    with pytest.raises(Exception, match="changeEndBatchId"):
        spark.readStream.format(SOURCE).option("readChangeFeed", "true").option("changeEndBatchId", 3).load(
            checkpoints("agg_fmt2")
        )


def test_changes_follow_on_the_command_line(checkpoints):
    import subprocess
    import sys

    cp = checkpoints("agg_fmt2")
    last = _committed(Path(cp))[-1]
    done = subprocess.run(
        [sys.executable, "-m", "state_reader", "changes", cp, "--follow", "--json", "--to", str(last)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    expected = state_reader.changes(cp, 0, last)
    assert sorted(canon(r) for r in rows) == sorted(canon(r) for r in expected.to_pylist())
    text = subprocess.run(
        [sys.executable, "-m", "state_reader", "changes", cp, "--follow", "--to", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert text.returncode == 0 and "batch 0:" in text.stdout and "batch 1:" in text.stdout, text.stderr
