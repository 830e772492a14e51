"""A format migration next to a plain rewrite of the same state.

On the 1M-key HDFS-backed aggregation checkpoint (8 state partitions, see ``generate.py``; aggregation state
format 2), in one process, interleaved, medians of ``--repeats`` runs of each:

* ``plain``: ``state_reader.rewrite(src, dst)``, the state rewritten as it is;
* ``aggregation 2 -> 1``: the same with ``confs={aggregation.stateFormatVersion: 1}``: every value decoded,
  given its grouping columns, encoded again, and a new schema file;
* ``codec lz4 -> zstd``: the same with ``confs={compression.codec: zstd}``: every snapshot compressed anew.

Prints each one's wall time and its ratio to the plain rewrite (the issue asks for at most 1.5).

    python benchmarks/bench_migrate.py [--keys 1M] [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate

import state_reader

AGG = "spark.sql.streaming.aggregation.stateFormatVersion"
CODEC = "spark.sql.streaming.stateStore.compression.codec"
RUNS = {
    "plain": {},
    "aggregation 2 -> 1": {AGG: "1"},
    "codec lz4 -> zstd": {CODEC: "zstd"},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="1M")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir")
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args(argv)
    (keys,) = generate.parse_keys(args.keys)
    src = generate.ensure(generate.data_dir(args.data_dir), ["hdfs"], [keys])["hdfs", keys]
    times: dict[str, list[float]] = {name: [] for name in RUNS}
    rows = 0
    with tempfile.TemporaryDirectory(prefix="bench-migrate-") as tmp:
        for repeat in range(args.repeats):
            for name, confs in RUNS.items():  # interleaved: the machine's load falls on each alike
                dst = Path(tmp) / f"{repeat}-{len(times[name])}"
                start = time.perf_counter()
                report = state_reader.rewrite(str(src), str(dst), confs=confs)
                times[name].append(time.perf_counter() - start)
                rows = sum(s.rows for s in report.stores)
                shutil.rmtree(dst)
    plain = statistics.median(times["plain"])
    result = {
        name: {"seconds": statistics.median(t), "ratio": statistics.median(t) / plain} for name, t in times.items()
    }
    print(f"{keys:,} keys ({rows:,} rows), HDFS-backed, 8 partitions; median of {args.repeats}")
    for name, r in result.items():
        print(f"  {name:<20} {r['seconds']:7.2f} s   {r['ratio']:.2f}x the plain rewrite")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"keys": keys, "rows": rows, "runs": result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
