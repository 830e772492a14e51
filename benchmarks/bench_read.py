"""Read speed of state_reader against Spark's built-in ``statestore`` reader.

For each benchmark checkpoint (see ``generate.py``), in one warm SparkSession,
timed several times each, interleaved:

* ``builtin``      ``spark.read.format("statestore").load(cp).toArrow()`` (``-pandas``: ``toPandas()``)
* ``ours-spark``   ``spark.read.format("state_reader.statestore").load(cp).toArrow()`` (and ``toPandas()``)
* ``ours``         ``state_reader.read_state(cp)`` (no Spark involved) as installed: the numba
                   kernels (RocksDB: the SST files read directly) where they pay
* ``ours-python``  the same with ``STATE_READER_NUMBA=0``: the Python record walk and Arrow
                   merge, RocksDB iterated with rocksdict
* ``floor``        reading the files the state is rebuilt from and decompressing them,
                   nothing else, on one thread (RocksDB: the zip and the SST files,
                   whose data blocks are lz4-decompressed)
* ``*-lookup``     one key: ``.where(key.key = ...)`` through Spark (filter pushdown on),
                   ``read_state(cp, key_filter="key = ...")`` Spark-free

then the peak memory of the Spark-free read and of ``scan_state`` (in fresh
processes), and cold starts: a fresh process importing state_reader and reading
the 1M-key (or largest) HDFS checkpoint, against a fresh SparkSession's first read
of it, and ``state-reader metadata``.

    python benchmarks/bench_read.py [--keys 100000,1000000] [--providers hdfs,rocksdb]
                                    [--partitions 8] [--repeats 5] [--data-dir DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Spark's Python workers must import this checkout too
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])

import generate  # noqa: E402

# keys of the tiny checkpoint read first when measuring memory "warm"
WARM_KEYS = 1000


# -- the floor: read and decompress, nothing else ---------------------------------


def _latest_version(cp: Path) -> int:
    batches = [int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit()]
    return max(batches) + 1


def _lz4_java(data: bytes) -> int:
    """Decompressed size of an lz4-java block stream, decompressing every block."""
    import lz4.block

    pos, total = 0, 0
    while pos < len(data):
        token = data[pos + 8]
        clen = int.from_bytes(data[pos + 9 : pos + 13], "little")
        dlen = int.from_bytes(data[pos + 13 : pos + 17], "little")
        start = pos + 21
        if dlen:
            if token & 0xF0 == 0x20:
                total += len(lz4.block.decompress(data[start : start + clen], uncompressed_size=dlen))
            else:
                total += clen
        pos = start + clen
    return total


def _sst_blocks(data: bytes) -> int:
    """Decompressed size of an SST file's data blocks, decompressing every one (no checksums).

    Finding the blocks takes state_reader's SST reader, which needs numba; without it, the bytes read.
    """
    import cramjam

    from state_reader.formats.sst import _SstFile

    try:
        starts, lengths, kinds, sizes = _SstFile(data, "sst").data_layout()
    except ImportError:
        return len(data)
    view = memoryview(data)
    out = bytearray(int(sizes.sum()))
    target = memoryview(out)
    at = 0
    for start, length, kind, size in zip(
        starts.tolist(), lengths.tolist(), kinds.tolist(), sizes.tolist(), strict=True
    ):
        if kind == 0:
            target[at : at + size] = view[start : start + length]
        else:  # lz4, the benchmark checkpoints' codec
            cramjam.lz4.decompress_block_into(view[start : start + length], target[at : at + size], output_len=size)
        at += size
    return at


def _hdfs_files(store: Path, version: int) -> list[Path]:
    snapshots = [int(p.stem) for p in store.glob("*.snapshot") if p.stem.isdigit() and int(p.stem) <= version]
    start = max(snapshots, default=0)
    files = [store / f"{start}.snapshot"] if start else []
    return files + [store / f"{v}.delta" for v in range(start + 1, version + 1)]


def floor_read(cp: Path) -> int:
    """Read (and for HDFS decompress) every file the latest state is rebuilt from; bytes produced."""
    version = _latest_version(cp)
    total = 0
    for store in sorted((cp / "state" / "0").iterdir()):
        if not store.name.isdigit():
            continue
        if (store / f"{version}.zip").exists():
            with zipfile.ZipFile(io.BytesIO((store / f"{version}.zip").read_bytes())) as archive:
                meta = b""
                for info in archive.infolist():
                    body = archive.read(info)
                    total += len(body)
                    if info.filename == "metadata":
                        meta = body
            for sst in json.loads(meta.split(b"\n", 1)[1]).get("sstFiles", []):
                total += _sst_blocks((store / "SSTs" / sst["dfsSstFileName"]).read_bytes())
        else:
            for path in _hdfs_files(store, version):
                total += _lz4_java(path.read_bytes())
    return total


# -- timing -------------------------------------------------------------------------


def _timed(fn: Callable[[], object]) -> tuple[float, object]:
    gc.collect()
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def _rows(result: object) -> int | None:
    return getattr(result, "num_rows", None)


def _with_numba(setting: str, fn: Callable[[], object]) -> object:
    """Run ``fn`` with the record walk forced to Python ("0") or numba ("1")."""
    saved = os.environ.get("STATE_READER_NUMBA")
    os.environ["STATE_READER_NUMBA"] = setting
    try:
        return fn()
    finally:
        if saved is None:
            os.environ.pop("STATE_READER_NUMBA", None)
        else:
            os.environ["STATE_READER_NUMBA"] = saved


def lookup_key(keys: int) -> str:
    """A key that every benchmark checkpoint of ``keys`` keys holds (generate.py writes user-0 ... user-<keys-1>)."""
    return f"user-{keys // 2 + 7}"


def bench_checkpoint(spark, cp: Path, keys: int, repeats: int) -> dict:
    """Medians (and all runs) of every method on one checkpoint."""
    from pyspark.sql import functions as F

    import state_reader

    path = str(cp)
    key = lookup_key(keys)

    def spark_read(fmt: str):
        return spark.read.format(fmt).load(path)

    scans: dict[str, Callable[[], object]] = {
        "builtin": lambda: spark_read("statestore").toArrow(),
        "ours-spark": lambda: spark_read("state_reader.statestore").toArrow(),
        "builtin-pandas": lambda: spark_read("statestore").toPandas(),
        "ours-spark-pandas": lambda: spark_read("state_reader.statestore").toPandas(),
        "ours": lambda: state_reader.read_state(path),  # the default: numba where it pays
        "ours-python": lambda: _with_numba("0", lambda: state_reader.read_state(path)),
        "floor": lambda: floor_read(cp),
    }
    lookups: dict[str, Callable[[], object]] = {
        "builtin-lookup": lambda: spark_read("statestore").where(F.col("key.key") == key).toArrow(),
        "ours-spark-lookup": lambda: spark_read("state_reader.statestore").where(F.col("key.key") == key).toArrow(),
        "ours-lookup": lambda: state_reader.read_state(path, key_filter=f"key = '{key}'"),
    }
    methods = {**scans, **lookups}
    rows = {}
    for name, fn in methods.items():  # warm-up: JIT, JVM, Python workers, page cache
        out = fn()
        rows[name] = len(out) if name.endswith("-pandas") else _rows(out)
    counts = {v for k, v in rows.items() if k in scans and k != "floor"}
    if len(counts) != 1 or {rows[k] for k in lookups} != {1}:
        raise SystemExit(f"{cp}: the readers disagree on the number of rows: {rows}")
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, fn in methods.items():
            elapsed, _ = _timed(fn)
            times[name].append(elapsed)
    return {"rows": counts.pop(), "times": times, "median": {name: statistics.median(t) for name, t in times.items()}}


# -- memory and cold starts, each in a fresh process ------------------------------

_PEAK = """
import gc, json, os, sys, time
import state_reader
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * page
def peak():
    # VmHWM belongs to this process image; ru_maxrss would carry over the
    # high-water mark of the (large) benchmark process this one was forked from
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
if len(sys.argv) > 2:  # first a tiny read, so that lazily loaded modules are not counted
    state_reader.read_state(sys.argv[2])
    gc.collect()
before = rss()
try:  # restart the high-water mark from here
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
except OSError:
    pass
start = time.perf_counter()
if os.environ.get("BENCH_SCAN"):  # consume scan_state batch by batch, keeping none
    rows = nbytes = 0
    for batch in state_reader.scan_state(sys.argv[1]):
        rows, nbytes = rows + batch.num_rows, nbytes + batch.nbytes
        del batch
else:
    table = state_reader.read_state(sys.argv[1])
    rows, nbytes = table.num_rows, table.nbytes
elapsed = time.perf_counter() - start
print(json.dumps({"before": before, "peak": peak(), "table": nbytes, "rows": rows, "seconds": elapsed}))
"""

_COLD_OURS = """
import sys, time
import state_reader
table = state_reader.read_state(sys.argv[1])
print(time.time(), table.num_rows)
"""

_COLD_SPARK = """
import sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.driver.memory", "8g").getOrCreate())
table = spark.read.format("statestore").load(sys.argv[1]).toArrow()
print(time.time(), table.num_rows)
spark.stop()
"""


def _child(code: str, *args: str) -> tuple[float, str]:
    """Wall time from launch to the child's report, and its last output line."""
    start = time.time()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    line = done.stdout.strip().splitlines()[-1]
    return float(line.split()[0]) - start, line


def peak_memory(cp: Path, warm_cp: Path) -> dict:
    """Peak RSS of fresh processes reading ``cp`` with read_state, against the table's size.

    ``cold``: growth over the RSS right after ``import state_reader``, so modules
    loaded on first use (pyarrow.compute, pandas through pyarrow, numba) count,
    with the default (automatic) choice of path; ``warm`` (Python path) and
    ``warm-numba``: growth over the RSS after a tiny read of ``warm_cp`` on the
    same path loaded them (numba's compiled code alone is about 120 MB); ``scan``:
    ``scan_state`` consumed batch by batch (automatic path, warm), nothing kept.
    """
    from state_reader.formats import kernels

    runs = [("cold", None, []), ("warm", "0", [str(warm_cp)])]
    if kernels.numba_available():
        runs.append(("warm-numba", "1", [str(warm_cp)]))
    runs.append(("scan", None, [str(warm_cp)]))
    out = {}
    for name, numba, extra in runs:
        env = {k: v for k, v in os.environ.items() if k not in ("STATE_READER_NUMBA", "BENCH_SCAN")}
        if numba is not None:
            env["STATE_READER_NUMBA"] = numba
        if name == "scan":
            env["BENCH_SCAN"] = "1"
        done = subprocess.run(
            [sys.executable, "-c", _PEAK, str(cp), *extra], capture_output=True, text=True, check=True, env=env
        )
        got = json.loads(done.stdout.strip().splitlines()[-1])
        out[name] = got["peak"] - got["before"]
        out["table"] = got["table"]
        out[f"{name}_before"] = got["before"]
    return out


def _cli_command() -> list[str] | None:
    if importlib.util.find_spec("state_reader.fronts.cli") is None:
        return None
    script = Path(sys.executable).with_name("state-reader")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "state_reader.fronts.cli"]


def cold_starts(cp: Path, repeats: int) -> dict:
    """Median wall times of fresh processes: ours (import to table), Spark (session to table), CLI."""
    out: dict[str, float] = {}
    ours = [_child(_COLD_OURS, str(cp))[0] for _ in range(repeats)]
    out["ours: import + read_state"] = statistics.median(ours)
    spark = [_child(_COLD_SPARK, str(cp))[0] for _ in range(max(1, repeats // 2))]
    out["builtin: new SparkSession + first read"] = statistics.median(spark)
    cli = _cli_command()
    if cli is not None:
        runs = []
        for _ in range(repeats):
            start = time.time()
            subprocess.run([*cli, "metadata", str(cp)], capture_output=True, check=True)
            runs.append(time.time() - start)
        out["state-reader metadata (CLI)"] = statistics.median(runs)
    return out


# -- report ---------------------------------------------------------------------------


def _mb(n: float) -> str:
    return f"{n / 1e6:.0f} MB" if n >= 1e7 else f"{n / 1e6:.1f} MB"


def report(results: list[dict], memory: dict, cold: dict, cold_cp: str) -> str:
    from state_reader.formats import kernels as _fast

    lines = [
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, Python {platform.python_version()}, {_fast.describe()}",
        "",
        "Full scans, medians. `ours` = `read_state` as installed (numba where it pays), `ours-python` = with "
        "STATE_READER_NUMBA=0; speed-ups are builtin / ours (`-pandas`: `toPandas()` on both sides).",
        "",
        "| provider | keys | partitions | builtin | ours-spark | builtin pandas | ours-spark pandas | ours | "
        "ours-python | floor | spark speed-up | pandas speed-up | ours speed-up | ours-python speed-up "
        "| ours / floor | ours ns/row |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        m = r["median"]
        lines.append(
            f"| {r['provider']} | {r['keys']:,} | {r['partitions']} | {m['builtin']:.3f} s | {m['ours-spark']:.3f} s | "
            f"{m['builtin-pandas']:.3f} s | {m['ours-spark-pandas']:.3f} s | {m['ours']:.3f} s | "
            f"{m['ours-python']:.3f} s | {m['floor']:.3f} s | {m['builtin'] / m['ours-spark']:.2f}x | "
            f"{m['builtin-pandas'] / m['ours-spark-pandas']:.2f}x | {m['builtin'] / m['ours']:.1f}x | "
            f"{m['builtin'] / m['ours-python']:.1f}x | {m['ours'] / m['floor']:.1f}x | "
            f"{m['ours'] / r['rows'] * 1e9:.0f} |"
        )
    lines += [
        "",
        "One-key lookups (`where key.key = ...` through Spark, with filter pushdown on; "
        "`key_filter` Spark-free), medians; speed-ups over the built-in's lookup:",
        "",
        "| provider | keys | builtin | ours-spark | ours | ours-spark speed-up | ours speed-up |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        m = r["median"]
        lines.append(
            f"| {r['provider']} | {r['keys']:,} | {m['builtin-lookup']:.3f} s | "
            f"{m['ours-spark-lookup']:.3f} s | {m['ours-lookup']:.4f} s | "
            f"{m['builtin-lookup'] / m['ours-spark-lookup']:.1f}x | "
            f"{m['builtin-lookup'] / m['ours-lookup']:.0f}x |"
        )
    lines += [
        "",
        "Peak memory of the Spark-free read, fresh processes (growth of peak RSS over the RSS after "
        "`import state_reader` (cold, automatic path) or after a tiny read on the same path that loaded the "
        "lazily imported modules (warm: Python path, warm numba: numba path; scan: `scan_state` consumed "
        "batch by batch, automatic path)):",
        "",
        "| provider | keys | table | cold growth | cold / table | warm growth | warm / table "
        "| warm numba growth | warm numba / table | scan growth | scan / table |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (provider, keys), mem in memory.items():
        numba = mem.get("warm-numba")
        numba_cells = "- | -" if numba is None else f"{_mb(numba)} | {numba / mem['table']:.2f}"
        lines.append(
            f"| {provider} | {keys:,} | {_mb(mem['table'])} | {_mb(mem['cold'])} | "
            f"{mem['cold'] / mem['table']:.2f} | {_mb(mem['warm'])} | {mem['warm'] / mem['table']:.2f} | "
            f"{numba_cells} | {_mb(mem['scan'])} | {mem['scan'] / mem['table']:.2f} |"
        )
    if cold:
        lines += [
            "",
            f"Cold start, fresh process, {cold_cp} (median wall time):",
            "",
            "| what | seconds |",
            "|---|---:|",
        ]
        lines += [f"| {name} | {seconds:.2f} |" for name, seconds in cold.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="100000,1000000", help="comma-separated key counts, e.g. 100k,1M,5M")
    parser.add_argument("--providers", default="hdfs,rocksdb", help="comma-separated: hdfs, rocksdb")
    parser.add_argument(
        "--partitions",
        type=int,
        default=generate.PARTITIONS,
        help=f"state partitions of the checkpoints (default {generate.PARTITIONS})",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each method (default 5)")
    parser.add_argument(
        "--data-dir", default=None, help=f"checkpoint cache (default ${generate.DATA_ENV} or benchmarks/.data)"
    )
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-start figures")
    parser.add_argument("--json", default=None, help="also write every figure to this file")
    args = parser.parse_args(argv)
    key_counts = generate.parse_keys(args.keys)
    providers = args.providers.split(",")

    import state_reader

    spark = generate.build_session()
    # Python data sources see Spark's filters only with this on (the lookups)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    state_reader.register(spark)
    try:
        root = generate.data_dir(args.data_dir)
        paths = generate.ensure(root, providers, key_counts, spark, args.partitions)
        warm = generate.ensure(root, providers, [WARM_KEYS], spark, args.partitions)
        results = []
        for (provider, keys), cp in paths.items():
            print(f"timing {provider} {keys} keys ...", file=sys.stderr, flush=True)
            r = bench_checkpoint(spark, cp, keys, args.repeats)
            r.update(provider=provider, keys=keys, partitions=args.partitions)
            results.append(r)
    finally:
        spark.stop()
    memory = {}
    for (provider, keys), cp in paths.items():
        print(f"peak memory {provider} {keys} keys ...", file=sys.stderr, flush=True)
        memory[(provider, keys)] = peak_memory(cp, warm[(provider, WARM_KEYS)])
    cold: dict[str, float] = {}
    cold_keys = 1_000_000 if 1_000_000 in key_counts else max(key_counts)
    cold_provider = "hdfs" if "hdfs" in providers else providers[0]
    if not args.no_cold:
        print("cold starts ...", file=sys.stderr, flush=True)
        cold = cold_starts(paths[(cold_provider, cold_keys)], 3)
    text = report(results, memory, cold, f"{cold_provider} {cold_keys:,} keys")
    print(text)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "date": time.strftime("%Y-%m-%d"),
                    "cores": os.cpu_count(),
                    "results": results,
                    "memory": {f"{p}-{k}": v for (p, k), v in memory.items()},
                    "cold": cold,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
