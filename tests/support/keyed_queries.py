"""Small queries over ``(ts, k, v)`` rows, each writing a checkpoint of its own (HDFS-backed unless its confs
say otherwise): the real queries that have a problem ``doctor`` finds, and their healthy twins."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import functions as F

from tests.support.cli import run as cli_run
from tests.support.streaming_queries import HDFS, T0, Query, run_query

SCHEMA = "ts timestamp, k string, v long"

BATCHES = 10


def keyed_rows(keys_per_batch, event_time=lambda b, i: T0 + b * 10 + i):
    """The input of ``BATCHES`` batches: batch b holds one row per key of ``keys_per_batch(b)``."""
    return lambda: [
        [{"ts": event_time(b, i), "k": key, "v": b * 100 + i} for i, key in enumerate(keys_per_batch(b))]
        for b in range(BATCHES)
    ]


def new_keys(b: int) -> list[str]:
    """Six keys no earlier batch had."""
    return [f"k{b}-{i}" for i in range(6)]


def growing_keys(b: int) -> list[str]:
    """Every key of the batches before and one more: a state keyed by them grows, and no key leaves it."""
    return [f"k{i}" for i in range(b + 1)]


def close_event_times(b: int, i: int) -> int:
    """Event times within two seconds of each other in a batch, ten seconds on from the batch before."""
    return T0 + b * 10 + i % 3


def keyed_join(left_watermark: bool, right_watermark: bool):
    """An inner stream-stream join of the input with itself on ``k``, a right row matching the left rows
    within three seconds of its event time, with ``withWatermark`` on the inputs chosen. With both, Spark
    evicts each side's rows once the other input's watermark leaves them out of that range."""

    def build(left, right):
        left = left.select(F.col("ts").alias("lts"), F.col("k").alias("lk"), F.col("v").alias("lv"))
        right = right.select(F.col("ts").alias("rts"), F.col("k").alias("rk"), F.col("v").alias("rv"))
        if left_watermark:
            left = left.withWatermark("lts", "5 seconds")
        if right_watermark:
            right = right.withWatermark("rts", "5 seconds")
        condition = F.expr("lk = rk AND rts BETWEEN lts - interval 3 seconds AND lts + interval 3 seconds")
        return left.join(right, condition, "inner")

    return build


def run_keyed(
    spark,
    tmp_path: Path,
    name: str,
    build,
    *,
    output_mode: str = "update",
    confs: dict | None = None,
    batches=None,
    sources: int = 1,
) -> str:
    """Run ``build`` over ``batches`` (new keys each batch by default) into ``tmp_path / name``; with
    ``sources=2``, ``build`` takes the input twice, as two streams (a stream-stream join)."""
    query = Query(
        build,
        output_mode=output_mode,
        confs={**HDFS, **(confs or {})},
        schema=SCHEMA,
        batches=batches or keyed_rows(new_keys),
        sources=sources,
    )
    return run_query(spark.newSession(), query, tmp_path / name)  # a session of its own: pairs run side by side


def kinds(path: str, **thresholds) -> set[str]:
    """The kinds of the findings ``doctor`` reports on ``path``."""
    import state_reader

    return {f.kind for f in state_reader.diagnose(path, thresholds=thresholds).findings}


def windowed(df):
    """A windowed count with a watermark: evicts, unless its output mode keeps every window (complete)."""
    return df.withWatermark("ts", "5 seconds").groupBy(F.window("ts", "10 seconds")).agg(F.count("*").alias("n"))


def stats_text(path: str) -> str:
    """What ``state-reader stats`` prints for ``path``, wide enough for every column."""

    proc = cli_run("stats", path, env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
