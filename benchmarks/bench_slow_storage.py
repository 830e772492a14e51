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

"round trips" is the critical path: (time over the slow filesystem - time over the same
filesystem with no latency) / latency, each time the best of ``--runs`` (the run least slowed by
other work on the machine, which only ever adds time). Taking the remote path both times leaves
out what its fetch pools cost in CPU, which a busy machine makes much of ("local", the plain local
read, is shown too: earlier rounds counted from it). ``--source NAME=DIR`` runs the same operations with the
package found in DIR (an export of an older commit, say) beside the working tree's, side by side.

``--check`` runs the four operations a user waits on (read, doctor, display, lookup) on both
providers (five runs each unless ``--runs`` says otherwise), prints their numbers side by side,
and exits with 1, naming each, when one of them costs more round trips than its budget in
:data:`BUDGETS`, lists more than :data:`LISTINGS` times or fetches a file twice. Round trips
are times: on a machine busy with other work they move by several either way.

    python benchmarks/generate.py --keys 100000 --providers hdfs,rocksdb --partitions 200
    python benchmarks/bench_slow_storage.py --partitions 200 --source before=/tmp/old-checkout
    python benchmarks/bench_slow_storage.py --check
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])

import generate  # noqa: E402

OPERATIONS = ("read", "display", "doctor", "lookup", "metadata")
# round trips on the critical path each operation may cost on Spark's default 200 state partitions
# at most, on either provider (what README.md and benchmarks/README promise)
BUDGETS = {"read": 30, "doctor": 60, "display": 10, "lookup": 10}
LISTINGS = 8  # listings do not grow with the partitions: the logs, state/ and each operator's, paginated


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
    # the measuring filesystem is this tree's, whatever the source
    spec = importlib.util.spec_from_file_location("latency_fs", ROOT / "tests" / "support" / "latency_fs.py")
    assert spec is not None and spec.loader is not None
    latency_fs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(latency_fs)
    fs = latency_fs.LatencyFileSystem

    prefix = latency_fs.register(0.0)
    _operation(op, path)  # imports, compiled kernels, page cache
    local = []
    for _ in range(runs):
        started = time.perf_counter()
        _operation(op, path)
        local.append(time.perf_counter() - started)
    # the remote code path with no latency (its fetch pools and threads, which cost CPU time of their
    # own) and with it, alternately: the difference is what the latency alone adds
    remote, fast = [], []
    for _ in range(runs):
        for wait, times in ((0.0, fast), (latency, remote)):
            fs.reset(wait)
            started = time.perf_counter()
            _operation(op, prefix + path)
            times.append(time.perf_counter() - started)
    fetched = Counter(p for kind, p in fs.paths if kind == "get")
    return {
        "local": min(local),
        "remote": min(remote),
        "fast": min(fast),
        "calls": dict(fs.calls),
        "twice": sorted(p.rsplit("/checkpoint/", 1)[-1] for p, n in fetched.items() if n > 1),
    }


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


def _trips(r: dict, latency: float) -> float:
    """Round trips on the critical path (a result without the no-latency run: from the local read)."""
    return (r["remote"] - r.get("fast", r["local"])) / latency


def _check(results: dict[tuple[str, str, str], dict], latency: float) -> list[str]:
    """What went past its budget (or fetched a file twice), one line each."""
    failed = []
    for (op, provider, name), r in sorted(results.items()):
        if name != "now" or op not in BUDGETS:
            continue
        label = f"{op} {provider}"
        if "error" in r:
            failed.append(f"{label}: failed ({r['error']})")
            continue
        trips = _trips(r, latency)
        if trips > BUDGETS[op]:
            failed.append(f"{label}: {trips:.0f} round trips, over its budget of {BUDGETS[op]}")
        if r["calls"].get("list", 0) > LISTINGS:
            failed.append(f"{label}: {r['calls']['list']} listings, over {LISTINGS}")
        if r["twice"]:
            shown = ", ".join(r["twice"][:3]) + (", ..." if len(r["twice"]) > 3 else "")
            failed.append(f"{label}: {len(r['twice'])} files fetched more than once ({shown})")
    return failed


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        op, path, latency, runs, source = sys.argv[2:7]
        print(json.dumps(worker(op, path, float(latency), int(runs), source)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="100000", help="key counts, comma-separated (default 100000)")
    parser.add_argument("--providers", default="hdfs,rocksdb")
    parser.add_argument("--partitions", type=int, default=200, help="state partitions (default 200)")
    parser.add_argument("--operations", help=f"comma-separated (default {','.join(OPERATIONS)}; --check: its four)")
    parser.add_argument("--latency", type=float, default=0.03, help="seconds added per request (default 0.03)")
    parser.add_argument("--runs", type=int, help="runs of each operation, the best reported (default 1; --check: 5)")
    parser.add_argument(
        "--source",
        action="append",
        default=[],
        help="NAME=DIR: also run the package in DIR (e.g. an export of an older commit)",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when read, doctor, display or lookup goes past its budget"
    )
    parser.add_argument("--data-dir", help="where benchmark checkpoints are cached")
    args = parser.parse_args(argv)
    operations = (args.operations or ",".join(BUDGETS if args.check else OPERATIONS)).split(",")
    runs = args.runs or (5 if args.check else 1)
    paths = generate.ensure(
        generate.data_dir(args.data_dir),
        args.providers.split(","),
        generate.parse_keys(args.keys),
        partitions=args.partitions,
    )
    sources = [tuple(s.split("=", 1)) for s in args.source] + [("now", str(ROOT))]
    providers = sorted({provider for provider, _ in paths})
    ms = args.latency * 1000
    print(
        f"{args.partitions} partitions, {ms:.0f} ms per request, best of {runs} run{'s' if runs > 1 else ''}; "
        "calls = get / list / info; round trips = (remote - remote with no latency) / latency"
    )
    head = "".join(f" | {p + ': calls':>20} {'trips':>6} {'local':>6} {'remote':>7}" for p in providers)
    print(f"{'operation':<9} {'source':<8} {'budget':>6}{head}")
    results: dict[tuple[str, str, str], dict] = {}
    for op in operations:
        for name, source in sources:
            cells = []
            for provider in providers:
                path = next(p for (prov, _), p in sorted(paths.items()) if prov == provider)
                r = results[(op, provider, name)] = _run(Path(source), op, path, args.latency, runs)
                if "error" in r:
                    cells.append(f" | {'error':>20} {'':>6} {'':>6} {'':>7}")
                    continue
                c = r["calls"]
                calls = f"{c.get('get', 0)} / {c.get('list', 0)} / {c.get('info', 0)}"
                trips = _trips(r, args.latency)
                cells.append(f" | {calls:>20} {trips:>6.0f} {r['local']:>5.2f}s {r['remote']:>6.2f}s")
            print(f"{op:<9} {name:<8} {BUDGETS.get(op, ''):>6}{''.join(cells)}", flush=True)
    for (op, provider, name), r in sorted(results.items()):
        if "error" in r:
            print(f"{op} {provider} ({name}): error: {r['error']}")
    if not args.check:
        return 0
    failed = _check(results, args.latency)
    if failed:
        print(f"\nFAILED: over budget on an object store ({ms:.0f} ms a request):", file=sys.stderr)
        for line in failed:
            print(f"  {line}", file=sys.stderr)
        return 1
    print("\nok: every operation within its budget of round trips and listings, no file fetched twice")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
