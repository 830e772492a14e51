"""Streaming queries that write the checkpoints the tests read.

Each query reads small JSON files, one file per micro-batch, so every batch
is deterministic: inserts, updates of existing keys, and removals (watermark
eviction, timeouts, explicit removal) spread over several batches.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

T0 = 1_700_000_000  # epoch seconds of the first event

# Input rows: one list per batch. Event time advances so watermarks evict state.
EVENT_SCHEMA = "ts timestamp, user string, grp string, n int, amount long, price double, ok boolean, tag string"


def _events() -> list[list[dict]]:
    users = ["ann", "bob", "héllo", "日本", "🙂", "", None]
    batches = []
    for b in range(6):
        rows = []
        for i in range(7):
            u = users[(b + i) % len(users)]
            rows.append(
                {
                    "ts": T0 + b * 8 + i,
                    "user": u,
                    "grp": ["a", "b", "c"][(b * 7 + i) % 3],
                    "n": b * 10 + i,
                    "amount": (b + 1) * (i - 3),
                    "price": [1.5, float("nan"), -0.0, 1e308, float("inf"), 2.25, None][i],
                    "ok": [True, False, None][i % 3],
                    "tag": "close" if (b == 3 and i == 0) else f"t{i}",
                }
            )
        batches.append(rows)
    return batches


@dataclass
class Query:
    """A stateful query over the event batches and the confs it runs with."""

    build: Callable[[DataFrame], DataFrame]
    output_mode: str = "update"
    confs: dict[str, str] = field(default_factory=dict)
    batches: Callable[[], list[list[dict]]] = _events
    schema: str = EVENT_SCHEMA
    operators: int = 1
    sources: int = 1  # stream-stream joins read the input twice, as two streams
    # processing-time timers keep availableNow scheduling batches forever: such queries run
    # with a processing-time trigger until every input file is committed
    processing_time: str | None = None


def write_input(batches: list[list[dict]], directory: Path) -> None:
    """One JSON file per batch in a new ``directory``; ``ts`` numbers become ISO timestamps."""
    directory.mkdir(parents=True)
    start = time.time() - len(batches)
    for i, rows in enumerate(batches):
        path = directory / f"part-{i:04d}.json"
        with open(path, "w", encoding="utf-8") as fh:
            for row in rows:
                row = dict(row)
                if isinstance(row.get("ts"), (int, float)):
                    row["ts"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(row["ts"])) + "Z"
                fh.write(json.dumps(row, allow_nan=True) + "\n")
        # a file source takes files oldest first: one second apart, batch i reads file i
        os.utime(path, (start + i, start + i))


def run_query(spark: SparkSession, query: Query, out: Path) -> str:
    """Run ``query`` to the end of its input; return the checkpoint path."""
    if out.exists():
        shutil.rmtree(out)
    write_input(query.batches(), out / "input")
    checkpoint = out / "checkpoint"
    with session_confs(spark, query.confs):
        sources = [
            spark.readStream.schema(query.schema)
            .option("maxFilesPerTrigger", 1)
            .option("allowNonNumericNumbers", "true")
            .json(str(out / "input"))
            for _ in range(query.sources)
        ]
        writer = (
            query.build(*sources)
            .writeStream.format("noop")
            .outputMode(query.output_mode)
            .option("checkpointLocation", str(checkpoint))
        )
        if query.processing_time is None:
            handle = writer.trigger(availableNow=True).start()
            handle.awaitTermination()
        else:
            handle = writer.trigger(processingTime=query.processing_time).start()
            _wait_for_commits(handle, checkpoint / "commits", len(query.batches()))
            handle.stop()
        time.sleep(0.5)  # let maintenance write snapshots of the last versions
    return str(checkpoint)


@contextlib.contextmanager
def session_confs(spark: SparkSession, confs: dict[str, str]) -> Iterator[None]:
    """``confs`` set in the session while inside, then put back as they were."""
    saved = {k: spark.conf.get(k, None) for k in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _wait_for_commits(handle, commits: Path, count: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if handle.exception() is not None:
            raise handle.exception()
        done = [p for p in commits.glob("*") if p.name.isdigit()] if commits.exists() else []
        if len(done) >= count:
            return
        time.sleep(0.2)
    raise TimeoutError(f"the query committed fewer than {count} batches in {timeout} s")


def _window_agg(df: DataFrame) -> DataFrame:
    return (
        df.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "10 seconds"), "user")
        .agg(F.count(F.lit(1)), F.sum("amount"), F.avg("price"), F.max("price"), F.bool_and("ok"))
    )


def _plain_agg(df: DataFrame) -> DataFrame:
    return df.groupBy("grp").agg(F.count(F.lit(1)).alias("cnt"), F.sum("amount"), F.max("user"))


def _session_window(df: DataFrame) -> DataFrame:
    return (
        df.withWatermark("ts", "5 seconds")
        .groupBy(F.session_window("ts", "3 seconds"), "grp")
        .agg(F.count(F.lit(1)), F.sum("n"), F.max("user"))
    )


def _dedup(df: DataFrame) -> DataFrame:
    return df.withWatermark("ts", "5 seconds").dropDuplicates(["user", "ts"])


def _dedup_within(df: DataFrame) -> DataFrame:
    return df.withWatermark("ts", "5 seconds").dropDuplicatesWithinWatermark(["grp", "ok"])


def _limit(df: DataFrame) -> DataFrame:
    return df.where("n % 2 = 0").limit(9)


def _multi(df: DataFrame) -> DataFrame:
    return (
        df.withWatermark("ts", "5 seconds")
        .dropDuplicatesWithinWatermark(["user"])
        .groupBy(F.window("ts", "10 seconds"), "grp")
        .agg(F.count(F.lit(1)), F.sum("amount"))
    )


def _apply_in_pandas(df: DataFrame) -> DataFrame:
    from pyspark.sql.streaming.state import GroupStateTimeout

    def update(key, pdfs, state):
        import pandas as pd

        if state.exists:
            total, count, last, tags = state.get
        else:
            total, count, last, tags = 0.0, 0, None, ""
        closed = False
        for pdf in pdfs:
            for _, row in pdf.iterrows():
                if row["tag"] == "close":
                    closed = True
                total += float(row["amount"])
                count += 1
                last = row["user"]
                tags = (tags + "," + row["tag"]).strip(",")[-11:]
        if closed:
            state.remove()
        else:
            state.update((total, count, last, tags))
        yield pd.DataFrame({"grp": [key[0]], "count": [count]})

    # pyspark 4.3 cannot parse an array in this state schema (KeyError 'elementType')
    return df.groupBy("grp").applyInPandasWithState(
        update,
        "grp string, count long",
        "total double, n long, last string, tags string",
        "update",
        GroupStateTimeout.NoTimeout,
    )


FMGWS_TIMEOUT_BASE_S = T0 + 100  # timeouts of the query below lie after every event


def _apply_in_pandas_timeout(df: DataFrame) -> DataFrame:
    """Event-time timeouts whose value the test can recompute: (base + rows seen) seconds, in ms."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    def update(key, pdfs, state):
        import pandas as pd

        count = state.get[0] if state.exists else 0
        count += sum(len(pdf) for pdf in pdfs)
        state.update((count,))
        state.setTimeoutTimestamp((FMGWS_TIMEOUT_BASE_S + count) * 1000)
        yield pd.DataFrame({"grp": [key[0]], "count": [count]})

    return (
        df.withWatermark("ts", "2 seconds")
        .groupBy("grp")
        .applyInPandasWithState(
            update, "grp string, count long", "n long", "update", GroupStateTimeout.EventTimeTimeout
        )
    )


def _join(how: str) -> Callable[[DataFrame, DataFrame], DataFrame]:
    def build(left: DataFrame, right: DataFrame) -> DataFrame:
        left = left.where("n % 3 != 1").select(
            F.col("ts").alias("lts"), F.col("grp").alias("lgrp"), F.col("n").alias("lid"), "amount", "price"
        )
        right = right.where("n % 2 = 0").select(
            F.col("ts").alias("rts"), F.col("grp").alias("rgrp"), F.col("n").alias("rid"), "tag"
        )
        left = left.withWatermark("lts", "5 seconds")
        right = right.withWatermark("rts", "5 seconds")
        cond = F.expr("lgrp = rgrp AND rts BETWEEN lts - interval 4 seconds AND lts + interval 4 seconds")
        return left.join(right, cond, how)

    return build


def _join_batches() -> list[list[dict]]:
    """Pairs of rows that share a join key and an event time (and one null key per batch)."""
    batches = []
    for b in range(6):
        rows = []
        for i in range(8):
            rows.append(
                {
                    "ts": T0 + b * 8 + (i // 2) * 2,
                    "user": "u",
                    "grp": None if i == 7 else "ab"[(i // 2) % 2],
                    "n": b * 10 + i,
                    "amount": b * i,
                    "price": 1.0 * i,
                    "ok": True,
                    "tag": f"t{i}",
                }
            )
        batches.append(rows)
    return batches


def _transform_with_state(df: DataFrame) -> DataFrame:
    """transformWithStateInPandas with every kind of state variable, TTL and a timer per key."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Tracker(StatefulProcessor):
        def init(self, handle) -> None:
            self.handle = handle
            self.profile = handle.getValueState("profile", "visits long, total double, last string", 3600000)
            self.events = handle.getListState("events", "n int, tag string")
            self.counters = handle.getMapState("counters", "tag string", "cnt long, amount long", 3600000)
            self.plain = handle.getValueState("plain", "n int")

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803 - PySpark's names
            import pandas as pd

            visits, total, last = self.profile.get() if self.profile.exists() else (0, 0.0, None)
            events = list(self.events.get()) if self.events.exists() else []
            closed = False
            for pdf in rows:
                for _, row in pdf.iterrows():
                    visits += 1
                    total += float(row["amount"])
                    last = row["user"]
                    events = [*events, (int(row["n"]), row["tag"])][-3:]
                    tag = str(row["tag"])
                    cnt, amount = self.counters.getValue((tag,)) if self.counters.containsKey((tag,)) else (0, 0)
                    self.counters.updateValue((tag,), (cnt + 1, amount + int(row["amount"])))
                    self.plain.update((int(row["n"]),))
                    closed = closed or tag == "close"
            if closed:
                self.profile.clear()
                self.events.clear()
                self.counters.removeKey(("close",))
            else:
                self.profile.update((visits, total, last))
                self.events.put(events)
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 3_600_000)
            yield pd.DataFrame({"grp": [key[0]], "visits": [visits]})

        def close(self) -> None:
            pass

    return df.groupBy("grp").transformWithStateInPandas(
        Tracker(), "grp string, visits long", "Update", "ProcessingTime"
    )


def _types_batches() -> list[list[dict]]:
    return [[{"ts": T0 + b * 5 + i, "n": b * 3 + i} for i in range(3)] for b in range(5)]


TYPES_SCHEMA = "ts timestamp, n int"

# Every key-able type in the key and the rest in the value; every 4th row all-null.
_TYPED_COLUMNS = {
    "k_str": "concat('héllo-', n)",
    "k_int": "n",
    "k_long": "cast(n as bigint) * 10000000000",
    "k_short": "cast(n as smallint)",
    "k_byte": "cast(n as tinyint)",
    "k_double": "cast(n as double) / 3",
    "k_float": "cast(n as float) / 7",
    "k_bool": "n % 2 = 0",
    "k_dec": "cast(n * 12.34 as decimal(10,2))",
    "k_bigdec": "cast(concat(if(n % 3 = 0, '-', ''), '12345678901234567890123456', lpad(n, 2, '0'), "
    "'.0123456789') as decimal(38,10))",
    "k_date": "date_add(date'2024-02-29', n)",
    "k_ntz": "to_timestamp_ntz('2024-01-02 03:04:05.123456') + make_dt_interval(n)",
    "k_bin": "encode(concat('bin', n), 'utf-8')",
    "k_struct": "named_struct('a', n, 'b', concat('s', n), 'c', named_struct('d', cast(n as double)))",
    "k_arr": "array(n, n + 1, null)",
    "k_sarr": "array(concat('x', n), null, '')",
}
_VALUE_COLUMNS = {
    "v_map": "map('k1', cast(n as bigint), 'k2', cast(n * 2 as bigint))",
    "v_imap": "map(n, concat('v', n))",
    "v_dt": "make_dt_interval(n, 1, 2, 3.5)",
    "v_arr_struct": "array(named_struct('x', n, 'y', concat('y', n)), null)",
    "v_nested": "array(array(n), array())",
}


def _typed(df: DataFrame) -> DataFrame:
    def nullable(expr: str) -> str:
        return f"if(n % 4 = 3, null, {expr})"

    cols = [F.expr(nullable(e)).alias(c) for c, e in {**_TYPED_COLUMNS, **_VALUE_COLUMNS}.items()]
    typed = df.select("ts", *cols)
    aggs = [F.count(F.lit(1)).alias("cnt")]
    aggs += [F.last(c).alias(f"last_{c}") for c in _VALUE_COLUMNS]
    aggs += [F.max("ts").alias("max_ts"), F.collect_list("k_int").alias("ints")]
    return typed.groupBy(*_TYPED_COLUMNS).agg(*aggs)


# Keys of every type a key filter can pin, for one-key lookups: -0.0 and NaN, multi-byte
# strings, wide decimals, a nested struct, and a null in every column of some row.
_LOOKUP_COLUMNS = {
    "s": "if(n % 5 = 4, null, concat('ü€😀-', n))",
    "l": "if(n % 6 = 5, null, cast(n as bigint) * 1000003 - 500)",
    "d": "case n % 4 when 0 then -0.0d when 1 then cast('NaN' as double) when 2 then null else n / 3.0d end",
    "dec": "if(n % 7 = 6, null, cast(n * 1.25 as decimal(9,2)))",
    "bdec": "if(n % 7 = 5, null, cast(concat('-123456789012345678901', n, '.12345') as decimal(30,5)))",
    "day": "if(n % 8 = 7, null, date_add(date'2024-02-29', n))",
    "at": "if(n % 9 = 8, null, timestamp'2024-01-01 00:00:00' + make_dt_interval(0, 0, 0, n + 0.123456))",
    "raw": "if(n % 5 = 3, null, encode(concat('b', n), 'utf-8'))",
    "st": "if(n % 10 = 9, null, named_struct('a', if(n % 3 = 0, null, n), 'b', concat('x', n)))",
}


def _lookup_keys(df: DataFrame) -> DataFrame:
    keyed = df.select(*(F.expr(e).alias(c) for c, e in _LOOKUP_COLUMNS.items()))
    return keyed.groupBy(*_LOOKUP_COLUMNS).agg(F.count(F.lit(1)).alias("cnt"))


def _exotic(df: DataFrame) -> DataFrame:
    """Types PySpark cannot collect or move through Arrow: only the Spark-free API reads them."""
    return df.groupBy((F.col("n") % 2).alias("parity")).agg(
        F.last(F.expr("make_ym_interval(1, n)")).alias("ym"),
        F.last(F.expr("make_interval(0, 1, 0, n, 0, 0, 0.25)")).alias("cal"),
        F.last(F.expr("parse_json(concat('{\"n\":', n, '}'))")).alias("variant"),
    )


STATE_PACKAGE = "org.apache.spark.sql.execution.streaming.state"
HDFS = {"spark.sql.streaming.stateStore.providerClass": f"{STATE_PACKAGE}.HDFSBackedStateStoreProvider"}

QUERIES: dict[str, Query] = {
    "agg_window": Query(_window_agg, confs=HDFS),
    "agg_fmt1": Query(_plain_agg, confs={**HDFS, "spark.sql.streaming.aggregation.stateFormatVersion": "1"}),
    "agg_fmt2": Query(_plain_agg, confs=HDFS),
    "agg_zstd": Query(_window_agg, confs={**HDFS, "spark.sql.streaming.stateStore.compression.codec": "zstd"}),
    "agg_snappy": Query(_window_agg, confs={**HDFS, "spark.sql.streaming.stateStore.compression.codec": "snappy"}),
    "agg_lzf": Query(_window_agg, confs={**HDFS, "spark.sql.streaming.stateStore.compression.codec": "lzf"}),
    "types": Query(_typed, confs=HDFS, batches=_types_batches, schema=TYPES_SCHEMA),
    "exotic_types": Query(_exotic, confs=HDFS, batches=_types_batches, schema=TYPES_SCHEMA),
    # eight state partitions, so that a lookup visibly reads few of them
    "lookup_types": Query(
        _lookup_keys, confs={**HDFS, "spark.sql.shuffle.partitions": "8"}, batches=_types_batches, schema=TYPES_SCHEMA
    ),
    "join_inner": Query(_join("inner"), output_mode="append", confs=HDFS, sources=2),
    "join_left_outer": Query(_join("left_outer"), output_mode="append", confs=HDFS, sources=2),
    "join_right_outer": Query(_join("right_outer"), output_mode="append", confs=HDFS, sources=2),
    "dedup": Query(_dedup, output_mode="append", confs=HDFS),
    "dedup_within": Query(_dedup_within, output_mode="append", confs=HDFS),
    "session_window": Query(_session_window, output_mode="append", confs=HDFS),
    "limit": Query(_limit, output_mode="append", confs=HDFS),
    "multi": Query(_multi, output_mode="append", confs=HDFS, operators=2),
    "apply_in_pandas": Query(_apply_in_pandas, confs=HDFS),
    "apply_in_pandas_fmt1": Query(
        _apply_in_pandas, confs={**HDFS, "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "1"}
    ),
}


# --- RocksDB provider variants of the queries above -------------------------------

ROCKSDB = {"spark.sql.streaming.stateStore.providerClass": f"{STATE_PACKAGE}.RocksDBStateStoreProvider"}
ROCKSDB_CHANGELOG = {**ROCKSDB, "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"}
# checkpoint format 2 needs changelog checkpointing; Spark's reader needs the conf in the reading session
CHECKPOINT_V2 = {"spark.sql.streaming.stateStore.checkpointFormatVersion": "2"}


def _with(query: Query, confs: dict[str, str]) -> Query:
    return Query(
        query.build,
        output_mode=query.output_mode,
        confs={**query.confs, **confs},
        batches=query.batches,
        schema=query.schema,
        operators=query.operators,
        sources=query.sources,
        processing_time=query.processing_time,
    )


# The single-store operator queries above, each with RocksDB without and with
# changelog checkpointing. The codec only matters for changelog files.
ROCKSDB_BASE_QUERIES = (
    "agg_window",
    "agg_fmt1",
    "agg_fmt2",
    "types",
    "dedup",
    "dedup_within",
    "session_window",
    "limit",
    "multi",
    "apply_in_pandas",
    "apply_in_pandas_fmt1",
)
for _name in ROCKSDB_BASE_QUERIES:
    QUERIES[f"rocksdb_{_name}"] = _with(QUERIES[_name], ROCKSDB)
    QUERIES[f"rocksdb_cl_{_name}"] = _with(QUERIES[_name], ROCKSDB_CHANGELOG)
QUERIES["rocksdb_lookup_types"] = _with(QUERIES["lookup_types"], ROCKSDB)
QUERIES["rocksdb_cl_agg_zstd"] = _with(QUERIES["agg_zstd"], ROCKSDB_CHANGELOG)
# row checksums (Spark 4.1+); Spark's reader verifies them only when asked, in the reading session
ROW_CHECKSUM = {"spark.sql.streaming.stateStore.rowChecksum.enabled": "true"}
VERIFY_ROW_CHECKSUMS = {"spark.sql.streaming.stateStore.rowChecksum.readVerificationRatio": "1"}
QUERIES["rocksdb_cl_checksum_agg_window"] = _with(QUERIES["agg_window"], {**ROCKSDB_CHANGELOG, **ROW_CHECKSUM})

# Checkpoint format 2 (RocksDB + changelog): kept apart from QUERIES because Spark's
# reader fails on these unless the reading session sets the conf as well.
CHECKPOINT_V2_QUERIES: dict[str, Query] = {
    f"rocksdb_v2_{name}": _with(QUERIES[name], {**ROCKSDB_CHANGELOG, **CHECKPOINT_V2})
    for name in ("agg_window", "dedup", "session_window", "limit", "multi", "apply_in_pandas")
}


# transformWithState runs on RocksDB only
QUERIES["tws"] = Query(_transform_with_state, confs=ROCKSDB_CHANGELOG, processing_time="1 second")
# every column family's values framed with row checksums
QUERIES["tws_checksum"] = _with(QUERIES["tws"], ROW_CHECKSUM)
QUERIES["tws_avro"] = Query(
    _transform_with_state,
    processing_time="1 second",
    confs={**ROCKSDB_CHANGELOG, "spark.sql.streaming.stateStore.encodingFormat": "avro"},
)

# stream-stream join state format 2 on RocksDB with changelogs: four stores in sub-directories, each with changelogs
# (named apart from the rocksdb_* queries, whose oracle reads the default store)
QUERIES["join_left_outer_rocksdb_cl"] = _with(QUERIES["join_left_outer"], ROCKSDB_CHANGELOG)

# stream-stream join state format 3: one store, a virtual column family per join store
QUERIES["join_v3"] = Query(
    _join("inner"),
    output_mode="append",
    sources=2,
    confs={**ROCKSDB_CHANGELOG, "spark.sql.streaming.join.stateFormatVersion": "3"},
)

# stream-stream join state format 4 (4.3): event time in the keys, lists of rows as values
QUERIES["join_v4"] = Query(
    _join("left_outer"),
    output_mode="append",
    sources=2,
    batches=_join_batches,
    confs={**ROCKSDB_CHANGELOG, "spark.sql.streaming.join.stateFormatVersion": "4"},
)
QUERIES["join_v4_checksum"] = _with(QUERIES["join_v4"], ROW_CHECKSUM)

# flatMapGroupsWithState state format 1 with timeouts: Spark's reader fails on these
# (the timeout is a long under an int in the schema), so they are not in QUERIES. Only
# HDFS: with RocksDB, Spark 4.3.0's own query fails validating that state on its second batch.
_FMGWS_V1 = {"spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "1"}
FMGWS_TIMEOUT_QUERIES: dict[str, Query] = {
    "fmgws_timeout_fmt1": Query(_apply_in_pandas_timeout, confs={**HDFS, **_FMGWS_V1}),
}


# --- Avro-encoded transformWithState state holding every type Spark keeps in Avro state ----
# (tinyint and smallint are not among them: Spark refuses such a state variable when it is defined)

AVRO_TWS_SCHEMAS = {
    "scalars": "s string, i int, l bigint, f float, d double, small decimal(5,2), "
    "big decimal(38,10), ok boolean, raw binary, day date, at timestamp, ntz timestamp_ntz",
    "nested": "tags array<string>, readings array<bigint>, pts array<struct<x int, y string>>, "
    "grid array<array<int>>, attrs map<string, double>, "
    "inner struct<first string, sizes array<int>, deep struct<a int, b string>>",
    "items": "n int, vals array<double>, info struct<name string, sizes array<int>>",
    "bymap_key": "tag string, day date, big decimal(20,3), who struct<u string, n int>",
    "bymap": "vals array<double>, peak float, m map<string, array<int>>, at timestamp",
    "plainmap_key": "tag string",
    "plainmap": "cnt long, arr array<struct<a string, b array<string>>>",
}
AVRO_TWS_VARIABLES = ("scalars", "nested", "items", "bymap", "plainmap")


def _avro_processor(rows_api: bool):
    """A StatefulProcessor keeping :data:`AVRO_TWS_SCHEMAS` state; ``rows_api``: the Row-based API."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    # defined here, not at module level, so the Python workers get it with the processor
    def _avro_state_values(row: dict) -> dict[str, tuple]:
        """State values of every Avro state variable for one input row: extremes, nulls, empties."""
        import datetime
        import decimal

        n, user, price, tag = int(row["n"]), row["user"], row["price"], str(row["tag"])
        price = None if price is None or (price != price and n % 3 == 0) else float(price)  # NaN or null
        odd = n % 2 == 1
        utc = datetime.timezone.utc
        at = (
            datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=utc)
            if odd
            else datetime.datetime(2024, 2, 29, 12, 0, 0, n, tzinfo=utc)
        )
        day = datetime.date(1969, 12, 31) if n % 3 == 0 else datetime.date(2024, 2, 29) + datetime.timedelta(days=n)
        big = decimal.Decimal(f"{'-' if odd else ''}1234567890123456789012345678.{n:010d}")
        scalars = (
            user,
            -(2**31) if odd else 2**31 - 1,
            -(2**63) if odd else 2**63 - 1,
            None if price is None else min(price, 3.0e38),
            price,
            decimal.Decimal(f"{'-' if odd else ''}{n % 1000}.{n % 100:02d}"),
            None if n % 5 == 0 else big,
            None if n % 3 == 2 else odd,
            b"" if n % 4 == 0 else bytes([0, 255, n % 256]),
            day,
            at,
            datetime.datetime(2024, 1, 2, 3, 4, 5, n) if not odd else None,
        )
        deep = (n, None) if odd else (None, user)
        readings = None if n % 4 == 1 else [int(row["amount"]), -1, 2**40]
        nested = (
            [] if n % 3 == 0 else ["", "héllo 日本", tag],
            readings,
            [(n, user), (None, "")],
            [[n], [], [1, 2, 3]],
            {} if n % 5 == 0 else {"a": price if price is not None else -0.0, "日本": float("inf")},
            None if n % 7 == 6 else (user, [n, n + 1], deep),
        )
        item = (n, [price if price is not None else 0.0, float("-inf")], (tag, [] if odd else [n]))
        bymap_key = (tag, day, decimal.Decimal(f"{n}.125"), (user, n % 3))
        bymap = (
            [] if odd else [price if price is not None else 1.5],
            -0.0 if odd else float("nan"),
            {"x": [n], "": []},
            at,
        )
        plainmap = (n, [(user, ["b", ""]), (None, [])])
        return {
            "scalars": scalars,
            "nested": nested,
            "item": item,
            "bymap_key": bymap_key,
            "bymap": bymap,
            "plainmap": plainmap,
        }

    class AvroTypes(StatefulProcessor):
        def init(self, handle) -> None:
            s = AVRO_TWS_SCHEMAS
            self.handle = handle
            self.scalars = handle.getValueState("scalars", s["scalars"])
            self.nested = handle.getValueState("nested", s["nested"], 3600000)
            self.items = handle.getListState("items", s["items"], 3600000)
            self.bymap = handle.getMapState("bymap", s["bymap_key"], s["bymap"], 3600000)
            self.plainmap = handle.getMapState("plainmap", s["plainmap_key"], s["plainmap"])

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803 - PySpark's names
            if rows_api:
                seen = [r.asDict() for r in rows]
            else:
                seen = [r.to_dict() for pdf in rows for _, r in pdf.iterrows()]
            for row in seen:
                for k in ("user", "ok"):  # pandas hands NaN for a null string or boolean
                    if isinstance(row[k], float):
                        row[k] = None
                values = _avro_state_values(row)
                self.scalars.update(values["scalars"])
                self.nested.update(values["nested"])
                self.items.appendValue(values["item"])
                self.bymap.updateValue(values["bymap_key"], values["bymap"])
                self.plainmap.updateValue((str(row["tag"]),), values["plainmap"])
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 3_600_000)
            if rows_api:
                from pyspark.sql import Row

                yield Row(grp=key[0], seen=len(seen))
            else:
                import pandas as pd

                yield pd.DataFrame({"grp": [key[0]], "seen": [len(seen)]})

        def close(self) -> None:
            pass

    return AvroTypes()


def _avro_tws(df: DataFrame) -> DataFrame:
    return df.groupBy("grp").transformWithStateInPandas(
        _avro_processor(False), "grp string, seen long", "Update", "ProcessingTime"
    )


def _avro_tws_rows(df: DataFrame) -> DataFrame:
    return df.groupBy("grp").transformWithState(
        _avro_processor(True), "grp string, seen long", "Update", "ProcessingTime"
    )


AVRO = {**ROCKSDB_CHANGELOG, "spark.sql.streaming.stateStore.encodingFormat": "avro"}
QUERIES["tws_avro_types"] = Query(_avro_tws, processing_time="1 second", confs=AVRO)
QUERIES["tws_avro_types_rows"] = Query(_avro_tws_rows, processing_time="1 second", confs=AVRO)


def _avro_event_time_tws(df: DataFrame) -> DataFrame:
    """Avro-encoded transformWithStateInPandas with event-time timers (several per key) on a value, a
    map and a list: its timestamp-to-key timer index is a range-scan family in Avro. (Spark refuses
    TTL in event time; ``tws_avro`` has TTL indexes, with processing-time timers.)"""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Expiring(StatefulProcessor):
        def init(self, handle) -> None:
            self.handle = handle
            self.total = handle.getValueState("total", "visits long, amount long, deadline long")
            self.tags = handle.getMapState("tags", "tag string", "cnt long")
            self.recent = handle.getListState("recent", "n int")

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803 - PySpark's names
            import pandas as pd

            visits, amount, _ = self.total.get() if self.total.exists() else (0, 0, 0)
            latest = 0
            for pdf in rows:
                for _, row in pdf.iterrows():
                    visits += 1
                    amount += int(row["amount"])
                    tag = (str(row["tag"]),)
                    cnt = self.tags.getValue(tag)[0] if self.tags.containsKey(tag) else 0
                    self.tags.updateValue(tag, (cnt + 1,))
                    self.recent.appendValue((int(row["n"]),))
                    latest = max(latest, row["ts"].value // 1_000_000)
            # in event time: fires once the watermark passes 10 s after the key's latest event; the
            # timers of its earlier events stay registered, and do nothing when they fire
            self.total.update((visits, amount, latest + 10_000))
            self.handle.registerTimer(latest + 10_000)
            yield pd.DataFrame({"user": [key[0]], "event": ["input"], "visits": [visits], "amount": [amount]})

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):  # noqa: N802, N803
            import pandas as pd

            if not self.total.exists() or self.total.get()[2] > expiredTimerInfo.getExpiryTimeInMs():
                return
            visits, amount, _ = self.total.get()
            self.total.clear()
            self.tags.clear()
            self.recent.clear()
            yield pd.DataFrame({"user": [key[0]], "event": ["expired"], "visits": [visits], "amount": [amount]})

        def close(self) -> None:
            pass

    return (
        df.withWatermark("ts", "5 seconds")
        .groupBy("user")
        .transformWithStateInPandas(
            Expiring(), "user string, event string, visits long, amount long", "Update", "EventTime"
        )
    )


QUERIES["tws_avro_event_time"] = Query(_avro_event_time_tws, confs=AVRO)


def _tws_lists(df: DataFrame) -> DataFrame:
    """transformWithStateInPandas with a list with TTL and one without, a map with TTL, a value and timers
    in processing time. A list with TTL keeps its counts in ``$count_``/``$min_`` families, and its
    ``$rowCounter_`` family, which the schema file names, is never created."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Lists(StatefulProcessor):
        def init(self, handle) -> None:
            self.handle = handle
            self.recent = handle.getListState("recent", "n int, tag string", 3600000)
            self.all = handle.getListState("all", "n int")
            self.tags = handle.getMapState("tags", "tag string", "cnt long", 3600000)
            self.total = handle.getValueState("total", "amount long")

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803 - PySpark's names
            import pandas as pd

            amount = self.total.get()[0] if self.total.exists() else 0
            for pdf in rows:
                for _, row in pdf.iterrows():
                    tag = str(row["tag"])
                    self.recent.appendValue((int(row["n"]), tag))
                    self.all.appendValue((int(row["n"]),))
                    cnt = self.tags.getValue((tag,))[0] if self.tags.containsKey((tag,)) else 0
                    self.tags.updateValue((tag,), (cnt + 1,))
                    amount += int(row["amount"])
            self.total.update((amount,))
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 3_600_000)
            yield pd.DataFrame({"grp": [key[0]], "amount": [amount]})

        def close(self) -> None:
            pass

    return df.groupBy("grp").transformWithStateInPandas(Lists(), "grp string, amount long", "Update", "ProcessingTime")


# RocksDB without changelog checkpointing (Spark's default): every version a snapshot
QUERIES["tws_lists_rocksdb"] = Query(_tws_lists, confs=ROCKSDB, processing_time="1 second")


# every query the suite's session checkpoints come from, by name
ALL_SESSION_QUERIES: dict[str, Query] = {**QUERIES, **CHECKPOINT_V2_QUERIES, **FMGWS_TIMEOUT_QUERIES}
