"""Why is my state growing? Measure it per batch and look at the watermark.

The query counts readings per device in 10-second event-time windows with a
30-second watermark. After two normal batches, a device with a frozen clock
keeps sending readings stamped with the same old time while new devices keep
appearing. The newest event time stops moving, so the watermark stalls, no
window is ever closed and evicted, and the state grows with every batch.

``state_reader.stats`` measures the state per batch and partition,
``batch_summary`` adds it up, and ``plot_state_size`` draws it.

    python examples/why_is_state_growing.py [--out state_growth.png] [--keep DIR]
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os

from _streaming import cli_hint, example_arguments, run_query, spark_session, workspace

import state_reader
from state_reader.inspect.stats import batch_summary

T0 = 1_700_000_000
BATCHES = 8


def readings() -> list[list[dict]]:
    batches = []
    for b in range(BATCHES):
        if b < 2:  # healthy: event time moves forward
            rows = [{"ts": T0 + b * 20 + i, "device": f"d{i}", "value": i} for i in range(6)]
        else:  # a frozen clock: always the same old time, and new devices every batch
            rows = [{"ts": T0 + 25, "device": f"d{b}-{i}", "value": i} for i in range(6)]
        batches.append(rows)
    return batches


def build(stream):
    from pyspark.sql import functions as F

    return (
        stream.withWatermark("ts", "30 seconds")
        .groupBy(F.window("ts", "10 seconds"), "device")
        .agg(F.count(F.lit(1)).alias("n"), F.avg("value").alias("avg_value"))
    )


def watermarks(checkpoint: str) -> dict[int, int]:
    """Batch -> the watermark (ms) the commit log says the next batch runs with."""
    out = {}
    for name in os.listdir(os.path.join(checkpoint, "commits")):
        if name.isdigit():
            with open(os.path.join(checkpoint, "commits", name), encoding="utf-8") as fh:
                out[int(name)] = json.loads(fh.read().split("\n")[1])["nextBatchWatermarkMs"]
    return out


def _out_option(parser) -> None:
    parser.add_argument("--out", default="state_growth.png", help="where to write the plot")


def main() -> int:
    args = example_arguments(__doc__, _out_option)
    with workspace(args.keep, "state-reader-growing-") as root:
        spark = spark_session()
        try:
            checkpoint = run_query(spark, root, readings(), "ts long, device string, value int", build)
        finally:
            spark.stop()  # from here on, no Spark: state_reader reads the files itself
        table = state_reader.stats(checkpoint)
        summary = batch_summary(table).to_pylist()
        marks = watermarks(checkpoint)
        print("batch  state rows    state bytes  watermark after the batch")
        for row in summary:
            mark = marks.get(row["batch_id"], 0)
            shown = dt.datetime.fromtimestamp(mark / 1000, dt.timezone.utc).strftime("%H:%M:%S") if mark else "-"
            print(f"{row['batch_id']:>5}  {row['rows']:>10}  {row['state_bytes']:>13}  {shown}")
        grew = all(b["rows"] >= a["rows"] for a, b in itertools.pairwise(summary[2:]))
        stalled = len({marks[b["batch_id"]] for b in summary[2:]}) == 1
        if grew and stalled:
            print(
                f"\nState grew from {summary[1]['rows']} to {summary[-1]['rows']} rows while the watermark "
                "stood still: no window can close, so nothing is evicted. Look for a source whose event "
                "time stopped advancing (a frozen clock, a stuck partition, a replayed backlog)."
            )
        fig = state_reader.plot_state_size(checkpoint, title="state size per partition: the watermark stalled")
        fig.savefig(args.out)
        print(f"\nplot written to {args.out}")
        print(cli_hint(checkpoint, kept=bool(args.keep)))
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
