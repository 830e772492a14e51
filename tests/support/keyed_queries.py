"""Small queries over ``(ts, k, v)`` rows, each writing a checkpoint of its own (HDFS-backed unless its confs
say otherwise): the real queries that have a problem ``doctor`` finds, and their healthy twins."""

from __future__ import annotations

from pathlib import Path

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


def run_keyed(
    spark, tmp_path: Path, name: str, build, *, output_mode: str = "update", confs: dict | None = None, batches=None
) -> str:
    """Run ``build`` over ``batches`` (new keys each batch by default) into ``tmp_path / name``."""
    query = Query(
        build,
        output_mode=output_mode,
        confs={**HDFS, **(confs or {})},
        schema=SCHEMA,
        batches=batches or keyed_rows(new_keys),
    )
    return run_query(spark, query, tmp_path / name)
