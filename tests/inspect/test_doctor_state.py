"""``doctor``'s checks of the logs and the state (``inspect/doctor_state``): for each finding, a real query
that has the problem and a twin that does not.

Each pair differs in the one thing that causes the problem (an output mode, a
watermark, the keys' spread, a conf); ``doctor`` must report the finding on the
first checkpoint and not on the second.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

import state_reader
from state_reader.model.checkpoint import JOIN_STORES
from tests.support.cli import run as cli_run
from tests.support.keyed_queries import (
    BATCHES,
    SCHEMA,
    close_event_times,
    growing_keys,
    keyed_join,
    keyed_rows,
    kinds,
    new_keys,
    run_keyed,
    stats_text,
    windowed,
)
from tests.support.parallel import side_by_side
from tests.support.streaming_queries import T0, Query, run_query


def test_expired_rows_complete_mode_against_update_mode(spark, tmp_path):
    problem, healthy = side_by_side(
        lambda: run_keyed(spark, tmp_path, "complete", windowed, output_mode="complete"),
        lambda: run_keyed(spark, tmp_path, "update", windowed),
    )
    diagnosis = state_reader.diagnose(problem)
    found = [f for f in diagnosis.findings if f.kind == "expired-rows"]
    assert found and found[0].evidence["expired_rows"] >= BATCHES - 3, found
    assert not diagnosis.healthy
    assert "expired-rows" not in kinds(healthy)


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
    # the finding cites the verdicts' count: every key of the store, never evicted
    never = state_reader.verdicts(problem).column("event").to_pylist().count("never")
    assert found[0].evidence["keys_never_evicted"] == never == found[0].evidence["rows_latest"]
    assert f"{never} keys of {never} will never leave" in found[0].summary
    assert "never-evicted" not in kinds(healthy)


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

    healthy, problem = side_by_side(
        lambda: run("watermarks", True, True),
        lambda: run("no_watermarks", False, False),
    )
    for store in JOIN_STORES:  # what a rule by the key alone sees: more rows, and every key still there
        assert _grew_keeping_every_key(healthy, store_name=store), store
    feed = state_reader.changes(healthy, 1, store_name="left-keyWithIndexToValue")
    assert "delete" in feed.column("change_type").to_pylist()  # yet rows were evicted
    diagnosis = state_reader.diagnose(healthy)
    assert not [f for f in diagnosis.findings if f.kind == "never-evicted"], diagnosis.findings
    proc = cli_run("doctor", healthy)
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
    healthy, problem = side_by_side(
        lambda: run_keyed(spark, tmp_path, "removes", _counter(True), batches=batches),
        lambda: run_keyed(spark, tmp_path, "keeps", _counter(False), batches=batches),
    )
    assert _grew_keeping_every_key(healthy)
    assert "delete" in state_reader.changes(healthy, 1).column("change_type").to_pylist()
    assert "never-evicted" not in kinds(healthy)
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "never-evicted"]
    assert found and found[0].evidence["deletes_in_change_feed"] == 0, found


def test_watermark_stalled_when_event_time_stops(spark, tmp_path):
    # the same input rows arrive every batch; in the problem, event time stops moving after batch 2
    stalled = keyed_rows(new_keys, event_time=lambda b, i: T0 + min(b, 2) * 10 + i)
    problem, healthy = side_by_side(
        lambda: run_keyed(spark, tmp_path, "stalled", windowed, batches=stalled),
        lambda: run_keyed(spark, tmp_path, "moving", windowed),
    )
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "watermark-stalled"]
    assert found and found[0].evidence["batches_with_input"] >= 5, found
    # the keys the stalled watermark holds in state, as the verdicts count them
    table = state_reader.verdicts(problem)
    when, overdue = table.column("when_watermark_ms").to_pylist(), table.column("overdue").to_pylist()
    waiting = sum(w is not None and not o for w, o in zip(when, overdue, strict=True))
    assert found[0].evidence["keys_waiting_for_watermark"] == waiting > 0
    assert "watermark-stalled" not in kinds(healthy)


def test_skew_when_keys_land_in_one_partition(spark, tmp_path):
    candidates = spark.range(20000).selectExpr("concat('key', id) AS k", "pmod(hash(concat('key', id)), 4) AS p")
    hot = [r.k for r in candidates.where("p = 0").limit(1500).collect()]
    spread = [r.k for r in candidates.limit(1500).collect()]
    confs = {"spark.sql.shuffle.partitions": "4"}

    def batches(keys):
        return keyed_rows(lambda b: keys[b * 150 : (b + 1) * 150])

    dedup = lambda df: df.dropDuplicates(["k"])  # noqa: E731
    problem, healthy = side_by_side(
        lambda: run_keyed(spark, tmp_path, "hot", dedup, output_mode="append", confs=confs, batches=batches(hot)),
        lambda: run_keyed(spark, tmp_path, "spread", dedup, output_mode="append", confs=confs, batches=batches(spread)),
    )
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "skew"]
    assert found and found[0].evidence["partition"] == 0 and found[0].evidence["rows"] == 1500, found
    # three of four partitions empty: the median is 0, and the finding says so rather than "inf×"
    assert found[0].evidence["ratio"] is None and "3 of 4 partitions are empty" in found[0].summary, found
    assert "skew" not in kinds(healthy)
    # one verdict: `state-reader stats` calls the same stores skewed and even as the doctor does
    assert "(skewed)" in stats_text(problem) and "(even)" in stats_text(healthy)


def test_large_rows_when_state_holds_a_big_payload(spark, tmp_path):
    def build(big: bool):
        size = 1_200_000 if big else 10
        return lambda df: (
            df.withColumn("payload", F.repeat(F.lit("x"), size)).groupBy("k").agg(F.max("payload").alias("payload"))
        )

    problem, healthy = side_by_side(
        lambda: run_keyed(spark, tmp_path, "big", build(True), batches=keyed_rows(lambda b: ["one"])),
        lambda: run_keyed(spark, tmp_path, "small", build(False), batches=keyed_rows(lambda b: ["one"])),
    )
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "large-rows"]
    assert found and found[0].evidence["column"] == "value" and found[0].evidence["largest"][0]["bytes"] >= 1_200_000
    assert "large-rows" not in kinds(healthy)


def test_uncommitted_batch_after_a_crash(spark, tmp_path):
    healthy = run_keyed(spark, tmp_path, "clean", lambda df: df.groupBy("k").count())
    crashed = tmp_path / "crashed"
    shutil.copytree(healthy, crashed)
    last = max(int(p.name) for p in (crashed / "commits").iterdir() if p.name.isdigit())
    (crashed / "commits" / str(last)).unlink()  # what a driver that died during its last batch leaves
    found = [f for f in state_reader.diagnose(str(crashed)).findings if f.kind == "uncommitted-batch"]
    assert found and found[0].evidence["planned_batches"] == [last], found
    assert found[0].severity == "info"
    assert "uncommitted-batch" not in kinds(healthy)


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
        return run_query(spark.newSession(), query, tmp_path / name)

    # one after another: two transformWithStateInPandas queries starting at once start two Python workers
    # that must connect back to Spark within seconds, which a loaded machine can miss
    problem, healthy = run("past", -3_600_000), run("future", 3_600_000)
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "overdue-timers"]
    assert found and found[0].evidence["overdue"] >= 1, found
    assert "overdue-timers" not in kinds(healthy)


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
            spark.newSession(),
            Query(
                _count_processor(ttl_ms),
                confs=ROCKSDB_CHANGELOG,
                schema=SCHEMA,
                batches=keyed_rows(new_keys),
                processing_time="1 second",
            ),
            tmp_path / name,
        )

    problem, healthy = run("no_ttl", None), run("ttl", 3_600_000)  # one after another, as above
    found = [f for f in state_reader.diagnose(problem).findings if f.kind == "never-evicted"]
    assert found and "TTL" in found[0].evidence["why"], found
    assert "never-evicted" not in kinds(healthy)


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
    assert "unreadable-store" not in kinds(str(cp))


@pytest.mark.parametrize(
    ("store_name", "column", "due", "late"),
    [
        # a transformWithState timer fires once the clock reaches it: one due at the clock is overdue
        ("$procTimers_keyToTimestamp", "expiration_timestamp_ms", 10_000, True),
        ("$procTimers_keyToTimestamp", "expiration_timestamp_ms", 10_001, False),
        # a (flat)mapGroupsWithState timeout fires once the clock is past it
        ("default", "timeoutTimestamp", 9_999, True),
        ("default", "timeoutTimestamp", 10_000, False),
    ],
)
def test_overdue_timers_follow_the_rule_why_predicts_with(store_name, column, due, late):
    """The doctor calls a timer overdue exactly when the shared rule says the last batch should have fired it."""
    from types import SimpleNamespace

    from state_reader.inspect.doctor_findings import Store
    from state_reader.inspect.doctor_state import overdue_timers
    from state_reader.model.checkpoint import OffsetEntry

    if column == "expiration_timestamp_ms":
        table = pa.table({"key": pa.array([{"k": "a"}]), column: pa.array([due], pa.int64())})
    else:
        table = pa.table({"key": pa.array([{"k": "a"}]), "value": pa.array([{"n": 1, column: due}])})
    store = Store(0, store_name, "op", SimpleNamespace(), table)  # type: ignore[arg-type]
    found = overdue_timers(store, OffsetEntry(0, 10_000, {}, ()))
    assert bool(found) is late, found
