"""A format migration next to a plain rewrite of the same state.

On the 1M-key aggregation checkpoints of both providers (8 state partitions, see ``generate.py``; aggregation
state format 2), in one process, interleaved, medians of ``--repeats`` runs of each:

* ``plain``: ``state_reader.rewrite(src, dst)``, the state rewritten as it is;
* ``aggregation 2 -> 1``: the same with ``confs={aggregation.stateFormatVersion: 1}``: every value decoded,
  given its grouping columns, encoded again, and a new schema file;
* ``codec lz4 -> zstd`` (HDFS-backed): every snapshot compressed anew;
* ``row checksums on``: a checksum put in front of every value;
* ``checkpoint format 1 -> 2`` (RocksDB): the snapshots named by unique ids, listed in the commit log.

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
from state_reader.model.conf import CONF_AGG_FORMAT, CONF_CHECKPOINT_FORMAT, CONF_CODEC, CONF_ROW_CHECKSUM

SHARED = {"plain": {}, "aggregation 2 -> 1": {CONF_AGG_FORMAT: "1"}, "row checksums on": {CONF_ROW_CHECKSUM: "true"}}
RUNS = {
    "hdfs": {**SHARED, "codec lz4 -> zstd": {CONF_CODEC: "zstd"}},
    "rocksdb": {**SHARED, "checkpoint format 1 -> 2": {CONF_CHECKPOINT_FORMAT: "2"}},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="1M")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir")
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args(argv)
    (keys,) = generate.parse_keys(args.keys)
    sources = generate.ensure(generate.data_dir(args.data_dir), list(RUNS), [keys])
    times = {(provider, name): [] for provider, runs in RUNS.items() for name in runs}
    rows: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-migrate-") as tmp:
        for repeat in range(args.repeats):
            for provider, name in times:  # interleaved: the machine's load falls on each alike
                dst = Path(tmp) / f"{repeat}-{len(times[provider, name])}"
                start = time.perf_counter()
                report = state_reader.rewrite(str(sources[provider, keys]), str(dst), confs=RUNS[provider][name])
                times[provider, name].append(time.perf_counter() - start)
                rows[provider] = sum(s.rows for s in report.stores)
                shutil.rmtree(dst)
    result: dict[str, dict[str, dict[str, float]]] = {}
    for provider, runs in RUNS.items():
        plain = statistics.median(times[provider, "plain"])
        result[provider] = {
            name: {
                "seconds": statistics.median(times[provider, name]),
                "ratio": statistics.median(times[provider, name]) / plain,
            }
            for name in runs
        }
        print(f"{keys:,} keys ({rows[provider]:,} rows), {provider}, 8 partitions; median of {args.repeats}")
        for name, r in result[provider].items():
            print(f"  {name:<26} {r['seconds']:7.2f} s   {r['ratio']:.2f}x the plain rewrite")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"keys": keys, "rows": rows, "runs": result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
