"""Where the time of a read through Spark goes: our data source against the cost of
moving the same rows through *any* Python data source.

On one benchmark checkpoint, in one warm SparkSession, interleaved, medians:

* ``builtin``         ``spark.read.format("statestore").load(cp).toArrow()``
* ``ours-spark``      ``spark.read.format("state_reader.statestore").load(cp).toArrow()``
* ``transport``       a Python data source with the same schema and the same number of
                      input partitions that decodes nothing: each task memory-maps an
                      Arrow IPC file holding its share of the already decoded state and
                      yields its record batches. What is left is what every Python data
                      source pays: planning in a Python worker, a worker per task, Arrow
                      from the worker to the JVM, rows, and back to Arrow for ``toArrow()``
* ``ours``            ``state_reader.read_state(cp)``, no Spark

``builtin / transport`` bounds what any Python data source can reach on this read.

    python benchmarks/bench_spark_path.py [--keys 1M] [--provider hdfs] [--partitions 64] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])

import generate  # noqa: E402


def write_shares(table, directory: Path, tasks: int) -> list[str]:
    """The table cut into ``tasks`` Arrow IPC files, one per input partition."""
    import pyarrow as pa

    paths = []
    step = -(-table.num_rows // tasks)
    for i in range(tasks):
        path = directory / f"share-{i}.arrow"
        part = table.slice(i * step, step)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, part.schema) as writer:
            for batch in part.to_batches(max_chunksize=65536):
                writer.write_batch(batch)
        paths.append(str(path))
    return paths


def transport_source(schema):
    """A Python data source that yields prepared Arrow files (option ``files``: paths joined by ';')."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Reader(DataSourceReader):
        def __init__(self, files: list[str]) -> None:
            self.files = files

        def partitions(self):
            return [InputPartition(f) for f in self.files]

        def read(self, partition):
            import pyarrow as pa

            with pa.memory_map(partition.value) as source:
                reader = pa.ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)

    class Transport(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_transport"

        def schema(self):
            return schema

        def reader(self, schema):
            return Reader(self.options["files"].split(";"))

    return Transport


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="1M")
    parser.add_argument("--provider", default="hdfs", choices=sorted(generate.PROVIDERS))
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    keys = generate.parse_keys(args.keys)[0]

    import state_reader

    spark = generate.build_session("state-reader-bench-spark-path")
    state_reader.register(spark)
    try:
        root = generate.data_dir(args.data_dir)
        cp = str(generate.ensure(root, [args.provider], [keys], spark, args.partitions)[(args.provider, keys)])
        table = state_reader.read_state(cp, exact_schema=True)
        schema = spark.read.format("statestore").load(cp).schema
        tasks = spark.read.format("state_reader.statestore").load(cp).rdd.getNumPartitions()
        with tempfile.TemporaryDirectory(prefix="bench-transport-") as tmp:
            files = write_shares(table, Path(tmp), tasks)
            spark.dataSource.register(transport_source(schema))
            methods = {
                "builtin": lambda: spark.read.format("statestore").load(cp).toArrow(),
                "ours-spark": lambda: spark.read.format("state_reader.statestore").load(cp).toArrow(),
                "transport": lambda: (
                    spark.read.format("bench_transport").option("files", ";".join(files)).load().toArrow()
                ),
                "ours": lambda: state_reader.read_state(cp),
            }
            rows = {name: fn().num_rows for name, fn in methods.items()}  # warm-up
            if len(set(rows.values())) != 1:
                raise SystemExit(f"row counts differ: {rows}")
            times: dict[str, list[float]] = {name: [] for name in methods}
            for _ in range(args.repeats):
                for name, fn in methods.items():
                    start = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - start)
    finally:
        spark.stop()
    med = {name: statistics.median(t) for name, t in times.items()}
    print(
        f"{args.provider}, {keys:,} keys, {args.partitions} state partitions, {tasks} Spark tasks, "
        f"median of {args.repeats}"
    )
    print("| builtin | ours-spark | transport | ours | builtin / ours-spark | builtin / transport |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {med['builtin']:.3f} s | {med['ours-spark']:.3f} s | {med['transport']:.3f} s | {med['ours']:.3f} s | "
        f"{med['builtin'] / med['ours-spark']:.2f}x | {med['builtin'] / med['transport']:.2f}x |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
