"""A format migration next to a plain rewrite of the same state.

On four states of ``generate.py`` (8 state partitions each), in one process, interleaved, medians of
``--repeats`` runs of each, every migration against ``plain`` (``state_reader.rewrite(src, dst)``, the same
state rewritten as it is):

* the 1M-key aggregations of both providers (aggregation state format 2):

  * ``aggregation 2 -> 1``: ``confs={aggregation.stateFormatVersion: 1}``: every value given its grouping
    columns (moved as bytes), and a new schema file;
  * ``codec lz4 -> zstd`` (HDFS-backed): every snapshot compressed anew;
  * ``row checksums on``: a checksum put in front of every value;
  * ``checkpoint format 1 -> 2`` (RocksDB): the snapshots named by unique ids, listed in the commit log;

* a stream-stream inner join buffering 1M input rows (join state format 2, RocksDB; ``generate.py --kinds
  join``):

  * ``join 2 -> 4``: each side's rows as lists keyed by (join key, event time), with the event-time index,
    as column families of one store;
  * ``join 2 -> 3``: the four stores as column families of one store;

* a transformWithState keeping a value state for 1M keys (RocksDB, UnsafeRow encoding; ``--kinds tws``):

  * ``encoding unsaferow -> avro``: every key and value decoded and written as an Avro record.

Prints each one's wall time and its ratio to the plain rewrite of its state (the issue asks for at most 1.5).
``--states`` picks some of ``hdfs,rocksdb,join,tws``; a missing checkpoint is generated first (the join and
transformWithState ones take a few minutes each).

``--repeats 5`` on 2 cores, 1-minute load average 0.6 to 1.3 from other work (benchmarks/README.md has the
details and the figures before this round's changes), medians and ratios to the plain rewrite:

    aggregation, HDFS-backed   plain 0.68 s   aggregation 2 -> 1 0.81 s (1.18x)   row checksums on 0.78 s (1.13x)
                                              codec lz4 -> zstd 0.57 s (0.83x)
    aggregation, RocksDB       plain 1.54 s   aggregation 2 -> 1 1.61 s (1.04x)   row checksums on 1.71 s (1.11x)
                                              checkpoint format 1 -> 2 1.48 s (0.96x)
    join (format 2), RocksDB   plain 3.29 s   join 2 -> 4 3.79 s (1.15x)          join 2 -> 3 2.54 s (0.77x)
    transformWithState         plain 1.56 s   encoding unsaferow -> avro 1.96 s (1.26x)

    python benchmarks/bench_migrate.py [--keys 1M] [--repeats 3] [--states hdfs,rocksdb,join,tws] [--json out.json]
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
from state_reader.model.conf import (
    CONF_AGG_FORMAT,
    CONF_CHECKPOINT_FORMAT,
    CONF_CODEC,
    CONF_ENCODING,
    CONF_JOIN_FORMAT,
    CONF_ROW_CHECKSUM,
)

AGGREGATIONS = {
    "plain": {},
    "aggregation 2 -> 1": {CONF_AGG_FORMAT: "1"},
    "row checksums on": {CONF_ROW_CHECKSUM: "true"},
}
# each state benchmarked: (generate.py's kind, provider, the rewrites of it), "plain" first
STATES = {
    "hdfs": (generate.AGGREGATION, "hdfs", {**AGGREGATIONS, "codec lz4 -> zstd": {CONF_CODEC: "zstd"}}),
    "rocksdb": (
        generate.AGGREGATION,
        "rocksdb",
        {**AGGREGATIONS, "checkpoint format 1 -> 2": {CONF_CHECKPOINT_FORMAT: "2"}},
    ),
    "join": (
        generate.JOIN,
        "rocksdb",
        {"plain": {}, "join 2 -> 4": {CONF_JOIN_FORMAT: "4"}, "join 2 -> 3": {CONF_JOIN_FORMAT: "3"}},
    ),
    "tws": (generate.TWS, "rocksdb", {"plain": {}, "encoding unsaferow -> avro": {CONF_ENCODING: "avro"}}),
}
# how each state's line names it
LABELS = {
    "hdfs": "aggregation, hdfs",
    "rocksdb": "aggregation, rocksdb",
    "join": "stream-stream join (format 2), rocksdb",
    "tws": "transformWithState (unsaferow), rocksdb",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="1M")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--states", default=",".join(STATES), help=f"comma-separated: {', '.join(STATES)}")
    parser.add_argument("--data-dir")
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args(argv)
    (keys,) = generate.parse_keys(args.keys)
    states = args.states.split(",")
    if unknown := sorted(set(states) - set(STATES)):
        parser.error(f"unknown states {', '.join(unknown)}; known: {', '.join(STATES)}")
    root = generate.data_dir(args.data_dir)
    sources = {}
    for state in states:
        kind, provider, _ = STATES[state]
        sources[state] = generate.ensure(root, [provider], [keys], kind=kind)[provider, keys]
    times: dict[tuple[str, str], list[float]] = {(state, name): [] for state in states for name in STATES[state][2]}
    rows: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-migrate-") as tmp:
        for repeat in range(args.repeats):
            for state, name in times:  # interleaved: the machine's load falls on each alike
                dst = Path(tmp) / f"{repeat}-{len(times[state, name])}"
                start = time.perf_counter()
                report = state_reader.rewrite(str(sources[state]), str(dst), confs=STATES[state][2][name])
                times[state, name].append(time.perf_counter() - start)
                if name == "plain":  # the rows of the state as it is (a join in format 4 counts others)
                    rows[state] = sum(s.rows for s in report.stores)
                shutil.rmtree(dst)
    result: dict[str, dict[str, dict[str, float]]] = {}
    for state in states:
        plain = statistics.median(times[state, "plain"])
        result[state] = {
            name: {
                "seconds": statistics.median(times[state, name]),
                "ratio": statistics.median(times[state, name]) / plain,
            }
            for name in STATES[state][2]
        }
        what = "rows buffered" if state == "join" else "keys"
        print(f"{keys:,} {what} ({rows[state]:,} state rows), {LABELS[state]}, 8 partitions; median of {args.repeats}")
        for name, r in result[state].items():
            print(f"  {name:<26} {r['seconds']:7.2f} s   {r['ratio']:.2f}x the plain rewrite")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"keys": keys, "rows": rows, "runs": result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
