#!/usr/bin/env python3
"""Write small, real Structured Streaming checkpoints ("golden data") with stateful operators.

Run this script with the python of an environment that has the pyspark version you want to
write checkpoints with (plus pandas and pyarrow, for applyInPandasWithState)::

    python tests/golden/generate.py --out tests/golden/spark-3.5.8
    python tests/golden/generate.py --out tests/golden/spark-4.0.5

For every checkpoint it writes, it deletes and recreates ``<out>/<name>/`` (and nothing else
under ``<out>``), then merges the entries of this Spark version into ``manifest.json`` next to
this script (entries of other Spark versions are kept as they are).

How each checkpoint is made:

* input rows are written as JSON files (one file per micro-batch) into a scratch directory
  outside the repository; the query reads them with ``maxFilesPerTrigger=1``;
* the query runs with ``Trigger.AvailableNow`` and the ``noop`` sink, in two runs: the first run
  consumes all files but the last one, then the script waits so that the state store maintenance
  thread writes snapshots (``spark.sql.streaming.stateStore.minDeltasForSnapshot=2``, maintenance
  every 200ms); the second run (a restart of the same query from its checkpoint) consumes the last
  file with snapshots switched off.  The newest state store version of an HDFS-backed store (and
  of a RocksDB store with changelog checkpointing) is therefore a snapshot plus one or more deltas
  (changelogs) written after it, so readers have to combine both;
* nothing is removed from the checkpoint afterwards (``.crc`` files, ``sources/``, ``offsets/``,
  ``commits/`` and ``metadata`` all stay).

The content of the input files is fixed (no randomness without a fixed seed, no wall clock); what
Spark itself writes (query ids, batch timestamps, snapshot timing) can still differ between runs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

# The JVM and the Python workers must see UTC; this has to happen before pyspark starts a JVM.
os.environ["TZ"] = "UTC"
if hasattr(time, "tzset"):
    time.tzset()
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MANIFEST = os.path.join(HERE, "manifest.json")

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
CODEC_CONF = "spark.sql.streaming.stateStore.compression.codec"
MIN_DELTAS_CONF = "spark.sql.streaming.stateStore.minDeltasForSnapshot"
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"

# Sleep after the first run so that the maintenance thread (every 200ms) can write snapshots.
SNAPSHOT_WAIT_SECONDS = 1.5
# File modification times of the input files (the file source orders files by them).
INPUT_MTIME_BASE = 1_704_067_200  # 2024-01-01T00:00:00Z

BASE_TS = dt.datetime(2024, 1, 1, 0, 0, 0)

# Strings that exercise UTF-8 handling: multi-byte characters, emoji, empty string and NULL.
NASTY_STRINGS = ["héllo", "日本", "🚀✨", "", None]

ROWS = list[dict]


def ts(seconds: float) -> str:
    """An ISO-8601 UTC timestamp `seconds` after 2024-01-01T00:00:00Z."""
    t = BASE_TS + dt.timedelta(seconds=seconds)
    return t.isoformat(timespec="milliseconds") + "Z"


def version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def rng_for(name: str) -> random.Random:
    return random.Random(zlib.crc32(name.encode("utf-8")))


# --------------------------------------------------------------------------------------------
# Input data
# --------------------------------------------------------------------------------------------


@dataclass
class Stream:
    schema: str  # DDL schema of the JSON input
    batches: list[ROWS]  # one JSON file per micro-batch


PRICES = [1.5, float("nan"), -0.0, float("inf"), float("-inf"), 3.25, None, 0.0, 1e300, 2.5e-8]


def window_agg_rows(name: str) -> dict[str, Stream]:
    """Rows for the window aggregation: keys (window, category, region_id) get inserted, updated in
    later batches, and evicted once the watermark (max event time - 10s) passes the window end."""
    rng = rng_for(name)
    cats = NASTY_STRINGS
    batches = []
    for b in range(6):
        rows = []
        base = b * 10
        for _ in range(7):
            rows.append(
                {
                    "ts": ts(base + rng.choice([-6, -3, -1, 0, 2, 4, 6, 8, 9.5])),
                    "category": rng.choice(cats),
                    "region_id": rng.choice([1, 2, None]),
                    "amount": rng.choice([rng.randint(-50, 1000), None, 9_000_000_000]),
                    "price": rng.choice(PRICES),
                }
            )
        if b == 4:
            # late row: its window was already evicted, so it is dropped
            rows.append({"ts": ts(1), "category": "héllo", "region_id": 1, "amount": 1, "price": 1.0})
        batches.append(rows)
    return {"events": Stream("ts timestamp, category string, region_id int, amount long, price double", batches)}


def fmt1_rows(name: str) -> dict[str, Stream]:
    rng = rng_for(name)
    groups = ["héllo", "日本", "🚀✨", "", None, "plain", "Ünïcödé"]
    batches = []
    for b in range(6):
        rows = []
        for g in groups[: 3 + b % 5]:
            rows.append({"grp": g, "amount": rng.choice([rng.randint(-100, 100), None])})
        batches.append(rows)
    return {"events": Stream("grp string, amount long", batches)}


TYPES_SCHEMA = ", ".join(
    [
        "k_str string",
        "k_int int",
        "k_long long",
        "k_short short",
        "k_byte byte",
        "k_double double",
        "k_float float",
        "k_bool boolean",
        "k_dec10 string",
        "k_dec38 string",
        "k_date string",
        "k_ts string",
        "k_ntz string",
        "k_bin string",
        "k_struct struct<a:int,b:string,c:struct<d:double>>",
        "k_arr_int array<int>",
        "k_arr_str array<string>",
        "v_long long",
        "v_map_key string",
        "v_days int",
        "v_hours int",
        "v_mins int",
        "v_secs string",
        "v_years int",
        "v_months int",
        "v_dec38 string",
        "v_ntz string",
        "v_bin string",
        "v_struct struct<x:int,y:struct<z:string,w:array<int>>>",
        "v_arr_struct array<struct<p:string,q:double>>",
    ]
)

TYPES_KEYS = [
    dict(
        k_str="héllo",
        k_int=1,
        k_long=9_000_000_000,
        k_short=-32768,
        k_byte=127,
        k_double=1.5,
        k_float=0.25,
        k_bool=True,
        k_dec10="12345678.91",
        k_dec38="1234567890123456789012345678.0123456789",
        k_date="2024-02-29",
        k_ts="2024-01-01T00:00:00.123456Z",
        k_ntz="2024-01-01T12:34:56.789",
        k_bin="00ff10",
        k_struct={"a": 1, "b": "日本", "c": {"d": -0.5}},
        k_arr_int=[1, None, 3],
        k_arr_str=["a", "ü", None],
    ),
    dict(
        k_str="日本",
        k_int=-2147483648,
        k_long=-1,
        k_short=7,
        k_byte=-128,
        k_double=float("nan"),
        k_float=float("nan"),
        k_bool=False,
        k_dec10="-0.01",
        k_dec38="-0.0000000001",
        k_date="1969-12-31",
        k_ts="1969-12-31T23:59:59.999999Z",
        k_ntz="1900-01-01T00:00:00",
        k_bin="",
        k_struct={"a": None, "b": None, "c": None},
        k_arr_int=[],
        k_arr_str=[],
    ),
    dict(
        k_str="",
        k_int=0,
        k_long=0,
        k_short=0,
        k_byte=0,
        k_double=-0.0,
        k_float=-0.0,
        k_bool=None,
        k_dec10="0",
        k_dec38="0",
        k_date="2000-01-01",
        k_ts="2000-01-01T00:00:00Z",
        k_ntz="2000-01-01T00:00:00",
        k_bin="deadbeef",
        k_struct={"a": 0, "b": "", "c": {"d": None}},
        k_arr_int=[None],
        k_arr_str=[""],
    ),
    dict(
        k_str="🚀✨",
        k_int=2147483647,
        k_long=9223372036854775807,
        k_short=32767,
        k_byte=1,
        k_double=float("inf"),
        k_float=float("-inf"),
        k_bool=True,
        k_dec10="99999999.99",
        k_dec38="9999999999999999999999999999.9999999999",
        k_date="9999-12-31",
        k_ts="2262-04-11T23:47:16.854775Z",
        k_ntz="9999-12-31T23:59:59.999999",
        k_bin=None,
        k_struct=None,
        k_arr_int=None,
        k_arr_str=None,
    ),
    dict(
        k_str=None,
        k_int=None,
        k_long=None,
        k_short=None,
        k_byte=None,
        k_double=None,
        k_float=None,
        k_bool=None,
        k_dec10=None,
        k_dec38=None,
        k_date=None,
        k_ts=None,
        k_ntz=None,
        k_bin=None,
        k_struct=None,
        k_arr_int=None,
        k_arr_str=None,
    ),  # all keys NULL
    dict(
        k_str="plain",
        k_int=42,
        k_long=42,
        k_short=42,
        k_byte=42,
        k_double=42.0,
        k_float=42.0,
        k_bool=False,
        k_dec10="42.00",
        k_dec38="42",
        k_date="2024-01-01",
        k_ts="2024-01-01T00:00:42Z",
        k_ntz="2024-01-01T00:00:42",
        k_bin="2a",
        k_struct={"a": 42, "b": "forty-two", "c": {"d": 42.0}},
        k_arr_int=[4, 2],
        k_arr_str=["forty", "two"],
    ),
]


def types_rows(name: str) -> dict[str, Stream]:
    rng = rng_for(name)
    map_keys = ["clé", "キー", "", "k🚀"]
    batches = []
    for b in range(6):
        rows = []
        # every batch touches some of the keys again (updates) and adds one more key
        for k in range(min(len(TYPES_KEYS), 2 + b)):
            if b > 0 and k % 2 == b % 2 and k != 1 + b:
                continue
            row = dict(TYPES_KEYS[k])
            n = b * 10 + k
            row.update(
                v_long=rng.choice([n, -n, None, 2**40 + n]),
                v_map_key=rng.choice([*map_keys, None]),
                v_days=rng.randint(-3, 3),
                v_hours=rng.randint(0, 23),
                v_mins=rng.randint(0, 59),
                v_secs=rng.choice(["0", "1.5", "59.999999", "-12.000001"]),
                v_years=rng.randint(-5, 5),
                v_months=rng.randint(-11, 11),
                v_dec38=rng.choice(["3.1415926535", "-1234567890123456789012345678.0000000001", None]),
                v_ntz=rng.choice(["2024-06-01T08:00:00.5", "1970-01-01T00:00:00", None]),
                v_bin=rng.choice(["cafe", "", None, "0001020304"]),
                v_struct=rng.choice([{"x": n, "y": {"z": "ß", "w": [n, None]}}, {"x": None, "y": None}, None]),
                v_arr_struct=rng.choice([[{"p": "😀", "q": float("nan")}, {"p": None, "q": -0.0}], [], None, [None]]),
            )
            rows.append(row)
        batches.append(rows)
    return {"events": Stream(TYPES_SCHEMA, batches)}


def dedup_rows(name: str) -> dict[str, Stream]:
    """(user, ts) pairs duplicated within a batch and across batches; old pairs get evicted when
    the watermark (max ts - 5s) passes them, after which a re-sent pair is late and dropped."""
    users = ["ålice", "бob", "😀", "", None]
    batches = []
    for b in range(6):
        base = b * 4
        rows = []
        for i, u in enumerate(users):
            t = ts(base + i % 3)
            rows.append({"user": u, "ts": t, "payload": f"b{b}-{i}"})
            if i % 2 == 0:  # duplicate within the batch
                rows.append({"user": u, "ts": t, "payload": f"b{b}-{i}-dup"})
        if b > 0:  # duplicates of the previous batch (still in state)
            rows.append({"user": users[0], "ts": ts(base - 4), "payload": f"b{b}-xdup"})
            rows.append({"user": users[2], "ts": ts(base - 4 + 2), "payload": f"b{b}-xdup2"})
        if b >= 3:  # far too late: dropped by the watermark
            rows.append({"user": users[1], "ts": ts(0), "payload": f"b{b}-late"})
        batches.append(rows)
    return {"events": Stream("user string, ts timestamp, payload string", batches)}


def dedup_within_rows(name: str) -> dict[str, Stream]:
    batches = []
    for b in range(6):
        base = b * 4
        rows = []
        for i in range(4):
            eid = f"e{b * 4 + i:03d}"
            rows.append({"event_id": eid, "ts": ts(base + i), "user": NASTY_STRINGS[i % 5]})
            if i == 1:  # duplicate within the batch, other event time
                rows.append({"event_id": eid, "ts": ts(base + i + 1), "user": "dup"})
        if b > 0:  # duplicates of events of the previous batch
            rows.append({"event_id": f"e{(b - 1) * 4 + 3:03d}", "ts": ts(base), "user": "xdup"})
            rows.append({"event_id": "ключ-日本-🚀", "ts": ts(base), "user": "uni"})
        rows.append({"event_id": "" if b % 2 else None, "ts": ts(base + 2), "user": "blank"})
        batches.append(rows)
    return {"events": Stream("event_id string, ts timestamp, user string", batches)}


def session_rows(name: str) -> dict[str, Stream]:
    """Sessions (gap 5s) that grow and merge across batches and are evicted by the watermark."""
    plan = [
        # (batch, user, second)
        (0, "ålice", 1),
        (0, "ålice", 3),
        (0, "bøb", 2),
        (0, "日本", 10),
        (0, None, 4),
        (1, "ålice", 7),
        (1, "bøb", 12),
        (1, "日本", 6),
        (1, None, 5),
        (1, "🚀", 14),
        (2, "ålice", 11),
        (2, "bøb", 8),
        (2, "🚀", 20),
        (2, "ålice", 30),
        (2, "", 25),
        (3, "ålice", 34),
        (3, "bøb", 33),
        (3, "日本", 36),
        (3, "", 28),
        (4, "ålice", 45),
        (4, "🚀", 44),
        (4, "bøb", 2),
        (4, "日本", 41),
        (5, "ålice", 48),  # merges with ålice@45 of the previous batch ...
        (5, "ålice", 52),  # ... and grows the session to [45, 57): still open at the end
        (5, "bøb", 58),
        (5, "", 56),
        (5, "日本", 60),
        (5, None, 57),
        (5, "🚀", 54),  # a second, separate session of 🚀 (44 is more than 5s earlier)
    ]
    notes = ["zèbre", "äpfel", "", None, "日本語", "🚀🚀", "a"]
    batches: list[ROWS] = [[] for _ in range(6)]
    for i, (b, user, sec) in enumerate(plan):
        batches[b].append({"user": user, "ts": ts(sec), "amount": i * 3 - 10, "note": notes[i % len(notes)]})
    return {"events": Stream("user string, ts timestamp, amount long, note string", batches)}


def pandas_rows(name: str) -> dict[str, Stream]:
    accounts = ["acc-1", "äcc-2", "口座-3", "", None]
    plan = [
        # batch -> list of (account, op, amount, tag)
        [
            ("acc-1", "deposit", 100.0, "first"),
            ("äcc-2", "deposit", 50.5, "💰"),
            ("口座-3", "deposit", -0.0, "零"),
            ("", "deposit", 1.0, ""),
            (None, "deposit", 2.0, None),
        ],
        [("acc-1", "withdraw", 30.0, "rent"), ("äcc-2", "deposit", float("inf"), "∞"), ("口座-3", "close", 0.0, "bye")],
        [
            ("acc-1", "deposit", 0.25, None),
            ("", "withdraw", float("nan"), "nan"),
            ("口座-3", "deposit", 7.0, "reopen"),
            ("äcc-2", "close", 0.0, None),
        ],
        [
            ("acc-1", "withdraw", 1.0, "x"),
            ("acc-1", "withdraw", 2.0, "y"),
            ("acc-1", "deposit", 3.0, "z"),
            (None, "withdraw", 0.5, "nul"),
        ],
        [("äcc-2", "deposit", 9.0, "back"), ("", "close", 0.0, None), ("acc-5", "deposit", 5.0, "new")],
        [("acc-1", "deposit", 1.0, "last"), ("acc-5", "withdraw", 5.0, "zero"), ("口座-3", "deposit", 1.5, "日本")],
    ]
    assert all(a in accounts or a == "acc-5" for batch in plan for a, *_ in batch)
    batches = []
    seq = 0
    for batch in plan:
        rows = []
        for account, op, amount, tag in batch:
            rows.append({"seq": seq, "account": account, "op": op, "amount": amount, "tag": tag})
            seq += 1
        batches.append(rows)
    return {"events": Stream("seq long, account string, op string, amount double, tag string", batches)}


def limit_rows(name: str) -> dict[str, Stream]:
    batches = []
    for b in range(6):
        rows = []
        for i in range(5):
            n = b * 5 + i
            rows.append({"id": n, "ts": ts(n), "val": NASTY_STRINGS[n % 5]})
        batches.append(rows)
    return {"events": Stream("id long, ts timestamp, val string", batches)}


def multi_op_rows(name: str) -> dict[str, Stream]:
    rng = rng_for(name)
    batches = []
    for b in range(6):
        base = b * 8
        rows = []
        for i in range(6):
            eid = f"ev-{b}-{i}"
            row = {
                "event_id": eid,
                "ts": ts(base + rng.randint(0, 9)),
                "category": rng.choice(NASTY_STRINGS),
                "amount": rng.randint(1, 99),
            }
            rows.append(row)
            if i % 3 == 0:
                rows.append(dict(row, amount=row["amount"] + 1000))  # duplicate: dropped
        if b > 0:
            rows.append(
                {"event_id": f"ev-{b - 1}-1", "ts": ts(base), "category": "dup", "amount": 1}
            )  # duplicate of the previous batch: dropped
        batches.append(rows)
    return {"events": Stream("event_id string, ts timestamp, category string, amount long", batches)}


def join_rows(name: str) -> dict[str, Stream]:
    """Impressions (left) and clicks (right); several impressions per ad, clicks within 15s."""
    ads = ["ad-1", "ad-ü", "広告", "", None]
    left: list[ROWS] = []
    right: list[ROWS] = []
    for b in range(6):
        base = b * 10
        lrows, rrows = [], []
        for i, ad in enumerate(ads):
            if (b + i) % 4 == 3:
                continue
            lrows.append({"ad_id": ad, "imp_ts": ts(base + i), "imp_note": f"imp{b}{i}-{NASTY_STRINGS[i]}"})
            if i < 2:  # several rows per key
                lrows.append({"ad_id": ad, "imp_ts": ts(base + i + 3), "imp_note": f"imp{b}{i}b"})
        for i, ad in enumerate(ads):
            if (b + i) % 3 == 0:
                continue
            rrows.append({"click_ad_id": ad, "click_ts": ts(base + i + 2), "click_amount": b * 100 + i})
            if i == 0 and b > 0:  # a click for an impression of the previous batch
                rrows.append({"click_ad_id": ad, "click_ts": ts(base - 1), "click_amount": -b})
        left.append(lrows)
        right.append(rrows)
    return {
        "impressions": Stream("ad_id string, imp_ts timestamp, imp_note string", left),
        "clicks": Stream("click_ad_id string, click_ts timestamp, click_amount long", right),
    }


# --------------------------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------------------------

Builder = Callable[[SparkSession, dict[str, object]], tuple[object, str]]


def q_window_agg(spark, src):
    df = src["events"]
    out = (
        df.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "10 seconds"), "category", "region_id")
        .agg(
            F.count(F.lit(1)).alias("cnt"),
            F.sum("amount").alias("sum_amount"),
            F.avg("price").alias("avg_price"),
            F.max("price").alias("max_price"),
        )
    )
    return out, "update"


def q_fmt1_agg(spark, src):
    out = src["events"].groupBy("grp").agg(F.count(F.lit(1)).alias("cnt"), F.sum("amount").alias("sum_amount"))
    return out, "update"


def q_types_agg(spark, src):
    df = src["events"].select(
        "k_str",
        "k_int",
        "k_long",
        "k_short",
        "k_byte",
        "k_double",
        "k_float",
        "k_bool",
        F.expr("cast(k_dec10 as decimal(10,2))").alias("k_dec10"),
        F.expr("cast(k_dec38 as decimal(38,10))").alias("k_dec38"),
        F.expr("cast(k_date as date)").alias("k_date"),
        F.expr("cast(k_ts as timestamp)").alias("k_ts"),
        F.expr("cast(k_ntz as timestamp_ntz)").alias("k_ntz"),
        F.expr("unhex(k_bin)").alias("k_bin"),
        "k_struct",
        "k_arr_int",
        "k_arr_str",
        "v_long",
        F.expr("if(v_map_key is null, null, map(v_map_key, v_long, '∑', coalesce(v_long, 0) * 2))").alias("v_map"),
        F.expr("make_dt_interval(v_days, v_hours, v_mins, cast(v_secs as decimal(18,6)))").alias("v_dt_iv"),
        F.expr("make_ym_interval(v_years, v_months)").alias("v_ym_iv"),
        F.expr("cast(v_dec38 as decimal(38,10))").alias("v_dec38"),
        F.expr("cast(v_ntz as timestamp_ntz)").alias("v_ntz"),
        F.expr("unhex(v_bin)").alias("v_bin"),
        "v_struct",
        "v_arr_struct",
    )
    keys = [
        "k_str",
        "k_int",
        "k_long",
        "k_short",
        "k_byte",
        "k_double",
        "k_float",
        "k_bool",
        "k_dec10",
        "k_dec38",
        "k_date",
        "k_ts",
        "k_ntz",
        "k_bin",
        "k_struct",
        "k_arr_int",
        "k_arr_str",
    ]
    out = df.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("cnt"),
        F.sum("v_long").alias("sum_long"),
        F.first("v_map").alias("first_map"),
        F.last("v_dt_iv").alias("last_dt_interval"),
        F.first("v_ym_iv").alias("first_ym_interval"),
        F.last("v_dec38").alias("last_dec38"),
        F.first("v_ntz").alias("first_ntz"),
        F.first("v_struct").alias("first_struct"),
        F.last("v_arr_struct").alias("last_arr_struct"),
        F.last("v_bin").alias("last_bin"),
        F.collect_list("v_long").alias("all_longs"),
    )
    return out, "update"


def q_dedup(spark, src):
    return src["events"].withWatermark("ts", "5 seconds").dropDuplicates(["user", "ts"]), "append"


def q_dedup_within(spark, src):
    return (src["events"].withWatermark("ts", "5 seconds").dropDuplicatesWithinWatermark(["event_id"])), "append"


def q_session(spark, src):
    out = (
        src["events"]
        .withWatermark("ts", "5 seconds")
        .groupBy(F.session_window("ts", "5 seconds"), "user")
        .agg(F.count(F.lit(1)).alias("cnt"), F.sum("amount").alias("sum_amount"), F.max("note").alias("max_note"))
    )
    return out, "append"


PANDAS_OUTPUT_SCHEMA = "account string, balance double, n long, last_op string, closed boolean"
PANDAS_STATE_SCHEMA = "balance double, n long, last_op string, tags array<string>"


def _account_fn(key, pdfs, state):
    import pandas as pd

    if state.exists:
        balance, n, last_op, tags = state.get
        tags = list(tags) if tags is not None else []
    else:
        balance, n, last_op, tags = 0.0, 0, None, []
    closed = False
    for pdf in pdfs:
        for row in pdf.sort_values("seq").itertuples(index=False):
            if row.op == "deposit":
                balance += row.amount
            elif row.op == "withdraw":
                balance -= row.amount
            elif row.op == "close":
                closed = True
            n += 1
            last_op = row.op
            if row.tag is not None and not (isinstance(row.tag, float) and math.isnan(row.tag)):
                tags = [*tags, row.tag][-3:]
    if closed:
        state.remove()
    else:
        state.update((float(balance), int(n), last_op, tags))
    yield pd.DataFrame(
        {"account": [key[0]], "balance": [float(balance)], "n": [int(n)], "last_op": [last_op], "closed": [closed]}
    )


def q_apply_in_pandas(spark, src):
    from pyspark.sql.streaming.state import GroupStateTimeout

    out = (
        src["events"]
        .groupBy("account")
        .applyInPandasWithState(
            _account_fn, PANDAS_OUTPUT_SCHEMA, PANDAS_STATE_SCHEMA, "Update", GroupStateTimeout.NoTimeout
        )
    )
    return out, "update"


def q_limit(spark, src):
    return src["events"].filter(F.col("id") % 2 == 0).limit(7), "append"


def q_multi_op(spark, src):
    df = src["events"].withWatermark("ts", "10 seconds")
    if hasattr(df, "dropDuplicatesWithinWatermark"):
        df = df.dropDuplicatesWithinWatermark(["event_id"])
    else:
        df = df.dropDuplicates(["event_id", "ts"])
    out = df.groupBy(F.window("ts", "10 seconds"), "category").agg(
        F.count(F.lit(1)).alias("cnt"), F.sum("amount").alias("sum_amount")
    )
    return out, "append"


def _join(src, how):
    imps = src["impressions"].withWatermark("imp_ts", "10 seconds")
    clicks = src["clicks"].withWatermark("click_ts", "20 seconds")
    cond = F.expr("ad_id = click_ad_id AND click_ts >= imp_ts AND click_ts <= imp_ts + interval 15 seconds")
    return imps.join(clicks, cond, how)


def q_join_inner(spark, src):
    return _join(src, "inner"), "append"


def q_join_left_outer(spark, src):
    return _join(src, "leftOuter"), "append"


# --------------------------------------------------------------------------------------------
# Checkpoint specs
# --------------------------------------------------------------------------------------------


@dataclass
class Spec:
    name: str
    description: str
    build: Builder
    data: Callable[[str], dict[str, Stream]]
    conf: dict[str, str] = field(default_factory=dict)
    min_version: tuple[int, ...] = (3, 3, 0)
    max_version: tuple[int, ...] | None = None  # exclusive
    max_version_why: str = ""
    needs: tuple[str, ...] = ()  # DataFrame methods required
    # kinds of the stateful operators, in operatorId order (Spark 3.5 writes no operator metadata
    # into the checkpoint; newer versions do, and describe() checks it against this)
    operators: tuple[str, ...] = ("aggregation",)


ROCKS = {PROVIDER_CONF: ROCKSDB_PROVIDER}
ROCKS_CL = {PROVIDER_CONF: ROCKSDB_PROVIDER, CHANGELOG_CONF: "true"}

SPECS: list[Spec] = [
    Spec(
        "agg_window_hdfs",
        "withWatermark(ts, 10s).groupBy(window(ts, 10s), category, region_id)"
        ".agg(count, sum(long), avg(double), max(double)), update mode; windows are inserted, "
        "updated and evicted; aggregation state format 2",
        q_window_agg,
        window_agg_rows,
    ),
    Spec(
        "agg_fmt1_hdfs",
        "groupBy(grp).agg(count, sum(long)), update mode, no watermark (keys updated across "
        "batches), spark.sql.streaming.aggregation.stateFormatVersion=1",
        q_fmt1_agg,
        fmt1_rows,
        conf={"spark.sql.streaming.aggregation.stateFormatVersion": "1"},
    ),
    Spec(
        "agg_types_hdfs",
        "type coverage: groupBy 17 key columns (string, int, long, short, byte, double, float, "
        "boolean, decimal(10,2), decimal(38,10), date, timestamp, timestamp_ntz, binary, nested "
        "struct, array<int> with null elements, array<string>) including an all-NULL key; values: "
        "count, sum, first/last of map, day-time interval, year-month interval, decimal(38,10), "
        "timestamp_ntz, nested struct, array<struct>, binary, and collect_list (binary buffer); "
        "update mode, no watermark",
        q_types_agg,
        types_rows,
    ),
    Spec(
        "dedup_hdfs",
        "withWatermark(ts, 5s).dropDuplicates([user, ts]), append mode; duplicates within and "
        "across batches, eviction by watermark",
        q_dedup,
        dedup_rows,
        operators=("dedup",),
    ),
    Spec(
        "dedup_within_wm_hdfs",
        "withWatermark(ts, 5s).dropDuplicatesWithinWatermark([event_id]), append mode",
        q_dedup_within,
        dedup_within_rows,
        needs=("dropDuplicatesWithinWatermark",),
        operators=("dedup_within_watermark",),
    ),
    Spec(
        "session_window_hdfs",
        "withWatermark(ts, 5s).groupBy(session_window(ts, 5s), user).agg(count, sum(long), "
        "max(string)), append mode; sessions merge across batches and get evicted",
        q_session,
        session_rows,
        operators=("session_window",),
    ),
    Spec(
        "apply_in_pandas_hdfs",
        "groupBy(account).applyInPandasWithState(state 'balance double, n long, last_op string, "
        "tags array<string>', Update, NoTimeout); a 'close' op calls state.remove(); "
        "flatMapGroupsWithState state format 2",
        q_apply_in_pandas,
        pandas_rows,
        operators=("flatmapgroupswithstate",),
    ),
    Spec(
        "apply_in_pandas_fmt1_hdfs",
        "as apply_in_pandas_hdfs with spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion=1",
        q_apply_in_pandas,
        pandas_rows,
        conf={"spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "1"},
        operators=("flatmapgroupswithstate",),
    ),
    Spec(
        "limit_hdfs",
        "filter(id % 2 == 0).limit(7), append mode (StreamingGlobalLimitExec)",
        q_limit,
        limit_rows,
        operators=("limit",),
    ),
    Spec(
        "multi_op_hdfs",
        "withWatermark(ts, 10s).dropDuplicatesWithinWatermark([event_id]) then "
        "groupBy(window(ts, 10s), category).agg(count, sum), append mode: two stateful operators",
        q_multi_op,
        multi_op_rows,
        operators=("aggregation", "dedup_within_watermark"),
    ),
    Spec(
        "agg_zstd_hdfs",
        "the query of agg_window_hdfs with the zstd state store codec",
        q_window_agg,
        window_agg_rows,
        conf={CODEC_CONF: "zstd"},
    ),
    Spec(
        "agg_snappy_hdfs",
        "the query of agg_window_hdfs with the snappy state store codec",
        q_window_agg,
        window_agg_rows,
        conf={CODEC_CONF: "snappy"},
    ),
    Spec(
        "agg_window_rocksdb",
        "the query of agg_window_hdfs on the RocksDB provider, changelog checkpointing off",
        q_window_agg,
        window_agg_rows,
        conf=dict(ROCKS),
    ),
    Spec(
        "agg_window_rocksdb_cl",
        "the query of agg_window_hdfs on the RocksDB provider with changelog checkpointing",
        q_window_agg,
        window_agg_rows,
        conf=dict(ROCKS_CL),
        min_version=(3, 4, 0),  # changelog checkpointing
    ),
    Spec(
        "session_window_rocksdb_cl",
        "the query of session_window_hdfs on the RocksDB provider with changelog checkpointing",
        q_session,
        session_rows,
        conf=dict(ROCKS_CL),
        min_version=(3, 4, 0),  # changelog checkpointing
        operators=("session_window",),
    ),
    Spec(
        "dedup_rocksdb",
        "the query of dedup_hdfs on the RocksDB provider, changelog checkpointing off",
        q_dedup,
        dedup_rows,
        conf=dict(ROCKS),
        operators=("dedup",),
    ),
    Spec(
        "agg_types_rocksdb_cl",
        "the query of agg_types_hdfs on the RocksDB provider with changelog checkpointing",
        q_types_agg,
        types_rows,
        conf=dict(ROCKS_CL),
        min_version=(3, 4, 0),  # changelog checkpointing
    ),
    Spec(
        "join_inner_hdfs",
        "stream-stream inner join: impressions withWatermark(imp_ts, 10s) join clicks "
        "withWatermark(click_ts, 20s) on ad_id = click_ad_id and click_ts in "
        "[imp_ts, imp_ts + 15s]; several rows per key; append mode",
        q_join_inner,
        join_rows,
        operators=("join",),
    ),
    Spec(
        "join_left_outer_rocksdb_cl",
        "the join of join_inner_hdfs as a left outer join, on the RocksDB provider with changelog checkpointing",
        q_join_left_outer,
        join_rows,
        conf=dict(ROCKS_CL),
        min_version=(3, 4, 0),  # changelog checkpointing
        operators=("join",),
    ),
    Spec(
        "join_fmt1_hdfs",
        "the join of join_inner_hdfs with spark.sql.streaming.join.stateFormatVersion=1",
        q_join_inner,
        join_rows,
        conf={"spark.sql.streaming.join.stateFormatVersion": "1"},
        operators=("join",),
        max_version=(3, 6, 0),
        max_version_why="join state format 1 checkpoints are only generated with the Spark 3.5 "
        "writer (legacy format; one writer version is enough)",
    ),
]


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


def make_spark() -> SparkSession:
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("state_reader-golden")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config(MIN_DELTAS_CONF, "2")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "200ms")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.streaming.metricsEnabled", "false")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def write_input(dir_path: str, rows: ROWS, index: int) -> None:
    os.makedirs(dir_path, exist_ok=True)
    path = os.path.join(dir_path, f"batch-{index:02d}.json")
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, allow_nan=True, sort_keys=True))
            f.write("\n")
    mtime = INPUT_MTIME_BASE + 60 * index
    os.utime(path, (mtime, mtime))


def run_query(spark, spec: Spec, streams: dict[str, Stream], input_dirs: dict[str, str], checkpoint: str) -> None:
    src = {}
    for stream_name, stream in streams.items():
        src[stream_name] = (
            spark.readStream.schema(stream.schema).option("maxFilesPerTrigger", 1).json(input_dirs[stream_name])
        )
    df, mode = spec.build(spark, src)
    query = (
        df.writeStream.format("noop")
        .outputMode(mode)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def generate(spark_base: SparkSession, spec: Spec, out_dir: str, input_root: str) -> None:
    checkpoint = os.path.join(out_dir, spec.name)
    if os.path.exists(checkpoint):
        shutil.rmtree(checkpoint)
    streams = spec.data(spec.name)
    n_batches = {len(s.batches) for s in streams.values()}
    assert len(n_batches) == 1, "all input streams must have the same number of batches"
    n = n_batches.pop()

    input_dirs = {}
    for stream_name in streams:
        d = os.path.join(input_root, spec.name, stream_name)
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)
        input_dirs[stream_name] = d

    spark = spark_base.newSession()
    for k, v in spec.conf.items():
        spark.conf.set(k, v)

    # Run 1: all batches but the last, then give maintenance time to write snapshots.
    for stream_name, stream in streams.items():
        for i in range(n - 1):
            write_input(input_dirs[stream_name], stream.batches[i], i)
    run_query(spark, spec, streams, input_dirs, checkpoint)
    time.sleep(SNAPSHOT_WAIT_SECONDS)
    # Run 2: restart from the checkpoint and consume the last batch. The state store reads
    # minDeltasForSnapshot when a query starts (the offset log does not pin it), so raising it
    # keeps this run from writing snapshots: the newest version stays "snapshot + deltas".
    spark.conf.set(MIN_DELTAS_CONF, "1000000")
    for stream_name, stream in streams.items():
        write_input(input_dirs[stream_name], stream.batches[n - 1], n - 1)
    run_query(spark, spec, streams, input_dirs, checkpoint)


# --------------------------------------------------------------------------------------------
# Describing a checkpoint for the manifest
# --------------------------------------------------------------------------------------------

# Known limitations of Spark's own reader (spark.read.format("statestore"), Spark 4.x) on some
# checkpoints, keyed by (checkpoint name, writer "major.minor"); copied into the manifest.
KNOWN_ISSUES = {
    ("session_window_rocksdb_cl", "3.5"): [
        "Spark 3.5 writes no operator metadata (state/<op>/_metadata/metadata), so Spark 4.x's "
        "statestore reader assumes numColsPrefixKey=0, but the RocksDB store of a session window "
        "encodes its keys with a 1-column prefix (user): the read fails with "
        "STATE_STORE_KEY_ROW_FORMAT_VALIDATION_FAILURE. Adding that metadata file (as Spark 4.0 "
        "writes it, numColsPrefixKey=1) to a copy of the checkpoint makes Spark 4.3 read it.",
    ],
}

OPERATOR_KINDS = {
    "stateStoreSave": "aggregation",
    "dedupe": "dedup",
    "dedupeWithinWatermark": "dedup_within_watermark",
    "sessionWindowStateStoreSaveExec": "session_window",
    "flatMapGroupsWithState": "flatmapgroupswithstate",
    "applyInPandasWithState": "flatmapgroupswithstate",
    "globalLimit": "limit",
    "symmetricHashJoin": "join",
}

JOIN_STORES = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")

FORMAT_CONFS = {
    "aggregation": "spark.sql.streaming.aggregation.stateFormatVersion",
    "flatmapgroupswithstate": "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion",
    "join": "spark.sql.streaming.join.stateFormatVersion",
    "session_window": "spark.sql.streaming.sessionWindow.stateFormatVersion",
}


def read_log_json(path: str) -> dict:
    """The first JSON line after the version line of a metadata/offset log file."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in lines[1:]:
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    return {}


def log_batch_ids(d: str) -> list[int]:
    if not os.path.isdir(d):
        return []
    return sorted(int(x) for x in os.listdir(d) if x.isdigit())


def describe(
    spec: Spec, out_dir: str, manifest_dir: str, writer_version: str, conf_default: Callable[[str], str | None]
) -> dict:
    checkpoint = os.path.join(out_dir, spec.name)
    commits = log_batch_ids(os.path.join(checkpoint, "commits"))
    offsets = log_batch_ids(os.path.join(checkpoint, "offsets"))
    conf = {}
    if offsets:
        with open(os.path.join(checkpoint, "offsets", str(offsets[-1])), encoding="utf-8") as f:
            lines = f.read().splitlines()
        conf = json.loads(lines[1]).get("conf", {})

    def setting(key, default):
        # the offset log records the confs that a checkpoint pins; else what this script set;
        # else the Spark default of the writer
        for value in (conf.get(key), spec.conf.get(key), conf_default(key)):
            if value is not None:
                return value
        return default

    provider_class = setting(PROVIDER_CONF, HDFS_PROVIDER)
    provider = "rocksdb" if "RocksDB" in provider_class else "hdfs"
    state_dir = os.path.join(checkpoint, "state")
    has_changelog = False
    for _root, _dirs, files in os.walk(state_dir):
        if any(f.endswith(".changelog") for f in files):
            has_changelog = True
    op_ids = sorted(int(x) for x in os.listdir(state_dir) if x.isdigit())
    has_operator_metadata = all(
        os.path.exists(os.path.join(state_dir, str(i), "_metadata", "metadata")) for i in op_ids
    )
    if len(op_ids) != len(spec.operators):
        raise RuntimeError(f"{spec.name}: expected operators {spec.operators}, found state directories {op_ids}")
    operators = []
    for op_id, kind in zip(op_ids, spec.operators, strict=True):
        stores = list(JOIN_STORES) if kind == "join" else ["default"]
        meta_path = os.path.join(state_dir, str(op_id), "_metadata", "metadata")
        if os.path.exists(meta_path):  # written by Spark >= 4.0
            meta = read_log_json(meta_path)
            op_name = meta.get("operatorInfo", {}).get("operatorName")
            if OPERATOR_KINDS.get(op_name) != kind:
                raise RuntimeError(f"{spec.name}: operator {op_id} is {op_name!r}, expected {kind}")
            meta_stores = [st["storeName"] for st in meta.get("stateStoreInfo", [])]
            if sorted(meta_stores) != sorted(stores):
                raise RuntimeError(f"{spec.name}: operator {op_id} stores {meta_stores}")
        fmt_conf = FORMAT_CONFS.get(kind)
        fmt = setting(fmt_conf, None) if fmt_conf else None
        operators.append(
            {
                "operatorId": op_id,
                "kind": kind,
                "stores": stores,
                "state_format": int(fmt) if fmt is not None else None,
            }
        )
    return {
        "name": spec.name,
        "writer_version": writer_version,
        "path": os.path.relpath(checkpoint, manifest_dir).replace(os.sep, "/"),
        "provider": provider,
        "changelog": has_changelog,
        "codec": setting(CODEC_CONF, "lz4"),
        "operators": operators,
        "last_batch_id": commits[-1] if commits else None,
        # False for Spark 3.5: then the state-metadata source finds no operators
        "operator_metadata": has_operator_metadata,
        "input_batches": len(next(iter(spec.data(spec.name).values())).batches),
        "conf": dict(sorted(spec.conf.items())),
        "description": spec.description,
        "known_issues": KNOWN_ISSUES.get((spec.name, ".".join(writer_version.split(".")[:2])), []),
    }


def merge_manifest(
    manifest_path: str, writer_version: str, written: list[dict], skipped: list[dict], names_run: list[str]
) -> None:
    manifest = {"checkpoints": [], "skipped": []}
    if os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)

    def keep(entry):
        return not (entry["writer_version"] == writer_version and entry["name"] in names_run)

    order = {s.name: i for i, s in enumerate(SPECS)}

    def sort_key(entry):
        return (version_tuple(entry["writer_version"]), order.get(entry["name"], 999), entry["name"])

    manifest["checkpoints"] = sorted([e for e in manifest.get("checkpoints", []) if keep(e)] + written, key=sort_key)
    manifest["skipped"] = sorted([e for e in manifest.get("skipped", []) if keep(e)] + skipped, key=sort_key)
    with open(manifest_path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output directory, e.g. tests/golden/spark-3.5.8")
    parser.add_argument(
        "--manifest",
        default=DEFAULT_MANIFEST,
        help="manifest to merge into (default: manifest.json beside this script)",
    )
    parser.add_argument("--only", nargs="*", help="generate only these checkpoints")
    parser.add_argument(
        "--input-root",
        default=None,
        help="scratch directory for input files (default: a fixed directory under the system temp dir)",
    )
    args = parser.parse_args(argv)

    out_dir = os.path.abspath(args.out)
    manifest_path = os.path.abspath(args.manifest)
    manifest_dir = os.path.dirname(manifest_path)
    specs = SPECS
    if args.only:
        unknown = set(args.only) - {s.name for s in SPECS}
        if unknown:
            parser.error(f"unknown checkpoints: {sorted(unknown)}")
        specs = [s for s in SPECS if s.name in args.only]

    spark = make_spark()
    writer_version = spark.version
    vt = version_tuple(writer_version)
    # A fixed scratch location keeps the input paths that Spark records in sources/ stable.
    input_root = args.input_root or os.path.join(tempfile.gettempdir(), "state_reader_golden_input", writer_version)
    os.makedirs(out_dir, exist_ok=True)

    def conf_default(key):
        try:
            return spark.conf.get(key)
        except Exception:
            return None

    written, skipped, failures = [], [], []
    for spec in specs:
        why = None
        if vt < spec.min_version:
            why = f"needs Spark >= {'.'.join(map(str, spec.min_version))}"
        elif spec.max_version is not None and vt >= spec.max_version:
            why = spec.max_version_why or f"not generated with Spark >= {spec.max_version}"
        else:
            probe = spark.range(1)
            missing = [m for m in spec.needs if not hasattr(probe, m)]
            if missing:
                why = f"pyspark {writer_version} has no DataFrame.{', '.join(missing)}"
        if why:
            print(f"[skip] {spec.name}: {why}", flush=True)
            skipped.append({"name": spec.name, "writer_version": writer_version, "why": why})
            continue
        print(f"[run ] {spec.name}", flush=True)
        started = time.time()
        try:
            generate(spark, spec, out_dir, input_root)
            entry = describe(spec, out_dir, manifest_dir, writer_version, conf_default)
        except Exception as e:  # record and continue with the other checkpoints
            traceback.print_exc()
            failures.append(spec.name)
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            skipped.append(
                {
                    "name": spec.name,
                    "writer_version": writer_version,
                    "why": f"failed under Spark {writer_version}: {msg[:300]}",
                }
            )
            shutil.rmtree(os.path.join(out_dir, spec.name), ignore_errors=True)
            continue
        written.append(entry)
        print(
            f"[done] {spec.name}: last batch {entry['last_batch_id']}, "
            f"{len(entry['operators'])} operator(s), {time.time() - started:.1f}s",
            flush=True,
        )

    spark.stop()
    shutil.rmtree(input_root, ignore_errors=True)
    if args.input_root is None:
        with contextlib.suppress(OSError):  # the shared parent, once no other version uses it
            os.rmdir(os.path.dirname(input_root))
    merge_manifest(manifest_path, writer_version, written, skipped, [s.name for s in specs])
    print(f"wrote {len(written)} checkpoint(s), skipped {len(skipped)}; manifest: {manifest_path}")
    if failures:
        print(f"FAILED: {failures}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
