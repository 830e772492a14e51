"""Operations over a filesystem as slow as an object store: round trips and times, before and after.

Every request to the local disk gets ``--latency`` seconds (30 ms by default, what an
object store costs per request) and is counted, through the latency-adding fsspec
filesystem of the tests (``tests/support/latency_fs.py``: a GET per file opened, a listing per
``ls`` or per 1,000 entries of a recursive ``find``, an info per ``info``/``exists``).
Each operation runs in a fresh process:

* ``read``: ``read_state`` of the whole store (HDFS-backed and RocksDB);
* ``display``: ``repr(state_reader.open(cp))``, the notebook overview with store sizes;
* ``doctor``: ``diagnose``;
* ``lookup``: ``read_state`` with a one-key filter (one partition read);
* ``metadata``: ``read_metadata``.

"round trips" is the critical path: (time over the slow filesystem - time locally) /
latency. ``--source NAME=DIR`` runs the same operations with the package found in DIR
(an export of an older commit, say) beside the working tree's, side by side.

    python benchmarks/generate.py --keys 100000 --providers hdfs,rocksdb --partitions 200
    python benchmarks/bench_slow_storage.py --partitions 200 --source before=/tmp/old-checkout
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])

import generate  # noqa: E402

OPERATIONS = ("read", "display", "doctor", "lookup", "metadata")


def _operation(op: str, path: str) -> None:
    import state_reader

    if op == "read":
        state_reader.read_state(path)
    elif op == "display":
        repr(state_reader.open(path))
    elif op == "doctor":
        state_reader.diagnose(path)
    elif op == "lookup":
        table = state_reader.read_state(path, key_filter="key = 'user-12345'")
        assert table.num_rows == 1, table.num_rows
    elif op == "metadata":
        state_reader.read_metadata(path)
    else:
        raise ValueError(op)


def worker(op: str, path: str, latency: float, runs: int, source: str) -> dict:
    """In a fresh process: the operation locally (warm-up and baseline), then over the slow filesystem."""
    sys.path[:0] = [source, str(ROOT)]  # the package of ``source``, ahead of this tree's
    from tests.support import latency_fs

    prefix = latency_fs.register(0.0)
    _operation(op, path)  # imports, compiled kernels, page cache
    local = []
    for _ in range(runs):
        started = time.perf_counter()
        _operation(op, path)
        local.append(time.perf_counter() - started)
    latency_fs.LatencyFileSystem.reset(latency)
    remote = []
    for _ in range(runs):
        latency_fs.LatencyFileSystem.reset()
        started = time.perf_counter()
        _operation(op, prefix + path)
        remote.append(time.perf_counter() - started)
    calls = dict(latency_fs.LatencyFileSystem.calls)
    return {"local": statistics.median(local), "remote": statistics.median(remote), "calls": calls}


def _run(source: Path, op: str, path: Path, latency: float, runs: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), str(ROOT)])}
    out = subprocess.run(
        [sys.executable, __file__, "--worker", op, str(path), str(latency), str(runs), str(source)],
        env=env,
        capture_output=True,
        text=True,
        cwd=str(source),
    )
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        op, path, latency, runs, source = sys.argv[2:7]
        print(json.dumps(worker(op, path, float(latency), int(runs), source)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="100000", help="key counts, comma-separated (default 100000)")
    parser.add_argument("--providers", default="hdfs,rocksdb")
    parser.add_argument("--partitions", type=int, default=200, help="state partitions (default 200)")
    parser.add_argument("--operations", default=",".join(OPERATIONS))
    parser.add_argument("--latency", type=float, default=0.03, help="seconds added per request (default 0.03)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--source",
        action="append",
        default=[],
        help="NAME=DIR: also run the package in DIR (e.g. an export of an older commit)",
    )
    parser.add_argument("--data-dir", help="where benchmark checkpoints are cached")
    args = parser.parse_args(argv)
    paths = generate.ensure(
        generate.data_dir(args.data_dir),
        args.providers.split(","),
        generate.parse_keys(args.keys),
        partitions=args.partitions,
    )
    sources = [tuple(s.split("=", 1)) for s in args.source] + [("now", str(ROOT))]
    ms = args.latency * 1000
    print(
        f"{args.partitions} partitions, {ms:.0f} ms per request; calls = get / list / info; "
        f"round trips = (remote - local) / latency"
    )
    print(f"{'operation':<18} {'source':<8} {'local':>7} {'remote':>8} {'calls':>16} {'round trips':>12}")
    for (provider, _keys), path in sorted(paths.items()):
        for op in args.operations.split(","):
            for name, source in sources:
                r = _run(Path(source), op, path, args.latency, args.runs)
                label = f"{op} {provider}"
                if "error" in r:
                    print(f"{label:<18} {name:<8} error: {r['error']}")
                    continue
                c = r["calls"]
                calls = f"{c.get('get', 0)} / {c.get('list', 0)} / {c.get('info', 0)}"
                trips = (r["remote"] - r["local"]) / args.latency
                print(
                    f"{label:<18} {name:<8} {r['local']:>6.2f}s {r['remote']:>7.2f}s {calls:>16} {trips:>12.0f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
