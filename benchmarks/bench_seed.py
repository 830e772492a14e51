"""Seeding at scale: ``rewrite(src, dst, upsert=rows)`` with millions of rows.

A small checkpoint of the benchmarks' aggregation (``generate.py``: key, count, total,
top; 8 state partitions) gets a seed of ``--rows`` keys (default 10M) upserted, in
a fresh process per run:

* ``seed``: the seed as a Parquet file, read into a pyarrow Table by the process
  (its bytes in memory are reported as ``seed_bytes``);
* ``spark-free``: ``state_reader.rewrite(src, dst, upsert=table)``: the call's wall
  time and the process's peak RSS (VmHWM) over its RSS once the seed is loaded (the
  Spark-free path holds the seed: a table in memory, checked and encoded at once);
* ``spark``: the same with ``spark=`` on a ``local[2]`` session, the seed a DataFrame read
  from the Parquet file: the call's wall time (the session's start-up not counted) and the
  driver's Python process's peak RSS over its RSS before the call (no seed row passes
  through it).

Medians of ``--repeats`` runs. ``--num-partitions N`` rewrites into N partitions (smaller ones: the
Spark-free peak follows the largest new partition, not the seed).

    python benchmarks/bench_seed.py [--rows 10M] [--repeats 3] [--num-partitions N] [--spark-free-only]
                                    [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate

_RUN = """
import json, os, sys, time
import pyarrow.parquet as pq
import state_reader
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * page
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
seed = pq.read_table(sys.argv[3])
before = rss()
try:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # the peak from here on
except OSError:
    pass
start = time.perf_counter()
report = state_reader.rewrite(sys.argv[1], sys.argv[2], upsert=seed, num_partitions=int(sys.argv[5]) or None)
elapsed = time.perf_counter() - start
store = report.stores[0]
print(json.dumps({
    "seconds": elapsed,
    "peak_over_start": peak() - before,
    "seed_bytes": seed.nbytes,
    "rows": store.rows,
    "gained": sum(store.gained_per_partition),
    "largest_partition_bytes": max(store.bytes_per_partition),
}))
"""


_SPARK = """
import json, os, sys, time
sys.path.insert(0, sys.argv[4])
import generate
import state_reader
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * page
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
spark = generate.build_session("state-reader-bench-seed")
seed = spark.read.parquet(sys.argv[3])
before = rss()
try:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
except OSError:
    pass
start = time.perf_counter()
n = int(sys.argv[5]) or None
report = state_reader.rewrite(sys.argv[1], sys.argv[2], upsert=seed, spark=spark, num_partitions=n)
elapsed = time.perf_counter() - start
store = report.stores[0]
print(json.dumps({"seconds": elapsed, "peak_over_start": peak() - before, "rows": store.rows,
                  "gained": sum(store.gained_per_partition)}))
spark.stop()
"""


def write_seed(checkpoint: Path, rows: int, out: Path) -> None:
    """``rows`` keys in the shape read_state gives the checkpoint's store, as a Parquet file."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    import state_reader

    schema = state_reader.read_state(str(checkpoint)).drop(["partition_id"]).schema
    value_type = schema.field("value").type
    ids = np.arange(rows, dtype=np.int64)
    key_type = schema.field("key").type
    key = pa.StructArray.from_arrays(
        [pc.binary_join_element_wise("seed-", pc.cast(pa.array(ids), pa.string()), "")], fields=[key_type.field(0)]
    )
    columns = {"count": pa.array(ids % 7 + 1), "total": pa.array(ids * 3), "top": pa.array((ids % 1000) * 0.5)}
    value = pa.StructArray.from_arrays(
        [columns[f.name] if f.name in columns else pa.array(ids % 7 + 1).cast(f.type) for f in value_type],
        fields=list(value_type),
    )
    pq.write_table(pa.table({"key": key, "value": value}, schema=schema), out)


def run_once(src: Path, seed: Path, script: str = _RUN, num_partitions: int = 0) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-seed-") as tmp:
        here = str(Path(__file__).parent)
        proc = subprocess.run(
            [sys.executable, "-c", script, str(src), str(Path(tmp) / "dst"), str(seed), here, str(num_partitions)],
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="10M", help="seed rows (10M, 500k, ...)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", help="where the checkpoints are cached (default: generate.py's)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--num-partitions",
        type=int,
        default=0,
        help="new state partitions (default: the source's 8); more partitions, smaller ones, less memory",
    )
    parser.add_argument("--spark-free-only", action="store_true", help="leave out the run through Spark")
    args = parser.parse_args(argv)
    rows = generate.parse_keys(args.rows)[0]
    root = generate.data_dir(args.data)
    spark = generate.build_session("state-reader-bench-seed")
    try:
        src = generate.generate(spark, root, "hdfs", 1000)
    finally:
        spark.stop()
    seed = root / f"seed-{rows}.parquet"
    if not seed.exists():
        write_seed(src, rows, seed)
    runs = [run_once(src, seed, num_partitions=args.num_partitions) for _ in range(args.repeats)]
    spark_runs = (
        [] if args.spark_free_only else [run_once(src, seed, _SPARK, args.num_partitions) for _ in range(args.repeats)]
    )
    result = {
        "rows": rows,
        "spark-free": {
            "seconds": statistics.median(r["seconds"] for r in runs),
            "peak_over_start": statistics.median(r["peak_over_start"] for r in runs),
            "seed_bytes": runs[0]["seed_bytes"],
            "largest_partition_bytes": runs[0]["largest_partition_bytes"],
            "gained": runs[0]["gained"],
        },
    }
    if spark_runs:
        result["spark"] = {
            "seconds": statistics.median(r["seconds"] for r in spark_runs),
            "driver_peak_over_start": statistics.median(r["peak_over_start"] for r in spark_runs),
            "gained": spark_runs[0]["gained"],
        }
    free = result["spark-free"]
    line = (
        f"{rows:,} seed rows, spark-free: {free['seconds']:.1f} s, peak RSS +{free['peak_over_start'] / 2**20:.0f} MiB "
        f"(seed {free['seed_bytes'] / 2**20:.0f} MiB in memory, largest new partition "
        f"{free['largest_partition_bytes'] / 2**20:.0f} MiB)"
    )
    if spark_runs:
        through = result["spark"]
        line += (
            f"; through Spark: {through['seconds']:.1f} s, "
            f"driver peak RSS +{through['driver_peak_over_start'] / 2**20:.0f} MiB"
        )
    print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
