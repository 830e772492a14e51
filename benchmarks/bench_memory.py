"""Peak memory of reading a large checkpoint: partition by partition, and whole.

Reading partition by partition (as the Spark data source does: one input
partition per state partition, its record batches handed on as they are made)
keeps the peak bounded by the largest partition, whatever the number of
partitions; only materialising the whole table grows with the whole state.

Each measurement runs in a fresh interpreter and reports its peak resident set
size (``ru_maxrss``) above the same interpreter's size after importing
state_reader and planning the read, so imports and the plan do not count:

* ``one partition``  decode the largest partition only, drop its batches
* ``streamed``       decode every partition in turn, dropping each batch
* ``whole table``    ``read_table(plan)``, kept until the end

Peak RSS also counts memory the allocators keep cached after it was freed, so
the streamed figure creeps above the single partition's; the Arrow memory still
allocated after each partition (printed too) shows that nothing is carried over.

The checkpoints are those of ``benchmarks/generate.py`` (a real streaming
aggregation, 8 state partitions), generated on first use and cached.

    python benchmarks/bench_memory.py --keys 1000000,5000000 --providers hdfs,rocksdb
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

MODES = ("one partition", "streamed", "whole table")
MIB = 2**20


def _peak_rss() -> int:
    """Peak resident set size of this process so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _current_rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(checkpoint: str, mode: str) -> dict:
    """Run one mode in this process; return its figures (called in a child interpreter)."""
    import pyarrow as pa

    from state_reader.core.decode import read_partition
    from state_reader.core.planner import plan_state_read
    from state_reader.core.scan import read_table

    plan = plan_state_read({"path": checkpoint})
    for module in ("lz4.block", "xxhash", "cramjam", "zstandard", "rocksdict", "google_crc32c"):
        try:  # code that decoding loads on first use is not state: load it before the baseline
            __import__(module)
        except ImportError:
            pass
    base = _current_rss()
    out = {"mode": mode, "partitions": len(plan.partitions), "rows": 0, "output_bytes": 0, "largest_output": 0}
    if mode == "whole table":
        table = read_table(plan)
        out["rows"], out["output_bytes"] = table.num_rows, table.nbytes
    else:
        largest = int(os.environ["BENCH_LARGEST_PARTITION"]) if mode == "one partition" else None
        for partition in [largest] if largest is not None else plan.partitions:
            size = 0
            for batch in read_partition(plan, partition):
                out["rows"] += batch.num_rows
                size += batch.nbytes
                del batch
            out["output_bytes"] += size
            out["largest_output"] = max(out["largest_output"], size)
            # Arrow memory still held once a partition is done: nothing carries over to the next
            out["retained"] = max(out.get("retained", 0), pa.total_allocated_bytes())
    out["peak_above_base"] = max(0, _peak_rss() - base)
    out["pool"] = pa.default_memory_pool().backend_name
    return out


def _child(checkpoint: str, mode: str, env: dict[str, str]) -> dict:
    code = (
        f"import sys, json; sys.path.insert(0, {str(HERE)!r}); import bench_memory as b; "
        f"print(json.dumps(b.measure({checkpoint!r}, {mode!r})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, env={**os.environ, **env}
    )
    if result.returncode != 0:
        raise RuntimeError(f"{mode} on {checkpoint} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _on_disk(checkpoint: Path) -> tuple[int, dict[int, int]]:
    """Bytes of state files in all, and per partition (hidden checksum files left out)."""
    per: dict[int, int] = {}
    for path in (checkpoint / "state" / "0").rglob("*"):
        parts = path.relative_to(checkpoint / "state" / "0").parts
        if path.is_file() and not path.name.startswith(".") and parts[0].isdigit():
            per[int(parts[0])] = per.get(int(parts[0]), 0) + path.stat().st_size
    return sum(per.values()), per


def bench(checkpoint: Path) -> list[dict]:
    """The three modes on one checkpoint; the largest partition is the one with most bytes on disk."""
    _, per = _on_disk(checkpoint)
    largest = max(per, key=per.get)
    env = {"BENCH_LARGEST_PARTITION": str(largest)}
    return [_child(str(checkpoint), mode, env) for mode in MODES]


def main(argv: list[str] | None = None) -> int:
    import generate

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default="1000000", help="comma-separated key counts (100k, 1M allowed)")
    parser.add_argument("--providers", default="hdfs,rocksdb", help="comma-separated: hdfs, rocksdb")
    parser.add_argument("--data-dir", default=None, help="checkpoint cache (see generate.py)")
    args = parser.parse_args(argv)
    paths = generate.ensure(generate.data_dir(args.data_dir), args.providers.split(","), generate.parse_keys(args.keys))
    print(
        f"{'checkpoint':<16} {'mode':<14} {'rows':>9} {'output MiB':>10} {'largest part. MiB':>17} "
        f"{'peak RSS above base MiB':>23}"
    )
    verdicts = []
    for (provider, keys), checkpoint in paths.items():
        total, per = _on_disk(checkpoint)
        label = f"{provider}-{keys}"
        figures = {f["mode"]: f for f in bench(checkpoint)}
        for mode in MODES:
            f = figures[mode]
            largest = f"{f['largest_output'] / MIB:.1f}" if f["largest_output"] else "-"
            print(
                f"{label:<16} {mode:<14} {f['rows']:>9} {f['output_bytes'] / MIB:>10.1f} "
                f"{largest:>17} {f['peak_above_base'] / MIB:>23.1f}"
            )
        one, streamed, whole = (figures[m]["peak_above_base"] for m in MODES)
        print(
            f"{label:<16} Arrow memory held after each streamed partition: at most "
            f"{figures['streamed'].get('retained', 0) / MIB:.1f} MiB ({figures['streamed']['pool']} pool)"
        )
        print(
            f"{label:<16} state files on disk {total / MIB:.1f} MiB in {len(per)} partitions "
            f"(largest {max(per.values()) / MIB:.1f} MiB)"
        )
        verdicts.append(
            f"{label}: streaming every partition peaks at {streamed / MIB:.0f} MiB, "
            f"{streamed / max(one, 1):.2f}x the largest partition alone ({one / MIB:.0f} MiB); "
            f"the whole table peaks at {whole / MIB:.0f} MiB"
        )
    print()
    print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
