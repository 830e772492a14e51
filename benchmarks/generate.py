"""Write the benchmark checkpoints with a real streaming aggregation.

One checkpoint per (provider, number of keys): ``groupBy(key)`` over a string
key with ``count``, ``sum`` of a long and ``max`` of a double, 8 state
partitions (``--partitions``), two micro-batches (every key once, then a tenth of the keys
again). The aggregation buffers are then ``count``, ``sum`` and ``max``:
unique names, which Spark's ``toArrow()`` needs.

Checkpoints are cached under the data directory (``--data-dir``, or the
``STATE_READER_BENCH_DATA`` environment variable, default ``benchmarks/.data``)
and reused by later runs; a ``DONE`` marker tells finished ones from
interrupted ones.

    python benchmarks/generate.py --keys 100000,1000000 --providers hdfs,rocksdb
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DATA_DIR = HERE / ".data"
DATA_ENV = "STATE_READER_BENCH_DATA"
PARTITIONS = 8
PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "rocksdb-changelog": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
# providers written with RocksDB's changelog checkpointing (a changelog per batch beside the zips)
CHANGELOG_PROVIDERS = {"rocksdb-changelog"}
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
DONE = "DONE"


def data_dir(given: str | None = None) -> Path:
    """Where checkpoints are cached: the option, else the environment, else benchmarks/.data."""
    return Path(given or os.environ.get(DATA_ENV) or DEFAULT_DATA_DIR).resolve()


def checkpoint_dir(root: Path, provider: str, keys: int, partitions: int = PARTITIONS) -> Path:
    """The checkpoint of one (provider, key count, state partitions) under the data directory."""
    suffix = "" if partitions == PARTITIONS else f"-p{partitions}"
    return root / f"{provider}-{keys}{suffix}" / "checkpoint"


def median_seconds(fn, repeat: int) -> float:
    """The median wall time of ``repeat`` calls of ``fn`` (what the benchmarks report)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def parse_keys(text: str) -> list[int]:
    """'100k,1M,5000000' -> [100000, 1000000, 5000000]."""
    out = []
    for item in text.split(","):
        item = item.strip().lower()
        scale = {"k": 1_000, "m": 1_000_000}.get(item[-1:], 1)
        out.append(int(float(item.rstrip("km")) * scale))
    return out


def build_session(app: str = "state-reader-bench", memory: str = "8g"):
    """A local[2] SparkSession sized for the 5M-key checkpoints."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", memory)
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _write_input(directory: Path, keys: int) -> None:
    """Two parquet files, one per micro-batch: every key, then every tenth key."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    directory.mkdir(parents=True)
    for batch, ids in enumerate((np.arange(keys, dtype=np.int64), np.arange(0, keys, 10, dtype=np.int64))):
        names = pc.binary_join_element_wise("user-", pc.cast(pa.array(ids), pa.string()), "")
        table = pa.table(
            {
                "key": names,
                "amount": pa.array(ids * 3 + batch),
                "price": pa.array((ids % 1000) * 0.5 + batch),
            }
        )
        pq.write_table(table, directory / f"part-{batch}.parquet")


def generate(spark, root: Path, provider: str, keys: int, partitions: int = PARTITIONS) -> Path:
    """Run the aggregation into a fresh checkpoint unless a finished one is cached."""
    from pyspark.sql import functions as F

    out = checkpoint_dir(root, provider, keys, partitions).parent
    checkpoint = out / "checkpoint"
    if (out / DONE).exists():
        return checkpoint
    if out.exists():
        shutil.rmtree(out)
    started = time.perf_counter()
    _write_input(out / "input", keys)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS[provider])
    spark.conf.set(CHANGELOG_CONF, str(provider in CHANGELOG_PROVIDERS).lower())  # frozen into the checkpoint
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))  # frozen into the checkpoint
    events = (
        spark.readStream.schema("key string, amount long, price double")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(out / "input"))
    )
    counts = events.groupBy("key").agg(
        F.count(F.lit(1)).alias("count"), F.sum("amount").alias("total"), F.max("price").alias("top")
    )
    query = (
        counts.writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    shutil.rmtree(out / "input")
    (out / DONE).write_text(
        f"{keys} keys, {provider}, {partitions} partitions, {time.perf_counter() - started:.1f} s\n"
    )
    return checkpoint


def ensure(
    root: Path, providers: list[str], key_counts: list[int], spark=None, partitions: int = PARTITIONS
) -> dict[tuple[str, int], Path]:
    """Checkpoints for every (provider, keys) with ``partitions`` state partitions, generating
    the missing ones with ``spark`` (or a session of their own)."""
    paths = {(p, n): checkpoint_dir(root, p, n, partitions) for p in providers for n in key_counts}
    missing = [(p, n) for (p, n), path in paths.items() if not (path.parent / DONE).exists()]
    if missing:
        own = spark is None
        spark = spark or build_session("state-reader-bench-generate")
        try:
            for p, n in missing:
                print(
                    f"generating {p} checkpoint with {n} keys, {partitions} partitions ...", file=sys.stderr, flush=True
                )
                generate(spark, root, p, n, partitions)
        finally:
            if own:
                spark.stop()
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="100000,1000000", help="comma-separated key counts (100k, 1M allowed)")
    parser.add_argument("--providers", default="hdfs,rocksdb", help="comma-separated: hdfs, rocksdb, rocksdb-changelog")
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help=f"state partitions (default {PARTITIONS})")
    parser.add_argument("--data-dir", default=None, help=f"cache directory (default ${DATA_ENV} or benchmarks/.data)")
    args = parser.parse_args(argv)
    paths = ensure(
        data_dir(args.data_dir), args.providers.split(","), parse_keys(args.keys), partitions=args.partitions
    )
    for (provider, keys), path in paths.items():
        print(f"{provider:8} {keys:>9}  {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
