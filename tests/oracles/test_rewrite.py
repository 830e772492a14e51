"""Rewrites judged by Spark itself: the query restarted from the rewritten checkpoint with new
input produces exactly what it produces restarted from the original, and Spark's built-in reader
sees the same state there, each row in the partition Spark's own hash() assigns."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

import state_reader
from state_reader.core.options import from_kwargs
from state_reader.core.planner import plan_state_read
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir

# every operator the HDFS-backed provider runs, and every codec; RocksDB (checkpoint format 1) without and
# with changelog checkpointing, for the operators without column families
# with checkpoint format 2 (files named by unique ids in the commit log)
from tests.support.paths import GOLDEN
from tests.support.resume import (
    add_input,
    assert_builtin_sees_same_state,
    copy_as_another_query,
    digest,
    forget_unfinished_batch,
    new_batches,
    restart_each,
    resume,
    resume_each,
    resume_with_timers,
    state_rows,
    stores,
)
from tests.support.streaming_queries import (
    CHECKPOINT_V2_QUERIES,
    QUERIES,
    Query,
    run_query,
    session_confs,
)

CASES = [
    "agg_window",
    "agg_fmt1",
    "dedup",
    "dedup_within",
    "session_window",
    "apply_in_pandas",
    "join_inner",
    "multi",
    "limit",
    "agg_zstd",
    "agg_snappy",
    "agg_lzf",
    "rocksdb_agg_window",
    "rocksdb_cl_agg_window",
    "rocksdb_dedup",
    "rocksdb_cl_session_window",
    "rocksdb_apply_in_pandas",
    "rocksdb_cl_multi",
    "join_left_outer_rocksdb_cl",
    "rocksdb_v2_agg_window",
    "rocksdb_v2_session_window",
    "rocksdb_v2_multi",
]
ALL_QUERIES = {**QUERIES, **CHECKPOINT_V2_QUERIES}
# a codec changes the files' bytes, not what the restarted query does with the rows in them: Spark's
# reader reading the rewritten files back is the test there, and the restarts are left out
NOT_RESUMED = {"agg_zstd", "agg_snappy", "agg_lzf"}


@pytest.mark.parametrize("name", CASES)
def test_resume_oracle(spark, own_run, tmp_path, name):
    """Rewritten to more partitions and to fewer in the other provider's files: Spark's reader sees the source's
    state in both, each row in the partition hash() gives it, and the second resumes as the source does."""
    query = ALL_QUERIES[name]
    src, input_dir = own_run
    before = digest(src)
    op, store = stores(src)[0]
    plan = plan_state_read(from_kwargs(src, {"operator_id": op, "store_name": store}))
    old = int(plan.num_partitions or 0)
    other = "hdfs" if "RocksDB" in plan.provider_class else "rocksdb"
    # more partitions; fewer, in the other provider's files
    targets = {"more": (old + 3, None), other: (max(1, old - 1), other)}
    if name in CHECKPOINT_V2_QUERIES:
        # the HDFS-backed provider has no checkpoint format 2
        with pytest.raises(state_reader.UnsupportedOptionError, match="format 2"):
            state_reader.rewrite(src, str(tmp_path / "hdfs"), provider="hdfs")
        targets[other] = (max(1, old - 1), None)
    with session_confs(spark, query.confs):  # Spark's reader needs the format 2 conf to read such state
        for label, (n, provider) in targets.items():
            dst = str(tmp_path / f"dst-{label}")
            report = state_reader.rewrite(src, dst, num_partitions=n, provider=provider)
            assert report.new_partitions == n and report.old_partitions == old
            assert report.provider == (provider or report.source_provider)
            assert digest(src) == before, "the source changed"
            assert_builtin_sees_same_state(spark, src, dst, n)
    if name in NOT_RESUMED:
        return
    add_input(input_dir, new_batches(query))
    copy = str(tmp_path / "src-copy")
    copy_as_another_query(src, copy)
    # restarted: the rewrite into fewer partitions, in the other provider's files where it can move (the one into
    # more partitions is judged by Spark's reader above; the resume oracle through Spark restarts from more)
    dst = str(tmp_path / f"dst-{other}")
    expected, got = resume_each(spark, query, [copy, dst], input_dir)
    assert expected, "the restarted query ran no batch"
    assert got == expected
    with session_confs(spark, query.confs):
        for op, store in stores(copy):
            options = {"operatorId": op, "storeName": store}
            assert state_rows(spark, dst, **options) == state_rows(spark, copy, **options), (op, store)
    if targets[other][1] is not None:
        # the resumed query kept the provider the rewrite put in the checkpoint
        after = plan_state_read(from_kwargs(str(tmp_path / f"dst-{other}"), {"operator_id": op, "store_name": store}))
        assert ("RocksDB" in after.provider) == (other == "rocksdb")


def _many_keys(df):
    from pyspark.sql import functions as F

    return df.groupBy("user").agg(F.count(F.lit(1)).alias("cnt"), F.sum("amount"), F.max("tag"))


def _many_key_batches() -> list[list[dict]]:
    return [
        [
            {
                "ts": 1_700_000_000 + b,
                "user": f"user-{i:06d}-{'x' * 24}",
                "grp": "a",
                "n": i,
                "amount": i * b,
                "price": 1.0,
                "ok": True,
                "tag": f"t{b}",
            }
            for i in range(b * 3000, b * 3000 + 12000)
        ]
        for b in range(2)
    ]


def test_snapshot_built_through_small_memtables_resumes(spark, tmp_path, monkeypatch):
    """A new partition many times the build's memtable is flushed again and again (and compacted
    by RocksDB as it goes); Spark reads such a snapshot and resumes from it as from the source."""
    from state_reader.formats import rocksdict_db
    from tests.support.streaming_queries import HDFS

    query = Query(_many_keys, confs=HDFS, batches=_many_key_batches)
    src = run_query(spark, query, tmp_path / "run")
    monkeypatch.setattr(rocksdict_db, "_WRITE_BUFFER", 64 << 10)  # a memtable a twentieth of a partition
    dst = str(tmp_path / "dst")
    report = state_reader.rewrite(src, dst, num_partitions=2, provider="rocksdb")
    assert min(report.partition_sizes()[1]) > 8 * (64 << 10)  # each partition's rows fill many memtables
    assert_builtin_sees_same_state(spark, src, dst, 2)
    input_dir = tmp_path / "run" / "input"
    add_input(input_dir, new_batches(query))
    copy = str(tmp_path / "src-copy")
    copy_as_another_query(src, copy)
    expected, got = resume_each(spark, query, [copy, dst], input_dir)
    assert expected and got == expected


# stores with RocksDB column families: transformWithState (every variable kind, TTL, timers) and joins of
# formats 3 and 4; Spark runs them on RocksDB only
# (tws_avro and tws_avro_event_time: Avro-encoded, their TTL and timestamp-to-key timer indexes range-scan keys)
FAMILY_CASES = ["tws", "join_v3", "join_v4", "tws_avro", "tws_avro_event_time"]
# what the restarted query writes from its clock: TTL expiries and timers registered at "now + 1 hour"
_CLOCK_FIELDS = {"ttlExpirationMs", "expiration_timestamp_ms"}


def _family_reads(checkpoint: str) -> list[dict[str, str]]:
    """The built-in reader's options that together show every column family's state."""
    cp = CheckpointDir(Storage(checkpoint))
    meta = cp.operator_metadata(0, cp.latest_committed_batch())
    if "transformWithState" in (meta.operator_name or ""):
        names = [v["stateName"] for v in meta.properties["stateVariables"] if not v["stateName"].startswith("$")]
        return [{"stateVarName": n} for n in names] + [{"readRegisteredTimers": "true"}]
    return [{"joinSide": "left"}, {"joinSide": "right"}]


def _without_clock(value):
    if hasattr(value, "asDict"):
        value = value.asDict()
    if isinstance(value, dict):
        return {k: _without_clock(v) for k, v in sorted(value.items()) if k not in _CLOCK_FIELDS}
    if isinstance(value, (list, tuple)):
        return [_without_clock(v) for v in value]
    return value


def _without(row: dict, *names: str) -> dict:
    return {k: v for k, v in row.items() if k not in names}


def _family_rows(
    spark, checkpoint: str, options: dict[str, str], clock: bool = True, partition: bool = False
) -> list[str]:
    df = spark.read.format("statestore").options(**options).load(checkpoint)
    rows = (df if partition else df.drop("partition_id")).collect()
    return sorted(repr(r.asDict(recursive=True) if clock else _without_clock(r)) for r in rows)


@pytest.mark.parametrize("name", FAMILY_CASES)
def test_resume_oracle_column_families(spark, own_run, tmp_path, name):
    """Every column family is rewritten (internal ones too): Spark's reader sees each variable, its
    timers and both join sides unchanged, every row where hash() puts it, and the query resumes alike."""
    from pyspark.sql import functions as F

    query = QUERIES[name]
    src, input_dir = own_run
    forget_unfinished_batch(src)
    before = digest(src)
    reads = _family_reads(src)
    with pytest.raises(state_reader.UnsupportedOptionError, match="RocksDB provider only"):
        state_reader.rewrite(src, str(tmp_path / "hdfs"), provider="hdfs")
    old = state_reader.rewrite(src, dry_run=True).old_partitions
    targets = {"fewer": max(1, old - 1), "more": old + 3}
    source: dict[str, list[str]] = {}  # Spark's reader on the source, read once (it does not change)
    for label, n in targets.items():
        dst = str(tmp_path / f"dst-{label}")
        report = state_reader.repartition(src, dst, n)
        assert report.stores[0].rows > 0 and report.stores[0].rows == sum(report.stores[0].old_rows_per_partition)
        assert digest(src) == before, "the source changed"
        for options in reads:
            df = spark.read.format("statestore").options(**options).load(dst)
            # join format 4 shows each row's event time in the key; the join key is the rest
            key = [F.col("key")[f] for f in df.schema["key"].dataType.names if f != "__event_time"]
            rows = df.withColumn("_hashed", F.pmod(F.hash(*key), F.lit(n))).collect()
            assert not [r for r in rows if r["partition_id"] != r["_hashed"]], (label, options)
            shown = sorted(repr(_without(r.asDict(recursive=True), "partition_id", "_hashed")) for r in rows)
            if label == next(iter(targets)):
                source[str(options)] = _family_rows(spark, src, options)
            assert shown == source[str(options)], (label, options)
    add_input(input_dir, new_batches(query))
    copy = str(tmp_path / "src-copy")
    copy_as_another_query(src, copy)
    dsts = {label: str(tmp_path / f"dst-{label}") for label in targets}
    expected, *got = resume_each(spark, query, [copy, *dsts.values()], input_dir, timers=bool(query.processing_time))
    assert expected, "the restarted query ran no batch"
    for label, rows in zip(dsts, got, strict=True):
        assert rows == expected, label
    for dst in dsts.values():
        for options in reads:
            assert _family_rows(spark, dst, options, clock=False) == _family_rows(spark, copy, options, clock=False)


def _range_scan_timers(checkpoint: str) -> list[tuple]:
    """(partition, grouping key, expiry) of every entry of the timestamp-to-key timer index, the
    range-scan family Spark's reader does not serve, as the rows ``readRegisteredTimers`` shows."""
    from state_reader.formats.rocksdb_encoding import (
        RANGE_SCAN,
        KeyEncoderSpec,
        column_family_ids,
        decode_keys,
        select,
        strip_column_family,
    )
    from state_reader.model.checkpoint import DEFAULT_STORE
    from state_reader.model.state_variables import family_schemas
    from state_reader.providers import rocksdb

    plan = plan_state_read(from_kwargs(checkpoint, {"read_registered_timers": True}))
    cp = plan.checkpoint
    family = "$eventTimers_timestampToKey"
    schema = family_schemas(cp, 0, cp.operator_metadata(0, plan.batch_id).store(DEFAULT_STORE))[family]
    spec = KeyEncoderSpec.from_plan(schema.key_encoder, 0)
    assert spec.kind == RANGE_SCAN and plan.store_conf.avro
    out = []
    for pid in plan.partitions:
        directory = cp.store_dir(0, pid, DEFAULT_STORE)
        state = rocksdb.load_store(plan, directory, pid)
        keys, _ = state.row_buffers(directory)
        ids = column_family_ids(keys) if len(keys.starts) else []
        cf_id = rocksdb.store_column_families(plan, directory, state)[family]
        for row in decode_keys(
            strip_column_family(select(keys, ids == cf_id)), schema.key_schema, spec, True
        ).to_pylist():
            out.append((pid, row["key"], row["expiryTimestampMs"]))
    return sorted(out, key=repr)


def _builtin_timers(spark, checkpoint: str) -> list[tuple]:
    df = spark.read.format("statestore").option("readRegisteredTimers", "true").load(checkpoint)
    return sorted([(r.partition_id, r.key.asDict(), r.expiration_timestamp_ms) for r in df.collect()], key=repr)


def test_avro_range_scan_keys_rewritten(spark, tmp_path):
    """Avro transformWithState with event-time timers: repartitioned, its timestamp-to-key index (Avro
    range-scan keys) holds each timer Spark's reader shows, in the same partition; with a key dropped,
    Spark's reader no longer sees it, and the query resumes from both as from the source (less that key)."""
    query = QUERIES["tws_avro_event_time"]
    src = run_query(spark, query, tmp_path / "run")
    input_dir = tmp_path / "run" / "input"
    reads = _family_reads(src)
    assert _range_scan_timers(src) == _builtin_timers(spark, src)
    more, dropped = str(tmp_path / "dst-more"), str(tmp_path / "dst-dropped")
    n = state_reader.rewrite(src, dry_run=True).old_partitions + 3
    state_reader.repartition(src, more, n)
    assert _range_scan_timers(more) == _builtin_timers(spark, more)
    assert max(pid for pid, _, _ in _range_scan_timers(more)) > 1  # rows moved to the new partitions
    report = state_reader.rewrite(src, dropped, drop_keys="user = 'ann'")
    assert report.stores[0].dropped > 0
    for options in reads:
        rows = _family_rows(spark, src, options)
        kept = [r for r in rows if "'user': 'ann'" not in r]
        assert len(kept) < len(rows), options
        assert _family_rows(spark, dropped, options) == kept, options
        assert _family_rows(spark, more, options) == rows, options
    assert _range_scan_timers(dropped) == _builtin_timers(spark, dropped)
    # new input without the dropped key: the source's timers for it still fire, with its last counts
    add_input(input_dir, [[r for r in batch if r["user"] != "ann"] for batch in new_batches(query)])
    copy = str(tmp_path / "src-copy")
    copy_as_another_query(src, copy)
    expected, from_more, from_dropped = resume_each(spark, query, [copy, more, dropped], input_dir)
    assert any("'expired'" in r for rows in expected.values() for r in rows), "no timer fired after the restart"
    assert from_more == expected
    without = {b: [r for r in rows if not r.startswith("('ann',")] for b, rows in expected.items()}
    assert without != expected
    assert from_dropped == without


def test_drop_keys_removes_them_from_every_store(spark, tmp_path):
    src = run_query(spark, QUERIES["join_inner"], tmp_path / "run")
    table = state_reader.read_state(src, store_name="left-keyToNumValues")
    key_type = table.schema.field("key").type
    field = key_type[0].name
    value = next(v for v in table.column("key").to_pylist() if v[field] is not None)[field]
    expr = f"{field} = {value!r}" if not isinstance(value, str) else f"{field} = '{value}'"
    report = state_reader.rewrite(src, str(tmp_path / "dst"), drop_keys=expr)
    assert sum(s.dropped for s in report.stores) >= 4
    for _, store in stores(src):
        before = state_reader.read_state(src, store_name=store)
        after = state_reader.read_state(str(tmp_path / "dst"), store_name=store)
        assert (
            after.num_rows == before.num_rows - state_reader.read_state(src, store_name=store, key_filter=expr).num_rows
        )
        assert state_reader.read_state(str(tmp_path / "dst"), store_name=store, key_filter=expr).num_rows == 0


def test_spark_refuses_an_incomplete_rewrite(spark, checkpoints, tmp_path):
    """A rewrite that stops part-way leaves `metadata` unreadable: Spark will not start from it."""
    src = checkpoints("agg_window")
    damaged = tmp_path / "damaged"
    shutil.copytree(src, damaged)
    for f in (damaged / "state" / "0").rglob("*.delta"):
        f.write_bytes(b"not a delta")
    dst = tmp_path / "dst"
    with pytest.raises(state_reader.RewriteFailedError, match="incomplete"):
        state_reader.repartition(str(damaged), str(dst), 3)
    assert (dst / "metadata").read_bytes().startswith(b"state_reader: incomplete")
    query = QUERIES["agg_window"]
    with pytest.raises(Exception):  # noqa: B017 - Spark's own error, whatever it is called
        resume(spark, query, str(dst), Path(src).parent / "input")


# checkpoints written by older Spark versions (tests/golden), restarted by this one
# (a join written by 3.5 does not restart on 4.3 at all: its value schema's nullability changed)
GOLDEN_CASES = [
    ("spark-3.5.8", "agg_window_hdfs"),
    ("spark-3.5.8", "dedup_hdfs"),
    ("spark-4.0.5", "join_inner_hdfs"),
    ("spark-3.5.8", "session_window_hdfs"),
    ("spark-4.0.5", "agg_window_hdfs"),
    ("spark-4.0.5", "multi_op_hdfs"),
    ("spark-3.4.4", "agg_snappy_hdfs"),
    ("spark-3.5.8", "agg_window_rocksdb"),
]


def _golden_spec(name: str):
    from tests.golden import generate as golden

    return golden, next(s for s in golden.SPECS if s.name == name)


def _resume_golden(spark, golden, spec, checkpoint: str, input_root: Path) -> dict[int, list[str]]:
    collected: dict[int, list[str]] = {}

    def sink(df, batch_id: int) -> None:
        collected[batch_id] = sorted(repr(tuple(r)) for r in df.collect())

    streams = spec.data(spec.name)
    src = {
        n: spark.readStream.schema(s.schema).option("maxFilesPerTrigger", 1).json(str(input_root / n))
        for n, s in streams.items()
    }
    df, mode = spec.build(spark, src)
    handle = (
        df.writeStream.foreachBatch(sink)
        .outputMode(mode)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    handle.awaitTermination()
    return collected


@pytest.mark.parametrize(("writer", "name"), GOLDEN_CASES)
def test_resume_oracle_older_writers(spark, tmp_path, writer, name):
    golden, spec = _golden_spec(name)
    original = tmp_path / "src"
    shutil.copytree(GOLDEN / writer / name, original)
    before = digest(str(original))
    op, store = stores(str(original))[0]
    plan = plan_state_read(from_kwargs(str(original), {"operator_id": op, "store_name": store}))
    old = int(plan.num_partitions)
    other = "hdfs" if "RocksDB" in plan.provider_class else "rocksdb"
    # more partitions; fewer, in the other provider's files
    targets = {"more": (old + 2, None), other: (max(1, old - 1), other)}
    if name == "session_window_hdfs" and writer.startswith("spark-3."):
        # no operator metadata: Spark would restart the moved store with the wrong key encoder
        with pytest.raises(state_reader.UnsupportedOptionError, match="wrong key encoder"):
            state_reader.rewrite(str(original), str(tmp_path / "moved"), provider=other)
        targets[other] = (max(1, old - 1), None)
    for label, (n, provider) in targets.items():
        dst = str(tmp_path / f"dst-{label}")
        state_reader.rewrite(str(original), dst, num_partitions=n, provider=provider)
        assert digest(str(original)) == before
        assert_builtin_sees_same_state(spark, str(original), dst, n)
    # new input in a new place: the last batch again (keys the state holds), as a later file
    input_root = tmp_path / "input"
    for stream_name, stream in spec.data(spec.name).items():
        golden.write_input(str(input_root / stream_name), stream.batches[-1], 90)

    def restart(checkpoint: str) -> dict[int, list[str]]:
        session = spark.newSession()
        with session_confs(session, spec.conf):
            return _resume_golden(session, golden, spec, checkpoint, input_root)

    reference = copy_as_another_query(str(original), str(tmp_path / "reference"))
    expected, *got = restart_each(restart, [reference, *(str(tmp_path / f"dst-{label}") for label in targets)])
    assert expected
    for label, rows in zip(targets, got, strict=True):
        assert rows == expected, label


@pytest.mark.parametrize("name", ["rocksdb_agg_window", "tws", "join_v3"])
def test_equals_sparks_own_repartition(spark, checkpoints, tmp_path, name):
    """Where Spark 4.3's experimental repartition works (RocksDB, format 1), ours gives the same state,
    every row in the same partition."""
    manager = getattr(spark, "_streamingCheckpointManager", None)
    if manager is None:
        pytest.skip("this pyspark has no streaming checkpoint manager")
    src = tmp_path / "src"
    shutil.copytree(checkpoints(name), src)
    forget_unfinished_batch(str(src))
    theirs = tmp_path / "theirs"
    shutil.copytree(src, theirs)
    manager.repartition(str(theirs), 5)  # in place, on the copy
    ours = str(tmp_path / "ours")
    state_reader.repartition(str(src), ours, 5)
    reads = _family_reads(ours) if name != "rocksdb_agg_window" else [{}]
    for options in reads:
        assert _family_rows(spark, ours, options, partition=True) == _family_rows(
            spark, str(theirs), options, partition=True
        ), options


@pytest.mark.example("schema_evolution.py")
def test_schema_evolution_example_runs(example):
    """examples/schema_evolution.py: Spark refuses the changed query on the old checkpoint and resumes it
    from the rewrite, old aggregates carried on and the new one computed from the rows after the change."""
    assert "refused (STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE)" in example, example
    # c<i> bought for i, i+1, i+2 before the change and 100+i after it
    assert [line.strip() for line in example.splitlines() if line.startswith("  c")] == [
        f"c{i}: 4 purchases, {4 * i + 103} spent, largest since the change {100 + i}" for i in range(5)
    ]


def _kill_part_way(src: str, dst: Path, num_partitions: int) -> None:
    """Run a rewrite in its own process and kill it (SIGKILL) once it has begun writing ``dst``."""
    import signal
    import subprocess
    import sys

    code = f"import state_reader; state_reader.repartition({src!r}, {str(dst)!r}, {num_partitions})"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 120
        while not (dst / "metadata").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the rewrite finished before it could be killed"


def test_a_killed_rewrite_is_recognised_and_replaced_by_running_it_again(spark, checkpoints, tmp_path):
    src = checkpoints("agg_window")
    dst = tmp_path / "dst"
    _kill_part_way(src, dst, 5)
    assert (dst / "metadata").read_bytes().startswith(b"state_reader: incomplete rewrite of ")
    # the reader names what it is, with when it started
    with pytest.raises(
        state_reader.IncompleteRewriteError,
        match=r"an incomplete rewrite from \d{4}-\d\d-\d\d "
        r"\d\d:\d\d:\d\d UTC, not a checkpoint",
    ):
        state_reader.read_state(str(dst))
    # running the same rewrite again replaces the incomplete attempt
    (dst / "state" / "0" / "leftover-of-the-killed-run").parent.mkdir(parents=True, exist_ok=True)
    (dst / "state" / "0" / "leftover-of-the-killed-run").write_bytes(b"x")
    state_reader.repartition(src, str(dst), 5)
    assert not (dst / "state" / "0" / "leftover-of-the-killed-run").exists()
    assert b"incomplete" not in (dst / "metadata").read_bytes()
    assert_builtin_sees_same_state(spark, src, str(dst), 5)
    # a finished checkpoint, and any other non-empty directory, stay refused
    with pytest.raises(state_reader.DestinationNotEmptyError):
        state_reader.repartition(src, str(dst), 5)
    other = tmp_path / "other"
    other.mkdir()
    (other / "metadata").write_text("notes of mine\n")
    with pytest.raises(state_reader.DestinationNotEmptyError):
        state_reader.repartition(src, str(other), 5)
    assert (other / "metadata").read_text() == "notes of mine\n"


def test_a_moved_transform_with_state_checkpoint_is_rewritten_to_point_at_its_own_schemas(spark, tmp_path):
    """Operator metadata v2 records absolute schema file paths of where the query ran: a rewrite of a
    copy must point them at the destination's own schema files, so that Spark reads and resumes it."""
    import json

    query = QUERIES["tws"]
    written = run_query(spark, query, tmp_path / "run")
    forget_unfinished_batch(written)
    moved = tmp_path / "moved" / "checkpoint"
    shutil.copytree(written, moved)
    away = tmp_path / "run" / "checkpoint-away"
    os.rename(written, away)  # the place it was written is gone: stale paths lead nowhere
    reads = _family_reads(str(moved))
    dst = tmp_path / "dst"
    state_reader.repartition(str(moved), str(dst), 3)
    for path in (dst / "state" / "0" / "_metadata" / "v2").iterdir():
        if path.name.isdigit():
            doc = json.loads(path.read_text().split("\n", 1)[1])
            for store in doc["stateStoreInfo"]:
                for stored in store["stateSchemaFilePaths"]:
                    assert stored.startswith(f"file:{dst}/state/0/_stateSchema/"), stored
                    assert Path(stored.removeprefix("file:")).is_file(), stored
    for options in reads:  # Spark's reader follows the recorded paths
        ours = spark.read.format("state_reader.statestore").options(**options).load(str(moved))
        assert _family_rows(spark, str(dst), options) == sorted(
            repr(r.asDict(recursive=True)) for r in ours.drop("partition_id").collect()
        ), options
    # restarted from the rewrite, the query does what it does restarted where it was written
    os.rename(away, written)
    input_dir = tmp_path / "run" / "input"
    add_input(input_dir, new_batches(query))
    shutil.rmtree(moved.parent)
    expected = resume_with_timers(spark, query, written, input_dir)
    os.rename(written, away)
    assert resume_with_timers(spark, query, str(dst), input_dir) == expected
