"""Write the benchmark checkpoints with real streaming queries.

One checkpoint per (provider, number of keys): ``groupBy(key)`` over a string
key with ``count``, ``sum`` of a long and ``max`` of a double, 8 state
partitions (``--partitions``), two micro-batches (every key once, then a tenth of the keys
again). The aggregation buffers are then ``count``, ``sum`` and ``max``:
unique names, which Spark's ``toArrow()`` needs.

Other kinds of state are written only when asked for (``--kinds``), each in a directory named
after its kind (``join-rocksdb-1000000``; the aggregations keep their names):

* ``join``: a stream-stream inner join (join state format 2) buffering ``keys`` input rows, half
  on each side, two rows per join key on a side, in one micro-batch (and the batch without data
  Spark runs after it as the watermarks move). Each side has a watermark
  (a year behind, so that no row is evicted) and the condition bounds the two event times, as a
  join Spark can run in state format 4 needs.
* ``tws``: a ``transformWithState`` (the Row API) keeping a value state of two longs for each of
  ``keys`` string grouping keys, in one micro-batch; RocksDB only, as Spark runs it.

Checkpoints are cached under the data directory (``--data-dir``, or the
``STATE_READER_BENCH_DATA`` environment variable, default ``benchmarks/.data``)
and reused by later runs; a ``DONE`` marker tells finished ones from
interrupted ones.

    python benchmarks/generate.py --keys 100000,1000000 --providers hdfs,rocksdb
    python benchmarks/generate.py --keys 1M --providers rocksdb --kinds join,tws
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
AGGREGATION, JOIN, TWS = "aggregation", "join", "tws"
KINDS = (AGGREGATION, JOIN, TWS)
# each kind's output mode, and the providers Spark runs it on (a kind not named here: any)
OUTPUT_MODES = {AGGREGATION: "update", JOIN: "append", TWS: "update"}
KIND_PROVIDERS = {TWS: ("rocksdb", "rocksdb-changelog")}
JOIN_FORMAT_CONF = "spark.sql.streaming.join.stateFormatVersion"
# the joins' event times: one row a second from 2026-01-01
_T0_SECONDS = 1_767_225_600


def data_dir(given: str | None = None) -> Path:
    """Where checkpoints are cached: the option, else the environment, else benchmarks/.data."""
    return Path(given or os.environ.get(DATA_ENV) or DEFAULT_DATA_DIR).resolve()


def checkpoint_dir(root: Path, provider: str, keys: int, partitions: int = PARTITIONS, kind: str = AGGREGATION) -> Path:
    """The checkpoint of one (provider, key count, state partitions) of a kind under the data directory."""
    suffix = "" if partitions == PARTITIONS else f"-p{partitions}"
    prefix = "" if kind == AGGREGATION else f"{kind}-"
    return root / f"{prefix}{provider}-{keys}{suffix}" / "checkpoint"


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


def _aggregation(spark, directory: Path, keys: int):
    """The aggregation over two micro-batches of input."""
    from pyspark.sql import functions as F

    _write_input(directory, keys)
    events = (
        spark.readStream.schema("key string, amount long, price double")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(directory))
    )
    return events.groupBy("key").agg(
        F.count(F.lit(1)).alias("count"), F.sum("amount").alias("total"), F.max("price").alias("top")
    )


def _user_names(ids):
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.binary_join_element_wise("user-", pc.cast(pa.array(ids), pa.string()), "")


def _join(spark, directory: Path, rows: int):
    """The inner join over one micro-batch: ``rows // 2`` rows a side, two a join key, a second apart."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    ids = np.arange(rows // 2, dtype=np.int64)
    names = _user_names(ids // 2)
    times = pa.array((_T0_SECONDS + ids) * 1_000_000, pa.timestamp("us", tz="UTC"))
    sides = {
        "left": ("lkey string, lts timestamp, amount long", [names, times, pa.array(ids * 3)]),
        "right": ("rkey string, rts timestamp, tag string", [names, times, _user_names(ids % 1000)]),
    }
    frames = {}
    for side, (schema, columns) in sides.items():
        (directory / side).mkdir(parents=True)
        table = pa.table(dict(zip([c.split()[0] for c in schema.split(", ")], columns, strict=True)))
        pq.write_table(table, directory / side / "part-0.parquet")
        frames[side] = spark.readStream.schema(schema).parquet(str(directory / side))
    left = frames["left"].withWatermark("lts", "365 days")
    right = frames["right"].withWatermark("rts", "365 days")
    return left.join(right, F.expr("lkey = rkey AND rts BETWEEN lts - interval 1 minute AND lts + interval 1 minute"))


def _tws(spark, directory: Path, keys: int):
    """transformWithState keeping (rows seen, their amount) in a value state per key, over one micro-batch."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Totals(StatefulProcessor):
        def init(self, handle) -> None:
            self.totals = handle.getValueState("totals", "count long, amount long")

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803 - PySpark's names
            count = amount = 0
            for row in rows:
                count += 1
                amount += row.amount
            self.totals.update((count, amount))
            return iter(())

        def close(self) -> None:
            pass

    ids = np.arange(keys, dtype=np.int64)
    directory.mkdir(parents=True)
    pq.write_table(pa.table({"key": _user_names(ids), "amount": pa.array(ids * 3)}), directory / "part-0.parquet")
    events = spark.readStream.schema("key string, amount long").parquet(str(directory))
    return events.groupBy("key").transformWithState(Totals(), "key string, count long", "Update", "None")


_BUILDERS = {AGGREGATION: _aggregation, JOIN: _join, TWS: _tws}


def generate(
    spark, root: Path, provider: str, keys: int, partitions: int = PARTITIONS, kind: str = AGGREGATION
) -> Path:
    """Run the query of ``kind`` into a fresh checkpoint unless a finished one is cached."""
    if provider not in KIND_PROVIDERS.get(kind, PROVIDERS):
        raise ValueError(f"Spark runs {kind} on {', '.join(KIND_PROVIDERS[kind])} only, not {provider}")
    out = checkpoint_dir(root, provider, keys, partitions, kind).parent
    checkpoint = out / "checkpoint"
    if (out / DONE).exists():
        return checkpoint
    if out.exists():
        shutil.rmtree(out)
    started = time.perf_counter()
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS[provider])
    spark.conf.set(CHANGELOG_CONF, str(provider in CHANGELOG_PROVIDERS).lower())  # frozen into the checkpoint
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))  # frozen into the checkpoint
    if kind == JOIN:
        spark.conf.set(JOIN_FORMAT_CONF, "2")  # frozen into the checkpoint
    query = (
        _BUILDERS[kind](spark, out / "input", keys)
        .writeStream.format("noop")
        .outputMode(OUTPUT_MODES[kind])
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    shutil.rmtree(out / "input")
    label = "keys" if kind == AGGREGATION else f"keys, {kind}" if kind == TWS else f"rows, {kind}"
    (out / DONE).write_text(
        f"{keys} {label}, {provider}, {partitions} partitions, {time.perf_counter() - started:.1f} s\n"
    )
    return checkpoint


def ensure(
    root: Path,
    providers: list[str],
    key_counts: list[int],
    spark=None,
    partitions: int = PARTITIONS,
    kind: str = AGGREGATION,
) -> dict[tuple[str, int], Path]:
    """Checkpoints of ``kind`` for every (provider, keys) with ``partitions`` state partitions, generating
    the missing ones with ``spark`` (or a session of their own)."""
    paths = {(p, n): checkpoint_dir(root, p, n, partitions, kind) for p in providers for n in key_counts}
    missing = [(p, n) for (p, n), path in paths.items() if not (path.parent / DONE).exists()]
    if missing:
        own = spark is None
        spark = spark or build_session("state-reader-bench-generate")
        try:
            for p, n in missing:
                what = "" if kind == AGGREGATION else f"{kind} "
                print(
                    f"generating {what}{p} checkpoint with {n} {'rows' if kind == JOIN else 'keys'}, "
                    f"{partitions} partitions ...",
                    file=sys.stderr,
                    flush=True,
                )
                generate(spark, root, p, n, partitions, kind)
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
    parser.add_argument("--kinds", default=AGGREGATION, help=f"comma-separated: {', '.join(KINDS)}")
    args = parser.parse_args(argv)
    kinds = args.kinds.split(",")
    if unknown := sorted(set(kinds) - set(KINDS)):
        parser.error(f"unknown kinds {', '.join(unknown)}; known: {', '.join(KINDS)}")
    root, providers, key_counts = data_dir(args.data_dir), args.providers.split(","), parse_keys(args.keys)
    for kind in kinds:
        paths = ensure(root, providers, key_counts, partitions=args.partitions, kind=kind)
        for (provider, keys), path in paths.items():
            print(f"{provider:8} {keys:>9}  {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
