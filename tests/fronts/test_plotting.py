"""The state-size figure: through the API, the ``plot`` command, and for many partitions a band and the top ones."""

from __future__ import annotations

import pyarrow as pa

import state_reader
from state_reader.inspect.stats import STATS_SCHEMA
from tests.support.cli import png_size, run, run_json
from tests.support.paths import GOLDEN


def test_plot_writes_png(agg, tmp_path):
    out = tmp_path / "state.png"
    doc = run_json("plot", agg, "--out", out)
    width, height = png_size(out)
    assert (width, height) == (doc["width"], doc["height"]) == (1200, 400)
    assert out.stat().st_size > 20_000  # drawn lines and labels, not an empty canvas
    two = tmp_path / "multi.png"
    assert run("plot", GOLDEN / "spark-4.0.5" / "multi_op_hdfs", "--out", two).returncode == 0
    assert png_size(two) == (1200, 800)  # one row of charts per store


def test_plot_state_size_figure(agg, tmp_path):
    from matplotlib.figure import Figure

    fig = state_reader.plot_state_size(agg)
    assert isinstance(fig, Figure)
    rows_ax, bytes_ax = fig.axes
    assert "rows per partition" in rows_ax.get_title() and "bytes" in bytes_ax.get_title()
    assert [line.get_label() for line in rows_ax.get_lines()] == ["partition 0", "partition 1"]
    table = state_reader.stats(agg)
    p1 = [r["rows"] for r in table.to_pylist() if r["partition_id"] == 1]
    assert list(rows_ax.get_lines()[1].get_ydata()) == p1
    fig.savefig(tmp_path / "x.png")
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_many_partitions_shows_band_and_top():

    from state_reader.fronts.plotting import figure_from_stats

    rows = [
        {
            "operator_id": 0,
            "store_name": "default",
            "batch_id": b,
            "version": b + 1,
            "partition_id": p,
            "rows": b * (50 if p == 7 else 1),
            "state_bytes": 100 * b,
            "files": 1,
            "bytes_on_disk": 10,
            "delta_chain": 1,
            "snapshot_version": None,
        }
        for b in range(4)
        for p in range(20)
    ]
    fig = figure_from_stats(pa.Table.from_pylist(rows, schema=STATS_SCHEMA))
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels[0] == "median partition" and "partition 7" in labels and len(labels) == 4
