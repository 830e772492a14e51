"""``verdicts`` (every key's verdict, Spark-free) against a plain ``read_state`` of the same store, side
by side in one run.

``verdicts`` reads the latest batch's state once, the change feed of the retained batches after the
first (for each key's last change) and the offset log, and applies the eviction rules over arrays; the
target is at most 3x a plain read of the latest batch. The checkpoints (an aggregation of 1M keys in 64
partitions, HDFS-backed and RocksDB) are written on first use and cached beside the other benchmark data.

    python benchmarks/bench_verdicts.py --keys 1000000 --partitions 64 --providers hdfs,rocksdb --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import generate

import state_reader


def _median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="1000000", help="comma-separated key counts (100k, 1M allowed)")
    parser.add_argument("--providers", default="hdfs,rocksdb", help="comma-separated: hdfs, rocksdb")
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    paths = generate.ensure(
        generate.data_dir(args.data_dir),
        args.providers.split(","),
        generate.parse_keys(args.keys),
        partitions=args.partitions,
    )
    print(f"{'provider':8} {'keys':>9} {'read_state s':>13} {'verdicts s':>11} {'ratio':>6}  events")
    for (provider, keys), path in paths.items():
        cp = str(path)
        state_reader.read_state(cp)  # warm the page cache and imports for both
        read = _median_seconds(lambda cp=cp: state_reader.read_state(cp), args.repeat)
        found = _median_seconds(lambda cp=cp: state_reader.verdicts(cp), args.repeat)
        table = state_reader.verdicts(cp)
        events = table.group_by("event").aggregate([([], "count_all")]).to_pylist()
        counts = ", ".join(f"{e['event']} {e['count_all']}" for e in events)
        print(f"{provider:8} {keys:>9} {read:13.3f} {found:11.3f} {found / read:5.2f}x  {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
