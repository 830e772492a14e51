"""``verdicts`` (every key's verdict, Spark-free) against a plain ``read_state`` of the same store, side
by side in one run, for each provider.

``verdicts`` reads the latest batch's state once, the change feed of the retained batches after the
first (for each key's last change) and the offset log, and applies the eviction rules over arrays; the
target is at most 3x a plain read of the latest batch. The checkpoints (an aggregation of 1M keys in 64
partitions: HDFS-backed, RocksDB without changelogs, whose change feed is computed by comparing
snapshots, and RocksDB with changelog checkpointing) are written on first use and cached beside the
other benchmark data. The two calls alternate, ``--repeat`` times each after a warm-up of both, and the
medians are reported (wall time, and the CPU time of all the process's threads): on a shared
machine both see the same load.

    python benchmarks/bench_verdicts.py --keys 1000000 --partitions 64 --repeat 5
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


def _alternating(calls: dict[str, object], repeat: int) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds of each call, the calls taking turns (``repeat`` rounds after one
    warm-up). CPU time (all threads of the process) moves less with the machine's load than wall time."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
    for round_ in range(repeat + 1):
        for name, fn in calls.items():
            start, cpu = time.perf_counter(), time.process_time()
            fn()  # type: ignore[operator]
            if round_:
                times[name].append((time.perf_counter() - start, time.process_time() - cpu))
    return {name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for name, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="1000000", help="comma-separated key counts (100k, 1M allowed)")
    parser.add_argument(
        "--providers",
        default="hdfs,rocksdb,rocksdb-changelog",
        help="comma-separated: hdfs, rocksdb, rocksdb-changelog",
    )
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    paths = generate.ensure(
        generate.data_dir(args.data_dir),
        args.providers.split(","),
        generate.parse_keys(args.keys),
        partitions=args.partitions,
    )
    print("| provider | keys | read_state | verdicts | ratio | read_state CPU | verdicts CPU | CPU ratio | events |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for (provider, keys), path in paths.items():
        cp = str(path)
        medians = _alternating(
            {"read": lambda cp=cp: state_reader.read_state(cp), "verdicts": lambda cp=cp: state_reader.verdicts(cp)},
            args.repeat,
        )
        table = state_reader.verdicts(cp)
        events = table.group_by("event").aggregate([([], "count_all")]).to_pylist()
        counts = ", ".join(f"{e['event']} {e['count_all']}" for e in events)
        (read, read_cpu), (found, found_cpu) = medians["read"], medians["verdicts"]
        print(
            f"| {provider} | {keys:,} | {read:.3f} s | {found:.3f} s | {found / read:.2f}x | {read_cpu:.3f} s "
            f"| {found_cpu:.3f} s | {found_cpu / read_cpu:.2f}x | {counts} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
