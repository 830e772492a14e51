"""Plots of state size over batches (matplotlib, no pyplot: no global figures, any backend).

One row of two charts per (operator, store): state rows per partition and
state bytes per partition (:mod:`state_reader.core.size`), over batches. Up to :data:`MAX_PARTITION_LINES`
partitions get a line each; beyond that the chart shows the min–max band, the
median and the largest partitions, so skew stays visible with 200 partitions.
"""

from __future__ import annotations

import statistics
from typing import Any

import pyarrow as pa

from state_reader.core.options import python_api
from state_reader.deprecation import renamed_keywords
from state_reader.inspect.stats import stats
from state_reader.units import byte_unit

MAX_PARTITION_LINES = 10
TOP_PARTITIONS = 3


PLOT_NEEDS = "plotting needs matplotlib: pip install 'state-reader[plot]'"


def _require_matplotlib() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(PLOT_NEEDS) from None
    return Figure


def _series(rows: list[dict[str, Any]], metric: str, scale: float = 1.0) -> tuple[list[int], dict[int, list[float]]]:
    batches = sorted({r["batch_id"] for r in rows})
    index = {b: i for i, b in enumerate(batches)}
    by_partition: dict[int, list[float]] = {}
    for r in rows:
        line = by_partition.setdefault(r["partition_id"], [float("nan")] * len(batches))
        line[index[r["batch_id"]]] = float(r[metric]) / scale
    return batches, by_partition


def _draw(ax: Any, rows: list[dict[str, Any]], metric: str, ylabel: str, scale: float = 1.0) -> None:
    batches, lines = _series(rows, metric, scale)
    if len(lines) <= MAX_PARTITION_LINES:
        for pid in sorted(lines):
            ax.plot(batches, lines[pid], marker="o", markersize=3, linewidth=1.5, label=f"partition {pid}")
    else:
        columns = list(zip(*lines.values(), strict=True))
        finite = [[v for v in col if v == v] for col in columns]
        ax.fill_between(
            batches,
            [min(c) if c else 0 for c in finite],
            [max(c) if c else 0 for c in finite],
            alpha=0.2,
            label=f"min–max of {len(lines)} partitions",
        )
        ax.plot(
            batches,
            [statistics.median(c) if c else 0 for c in finite],
            linewidth=2,
            color="black",
            label="median partition",
        )
        top = sorted(lines, key=lambda p: lines[p][-1] if lines[p][-1] == lines[p][-1] else -1, reverse=True)[
            :TOP_PARTITIONS
        ]
        for pid in top:
            ax.plot(batches, lines[pid], marker="o", markersize=3, linewidth=1.2, label=f"partition {pid}")
    ax.set_xlabel("batch")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if len(batches) <= 20:
        ax.set_xticks(batches)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small", loc="best")


def figure_from_stats(
    table: pa.Table, *, title: str | None = None, width: float = 12.0, row_height: float = 4.0, dpi: int = 100
) -> Any:
    """A matplotlib ``Figure`` of a :func:`state_reader.stats` table."""
    figure_cls = _require_matplotlib()
    from matplotlib.ticker import MaxNLocator

    rows = table.to_pylist()
    stores = sorted({(r["operator_id"], r["store_name"]) for r in rows})
    n = max(len(stores), 1)
    fig = figure_cls(figsize=(width, row_height * n), dpi=dpi, layout="constrained")
    axes = fig.subplots(n, 2, squeeze=False)
    if not stores:
        axes[0][0].text(0.5, 0.5, "no state", ha="center", va="center")
    for (op, store), (ax_rows, ax_bytes) in zip(stores, axes, strict=False):  # one row when empty
        mine = [r for r in rows if r["operator_id"] == op and r["store_name"] == store]
        _draw(ax_rows, mine, "rows", "state rows")
        ax_rows.yaxis.set_major_locator(MaxNLocator(integer=True))
        # two lines: long store names (join stores, timer families) would be cut off on one
        ax_rows.set_title(f"operator {op} · {store}\nrows per partition", fontsize="medium")
        unit, scale = byte_unit(max((r["state_bytes"] for r in mine), default=0))
        _draw(ax_bytes, mine, "state_bytes", f"state size ({unit}, uncompressed)", scale)
        ax_bytes.set_title(f"operator {op} · {store}\nstate bytes per partition", fontsize="medium")
    if title:
        fig.suptitle(title)
    return fig


@renamed_keywords("plot_state_size", start_batch="change_start_batch_id", end_batch="change_end_batch_id")
@python_api
def plot_state_size(
    checkpoint: str,
    *,
    operator_id: int | None = None,
    store_name: str | None = None,
    change_start_batch_id: int | None = None,
    change_end_batch_id: int | None = None,
    key_schema: str | None = None,
    value_schema: str | None = None,
    storage_options: dict[str, Any] | None = None,
    title: str | None = None,
) -> Any:
    """State rows and state bytes per partition over batches, as a matplotlib ``Figure``.

    The arguments select what :func:`state_reader.stats` measures (``key_schema`` and ``value_schema``:
    the schemas of a store without a schema file, as there). In a notebook the figure displays itself;
    elsewhere ``fig.savefig("state.png")``.
    """
    table = stats(
        checkpoint,
        operator_id=operator_id,
        store_name=store_name,
        change_start_batch_id=change_start_batch_id,
        change_end_batch_id=change_end_batch_id,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options,
    )
    return figure_from_stats(table, title=title or f"state of {checkpoint}")


def rewrite_layout_figure(report: Any) -> Any:
    """The current and the new per-partition state bytes of a rewrite (or dry run) side by side,
    on one scale, with each layout's median and skew (max/median) in its title."""
    figure_class = _require_matplotlib()
    from matplotlib.ticker import MaxNLocator

    from state_reader.core.rewrite.report import LAYOUTS, NEW

    sides = [(label, *report.partition_sizes(new), report.skew(new)) for label, new in LAYOUTS]
    largest = max((float(size.max()) for _, _, size, _ in sides if len(size)), default=0.0)
    unit, scale = byte_unit(largest)
    fig = figure_class(figsize=(11, 3.6), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (label, _, size, skew) in zip(axes, sides, strict=True):
        values = size / scale
        ax.bar(range(len(values)), values, width=0.85, color="#dd8452" if label == NEW else "#4c72b0")
        if len(values):
            ax.axhline(statistics.median(values.tolist()), color="black", linewidth=0.8, linestyle="--")
        ax.set_title(f"{label}: {len(values)} partitions, skew {skew:.2f} (max/median)", fontsize=10)
        ax.set_xlabel("state partition")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.margins(x=0.01)
    axes[0].set_ylabel(f"state ({unit}, uncompressed)")
    fig.suptitle(f"{report.source} at batch {report.batch_id}", fontsize=10)
    return fig


def figure_from_verdicts(summary: Any, title: str | None = None) -> Any:
    """The keys of a store over the watermark (and the batch time) at which they leave state, a bar per
    span of :func:`state_reader.inspect.verdict_summary.histogram`, with where that clock stands now drawn
    in; the keys that never leave and those overdue in the title. ``summary``: a ``VerdictSummary``."""
    import datetime as dt

    figure_class = _require_matplotlib()
    clocks = [
        (name, clock, now)
        for name, clock, now in (
            ("leaves_by_watermark", "watermark", summary.watermark_ms),
            ("leaves_by_time", "batch time", summary.batch_time_ms),
        )
        if getattr(summary, name)
    ] or [("leaves_by_watermark", "watermark", summary.watermark_ms)]
    fig = figure_class(figsize=(10, 3.4 * len(clocks)), layout="constrained")
    axes = fig.subplots(len(clocks), 1, squeeze=False)[:, 0]

    def at(ms: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)

    for ax, (name, clock, now) in zip(axes, clocks, strict=True):
        bins = getattr(summary, name)
        edges = [b["from_ms"] for b in bins] + [b["to_ms"] + 1 for b in bins] + ([now] if now else [])
        narrowest = (max(edges, default=0) - min(edges, default=0)) / 100 or 1000  # a bar stays visible
        for b in bins:
            width = max(b["to_ms"] + 1 - b["from_ms"], narrowest)
            ax.bar(
                at(b["from_ms"]),
                b["keys"],
                width=dt.timedelta(milliseconds=width),
                align="edge",
                color="#4c72b0",
                edgecolor="white",
            )
        if now:
            ax.axvline(at(now), color="#c44e52", linewidth=1.5, label=f"the {clock} now")
            ax.legend(loc="upper left", fontsize="small")
        ax.set_xlabel(f"the {clock} (UTC) at which they leave state")
        ax.set_ylabel("keys")
    never = summary.counts.get("never", 0)
    fig.suptitle(
        title
        or f"{summary.keys} keys of operator {summary.operator_id} at batch {summary.latest_batch_id}: "
        f"{never} never leave, {summary.overdue} overdue",
        fontsize=10,
    )
    return fig
