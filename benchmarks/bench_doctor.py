"""``doctor`` against a plain ``read_state`` of the same checkpoint, side by side in one run.

``diagnose`` reads the latest batch's state once per store (plus, for the growth
check, the oldest retained batch when the operator cannot evict), and the logs
and file listings; the target is at most 3x a plain read of the latest batch.

    python benchmarks/bench_doctor.py --keys 1000000 --providers hdfs,rocksdb --repeat 3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import generate

import state_reader


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="1000000", help="comma-separated key counts (100k, 1M allowed)")
    parser.add_argument("--providers", default="hdfs,rocksdb", help="comma-separated: hdfs, rocksdb")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    paths = generate.ensure(generate.data_dir(args.data_dir), args.providers.split(","), generate.parse_keys(args.keys))
    print(f"{'provider':8} {'keys':>9} {'read_state s':>13} {'diagnose s':>11} {'ratio':>6}  findings")
    for (provider, keys), path in paths.items():
        cp = str(path)
        state_reader.read_state(cp)  # warm the page cache and imports for both
        read = generate.median_seconds(lambda cp=cp: state_reader.read_state(cp), args.repeat)
        doctor = generate.median_seconds(lambda cp=cp: state_reader.diagnose(cp), args.repeat)
        kinds = sorted({f.kind for f in state_reader.diagnose(cp).findings})
        print(f"{provider:8} {keys:>9} {read:13.3f} {doctor:11.3f} {doctor / read:5.2f}x  {', '.join(kinds) or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
