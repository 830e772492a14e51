"""Our readers against Spark's built-in reader on checkpoints written with the
RocksDB provider: every operator query without and with changelog checkpointing,
latest and earlier batches, and checkpoint format version 2."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

import state_reader
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from tests.support.damage import fingerprint
from tests.support.oracle import arrow_rows, assert_same_as_builtin, diff, spark_rows
from tests.support.streaming_queries import CHECKPOINT_V2, CHECKPOINT_V2_QUERIES, QUERIES, run_query

ROCKSDB_NAMES = sorted(n for n in QUERIES if n.startswith("rocksdb_"))
V2_NAMES = sorted(CHECKPOINT_V2_QUERIES)


def _batches(path: str) -> list[int]:
    return CheckpointDir(Storage(path)).committed_batches


def _earlier(batches: list[int]) -> list[int]:
    """Earlier batches worth reading: the first (changelog only) and one in the middle
    (snapshot + changelogs with changelog checkpointing); every batch costs Spark reads."""
    return sorted({batches[0], batches[len(batches) // 2]} - {batches[-1]})


def _state_files(path: str, suffix: str) -> list[Path]:
    return sorted(p for p in Path(path, "state").rglob(f"*{suffix}") if not p.name.startswith("."))


@pytest.fixture(scope="module")
def v2_checkpoints(checkpoints):
    """Checkpoints written with checkpoint format version 2 (the session's checkpoint cache)."""
    return checkpoints


@pytest.mark.parametrize("name", ROCKSDB_NAMES)
def test_every_batch_matches_builtin(spark, checkpoints, name):
    path = checkpoints(name)
    batches = _batches(path)
    assert len(batches) >= 5
    assert _state_files(path, ".zip"), "the query did not write RocksDB snapshots"
    total = 0
    for op in range(QUERIES[name].operators):
        total += assert_same_as_builtin(spark, path, {"operatorId": str(op)})
        for batch in _earlier(batches):
            total += assert_same_as_builtin(spark, path, {"operatorId": str(op), "batchId": str(batch)})
    assert total > 0


def test_join_stores_by_name(spark, tmp_path):
    """Stream-stream join stores are named stores in sub-directories of each partition."""
    from pyspark.sql import functions as F

    from state_reader.model.checkpoint import JOIN_STORES
    from tests.support.streaming_queries import ROCKSDB_CHANGELOG, Query

    def join(df):
        left = df.select(F.col("grp").alias("lk"), F.col("ts").alias("lt"), "n").withWatermark("lt", "5 seconds")
        right = df.select(F.col("grp").alias("rk"), F.col("ts").alias("rt"), "user").withWatermark("rt", "5 seconds")
        return left.join(right, F.expr("lk = rk AND rt BETWEEN lt - interval 3 seconds AND lt + interval 3 seconds"))

    path = run_query(spark, Query(join, output_mode="append", confs=ROCKSDB_CHANGELOG), tmp_path / "join")
    for store in JOIN_STORES:
        assert assert_same_as_builtin(spark, path, {"storeName": store}) > 0
        assert_same_as_builtin(spark, path, {"storeName": store, "batchId": str(_batches(path)[-3])})


def test_changelog_checkpoints_replay_changelogs(checkpoints):
    """With changelog checkpointing some versions exist only as changelogs after a zip,
    so 'snapshot + changelogs' is what the oracle tests exercise."""
    path = checkpoints("rocksdb_cl_agg_window")
    zips = {(p.parent, int(p.stem)) for p in _state_files(path, ".zip")}
    logs = {(p.parent, int(p.stem)) for p in _state_files(path, ".changelog")}
    assert any(any(d == zd and z < v for zd, z in zips) for d, v in logs - zips)


def _conf_set(spark, confs: dict[str, str]):
    class _Ctx:
        def __enter__(self):
            self.saved = {k: spark.conf.get(k, None) for k in confs}
            for k, v in confs.items():
                spark.conf.set(k, v)

        def __exit__(self, *exc):
            for k, v in self.saved.items():
                if v is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, v)

    return _Ctx()


@pytest.mark.parametrize("name", V2_NAMES)
def test_checkpoint_v2_matches_builtin(spark, v2_checkpoints, name):
    """Format 2 is detected from the checkpoint; Spark's reader needs the conf in the session."""
    path = v2_checkpoints(name)
    batches = _batches(path)
    cp = CheckpointDir(Storage(path))
    assert cp.commit_entry(batches[-1])[0] == 2
    assert any("_" in p.stem for p in _state_files(path, ".zip"))
    total = 0
    for op in range(CHECKPOINT_V2_QUERIES[name].operators):
        for batch in [None, *_earlier(batches)]:
            options = {"operatorId": str(op)} if batch is None else {"operatorId": str(op), "batchId": str(batch)}
            with _conf_set(spark, CHECKPOINT_V2):
                total += assert_same_as_builtin(spark, path, options)
                expected = spark_rows(spark.read.format("statestore").options(**options).load(path))
            # ours needs no conf: the same rows in a session without it
            ours = spark_rows(spark.read.format("state_reader.statestore").options(**options).load(path))
            assert ours == expected, diff(expected, ours)
    assert total > 0


def test_checkpoint_v2_uses_lineage(v2_checkpoints):
    """Some versions have no zip of their own, so they are rebuilt through the changelog lineage."""
    path = v2_checkpoints("rocksdb_v2_multi")
    zips = {p.stem for p in _state_files(path, ".zip")}
    logs = {p.stem for p in _state_files(path, ".changelog")}
    assert logs - zips


def test_checkpoint_v2_ignores_files_of_other_ids(spark, v2_checkpoints, tmp_path):
    """Files of retried tasks (same version, another unique id) and plain-named files must not be used."""
    path = v2_checkpoints("rocksdb_v2_agg_window")
    with _conf_set(spark, CHECKPOINT_V2):
        expected = spark_rows(spark.read.format("statestore").load(path))
    copy = tmp_path / "checkpoint"
    shutil.copytree(path, copy)
    latest = _batches(str(copy))[-1] + 1
    for part in sorted((copy / "state" / "0").iterdir()):
        if not part.name.isdigit():
            continue
        files = sorted(p for p in part.iterdir() if p.suffix in (".zip", ".changelog") and "_" in p.stem)
        old_zip = next(p for p in files if p.suffix == ".zip")
        old_log = next(p for p in files if p.suffix == ".changelog")
        decoy = uuid.uuid4()
        shutil.copy(old_zip, part / f"{latest}_{decoy}.zip")
        shutil.copy(old_log, part / f"{latest}_{decoy}.changelog")
        shutil.copy(old_zip, part / f"{latest}.zip")
    ours = spark_rows(spark.read.format("state_reader.statestore").load(str(copy)))
    assert ours == expected, diff(expected, ours)
    api = arrow_rows(state_reader.read_state(str(copy), exact_schema=True))
    assert api == expected, diff(expected, api)


@pytest.mark.parametrize("name", ["rocksdb_agg_window", "rocksdb_cl_session_window", "rocksdb_v2_multi"])
def test_reading_leaves_checkpoint_unchanged(spark, checkpoints, v2_checkpoints, name):
    """Names, sizes and bytes of every file are the same after reading through both fronts."""
    path = v2_checkpoints(name) if name in CHECKPOINT_V2_QUERIES else checkpoints(name)
    ops = (CHECKPOINT_V2_QUERIES.get(name) or QUERIES[name]).operators
    before = fingerprint(path)
    for op in range(ops):
        for batch in _batches(path):
            options = {"operatorId": str(op), "batchId": str(batch)}
            rows = state_reader.read_state(path, operator_id=op, batch_id=batch).num_rows
            assert spark.read.format("state_reader.statestore").options(**options).load(path).count() == rows
    assert fingerprint(path) == before


@pytest.mark.parametrize(
    "name", ["rocksdb_cl_agg_window", "rocksdb_cl_session_window", "rocksdb_cl_checksum_agg_window"]
)
def test_change_feed_and_snapshot_replay_match_builtin(spark, checkpoints, name):
    """The provider's changelog records and replay from a chosen zip, through the readers' options."""
    path = checkpoints(name)
    batches = _batches(path)
    assert assert_same_as_builtin(spark, path, {"readChangeFeed": "true", "changeStartBatchId": "0"}) > 0
    zips = sorted(int(p.stem) for p in Path(path, "state", "0", "0").glob("*.zip"))
    assert zips
    for version in zips:
        if version - 1 in batches:
            assert_same_as_builtin(spark, path, {"snapshotStartBatchId": str(version - 1), "snapshotPartitionId": "0"})


def test_change_feed_needs_changelogs(checkpoints):
    """Without changelog checkpointing there is nothing to read a change feed from (as in Spark)."""
    path = checkpoints("rocksdb_agg_window")
    with pytest.raises(state_reader.MissingStateFileError, match="changelog checkpointing"):
        state_reader.read_state(path, read_change_feed=True, change_start_batch_id=0)


def test_checkpoint_v2_change_feed_and_snapshot_replay(spark, v2_checkpoints):
    path = v2_checkpoints("rocksdb_v2_multi")
    part0 = Path(path, "state", "0", "0")
    zip_batches = sorted(int(p.stem.split("_")[0]) - 1 for p in part0.glob("*_*.zip"))
    assert zip_batches
    with _conf_set(spark, CHECKPOINT_V2):
        for op in ("0", "1"):
            assert (
                assert_same_as_builtin(
                    spark, path, {"operatorId": op, "readChangeFeed": "true", "changeStartBatchId": "0"}
                )
                > 0
            )
            assert_same_as_builtin(
                spark, path, {"operatorId": op, "snapshotStartBatchId": str(zip_batches[0]), "snapshotPartitionId": "0"}
            )
