"""Read over a filesystem as slow as an object store: files fetched one by one vs at once.

Every open, listing and info of the local filesystem gets ``--latency`` seconds
(30 ms by default, what an object store costs per request). The same
``read_state`` of the same checkpoint runs with ``STATE_READER_IO_THREADS=1``
(each file a version needs fetched after the previous one) and with the default
(fetched at once); the medians and their ratio are printed side by side.

    python benchmarks/bench_slow_storage.py --keys 100000 --providers hdfs,rocksdb
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])

import generate  # noqa: E402


def register_slow_filesystem(latency: float) -> str:
    """``slowfile://``: the local filesystem with ``latency`` seconds added to every request."""
    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    class SlowFileSystem(LocalFileSystem):
        protocol = "slowfile"

        def _open(self, *args, **kwargs):
            time.sleep(latency)
            return super()._open(*args, **kwargs)

        def ls(self, *args, **kwargs):
            time.sleep(latency)
            return super().ls(*args, **kwargs)

        def info(self, *args, **kwargs):
            time.sleep(latency)
            return super().info(*args, **kwargs)

    fsspec.register_implementation("slowfile", SlowFileSystem, clobber=True)
    return "slowfile://"


def _median_seconds(path: str, io_threads: str | None, runs: int) -> float:
    import state_reader

    if io_threads is None:
        os.environ.pop("STATE_READER_IO_THREADS", None)
    else:
        os.environ["STATE_READER_IO_THREADS"] = io_threads
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        state_reader.read_state(path)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="100000", help="key counts, comma-separated (default 100000)")
    parser.add_argument("--providers", default="hdfs,rocksdb")
    parser.add_argument("--latency", type=float, default=0.03, help="seconds added per request (default 0.03)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--data-dir", help="where benchmark checkpoints are cached")
    args = parser.parse_args(argv)
    paths = generate.ensure(generate.data_dir(args.data_dir), args.providers.split(","),
                            generate.parse_keys(args.keys))
    scheme = register_slow_filesystem(args.latency)
    print(f"read_state over a filesystem with {args.latency * 1000:.0f} ms per request, median of {args.runs}")
    print(f"{'checkpoint':<22} {'one by one':>11} {'at once':>9} {'speed-up':>9}")
    for (provider, keys), path in sorted(paths.items()):
        url = scheme + str(path)
        sequential = _median_seconds(url, "1", args.runs)
        concurrent = _median_seconds(url, None, args.runs)
        print(f"{provider + ' ' + str(keys):<22} {sequential:>10.2f}s {concurrent:>8.2f}s "
              f"{sequential / concurrent:>8.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
