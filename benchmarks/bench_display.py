"""The notebook display (``state_reader.open(cp)._repr_html_()``) on a checkpoint with 64 state
partitions and 100 retained batches, against a plain ``read_state`` of its latest batch, in one run.

The display reads logs, metadata and file sizes only; its target is under a
second. The checkpoint (a streaming aggregation, HDFS and RocksDB) is written
on first use and cached beside the other benchmark data.

    python benchmarks/bench_display.py --providers hdfs,rocksdb --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import generate

import state_reader

PARTITIONS = 64
BATCHES = 100


def _checkpoint(root: Path, provider: str) -> Path:
    out = root / f"display-{provider}-{PARTITIONS}p-{BATCHES}b"
    if (out / generate.DONE).exists():
        return out / "checkpoint"
    spark = generate.build_session("state-reader-bench-display", memory="2g")
    try:
        source = out / "input"
        source.mkdir(parents=True, exist_ok=True)
        start = time.time() - BATCHES
        for b in range(BATCHES):
            path = source / f"{b:04d}.json"
            path.write_text("".join(json.dumps({"k": f"key{(b * 37 + i) % 5000}", "v": i}) + "\n" for i in range(200)))
            os.utime(path, (start + b, start + b))  # a file source takes files oldest first
        spark.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", generate.PROVIDERS[provider])
        stream = spark.readStream.schema("k string, v long").option("maxFilesPerTrigger", 1).json(str(source))
        query = (
            stream.groupBy("k")
            .count()
            .writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(out / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    finally:
        spark.stop()
    (out / generate.DONE).write_text("")
    return out / "checkpoint"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--providers", default="hdfs,rocksdb")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    root = generate.data_dir(args.data_dir)
    print(f"{'provider':8} {'partitions':>10} {'batches':>7} {'display s':>9} {'read_state s':>12}")
    for provider in args.providers.split(","):
        cp = str(_checkpoint(root, provider))
        batches = len(state_reader.open(cp).batches)
        display = generate.median_seconds(lambda cp=cp: state_reader.open(cp)._repr_html_(), args.repeat)
        read = generate.median_seconds(lambda cp=cp: state_reader.read_state(cp), args.repeat)
        print(f"{provider:8} {PARTITIONS:>10} {batches:>7} {display:9.3f} {read:12.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
