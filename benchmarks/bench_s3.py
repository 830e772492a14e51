"""Read, notebook display and doctor through s3fs against a local S3 server, per connection pool.

moto's S3 server runs on 127.0.0.1 (in a process of its own); an HTTP proxy in front of
it (in this process) holds each request and each response for half of ``--latency``, so
a request costs one round trip of ``--latency`` (30 ms by default) however many are in
flight, and a new connection one more (its handshake). It keeps the client's connections
open between requests, as S3 does (moto's server closes each after one response), and
counts the requests it forwards (``get``: an object; ``list``: a GET of the bucket, S3's
ListObjectsV2; ``head``) and the connections open at once.

The checkpoints of ``generate.py`` (100k keys, 200 state partitions, HDFS-backed and
RocksDB) are uploaded to the server as they are on disk (``--no-hadoop-crc``: without
Hadoop's hidden ``.<name>.crc`` files, as a query writing to S3 leaves them), then each
operation runs in a fresh process per connection pool setting, through ``s3://`` with
``storage_options``:

* ``read``: ``state_reader.read_state(url, storage_options=...)``;
* ``display``: ``state_reader.open(url, **options)._repr_html_()`` (``bench_display.py``);
* ``doctor``: ``state_reader.diagnose(url, storage_options=...)``.

Pools (``--pools``): a number N passes ``{"config_kwargs": {"max_pool_connections": N}}``
(10 is botocore's own default, what s3fs gets when nothing sets it); ``default`` passes no
``config_kwargs``, which state_reader now fills in with as many connections as fetches in
flight (``STATE_READER_IO_THREADS``, 64). Each process runs the operation once on the local
copy (imports, compiled kernels) and once more timed ("local"), once through the proxy on
new connections ("first"), then ``--runs`` times (median reported). Times are printed side
by side, with the first pool's time over each pool's ("speed-up"); nothing is asserted.
Requests beyond the pool wait in the client for a free connection (no warning is logged:
s3fs's HTTP client queues them).

    python benchmarks/generate.py --keys 100000 --providers hdfs,rocksdb --partitions 200
    python benchmarks/bench_s3.py                          # pools 10 and 64, 30 ms
    python benchmarks/bench_s3.py --pools 10,64,256 --latency 0.1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import generate  # noqa: E402

OPERATIONS = ("read", "display", "doctor")
BUCKET = "checkpoints"
CREDENTIALS: dict[str, Any] = {"key": "testing", "secret": "testing", "client_kwargs": {"region_name": "us-east-1"}}
_REQUEST_LINE = re.compile(rb"^(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/1\.[01]\r?\n")


# --- the S3 server, in a process of its own -------------------------------------------------


def serve(port: int) -> None:
    """Run moto's S3 server on 127.0.0.1:``port`` until standard input closes."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    print("ready", flush=True)
    sys.stdin.read()  # the benchmark closes it when done, or goes away
    server.stop()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server() -> tuple[subprocess.Popen, int]:
    """moto's server in a child process, and its port (a bucket made)."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", "moto server did not start"
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id=CREDENTIALS["key"],
        aws_secret_access_key=CREDENTIALS["secret"],
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    return proc, port


def upload(port: int, local: Path, prefix: str, hadoop_crc: bool = True) -> int:
    """Copy a checkpoint to ``s3://checkpoints/<prefix>``; return its object count. Without
    ``hadoop_crc`` the hidden ``.<name>.crc`` files of the local disk stay behind, as a query
    writing to S3 through Hadoop's S3A filesystem writes none."""
    import s3fs

    fs = s3fs.S3FileSystem(**CREDENTIALS, endpoint_url=f"http://127.0.0.1:{port}", skip_instance_cache=True)
    files = sorted(
        f for f in local.rglob("*") if f.is_file() and (hadoop_crc or not re.fullmatch(r"\..*\.crc", f.name))
    )
    fs.put([str(f) for f in files], [f"{BUCKET}/{prefix}/{f.relative_to(local).as_posix()}" for f in files])
    found = fs.find(f"{BUCKET}/{prefix}")
    hidden = [p for p in found if re.fullmatch(r"\..*\.crc", p.rsplit("/", 1)[-1])]
    assert len(found) == len(files) and bool(hidden) == hadoop_crc, "checkpoint not uploaded as it is"
    return len(found)


# --- the proxy: a fixed latency per request, requests counted -------------------------------


class LatencyProxy:
    """An HTTP/1.1 proxy on 127.0.0.1 in front of the S3 server, as far from the client as an
    object store: a request reaches the server ``latency / 2`` seconds after it was sent and its
    response the client ``latency / 2`` after the server gave it (one round trip per request,
    however many are in flight), and a new connection carries its first request one round trip
    after it was accepted (the handshake). Connections stay open between requests as they do on
    S3 (moto's server closes each after one response, so each request goes to it on a connection
    of its own). Requests are counted by their request line, connections as they open."""

    def __init__(self, upstream_port: int, latency: float) -> None:
        self.upstream_port = upstream_port
        self.latency = latency
        self.counts: Counter[str] = Counter()
        self.open = 0
        self.peak = 0
        self.opened = 0
        self._lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    def snapshot(self) -> dict[str, Any]:
        """Requests so far, connections opened so far, and the most open at once since the last snapshot."""
        with self._lock:
            out = {"requests": dict(self.counts), "opened": self.opened, "peak": self.peak}
            self.peak = self.open
        return out

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)

    def _count(self, method: str, target: str) -> None:
        path = target.split("?", 1)[0].strip("/")
        kind = method.lower()
        if method == "GET":
            kind = "get" if "/" in path else "list"  # path-style: /bucket/key is an object, /bucket?... a listing
        with self._lock:
            self.counts[kind] += 1

    async def _until(self, at: float) -> None:
        wait = at - self.loop.time()
        if wait > 0:
            await asyncio.sleep(wait)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ready = self.loop.time() + self.latency  # the handshake
        with self._lock:
            self.open += 1
            self.opened += 1
            self.peak = max(self.peak, self.open)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the client closed the connection
                sent = self.loop.time()
                m = _REQUEST_LINE.match(head)
                length = re.search(rb"(?im)^content-length:\s*(\d+)\r?$", head)
                body = await reader.readexactly(int(length.group(1))) if length else b""
                if m:
                    self._count(m.group(1).decode(), m.group(2).decode())
                await self._until(max(sent, ready) + self.latency / 2)
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
                up_writer.write(head + body)
                await up_writer.drain()
                response = await up_reader.read()  # the server closes after each response
                up_writer.close()
                answered = self.loop.time()
                split = response.find(b"\r\n\r\n")
                response = (
                    re.sub(rb"(?im)^connection:[ \t]*close(?=\r?$)", b"Connection: keep-alive", response[:split])
                    + response[split:]
                )
                await self._until(answered + self.latency / 2)
                writer.write(response)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            with self._lock:
                self.open -= 1


# --- one operation in a fresh process -------------------------------------------------------


def _operation(op: str, path: str, options: dict[str, Any]) -> None:
    import state_reader

    if op == "read":
        state_reader.read_state(path, storage_options=options)
    elif op == "display":
        state_reader.open(path, **options)._repr_html_()
    elif op == "doctor":
        state_reader.diagnose(path, storage_options=options)
    else:
        raise ValueError(op)


class _Warnings(logging.Handler):
    """Every warning logged or warned in the process, by message."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.seen[f"{record.name}: {record.getMessage()}"[:200]] += 1


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one operation: locally twice, then through the proxy once on new connections and
    ``runs`` times more. Before and after each remote run the parent is asked to note the proxy's
    counts (a line ``@@mark`` on standard output, answered by a line on standard input)."""
    from state_reader.io.calls import io_counts, io_counts_since

    caught = _Warnings()
    logging.getLogger().addHandler(caught)
    logging.captureWarnings(True)
    warnings.simplefilter("always")

    def mark() -> None:
        print("@@mark", flush=True)
        sys.stdin.readline()

    def timed(path: str, options: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        before = io_counts()
        cpu = time.process_time()
        started = time.perf_counter()
        _operation(spec["op"], path, options)
        seconds = time.perf_counter() - started
        return seconds, {**io_counts_since(before), "cpu": time.process_time() - cpu}

    _operation(spec["op"], spec["local"], {})  # imports, compiled kernels, page cache
    local, local_counts = timed(spec["local"], {})
    mark()
    first, _ = timed(spec["url"], spec["options"])
    mark()
    times, client = [], {}
    for _ in range(spec["runs"]):
        mark()
        seconds, client = timed(spec["url"], spec["options"])
        times.append(seconds)
        mark()
    return {
        "local": local,
        "local_cpu": local_counts["cpu"],
        "first": first,
        "times": times,
        "client": client,
        "warnings": dict(caught.seen),
    }


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of process ``pid`` so far, from /proc; 0 where there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_worker(proxy: LatencyProxy, server_pid: int, spec: dict[str, Any]) -> dict[str, Any]:
    """``worker`` in a fresh process; per remote run the proxy's counts, connections and the
    server's CPU time added."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(ROOT),
    )
    assert proc.stdin is not None and proc.stdout is not None
    marks, result = [], None
    for line in proc.stdout:
        if line.startswith("@@mark"):
            marks.append({**proxy.snapshot(), "server_cpu": _cpu_seconds(server_pid)})
            proc.stdin.write("\n")
            proc.stdin.flush()
        elif line.startswith("@@result "):
            result = json.loads(line[len("@@result ") :])
    stderr = proc.stderr.read() if proc.stderr else ""
    proc.wait()
    if result is None:
        return {"error": (stderr.strip().splitlines() or ["failed"])[-1]}
    # marks come in pairs around each remote run: the first run, then each measured one
    runs = []
    for before, after in zip(marks[0::2], marks[1::2], strict=True):
        requests = {k: after["requests"].get(k, 0) - before["requests"].get(k, 0) for k in after["requests"]}
        runs.append(
            {
                "requests": {k: v for k, v in requests.items() if v},
                "opened": after["opened"] - before["opened"],
                "peak": after["peak"],
                "server_cpu": after["server_cpu"] - before["server_cpu"],
            }
        )
    result["first_proxy"], result["proxy"] = runs[0], runs[1:]
    return result


# --- the run --------------------------------------------------------------------------------


def _pool_options(pool: str, endpoint: str) -> dict[str, Any]:
    options: dict[str, Any] = {**CREDENTIALS, "endpoint_url": endpoint}
    if pool != "default":
        options["config_kwargs"] = {"max_pool_connections": int(pool)}
    return options


def _requests(proxy_run: dict[str, Any]) -> str:
    r = proxy_run["requests"]
    extra = {k: v for k, v in r.items() if k not in ("get", "list")}
    text = f"{r.get('get', 0)} / {r.get('list', 0)}"
    return text + (" + " + ", ".join(f"{v} {k}" for k, v in sorted(extra.items())) if extra else "")


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
        return 0
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "--worker":
        print("@@result " + json.dumps(worker(json.loads(sys.argv[2]))), flush=True)
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="100000", help="key count of the checkpoints (default 100000)")
    parser.add_argument("--providers", default="hdfs,rocksdb")
    parser.add_argument("--partitions", type=int, default=200, help="state partitions (default 200)")
    parser.add_argument("--operations", default=",".join(OPERATIONS))
    parser.add_argument("--latency", type=float, default=0.03, help="seconds per request round trip (default 0.03)")
    parser.add_argument("--pools", default="10,64", help="max_pool_connections settings; 'default' passes none")
    parser.add_argument("--runs", type=int, default=2, help="measured runs per operation and pool (median)")
    parser.add_argument(
        "--no-hadoop-crc",
        action="store_true",
        help="upload without the hidden .<name>.crc files (a query writing to S3 writes none)",
    )
    parser.add_argument("--data-dir", help="where benchmark checkpoints are cached")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    keys = generate.parse_keys(args.keys)[0]
    paths = generate.ensure(
        generate.data_dir(args.data_dir), args.providers.split(","), [keys], partitions=args.partitions
    )
    pools = args.pools.split(",")
    started = time.perf_counter()
    server, port = start_server()
    proxy = LatencyProxy(port, args.latency)
    endpoint = f"http://127.0.0.1:{proxy.port}"
    results: list[dict[str, Any]] = []
    try:
        for (provider, _), path in sorted(paths.items()):
            files = upload(port, path, f"{provider}-{keys}-p{args.partitions}", hadoop_crc=not args.no_hadoop_crc)
            print(f"uploaded {provider}: {files} objects", flush=True)
        print(
            f"{args.partitions} partitions, {keys} keys, {args.latency * 1000:.0f} ms per request; "
            f"requests = get / list per run (counted by the proxy); conns = opened / most open at once; "
            f"cpu = the client's / the server's CPU seconds in the last run; "
            f"round trips = (median - local) / latency",
            flush=True,
        )
        head = (
            f"{'operation':<16} {'pool':>7} {'local':>7} {'first':>7} {'median':>7} {'requests':>18} "
            f"{'conns':>9} {'cpu':>11} {'trips':>6}"
        )
        print(head, flush=True)
        for (provider, _), path in sorted(paths.items()):
            url = f"s3://{BUCKET}/{provider}-{keys}-p{args.partitions}"
            for op in args.operations.split(","):
                for pool in pools:
                    spec = {
                        "op": op,
                        "local": str(path),
                        "url": url,
                        "options": _pool_options(pool, endpoint),
                        "runs": args.runs,
                    }
                    r = run_worker(proxy, server.pid, spec)
                    label = f"{op} {provider}"
                    r.update(operation=op, provider=provider, pool=pool)
                    results.append(r)
                    if "error" in r:
                        print(f"{label:<16} {pool:>7} error: {r['error']}", flush=True)
                        continue
                    median = statistics.median(r["times"])
                    last = r["proxy"][-1]
                    conns = f"{last['opened']} / {last['peak']}"
                    cpu = f"{r['client']['cpu']:.2f} / {last['server_cpu']:.2f}"
                    trips = f"{(median - r['local']) / args.latency:.0f}" if args.latency else "-"
                    print(
                        f"{label:<16} {pool:>7} {r['local']:>6.2f}s {r['first']:>6.2f}s {median:>6.2f}s "
                        f"{_requests(last):>18} {conns:>9} {cpu:>11} {trips:>6}",
                        flush=True,
                    )
                    for message, n in r["warnings"].items():
                        print(f"    warning x{n}: {message}", flush=True)
    finally:
        proxy.close()
        if server.stdin:
            server.stdin.close()
        server.wait(timeout=10)
    print()
    print(f"median time per pool, and the time with pool {pools[0]} over each (speed-up):")
    print(f"{'operation':<16} " + " ".join(f"{p:>16}" for p in pools))
    by = {(r["operation"], r["provider"], r["pool"]): r for r in results if "error" not in r}
    for (provider, _), _path in sorted(paths.items()):
        for op in args.operations.split(","):
            base = by.get((op, provider, pools[0]))
            cells = []
            for pool in pools:
                r = by.get((op, provider, pool))
                if r is None:
                    cells.append(f"{'-':>16}")
                    continue
                median = statistics.median(r["times"])
                ratio = f" ({statistics.median(base['times']) / median:.2f}x)" if base else ""
                cells.append(f"{median:>7.2f}s{ratio:>9}")
            print(f"{op + ' ' + provider:<16} " + " ".join(cells))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
