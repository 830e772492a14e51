"""Rewrite at scale: ours without Spark, ours through Spark, and Spark 4.3's own repartition.

On the 1M-key RocksDB checkpoint (written by this pyspark, checkpoint format 1)
and the 1M- and 5M-key HDFS ones (8 state partitions, see ``generate.py``), each
rewritten 8 -> 32 and 8 -> 3 partitions, in one run, interleaved:

* ``ours``: ``state_reader.repartition`` in a fresh process: wall time, and its peak
  RSS (VmHWM) over the RSS after a rewrite of a 1000-key checkpoint with numba on
  (which loads the modules and compiled code used on first use), next to the largest
  old and new partition's state (uncompressed key and value bytes);
* ``ours/spark``: ``state_reader.rewrite(..., spark=spark)`` on a ``local[2]`` session
  in a fresh process: the call's wall time (the session's start-up not counted);
* ``spark``: ``spark._streamingCheckpointManager.repartition`` on a copy (in place;
  RocksDB only): the call's wall time; its JVM's peak RSS.

Medians of ``--repeats`` runs; ratios are Spark's time over ours.

    python benchmarks/bench_rewrite.py [--keys 1M,5M] [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate

_OURS = """
import json, os, sys, time
import state_reader
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * page
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
import shutil, tempfile
if len(sys.argv) > 4:  # a tiny rewrite first, so that modules loaded on first use are not counted as state
    os.environ["STATE_READER_NUMBA"] = "1"  # numba too (its compiled code is ~100 MB), as a large read loads it
    warm = tempfile.mkdtemp()
    state_reader.repartition(sys.argv[4], warm + "/w", 2)
    shutil.rmtree(warm)
    del os.environ["STATE_READER_NUMBA"]
before = rss()
try:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
except OSError:
    pass
start = time.perf_counter()
report = state_reader.repartition(sys.argv[1], sys.argv[2], int(sys.argv[3]))
elapsed = time.perf_counter() - start
old = max(sum(s.old_bytes_per_partition[p] for s in report.stores) for p in range(report.old_partitions))
new = max(sum(s.bytes_per_partition[p] for s in report.stores if p < len(s.bytes_per_partition))
          for p in range(report.new_partitions))
print(json.dumps({"seconds": elapsed, "peak": peak() - before, "old_partition": old, "new_partition": new}))
"""

_SPARK = """
import json, os, sys, time
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "4g").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
mode, src, dst, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
start = time.perf_counter()
if mode == "ours":
    import state_reader
    state_reader.rewrite(src, dst, num_partitions=n, spark=spark)
else:
    spark._streamingCheckpointManager.repartition(dst, n)
elapsed = time.perf_counter() - start
pid = spark.sparkContext._gateway.proc.pid
jvm = next(int(line.split()[1]) * 1024 for line in open(f"/proc/{pid}/status") if line.startswith("VmHWM:"))
spark.stop()
print(json.dumps({"seconds": elapsed, "jvm_peak": jvm}))
"""


def _run(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench(cp: Path, provider: str, n: int, repeats: int, work: Path, warm: Path) -> dict:
    """Every way of rewriting ``cp`` into ``n`` partitions, interleaved, ``repeats`` times."""
    runs: dict[str, list[dict]] = {"ours": [], "ours/spark": [], "spark": []}
    for i in range(repeats):
        dst = work / f"ours-{i}"
        runs["ours"].append(_run(_OURS, str(cp), str(dst), str(n), str(warm)))
        shutil.rmtree(dst, ignore_errors=True)
        dst = work / f"spark-path-{i}"
        runs["ours/spark"].append(_run(_SPARK, "ours", str(cp), str(dst), str(n)))
        shutil.rmtree(dst, ignore_errors=True)
        if provider == "rocksdb":
            copy = work / f"theirs-{i}"
            shutil.copytree(cp, copy)
            runs["spark"].append(_run(_SPARK, "spark", str(cp), str(copy), str(n)))
            shutil.rmtree(copy, ignore_errors=True)
    out: dict = {}
    for name, results in runs.items():
        good = [r for r in results if "error" not in r]
        if not results:
            continue
        if not good:
            out[name] = {"error": results[0]["error"]}
            continue
        out[name] = {key: statistics.median(r[key] for r in good) for key in good[0]}
    return out


def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MB"


def report(rows: list[tuple[str, int, dict]]) -> str:
    lines = [
        "| checkpoint | partitions | ours | ours/spark | Spark's repartition | Spark / ours | ours peak RSS "
        "| largest old + new partition | peak / (old + new) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, n, r in rows:
        ours, path, theirs = r.get("ours", {}), r.get("ours/spark", {}), r.get("spark")

        def t(x: dict | None) -> str:
            if x is None:
                return "not supported"
            return x["error"] if "error" in x else f"{x['seconds']:.1f} s"

        ratio = (
            f"{theirs['seconds'] / ours['seconds']:.1f}x"
            if theirs and "seconds" in theirs and "seconds" in ours
            else "-"
        )
        parts = ours.get("old_partition", 0) + ours.get("new_partition", 0)
        lines.append(
            f"| {name} | 8 -> {n} | {t(ours)} | {t(path)} | {t(theirs)} | {ratio} | "
            f"{_mb(ours.get('peak', 0))} | {_mb(parts)} | "
            f"{ours.get('peak', 0) / parts if parts else 0:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="1M,5M", help="HDFS key counts (RocksDB: the smallest of them)")
    parser.add_argument("--partitions", default="32,3")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    keys = generate.parse_keys(args.keys)
    root = generate.data_dir(args.data_dir)
    paths = generate.ensure(root, ["hdfs"], keys)
    paths.update(generate.ensure(root, ["rocksdb"], keys[:1]))
    # the same query with 1000 keys: warms each measured process up (modules, compiled kernels)
    warm = {p: path for (p, _), path in generate.ensure(root, ["hdfs", "rocksdb"], [1000]).items()}
    rows = []
    with tempfile.TemporaryDirectory(prefix="state-reader-bench-rewrite-") as tmp:
        for (provider, count), cp in sorted(paths.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            for n in (int(x) for x in args.partitions.split(",")):
                name = f"{provider} {count:,} keys"
                print(f"{name}, 8 -> {n} ...", file=sys.stderr, flush=True)
                work = Path(tmp) / f"{provider}-{count}-{n}"
                work.mkdir()
                rows.append((name, n, bench(cp, provider, n, args.repeats, work, warm[provider])))
    text = report(rows)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps([{"checkpoint": a, "partitions": b, **c} for a, b, c in rows], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
