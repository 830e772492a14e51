"""``doctor``: for each finding, a real query that has the problem and a twin that does not.

Each pair differs in the one thing that causes the problem (an output mode, a
watermark, the keys' spread, a conf); ``doctor`` must report the finding on the
first checkpoint and not on the second.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

import state_reader
from state_reader.model.checkpoint import JOIN_STORES
from tests.support.keyed_queries import (
    BATCHES,
    SCHEMA,
    close_event_times,
    growing_keys,
    keyed_join,
    keyed_rows,
    new_keys,
    run_keyed,
)
from tests.support.paths import ROOT
from tests.support.streaming_queries import ROCKSDB, T0, Query, run_query


def _kinds(path: str, **thresholds) -> set[str]:
    return {f.kind for f in state_reader.diagnose(path, thresholds=thresholds).findings}


def _windowed(df):
    return df.withWatermark("ts", "5 seconds").groupBy(F.window("ts", "10 seconds")).agg(F.count("*").alias("n"))


def test_expired_rows_complete_mode_against_update_mode(spark, tmp_path):
    problem = run_keyed(spark, tmp_path, "complete", _windowed, output_mode="complete")
    healthy = run_keyed(spark, tmp_path, "update", _windowed)
    diagnosis = state_reader.diagnose(problem)
    found = [f for f in diagnosis.findings if f.kind == "expired-rows"]
    assert found and found[0].evidence["expired_rows"] >= BATCHES - 3, found
    assert not diagnosis.healthy
    assert "expired-rows" not in _kinds(healthy)


def test_never_evicted_dedup_without_watermark(spark, tmp_path):
    problem = run_keyed(spark, tmp_path, "no_watermark", lambda df: df.dropDuplicates(["k"]), output_mode="append")
    healthy = run_keyed(
        spark,
        tmp_path,
        "watermark",
        lambda df: df.withWatermark("ts", "5 seconds").dropDuplicates(["k", "ts"]),
        output_mode="append",
    )
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "never-evicted"]
    assert found and found[0].evidence["rows_latest"] > found[0].evidence["rows_first"], found
    assert "watermark" in found[0].evidence["why"]
    assert "never-evicted" not in _kinds(healthy)


def _grew_keeping_every_key(path: str, **options) -> bool:
    """Whether a store holds more rows at the latest batch than at batch 0, with every key of batch 0."""
    first = state_reader.read_state(path, batch_id=0, **options)
    last = state_reader.read_state(path, **options)
    return last.num_rows > first.num_rows and set(map(str, first.column("key"))) <= set(map(str, last.column("key")))


def test_never_evicted_join_with_watermarks_against_one_without(spark, tmp_path):
    """A stream-stream join evicts each side's rows by the event time in the rows, not in its key: with
    keys that keep coming back, its state grows and keeps every key while the watermark evicts rows."""
    batches = keyed_rows(growing_keys, event_time=close_event_times)

    def run(name: str, left: bool, right: bool) -> str:
        build = keyed_join(left, right)
        return run_keyed(spark, tmp_path, name, build, output_mode="append", batches=batches, sources=2)

    healthy = run("watermarks", True, True)
    problem = run("no_watermarks", False, False)
    for store in JOIN_STORES:  # what a rule by the key alone sees: more rows, and every key still there
        assert _grew_keeping_every_key(healthy, store_name=store), store
    feed = state_reader.changes(healthy, 1, store_name="left-keyWithIndexToValue")
    assert "delete" in feed.column("change_type").to_pylist()  # yet rows were evicted
    diagnosis = state_reader.diagnose(healthy)
    assert not [f for f in diagnosis.findings if f.kind == "never-evicted"], diagnosis.findings
    proc = subprocess.run(
        [sys.executable, "-m", "state_reader", "doctor", healthy], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and "nothing found" in proc.stdout, proc.stdout + proc.stderr
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "never-evicted"]
    assert {f.store_name for f in found} == set(JOIN_STORES), found
    assert all("no watermark" in f.evidence["why"] and f.evidence["deletes_in_change_feed"] == 0 for f in found)
    assert all("join" in f.action for f in found)


def test_never_evicted_join_side_whose_watermark_no_condition_can_use(spark, tmp_path):
    """A watermark on one input only: Spark bounds a side's event time by the other input's watermark,
    so neither side is evicted, though the query has a watermark."""
    batches = keyed_rows(growing_keys, event_time=close_event_times)
    one_sided = run_keyed(
        spark, tmp_path, "left_only", keyed_join(True, False), output_mode="append", batches=batches, sources=2
    )
    found = {f.store_name: f for f in state_reader.diagnose(one_sided).findings if f.kind == "never-evicted"}
    assert set(found) == set(JOIN_STORES), found
    assert "right input has no watermark" in found["left-keyWithIndexToValue"].evidence["why"]
    assert "right input has no watermark" in found["right-keyToNumValues"].evidence["why"]


def _counter(restart: bool):
    """applyInPandasWithState without timeouts counting each key's rows; with ``restart``, a key's state
    is removed at its third row, and its next row starts it again."""

    def build(df):
        from pyspark.sql.streaming.state import GroupStateTimeout

        def update(key, pdfs, state):
            import pandas as pd

            count = (state.get[0] if state.exists else 0) + sum(len(pdf) for pdf in pdfs)
            if restart and count % 3 == 0:
                state.remove()
            else:
                state.update((count,))
            yield pd.DataFrame({"k": [key[0]], "n": [count]})

        return df.groupBy("k").applyInPandasWithState(
            update, "k string, n long", "n long", "update", GroupStateTimeout.NoTimeout
        )

    return build


def test_never_evicted_judged_by_the_change_feed(spark, tmp_path):
    """A key removed and added again is in the oldest and the latest state alike: the change feed shows
    its removal, and a state that removes keys is not called never evicted."""
    batches = keyed_rows(growing_keys)
    healthy = run_keyed(spark, tmp_path, "removes", _counter(True), batches=batches)
    problem = run_keyed(spark, tmp_path, "keeps", _counter(False), batches=batches)
    assert _grew_keeping_every_key(healthy)
    assert "delete" in state_reader.changes(healthy, 1).column("change_type").to_pylist()
    assert "never-evicted" not in _kinds(healthy)
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "never-evicted"]
    assert found and found[0].evidence["deletes_in_change_feed"] == 0, found


def test_watermark_stalled_when_event_time_stops(spark, tmp_path):
    # the same input rows arrive every batch; in the problem, event time stops moving after batch 2
    stalled = keyed_rows(new_keys, event_time=lambda b, i: T0 + min(b, 2) * 10 + i)
    problem = run_keyed(spark, tmp_path, "stalled", _windowed, batches=stalled)
    healthy = run_keyed(spark, tmp_path, "moving", _windowed)
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "watermark-stalled"]
    assert found and found[0].evidence["batches_with_input"] >= 5, found
    assert "watermark-stalled" not in _kinds(healthy)


def test_skew_when_keys_land_in_one_partition(spark, tmp_path):
    candidates = spark.range(20000).selectExpr("concat('key', id) AS k", "pmod(hash(concat('key', id)), 4) AS p")
    hot = [r.k for r in candidates.where("p = 0").limit(1500).collect()]
    spread = [r.k for r in candidates.limit(1500).collect()]
    confs = {"spark.sql.shuffle.partitions": "4"}

    def batches(keys):
        return keyed_rows(lambda b: keys[b * 150 : (b + 1) * 150])

    dedup = lambda df: df.dropDuplicates(["k"])  # noqa: E731
    problem = run_keyed(spark, tmp_path, "hot", dedup, output_mode="append", confs=confs, batches=batches(hot))
    healthy = run_keyed(spark, tmp_path, "spread", dedup, output_mode="append", confs=confs, batches=batches(spread))
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "skew"]
    assert found and found[0].evidence["partition"] == 0 and found[0].evidence["rows"] == 1500, found
    # three of four partitions empty: the median is 0, and the finding says so rather than "inf×"
    assert found[0].evidence["ratio"] is None and "3 of 4 partitions are empty" in found[0].summary, found
    assert "skew" not in _kinds(healthy)
    # one verdict: `state-reader stats` calls the same stores skewed and even as the doctor does
    assert "(skewed)" in _stats_text(problem) and "(even)" in _stats_text(healthy)


def _stats_text(path: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "state_reader", "stats", path],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_long_chain_when_snapshots_are_not_written(spark, tmp_path):
    agg = lambda df: df.groupBy("k").agg(F.sum("v").alias("total"))  # noqa: E731
    problem = run_keyed(
        spark, tmp_path, "no_snapshots", agg, confs={"spark.sql.streaming.stateStore.minDeltasForSnapshot": "1000"}
    )
    healthy = run_keyed(spark, tmp_path, "snapshots", agg)
    found = [f for f in state_reader.diagnose(problem, thresholds={"long-chain": 8}).findings if f.kind == "long-chain"]
    assert found and found[0].evidence["chain"] >= BATCHES, found
    assert found[0].evidence["snapshot_version"] is None
    assert "no snapshot" in found[0].summary and "none" not in found[0].summary, found[0].summary
    assert "long-chain" not in _kinds(healthy, **{"long-chain": 8})


def test_large_rows_when_state_holds_a_big_payload(spark, tmp_path):
    def build(big: bool):
        size = 1_200_000 if big else 10
        return lambda df: (
            df.withColumn("payload", F.repeat(F.lit("x"), size)).groupBy("k").agg(F.max("payload").alias("payload"))
        )

    problem = run_keyed(spark, tmp_path, "big", build(True), batches=keyed_rows(lambda b: ["one"]))
    healthy = run_keyed(spark, tmp_path, "small", build(False), batches=keyed_rows(lambda b: ["one"]))
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "large-rows"]
    assert found and found[0].evidence["column"] == "value" and found[0].evidence["largest"][0]["bytes"] >= 1_200_000
    assert "large-rows" not in _kinds(healthy)


def test_uncommitted_batch_after_a_crash(spark, tmp_path):
    healthy = run_keyed(spark, tmp_path, "clean", lambda df: df.groupBy("k").count())
    crashed = tmp_path / "crashed"
    shutil.copytree(healthy, crashed)
    last = max(int(p.name) for p in (crashed / "commits").iterdir() if p.name.isdigit())
    (crashed / "commits" / str(last)).unlink()  # what a driver that died during its last batch leaves
    found = [f for f in state_reader.diagnose(str(crashed)).findings if f.kind == "uncommitted-batch"]
    assert found and found[0].evidence["planned_batches"] == [last], found
    assert found[0].severity == "info"
    assert "uncommitted-batch" not in _kinds(healthy)


@pytest.mark.parametrize("name", ["agg_window", "rocksdb_cl_agg_window"])
def test_files_past_the_last_commit(checkpoints, tmp_path, name):
    """A user who removes the last commit to reprocess that batch (or rolls a checkpoint back) leaves its
    state files behind: doctor names them, their versions and batches. The untouched checkpoint has none."""
    healthy = Path(checkpoints(name))
    assert "files-past-commit" not in _kinds(str(healthy))
    last = max(int(p.name) for p in (healthy / "commits").iterdir() if p.name.isdigit())
    version = last + 1  # the state files of batch `last` are those of version last + 1

    def without(log_dirs: tuple[str, ...], to: str) -> Path:
        copy = tmp_path / to
        shutil.copytree(healthy, copy)
        for log in log_dirs:
            for entry in (copy / log / str(last), copy / log / f".{last}.crc"):
                entry.unlink(missing_ok=True)
        return copy

    # the commit removed, the offsets kept: the query runs the batch again from them
    reprocess = without(("commits",), "reprocess")
    written = [p for p in (reprocess / "state" / "0").rglob(f"{version}.*") if not p.name.startswith(".")]
    assert written, "the last batch wrote no state file"
    found = [f for f in state_reader.diagnose(str(reprocess)).findings if f.kind == "files-past-commit"]
    assert len(found) == 1 and found[0].severity == "info", found
    evidence = found[0].evidence
    assert evidence["versions"] == [version] and evidence["batches"] == [last], evidence
    assert evidence["last_committed_batch"] == last - 1 and evidence["planned_batches"] == [last]
    assert evidence["files"] >= len(written) and evidence["bytes"] > 0
    assert all(f"/{version}." in e or "/SSTs/" in e for e in evidence["examples"]), evidence
    # commit and offsets both removed (a rolled-back checkpoint): nothing will run that batch as it was
    rolled_back = without(("commits", "offsets"), "rolled_back")
    diagnosis = state_reader.diagnose(str(rolled_back))
    found = [f for f in diagnosis.findings if f.kind == "files-past-commit"]
    assert len(found) == 1 and found[0].severity == "warning" and not diagnosis.healthy, found
    assert found[0].evidence["versions"] == [version] and found[0].evidence["planned_batches"] == []
    assert f"version {version}" in found[0].summary and "delete" in found[0].action, found[0]
    assert "uncommitted-batch" not in {f.kind for f in diagnosis.findings}


def test_cli_exit_codes_json_and_thresholds(spark, tmp_path):
    problem = run_keyed(spark, tmp_path, "complete", _windowed, output_mode="complete")
    healthy = run_keyed(spark, tmp_path, "update", _windowed)
    exe = [sys.executable, "-m", "state_reader"]
    proc = subprocess.run([*exe, "doctor", problem, "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr
    report = json.loads(proc.stdout)
    assert {f["kind"] for f in report["findings"]} >= {"expired-rows"}
    assert all(f["severity"] in ("error", "warning", "info") for f in report["findings"])
    proc = subprocess.run([*exe, "doctor", healthy], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "nothing found" in proc.stdout, proc.stdout + proc.stderr
    proc = subprocess.run(
        [*exe, "doctor", healthy, "--threshold", "skw=2"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1 and "skew" in proc.stderr  # names the threshold it may have meant
    table = state_reader.diagnose(problem).table()
    assert set(table.column_names) >= {"kind", "severity", "operator_id", "store_name", "evidence", "action"}


def test_doctor_on_every_fixture_operator_does_not_fail(checkpoints):
    """Every operator the tests write, both providers: doctor runs through and says what it checked."""
    for name in (
        "agg_window",
        "rocksdb_cl_agg_window",
        "session_window",
        "join_inner",
        "rocksdb_cl_multi",
        "apply_in_pandas",
        "tws",
    ):
        diagnosis = state_reader.diagnose(checkpoints(name))
        assert diagnosis.checked and not any("not read" in c for c in diagnosis.checked), (name, diagnosis.checked)


@pytest.mark.parametrize("bad", [{"skew": "x"}, {"nope": 1}])
def test_bad_thresholds_are_refused(checkpoints, bad):
    with pytest.raises(state_reader.InvalidOptionError):
        state_reader.diagnose(checkpoints("agg_window"), thresholds=bad)


WITHOUT_MAINTENANCE = """
import sys
from pathlib import Path
from tests.support.spark_session import build_session
from tests.support.streaming_queries import ROCKSDB, Query, run_query
from tests.support.keyed_queries import SCHEMA, keyed_rows, new_keys

# maintenance (snapshots, cleanup) runs on a timer started once per executor: this session's never fires
spark = build_session(extra={"spark.sql.streaming.stateStore.maintenanceInterval": "1h"})
query = Query(lambda df: df.dropDuplicates(["k"]), output_mode="append", schema=SCHEMA,
              confs={**ROCKSDB, "spark.sql.streaming.minBatchesToRetain": "2"}, batches=keyed_rows(new_keys))
print(run_query(spark, query, Path(sys.argv[1])))
spark.stop()
"""


def test_storage_waste_when_cleanup_does_not_run(spark, tmp_path):
    script = tmp_path / "no_maintenance.py"
    script.write_text(WITHOUT_MAINTENANCE)
    # the suite's environment puts the repository's root on PYTHONPATH, for the tests package
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "stale")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    problem = done.stdout.strip().splitlines()[-1]
    healthy = run_keyed(
        spark,
        tmp_path,
        "cleaned",
        lambda df: df.dropDuplicates(["k"]),
        output_mode="append",
        confs={**ROCKSDB, "spark.sql.streaming.minBatchesToRetain": "2"},
    )
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "storage-waste"]
    assert found and found[0].evidence["files"] >= 10, found
    assert "storage-waste" not in _kinds(healthy)


def _timer_processor(offset_ms: int):
    """transformWithStateInPandas that counts rows per key and keeps a periodic processing-time timer per key,
    first set ``offset_ms`` from now and re-armed one minute after the time it fired for. A negative offset is
    the bug: re-armed from its own (past) time instead of from now, the timer is always already due."""

    def build(df):
        from pyspark.sql.streaming.stateful_processor import StatefulProcessor

        class Counter(StatefulProcessor):
            def init(self, handle) -> None:
                self.handle = handle
                self.count = handle.getValueState("count", "n long")

            def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803 - PySpark's names
                import pandas as pd

                n = self.count.get()[0] if self.count.exists() else 0
                n += sum(len(pdf) for pdf in rows)
                self.count.update((n,))
                self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + offset_ms)
                yield pd.DataFrame({"k": [key[0]], "n": [n]})

            def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
                import pandas as pd

                self.handle.registerTimer(expiredTimerInfo.getExpiryTimeInMs() + 60_000)
                yield pd.DataFrame({"k": [key[0]], "n": [-1]})

            def close(self) -> None:
                pass

        return df.groupBy("k").transformWithStateInPandas(Counter(), "k string, n long", "Update", "ProcessingTime")

    return build


def test_overdue_timers_set_in_the_past(spark, tmp_path):
    from tests.support.streaming_queries import ROCKSDB_CHANGELOG

    def run(name: str, offset_ms: int) -> str:
        query = Query(
            _timer_processor(offset_ms),
            confs=ROCKSDB_CHANGELOG,
            schema=SCHEMA,
            processing_time="1 second",
            batches=keyed_rows(lambda b: [f"k{b}"]),
        )
        return run_query(spark, query, tmp_path / name)

    problem = run("past", -3_600_000)
    healthy = run("future", 3_600_000)
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "overdue-timers"]
    assert found and found[0].evidence["overdue"] >= 1, found
    assert "overdue-timers" not in _kinds(healthy)


def _count_processor(ttl_ms: int | None):
    """transformWithStateInPandas counting rows per key in a value state, with TTL or without."""

    def build(df):
        from pyspark.sql.streaming.stateful_processor import StatefulProcessor

        class Counter(StatefulProcessor):
            def init(self, handle) -> None:
                self.count = (
                    handle.getValueState("count", "n long", ttl_ms)
                    if ttl_ms
                    else handle.getValueState("count", "n long")
                )

            def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803 - PySpark's names
                import pandas as pd

                n = (self.count.get()[0] if self.count.exists() else 0) + sum(len(pdf) for pdf in rows)
                self.count.update((n,))
                yield pd.DataFrame({"k": [key[0]], "n": [n]})

            def close(self) -> None:
                pass

        # TTL needs processing time
        return df.groupBy("k").transformWithStateInPandas(Counter(), "k string, n long", "Update", "ProcessingTime")

    return build


def test_never_evicted_state_variable_without_ttl(spark, tmp_path):
    from tests.support.streaming_queries import ROCKSDB_CHANGELOG

    def run(name: str, ttl_ms: int | None) -> str:
        return run_query(
            spark,
            Query(
                _count_processor(ttl_ms),
                confs=ROCKSDB_CHANGELOG,
                schema=SCHEMA,
                batches=keyed_rows(new_keys),
                processing_time="1 second",
            ),
            tmp_path / name,
        )

    problem = run("no_ttl", None)
    healthy = run("ttl", 3_600_000)
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "never-evicted"]
    assert found and "TTL" in found[0].evidence["why"], found
    assert "never-evicted" not in _kinds(healthy)


@pytest.mark.parametrize(("name", "severity"), [("agg_window", "info"), ("rocksdb_v2_agg_window", "warning")])
def test_checksum_files_that_are_lfs_pointers(checkpoints, tmp_path, caplog, name, severity):
    """.crc files held as Git LFS pointers are a finding of their own, not damage: the state is read and
    every other check runs. Spark's own .crc files (checkpoint format 2) as pointers are a warning, as
    Spark fails to load the files beside them; Hadoop's, which Spark reads past, are info. The
    untouched checkpoint has no such finding."""
    from tests.support.damage import checksums_as_lfs_pointers

    healthy = checkpoints(name)
    assert "malformed-checksum-file" not in _kinds(healthy)
    copy = tmp_path / "cp"
    shutil.copytree(healthy, copy)
    replaced = {str(p) for p in checksums_as_lfs_pointers(copy)}
    with caplog.at_level("WARNING", logger="state_reader.io"):
        diagnosis = state_reader.diagnose(str(copy))
    assert not [r for r in caplog.records if r.name == "state_reader.io"], "a finding, not a warning as well"
    found = [f for f in diagnosis.findings if f.kind == "malformed-checksum-file"]
    assert len(found) == 1 and found[0].severity == severity, diagnosis.findings
    evidence = found[0].evidence
    assert evidence["examples"] and set(evidence["examples"]) <= replaced, evidence
    assert evidence["checksum_files"] >= len(evidence["examples"])
    assert (evidence["spark_checksum_files"] > 0) == (severity == "warning"), evidence
    assert "Git LFS pointer" in found[0].summary and "nothing says they are damaged" in found[0].summary
    assert "git lfs pull" in found[0].action
    assert "unreadable-store" not in {f.kind for f in diagnosis.findings}
    assert not any("not read" in c for c in diagnosis.checked), diagnosis.checked
    assert {f.kind for f in diagnosis.findings} - {"malformed-checksum-file"} == _kinds(healthy)


def test_a_missing_schema_file_blocks_reading_the_store_not_restarting_the_query(spark, checkpoints, tmp_path):
    from tests.support.damage import without_schema_files
    from tests.support.resume import add_input, new_batches, resume
    from tests.support.streaming_queries import QUERIES

    # the query's folder: its checkpoint and the input it read, so that it can run on
    healthy = Path(checkpoints("agg_window"))
    shutil.copytree(healthy.parent, tmp_path / "query")
    cp = tmp_path / "query" / healthy.name
    (schema,) = without_schema_files(cp)
    (found,) = [f for f in state_reader.diagnose(str(cp)).findings if f.kind == "unreadable-store"]
    assert found.evidence["error"] == "MissingSchemaFileError" and "_metadata/schema does not exist" in found.summary
    for told in ("keySchema", "valueSchema", "key_schema", "--key-schema", "Restarting the query does not need"):
        assert told in found.action, found.action
    assert "cannot restart" not in found.action
    # as the finding says: the query restarts from the checkpoint, and Spark writes the schema file again
    query = QUERIES["agg_window"]
    add_input(tmp_path / "query" / "input", new_batches(query))
    assert resume(spark, query, str(cp), tmp_path / "query" / "input"), "the restarted query ran no batch"
    assert schema.exists()
    assert "unreadable-store" not in _kinds(str(cp))
