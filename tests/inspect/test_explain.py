"""``explain`` (``state-reader why``, ``Checkpoint.explain``): the timeline against Spark's built-in reader,
and the verdict predicted, then checked by running the query on until the key leaves state."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

import state_reader
from state_reader.formats.flatten import json_values, unique_names
from state_reader.inspect.explain_rules import join_row_leaves_at
from tests.support.cli import assert_one_line_error, run, run_json
from tests.support.keyed_queries import SCHEMA
from tests.support.streaming_queries import HDFS, ROCKSDB, T0, Query, run_query, session_confs, write_input

# -- the timeline: every value is Spark's own reader's row for that key at that batch ---------------------


def _unique(dtype):
    """A Spark type whose struct fields are renamed as ``read_state`` names repeated ones (Arrow refuses repeats)."""
    from pyspark.sql import types as T

    if isinstance(dtype, T.StructType):
        names = unique_names(dtype.names)
        return T.StructType(
            [T.StructField(n, _unique(f.dataType), f.nullable) for n, f in zip(names, dtype.fields, strict=True)]
        )
    if isinstance(dtype, T.ArrayType):
        return T.ArrayType(_unique(dtype.elementType), dtype.containsNull)
    return dtype


def _spark_values(spark, cp: str, batch: int, where: str) -> dict[str, object]:
    """Each key (canonical JSON) -> its value, as Spark's built-in reader reads the store at ``batch``."""
    df = spark.read.format("statestore").option("batchId", batch).load(cp).where(where)
    renamed = df.select(*(F.col(c).cast(_unique(df.schema[c].dataType)).alias(c) for c in ("key", "value")))
    table = renamed.toArrow()
    keys = [json.dumps(k, sort_keys=True, ensure_ascii=False) for k in json_values(table.column("key"))]
    return dict(zip(keys, json_values(table.column("value")), strict=True))


def _assert_timelines_are_spark(spark, cp: str, key_filter: str, where: str) -> int:
    result = state_reader.explain(cp, key_filter=key_filter)
    assert result.keys, result.message
    compared = 0
    for batch in range(result.first_batch_id, result.latest_batch_id + 1):
        expected = _spark_values(spark, cp, batch, where)
        ours = {}
        for story in result.keys:
            at = [e for e in story.timeline if e.batch_id == batch]
            if at and at[0].change_type != "delete":
                ours[json.dumps(story.key, sort_keys=True, ensure_ascii=False)] = at[0].value
        assert ours == expected, batch
        compared += len(ours)
    return compared


@pytest.mark.parametrize(
    ("name", "key_filter"),
    [
        ("agg_window", "user = 'ann'"),
        ("rocksdb_cl_agg_window", "user = 'ann'"),
        ("rocksdb_dedup", "user = 'bob'"),  # no changelog: the changes come from comparing snapshots
        ("dedup_within", "grp = 'a'"),
        ("session_window", "grp = 'b'"),
        ("apply_in_pandas", "grp = 'c'"),
    ],
)
def test_every_timeline_value_is_sparks_row_at_that_batch(spark, checkpoints, name, key_filter):
    assert _assert_timelines_are_spark(spark, checkpoints(name), key_filter, f"key.{key_filter}") > 0


def test_scala_event_time_timeouts(scala_checkpoints):
    """flatMapGroupsWithState written in Scala (state format 1, its timeout in an int slot): each sensor's
    timeout, 8 s after its newest reading, fires once the watermark is past it."""
    path = scala_checkpoints("fmgws_v1")
    result = state_reader.explain(path, key_filter="value >= 0")
    held = [story for story in result.keys if story.in_state]
    assert held
    for story in held:
        last_seen = dt.datetime.fromisoformat(story.timeline[-1].value["lastSeen"])
        due = int(last_seen.timestamp() * 1000) + 8000
        verdict = story.verdict
        assert (verdict.event, verdict.when_watermark_ms, verdict.details["timeout"]) == ("fire", due + 1, "event time")
        assert verdict.overdue == (story.timeline[-1].watermark_ms > due)


def test_the_timeline_reads_the_watermark_and_batch_time_from_the_offset_log(agg):
    from state_reader.io.storage import Storage
    from state_reader.model.checkpoint import CheckpointDir

    cp = CheckpointDir(Storage(agg))
    result = state_reader.explain(agg, key_filter="user = 'ann'")
    for story in result.keys:
        kinds = [e.change_type for e in story.timeline]
        assert kinds[0] in ("snapshot", "insert")
        for entry in story.timeline:
            offsets = cp.offset_entry(entry.batch_id)
            assert (entry.watermark_ms, entry.batch_time_ms) == (offsets.watermark_ms, offsets.timestamp_ms)


def test_json_cli_and_notebook_carry_the_same_keys(agg):
    doc = run_json("why", agg, "--key-filter", "user = 'ann'")
    result = state_reader.explain(agg, key_filter="user = 'ann'")
    assert [k["key"] for k in doc["keys"]] == [k.key for k in result.keys]
    first = doc["keys"][0]
    assert set(first["timeline"][0]) >= {"batch_id", "batch_time_ms", "watermark_ms", "change_type", "value"}
    assert first["verdict"]["event"] in ("emit", "expire", "evict", "fire", "never", "gone")
    assert "when_watermark_ms" in first["verdict"] and "when_time_ms" in first["verdict"]
    text = run("why", agg, "-k", "user = 'ann'").stdout
    assert "key " in text and "watermark" in text
    # the filter positional, as the notebook takes it, or by name: the same call
    assert state_reader.explain(agg, "user = 'ann'").as_dict() == result.as_dict()
    shown = state_reader.open(agg).explain("user = 'ann'")
    assert "<svg" in shown._repr_html_() and [k.key for k in shown.keys] == [k.key for k in result.keys]
    assert result.table().num_rows == sum(len(k.timeline) for k in result.keys)


def test_a_key_never_in_state_says_so_and_many_keys_are_capped(agg):
    none = state_reader.explain(agg, key_filter="user = 'nobody'")
    assert none.keys == [] and "no key matching" in (none.message or "")
    many = state_reader.explain(agg, key_filter="user is not null", max_keys=2)
    assert len(many.keys) == 2 and many.keys_matched > 2 and many.capped
    assert "narrow the filter" in (many.message or "")


def test_errors_name_the_checkpoint(tmp_path, agg):
    with pytest.raises(state_reader.StateReaderError) as caught:
        state_reader.explain(str(tmp_path / "nothing"), key_filter="k = 'a'")
    assert "nothing" in str(caught.value)
    assert_one_line_error(run("why", agg, "-k", "no_such_field = 1"), "no_such_field")


# -- predict, then run ---------------------------------------------------------------------------------------


def _at(seconds: float) -> str:
    """An event time as the JSON input writes it, to the millisecond."""
    stamp = dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


class Running:
    """A keyed query over ``(ts, k, v)`` files that can be fed more input and run on from its checkpoint."""

    def __init__(
        self,
        spark,
        out: Path,
        build,
        confs: dict[str, str],
        output_mode: str = "update",
        sources: int = 1,
        keep_output: bool = False,
    ) -> None:
        self.spark, self.out = spark, out
        self.query = Query(build, output_mode=output_mode, confs=confs, schema=SCHEMA, sources=sources)
        self.files = 0
        self.keep_output = keep_output  # the runs after the first keep the rows the query emits, by batch

    def output(self) -> list[dict]:
        """The rows the query emitted in the runs after the first, each with its ``batch_id``."""
        found = sorted((self.out / "output").glob("*.json"))
        return [json.loads(line) for path in found for line in path.read_text().splitlines() if line]

    @property
    def checkpoint(self) -> str:
        return str(self.out / "checkpoint")

    def first(self, rows: list[dict], processing_seconds: float | None = None) -> str:
        """The query over ``rows``, from a new checkpoint; with ``processing_seconds``, on a processing-time
        trigger (a query that schedules batches for as long as it has timeouts never ends on availableNow)."""
        self.query.batches = lambda: [rows]
        self.files = 1
        if processing_seconds is None:
            return run_query(self.spark, self.query, self.out)
        write_input([rows], self.out / "input")
        self.feed([], processing_seconds=processing_seconds)
        return self.checkpoint

    def feed(self, rows: list[dict], processing_seconds: float | None = None) -> None:
        """One more input file (none when ``rows`` is empty), then the query run on to the end of its input
        (no-data batches included); with ``processing_seconds``, on a processing-time trigger of a second for
        that long instead."""
        if rows:
            self._add(rows)
        with session_confs(self.spark, self.query.confs):
            sources = [
                self.spark.readStream.schema(self.query.schema)
                .option("maxFilesPerTrigger", 1)
                .json(str(self.out / "input"))
                for _ in range(self.query.sources)
            ]
            writer = self.query.build(*sources).writeStream.outputMode(self.query.output_mode)
            writer = writer.option("checkpointLocation", self.checkpoint)
            if self.keep_output:
                kept = self.out / "output"
                kept.mkdir(exist_ok=True)

                def keep(df, batch_id: int) -> None:
                    rows = [{**row.asDict(), "batch_id": batch_id} for row in df.collect()]
                    (kept / f"{batch_id:06d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))

                writer = writer.foreachBatch(keep)
            else:
                writer = writer.format("noop")
            if processing_seconds is None:
                writer.trigger(availableNow=True).start().awaitTermination()
                return
            commits = Path(self.checkpoint) / "commits"
            before = len(list(commits.glob("[0-9]*"))) if commits.exists() else 0
            handle = writer.trigger(processingTime="1 second").start()
            deadline = time.monotonic() + 120
            # the time given counts from the first batch this run commits (a cold Python worker is slow)
            while time.monotonic() < deadline and handle.exception() is None:
                if commits.exists() and len(list(commits.glob("[0-9]*"))) > before:
                    break
                time.sleep(0.2)
            handle.awaitTermination(processing_seconds)
            handle.stop()

    def wake(self, seconds: float) -> None:
        """The query run on for ``seconds`` of processing time, woken by one row of another key: a query
        restarted with no new input runs no batch, however many timeouts it holds, until input comes."""
        self.feed([{"ts": _at(T0), "k": "wake", "v": 0}], processing_seconds=seconds)

    def _add(self, rows: list[dict]) -> None:
        staging = self.out / f"more-{self.files}"
        write_input([rows], staging)
        target = self.out / "input" / f"part-{self.files:04d}.json"
        os.replace(staging / "part-0000.json", target)
        now = time.time() + self.files
        os.utime(target, (now, now))
        self.files += 1


def _presence(cp: str, key_filter: str, since: int, **options) -> list[tuple[int, int, bool]]:
    """(batch, watermark, whether the key is in state) of every committed batch after ``since``."""
    from state_reader.io.storage import Storage
    from state_reader.model.checkpoint import CheckpointDir

    logs = CheckpointDir(Storage(cp))
    out = []
    for batch in logs.committed_batches:
        if batch > since:
            rows = state_reader.read_state(cp, batch_id=batch, key_filter=key_filter, **options).num_rows
            out.append((batch, logs.offset_entry(batch).watermark_ms, rows > 0))
    return out


def _windowed(df):
    return df.withWatermark("ts", "5 seconds").groupBy(F.window("ts", "10 seconds"), "k").agg(F.count("*").alias("n"))


def _dedup(df):
    return df.withWatermark("ts", "5 seconds").dropDuplicates(["k", "ts"])


def _dedup_within(df):
    return df.withWatermark("ts", "5 seconds").dropDuplicatesWithinWatermark(["k"])


def _session(df):
    return df.withWatermark("ts", "5 seconds").groupBy(F.session_window("ts", "3 seconds"), "k").count()


PROVIDERS = {"hdfs": HDFS, "rocksdb": ROCKSDB}

# (build, output mode, the event expected, the planted key's time in s -> the predicted watermark in s)
WATERMARKED = {
    "window_update": (_windowed, "update", "evict", lambda t: T0 + 10),
    "window_append": (_windowed, "append", "evict", lambda t: T0 + 10),
    "dedup": (_dedup, "update", "expire", lambda t: t),
    "dedup_within": (_dedup_within, "update", "expire", lambda t: t + 5),
    "session": (_session, "append", "evict", lambda t: t + 3),
}


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@pytest.mark.parametrize("case", sorted(WATERMARKED))
def test_predicted_watermark_is_where_the_key_leaves_state(spark, tmp_path, provider, case):
    build, mode, event, predicted = WATERMARKED[case]
    planted = T0 + 3.25
    running = Running(spark, tmp_path / case, build, PROVIDERS[provider], output_mode=mode)
    cp = running.first([{"ts": _at(planted), "k": "a", "v": 1}, {"ts": _at(T0 + 2), "k": "b", "v": 2}])

    story = state_reader.explain(cp, key_filter="k = 'a'").keys[0]
    verdict = story.verdict
    expected_ms = round(predicted(planted) * 1000)
    assert (verdict.event, verdict.when_watermark_ms, verdict.overdue) == (event, expected_ms, False)
    assert verdict.to_go_ms == expected_ms - story.timeline[-1].watermark_ms
    since = story.timeline[-1].batch_id

    # the watermark moves to a millisecond short of the prediction: the key stays
    running.feed([{"ts": _at(expected_ms / 1000 + 5 - 0.001), "k": "z", "v": 3}])
    # then exactly to it: the key leaves in that batch, not before
    running.feed([{"ts": _at(expected_ms / 1000 + 5), "k": "y", "v": 4}])
    seen = _presence(cp, "k = 'a'", since)
    assert any(wm == expected_ms - 1 and present for _, wm, present in seen), seen
    assert any(wm == expected_ms for _, wm, _ in seen), seen
    for _, wm, present in seen:
        assert present == (wm < expected_ms), seen

    after = state_reader.explain(cp, key_filter="k = 'a'").keys[0]
    assert after.verdict.event == "gone"
    assert after.verdict.when_watermark_ms == expected_ms


def _join(left, right):
    """An inner join of the input with itself on ``k``, a right row matching left rows of the two seconds before
    it: Spark drops a left row once the watermark is two seconds past its event time, a right row once it is
    past its own."""
    left = left.select(F.col("ts").alias("lts"), F.col("k").alias("lk"), F.col("v").alias("lv"))
    right = right.select(F.col("ts").alias("rts"), F.col("k").alias("rk"), F.col("v").alias("rv"))
    left, right = left.withWatermark("lts", "5 seconds"), right.withWatermark("rts", "5 seconds")
    return left.join(right, F.expr("lk = rk AND rts BETWEEN lts AND lts + interval 2 seconds"), "inner")


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_join_rows_are_buffered_on_each_side_until_the_watermark_passes_them(spark, tmp_path, provider):
    running = Running(spark, tmp_path / "join", _join, PROVIDERS[provider], output_mode="append", sources=2)
    planted = T0 + 3.25
    cp = running.first([{"ts": _at(planted), "k": "a", "v": 1}, {"ts": _at(T0 + 2), "k": "b", "v": 2}])

    result = state_reader.explain(cp, key_filter="field0 = 'a'")  # a join key's fields are numbered
    by_side = {story.join_side: story for story in result.keys}
    assert set(by_side) == {"left", "right"}, result.as_dict()
    expected_ms = round(planted * 1000)
    for story in by_side.values():  # no range and an inclusive bound: a millisecond past the event time
        assert story.verdict.event == "evict" and story.verdict.when_watermark_ms == expected_ms + 1
        assert story.timeline[-1].value["lv" if story.join_side == "left" else "rv"] == 1
    since = by_side["left"].timeline[-1].batch_id

    # short of the prediction by a millisecond, then at it, then past the two seconds of the condition
    for at in (expected_ms / 1000 - 0.001, expected_ms / 1000, expected_ms / 1000 + 2.5):
        running.feed([{"ts": _at(at + 5), "k": "z", "v": 3}])
    for side, bound_ms in (("left", 2000), ("right", 0)):
        seen = _presence(cp, "field0 = 'a'", since, join_side=side)
        assert seen[-1][1] >= expected_ms + bound_ms and not seen[-1][2], (side, seen)
        for _, wm, present in seen:
            if wm < expected_ms:
                assert present, (side, seen)  # never before the predicted watermark
            if wm >= expected_ms + bound_ms + 1:
                assert not present, (side, seen)


def _join_on(condition: str):
    """An inner join of the input with itself on ``k`` and ``condition`` over the event times ``lts``, ``rts``."""

    def build(left, right):
        left = left.select(F.col("ts").alias("lts"), F.col("k").alias("lk"), F.col("v").alias("lv"))
        right = right.select(F.col("ts").alias("rts"), F.col("k").alias("rk"), F.col("v").alias("rv"))
        left, right = left.withWatermark("lts", "5 seconds"), right.withWatermark("rts", "5 seconds")
        return left.join(right, F.expr(f"lk = rk AND {condition}"), "inner")

    return build


# condition -> (the verdict's watermark, the first watermark that drops a left row, a right row), from the
# row's event time in microseconds
JOIN_BOUNDS = {
    # inclusive bounds: a left row may match right rows up to 5 s later, a right row left rows up to its own time
    "between": (
        "rts BETWEEN lts AND lts + interval 5 seconds",
        lambda t: join_row_leaves_at(t),
        lambda t: join_row_leaves_at(t, 5000, inclusive=True),
        lambda t: join_row_leaves_at(t, 0, inclusive=True),
    ),
    # strict bounds: each a millisecond sooner (the verdict, which cannot see the condition, says inclusive)
    "strict": (
        "rts > lts AND rts < lts + interval 5 seconds",
        lambda t: join_row_leaves_at(t),
        lambda t: join_row_leaves_at(t, 5000, inclusive=False),
        lambda t: join_row_leaves_at(t, 0, inclusive=False),
    ),
    # the event time a join key: gone once the watermark reaches it
    "key": ("lts = rts", lambda t: t // 1000, lambda t: t // 1000, lambda t: t // 1000),
}


@pytest.mark.parametrize("case", sorted(JOIN_BOUNDS))
def test_join_rows_leave_at_sparks_state_watermark_of_each_side(spark, tmp_path, case):
    """Spark's own reader, batch by batch: a row is still buffered at the watermark a millisecond short of the
    rule's, and gone at it, on each side."""
    condition, verdict_at, left_at, right_at = JOIN_BOUNDS[case]
    running = Running(spark, tmp_path / case, _join_on(condition), HDFS, output_mode="append", sources=2)
    planted_us = round((T0 + 3.25) * 1_000_000)
    cp = running.first([{"ts": _at(planted_us / 1e6), "k": "a", "v": 1}, {"ts": _at(T0 + 2), "k": "b", "v": 2}])
    result = state_reader.explain(cp, key_filter="field0 = 'a'")
    by_side = {story.join_side: story for story in result.keys}
    bounds = {"left": left_at(planted_us), "right": right_at(planted_us)}
    for side, story in by_side.items():
        verdict = story.verdict
        assert (verdict.event, verdict.when_watermark_ms) == ("evict", verdict_at(planted_us)), verdict
        assert verdict.to_go_ms == verdict.when_watermark_ms - story.timeline[-1].watermark_ms > 0
        assert not verdict.overdue and verdict.when_watermark_ms <= bounds[side] + 1  # + 1: a strict bound
    since = by_side["left"].timeline[-1].batch_id

    for wm in sorted({b + d for b in bounds.values() for d in (-1, 0)}):
        running.feed([{"ts": _at(wm / 1000 + 5), "k": "z", "v": 3}])
    from state_reader.io.storage import Storage
    from state_reader.model.checkpoint import CheckpointDir

    offsets = CheckpointDir(Storage(cp))
    for side, column in (("left", "lk"), ("right", "rk")):
        seen = []
        for batch in offsets.committed_batches:
            if batch <= since:
                continue
            rows = (
                spark.read.format("statestore")
                .option("batchId", batch)
                .option("joinSide", side)
                .load(cp)
                .where(f"value.{column} = 'a'")
                .count()
            )
            seen.append((offsets.offset_entry(batch).watermark_ms, rows > 0))
        assert {bounds[side] - 1, bounds[side]} <= {wm for wm, _ in seen}, (side, seen)
        for wm, present in seen:
            assert present == (wm < bounds[side]), (side, bounds[side], seen)


TIMEOUT_AFTER_MS = 2000
# processing-time timeouts, timers and TTL lie this far after the batch that sets them: longer than a batch
# takes on a busy machine, so that the prediction is made before they are due
PROCESSING_DELAY_MS = 12_000


def _event_time_timeout(df):
    """applyInPandasWithState keeping a count per key, timing out two seconds (event time) after its latest event,
    and removing the key when it does."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    def update(key, pdfs, state):
        import pandas as pd

        if state.hasTimedOut:
            state.remove()
            yield pd.DataFrame({"k": [key[0]], "n": [-1]})
            return
        count = state.get[0] if state.exists else 0
        latest = 0
        for pdf in pdfs:
            count += len(pdf)
            latest = max(latest, int(pdf["ts"].max().timestamp() * 1000))
        state.update((count,))
        state.setTimeoutTimestamp(latest + TIMEOUT_AFTER_MS)
        yield pd.DataFrame({"k": [key[0]], "n": [count]})

    return (
        df.withWatermark("ts", "5 seconds")
        .groupBy("k")
        .applyInPandasWithState(update, "k string, n long", "n long", "update", GroupStateTimeout.EventTimeTimeout)
    )


def _processing_time_timeout(df):
    """The same count, timing out :data:`PROCESSING_DELAY_MS` of processing time after the key's last input."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    def update(key, pdfs, state):
        import pandas as pd

        if state.hasTimedOut:
            state.remove()
            yield pd.DataFrame({"k": [key[0]], "n": [-1]})
            return
        count = (state.get[0] if state.exists else 0) + sum(len(pdf) for pdf in pdfs)
        state.update((count,))
        state.setTimeoutDuration(PROCESSING_DELAY_MS)
        yield pd.DataFrame({"k": [key[0]], "n": [count]})

    return df.groupBy("k").applyInPandasWithState(
        update, "k string, n long", "n long", "update", GroupStateTimeout.ProcessingTimeTimeout
    )


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_event_time_timeout_fires_once_the_watermark_passes_it(spark, tmp_path, provider):
    running = Running(spark, tmp_path / "fmgws_event", _event_time_timeout, PROVIDERS[provider])
    planted = T0 + 3.25
    cp = running.first([{"ts": _at(planted), "k": "a", "v": 1}, {"ts": _at(T0 + 2), "k": "b", "v": 2}])
    story = state_reader.explain(cp, key_filter="k = 'a'").keys[0]
    due = round(planted * 1000) + TIMEOUT_AFTER_MS
    verdict = story.verdict
    assert (verdict.event, verdict.when_watermark_ms, verdict.when_time_ms) == ("fire", due + 1, None)
    assert verdict.details["timeout"] == "event time" and not verdict.overdue
    since = story.timeline[-1].batch_id

    # the watermark at the timeout itself: the key stays; a millisecond past it: the timeout fires
    for wm_ms in (due, due + 1):
        running.feed([{"ts": _at(wm_ms / 1000 + 5), "k": "z", "v": 3}])
    seen = _presence(cp, "k = 'a'", since)
    assert any(wm == due and present for _, wm, present in seen), seen
    assert any(wm == due + 1 for _, wm, _ in seen), seen
    for _, wm, present in seen:
        assert present == (wm <= due), seen


# one provider: a processing-time timeout is the operator's rule, kept alike by both (the event-time test above
# runs on both, and so does the reading of the timeout's value)
@pytest.mark.parametrize("provider", ["hdfs"])
def test_processing_time_timeout_fires_once_the_batch_time_passes_it(spark, tmp_path, provider):
    from state_reader.io.storage import Storage
    from state_reader.model.checkpoint import CheckpointDir

    running = Running(spark, tmp_path / "fmgws_proc", _processing_time_timeout, PROVIDERS[provider])
    cp = running.first([{"ts": _at(T0), "k": "a", "v": 1}], processing_seconds=2)
    story = state_reader.explain(cp, key_filter="k = 'a'").keys[0]
    verdict = story.verdict
    assert verdict.event == "fire" and verdict.when_watermark_ms is None
    assert verdict.details["timeout"] == "processing time"
    written = [e for e in story.timeline if e.change_type in ("snapshot", "insert", "update")][-1]
    assert verdict.when_time_ms == written.batch_time_ms + PROCESSING_DELAY_MS + 1
    since = story.timeline[-1].batch_id

    running.wake(seconds=PROCESSING_DELAY_MS / 1000 + 5)
    logs = CheckpointDir(Storage(cp))
    seen = [
        (b, logs.offset_entry(b).timestamp_ms, state_reader.read_state(cp, batch_id=b, key_filter="k = 'a'").num_rows)
        for b in logs.committed_batches
        if b > since
    ]
    assert any(t >= verdict.when_time_ms for _, t, _ in seen), seen
    for _, batch_time, rows in seen:
        assert (rows == 1) == (batch_time < verdict.when_time_ms), seen


def _tws(kind: str):
    """transformWithStateInPandas keeping a count per key in the value variable ``v``: ``ttl`` with a TTL of
    :data:`PROCESSING_DELAY_MS` (processing time) and no timer; ``proc_timer`` and ``event_timer`` without
    TTL, a timer that long after the key's last input (processing time), or two seconds after its latest
    event (event time), that clears the key when it fires."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Counter(StatefulProcessor):
        def init(self, handle) -> None:
            self.handle = handle
            self.v = handle.getValueState("v", "n long", PROCESSING_DELAY_MS if kind == "ttl" else None)

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803 - PySpark's names
            import pandas as pd

            count = self.v.get()[0] if self.v.exists() else 0
            latest = 0
            for pdf in rows:
                count += len(pdf)
                latest = max(latest, int(pdf["ts"].max().value // 1_000_000))
            self.v.update((count,))
            if kind == "proc_timer":
                self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + PROCESSING_DELAY_MS)
            elif kind == "event_timer":
                self.handle.registerTimer(latest + TIMEOUT_AFTER_MS)
            yield pd.DataFrame({"k": [key[0]], "n": [count]})

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
            import pandas as pd

            self.v.clear()
            yield pd.DataFrame({"k": [key[0]], "n": [-1]})

        def close(self) -> None:
            pass

    def build(df):
        if kind == "event_timer":
            df = df.withWatermark("ts", "5 seconds")
        mode = "EventTime" if kind == "event_timer" else "ProcessingTime"
        return df.groupBy("k").transformWithStateInPandas(Counter(), "k string, n long", "Update", mode)

    return build


def _by_batch_time(cp: str, since: int) -> list[tuple[int, int, int]]:
    """(batch, batch time, rows of key 'a' in the variable v) of every committed batch after ``since``."""
    from state_reader.io.storage import Storage
    from state_reader.model.checkpoint import CheckpointDir

    logs = CheckpointDir(Storage(cp))
    return [
        (
            b,
            logs.offset_entry(b).timestamp_ms,
            state_reader.read_state(cp, batch_id=b, state_var_name="v", key_filter="k = 'a'").num_rows,
        )
        for b in logs.committed_batches
        if b > since
    ]


TWS_CONFS = {**ROCKSDB, "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"}


def test_transform_with_state_ttl_expires_when_the_batch_time_reaches_it(spark, tmp_path):
    running = Running(spark, tmp_path / "tws_ttl", _tws("ttl"), TWS_CONFS)
    cp = running.first([{"ts": _at(T0), "k": "a", "v": 1}], processing_seconds=1)
    story = state_reader.explain(cp, key_filter="k = 'a'", state_var_name="v").keys[0]
    verdict = story.verdict
    assert verdict.event == "expire" and verdict.when_watermark_ms is None
    assert verdict.when_time_ms == verdict.details["ttl_expiration_ms"]
    written = [e for e in story.timeline if e.change_type in ("snapshot", "insert", "update")][-1]
    assert verdict.when_time_ms == written.batch_time_ms + PROCESSING_DELAY_MS
    since = story.timeline[-1].batch_id

    running.wake(seconds=PROCESSING_DELAY_MS / 1000 + 5)
    seen = _by_batch_time(cp, since)
    assert any(t >= verdict.when_time_ms for _, t, _ in seen), seen
    for _, batch_time, rows in seen:
        assert (rows == 1) == (batch_time < verdict.when_time_ms), seen


def test_transform_with_state_processing_time_timer_fires_when_the_batch_time_passes_it(spark, tmp_path):
    running = Running(spark, tmp_path / "tws_proc", _tws("proc_timer"), TWS_CONFS)
    cp = running.first([{"ts": _at(T0), "k": "a", "v": 1}], processing_seconds=1)
    story = state_reader.explain(cp, key_filter="k = 'a'", state_var_name="v").keys[0]
    verdict = story.verdict
    (timer,) = verdict.details["timers"]
    assert (verdict.event, verdict.when_time_ms, verdict.when_watermark_ms) == ("fire", timer, None)
    assert verdict.details["timer_clock"] == "processing time"
    since = story.timeline[-1].batch_id

    running.wake(seconds=PROCESSING_DELAY_MS / 1000 + 5)
    seen = _by_batch_time(cp, since)
    assert any(t >= timer for _, t, _ in seen), seen
    for _, batch_time, rows in seen:
        assert (rows == 1) == (batch_time < timer), seen


def test_transform_with_state_event_time_timer_fires_once_the_watermark_passes_it(spark, tmp_path):
    running = Running(spark, tmp_path / "tws_event", _tws("event_timer"), TWS_CONFS)
    planted = T0 + 3.25
    cp = running.first([{"ts": _at(planted), "k": "a", "v": 1}, {"ts": _at(T0 + 2), "k": "b", "v": 2}])
    story = state_reader.explain(cp, key_filter="k = 'a'", state_var_name="v").keys[0]
    due = round(planted * 1000) + TIMEOUT_AFTER_MS
    verdict = story.verdict
    assert (verdict.event, verdict.when_watermark_ms, verdict.when_time_ms) == ("fire", due, None)
    assert verdict.details["timers"] == [due] and verdict.details["timer_clock"] == "event time"
    since = story.timeline[-1].batch_id

    # a millisecond short of the timer: the key stays; at the timer itself, it fires
    for wm_ms in (due - 1, due):
        running.feed([{"ts": _at(wm_ms / 1000 + 5), "k": "z", "v": 3}])
    seen = _presence(cp, "k = 'a'", since, state_var_name="v")
    assert any(wm == due - 1 and present for _, wm, present in seen), seen
    assert any(wm == due for _, wm, _ in seen), seen
    for _, wm, present in seen:
        assert present == (wm < due), seen


def _tws_collections(df):
    """transformWithStateInPandas in event time with a value (``v``: the count and the latest event time), a
    list (``seen``: every ``v``) and a map (``tags``: a count per ``v % 2``) per key, and a timer two seconds
    after the key's latest event that clears all three when it fires (and emits ``n = -1``)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Collections(StatefulProcessor):
        def init(self, handle) -> None:
            self.handle = handle
            self.v = handle.getValueState("v", "n long, latest long")
            self.seen = handle.getListState("seen", "v long")
            self.tags = handle.getMapState("tags", "parity long", "cnt long")

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803 - PySpark's names
            import pandas as pd

            count, latest = self.v.get() if self.v.exists() else (0, 0)
            for pdf in rows:
                for _, row in pdf.iterrows():
                    count += 1
                    latest = max(latest, int(row["ts"].value // 1_000_000))
                    self.seen.appendValue((int(row["v"]),))
                    parity = (int(row["v"]) % 2,)
                    held = self.tags.getValue(parity)[0] if self.tags.containsKey(parity) else 0
                    self.tags.updateValue(parity, (held + 1,))
            self.v.update((count, latest))
            self.handle.registerTimer(latest + TIMEOUT_AFTER_MS)  # the same timer again while latest stays
            yield pd.DataFrame({"k": [key[0]], "n": [count]})

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
            import pandas as pd

            self.v.clear()
            self.seen.clear()
            self.tags.clear()
            yield pd.DataFrame({"k": [key[0]], "n": [-1]})

        def close(self) -> None:
            pass

    return (
        df.withWatermark("ts", "5 seconds")
        .groupBy("k")
        .transformWithStateInPandas(Collections(), "k string, n long", "Update", "EventTime")
    )


def _spark_variable(spark, cp: str, batch: int, var: str, where: str) -> dict[str, object]:
    """Each key (canonical JSON) -> its value as the timeline shows it, from Spark's built-in reader of the
    variable ``var`` at ``batch``: a value's row, a list's elements in order, a map's entries by user key."""
    df = spark.read.format("statestore").option("batchId", batch).option("stateVarName", var).load(cp).where(where)
    table = df.toArrow()
    keys = [json.dumps(k, sort_keys=True, ensure_ascii=False) for k in json_values(table.column("key"))]
    out: dict[str, list] = {}
    if "list_element" in table.column_names:
        for key, element in zip(keys, json_values(table.column("list_element")), strict=True):
            out.setdefault(key, []).append(element)
        return out
    if "user_map_key" in table.column_names:
        user_keys = json_values(table.column("user_map_key"))
        for key, user_key, value in zip(keys, user_keys, json_values(table.column("user_map_value")), strict=True):
            out.setdefault(key, []).append({"user_map_key": user_key, "user_map_value": value})
        return {k: sorted(v, key=lambda e: json.dumps(e["user_map_key"], sort_keys=True)) for k, v in out.items()}
    return dict(zip(keys, json_values(table.column("value")), strict=True))


def test_transform_with_state_without_changelogs_explains_every_variable_and_its_timer(spark, tmp_path):
    """RocksDB without changelog checkpointing (Spark's default): the value, list and map variables' timelines
    come from comparing snapshots, each value Spark's own reader's at that batch; the event-time timer is
    predicted at the watermark that equals it, and the query's own output has it fire in that batch."""
    running = Running(spark, tmp_path / "tws_nocl", _tws_collections, ROCKSDB, keep_output=True)
    planted = T0 + 3.25
    cp = running.first([{"ts": _at(planted), "k": "a", "v": 1}, {"ts": _at(T0 + 2), "k": "b", "v": 2}])
    assert not list(Path(cp, "state", "0", "0").glob("*.changelog"))
    # more rows of the key that leave its latest event time (and so its timer) where it was
    running.feed([{"ts": _at(planted - 1), "k": "a", "v": 2}, {"ts": _at(T0 + 1), "k": "a", "v": 3}])
    running.feed([{"ts": _at(planted - 0.5), "k": "a", "v": 5}])
    due = round(planted * 1000) + TIMEOUT_AFTER_MS

    for var in ("v", "seen", "tags"):
        result = state_reader.explain(cp, key_filter="k = 'a'", state_var_name=var)
        (story,) = result.keys
        assert [e.change_type for e in story.timeline].count("update") >= 2, story.timeline
        for entry in story.timeline:
            assert {json.dumps(story.key, sort_keys=True): entry.value} == _spark_variable(
                spark, cp, entry.batch_id, var, "key.k = 'a'"
            ), (var, entry)
        verdict = story.verdict
        assert (verdict.event, verdict.when_watermark_ms, verdict.when_time_ms) == ("fire", due, None), verdict
        assert verdict.details["timers"] == [due] and verdict.details["timer_clock"] == "event time"
        assert not verdict.overdue and verdict.to_go_ms == due - story.timeline[-1].watermark_ms
    assert [e.value["n"] for e in state_reader.explain(cp, key_filter="k = 'a'", state_var_name="v").keys[0].timeline][
        -1
    ] == 4
    since = story.timeline[-1].batch_id

    # the watermark a millisecond short of the timer, then at it: the query emits the timer's row in that batch
    for wm_ms in (due - 1, due):
        running.feed([{"ts": _at(wm_ms / 1000 + 5), "k": "z", "v": 3}])
    from state_reader.io.storage import Storage
    from state_reader.model.checkpoint import CheckpointDir

    logs = CheckpointDir(Storage(cp))
    watermarks = {b: logs.offset_entry(b).watermark_ms for b in logs.committed_batches}
    fired = [row["batch_id"] for row in running.output() if row["k"] == "a" and row["n"] == -1]
    assert len(fired) == 1 and watermarks[fired[0]] == due, (fired, watermarks)
    assert any(wm == due - 1 for b, wm in watermarks.items() if b > since), watermarks
    for var in ("v", "seen", "tags"):
        seen = _presence(cp, "k = 'a'", since, state_var_name=var)
        for _, wm, present in seen:
            assert present == (wm < due), (var, seen)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_no_watermark_means_never(spark, tmp_path, provider):
    running = Running(spark, tmp_path / "plain", lambda df: df.groupBy("k").count(), PROVIDERS[provider])
    cp = running.first([{"ts": _at(T0), "k": "a", "v": 1}])
    verdict = state_reader.explain(cp, key_filter="k = 'a'").keys[0].verdict
    assert verdict.event == "never" and "no watermark" in verdict.summary
    assert verdict.when_watermark_ms is None and verdict.when_time_ms is None
    running.feed([{"ts": _at(T0 + 3600), "k": "b", "v": 2}])
    assert state_reader.read_state(cp, key_filter="k = 'a'").num_rows == 1


def test_explain_reads_only_the_partitions_the_key_can_be_in(spark, tmp_path):
    from state_reader.core import scan

    running = Running(spark, tmp_path / "lookup", lambda df: df.groupBy("k").count(), HDFS)
    cp = running.first([{"ts": _at(T0), "k": f"k{i}", "v": i} for i in range(20)])
    decoded: list[int] = []
    original = scan.partitions_to_read

    def counted(*args, **kwargs):
        chosen = original(*args, **kwargs)
        decoded.extend(chosen)
        return chosen

    scan.partitions_to_read = counted
    try:
        state_reader.explain(cp, key_filter="k = 'k3'")
    finally:
        scan.partitions_to_read = original
    assert decoded and len(set(decoded)) == 1


def test_a_table_of_the_timeline():
    from state_reader.inspect.explain import Explanation, KeyStory
    from state_reader.inspect.explain_rules import TimelineEntry, Verdict

    story = KeyStory({"k": "a"}, [TimelineEntry(3, 10, 5, "snapshot", {"n": 1})], Verdict("never", "never"))
    result = Explanation("cp", 0, None, None, None, "k = 'a'", 3, 3, [story], 1)
    assert result.table().to_pylist()[0]["value"] == '{"n": 1}'
    assert isinstance(result.table(), pa.Table)


def test_a_history_kept_by_following_the_query_reaches_past_retention(spark, tmp_path):
    """A count per key that keeps 3 batches, its changes appended to a Parquet history by the streaming
    source after each run (as examples/state_history.py keeps one): the timeline starts at the history's
    first snapshot, and every count on it is the key's rows so far."""
    confs = {**HDFS, "spark.sql.streaming.minBatchesToRetain": "3"}
    running = Running(spark, tmp_path / "history", lambda df: df.groupBy("k").count(), confs)
    history, history_cp = str(tmp_path / "history.parquet"), str(tmp_path / "history-cp")

    def record() -> None:
        (
            spark.readStream.format("state_reader.statestore")
            .option("readChangeFeed", "true")
            .option("startWithSnapshot", "true")
            .load(running.checkpoint)
            .writeStream.format("parquet")
            .option("path", history)
            .option("checkpointLocation", history_cp)
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )

    running.first([{"ts": _at(T0), "k": "a", "v": 0}])
    record()
    for b in range(1, 9):
        running.feed([{"ts": _at(T0 + b), "k": "a", "v": b}, {"ts": _at(T0 + b), "k": "b", "v": b}])
        record()
    cp = running.checkpoint

    alone = state_reader.explain(cp, key_filter="k = 'a'")
    kept = state_reader.explain(cp, key_filter="k = 'a'", history=history)
    assert kept.first_batch_id < alone.first_batch_id, (kept.first_batch_id, alone.first_batch_id)
    (story,) = kept.keys
    assert story.timeline[0].batch_id == kept.first_batch_id
    assert [e.value["count"] for e in story.timeline] == [e.batch_id + 1 for e in story.timeline]
    assert {e.batch_id: e.value for e in alone.keys[0].timeline} == {
        e.batch_id: e.value for e in story.timeline if e.batch_id >= alone.first_batch_id
    }
    b_story = state_reader.explain(cp, key_filter="k = 'b'", history=history).keys[0]
    assert b_story.timeline[0].change_type == "insert" and b_story.timeline[0].batch_id == 1
    doc = run_json("why", cp, "-k", "k = 'a'", "--history", history)
    assert doc["first_batch_id"] == kept.first_batch_id and len(doc["keys"][0]["timeline"]) == len(story.timeline)
