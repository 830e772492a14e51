"""What a notebook shows of the tables and analyses :class:`~state_reader.fronts.notebook.Checkpoint` returns.

Each wraps the result of one public function and shows itself, as text (``__repr__``) and as HTML
(``_repr_html_``): :class:`StateTable` a state table or change feed (its head rows and the batches it
covers), :class:`KeyStories` ``explain``'s timelines (a table per key, its value drawn beside the
watermark, the verdict), :class:`StoreVerdicts` every key's verdict of a store summed up (a chart of keys
over the watermark or time at which they leave state, their ages, a few keys). The result itself stays
at hand (``.table``, ``.result``, ``.summary``) and its attributes read through.

The HTML every display of the notebook shares is here as well: the style sheet (:data:`CSS`), text
escaped for HTML (:func:`esc`) and counts (:func:`count_text`). Plain HTML, CSS and inline SVG: no
script and no request, and every name taken from the checkpoint escaped.
"""

from __future__ import annotations

import html
from typing import Any

import pyarrow as pa

from state_reader.formats.flatten import flatten_table, render_compact
from state_reader.inspect.explain import Explanation, KeyStory
from state_reader.inspect.verdict_summary import VerdictSummary, describe_leaving
from state_reader.units import iso_time

CSS = """<style>
.sr-cp{font-family:system-ui,sans-serif;font-size:13px;line-height:1.4;max-width:980px}
.sr-cp summary{cursor:pointer;font-weight:600;margin:4px 0}
.sr-cp table{border-collapse:collapse;margin:4px 0 8px 0}
.sr-cp td,.sr-cp th{padding:1px 8px;text-align:left;vertical-align:middle;border-bottom:1px solid #e5e5e5}
.sr-cp td.sr-p{width:4em;text-align:right}.sr-cp td.sr-n{text-align:right}
.sr-cp td.sr-b{width:164px;text-align:left}
.sr-track{display:block;width:160px;height:9px;background:#eef1f5;margin:0}
.sr-row{display:flex;gap:28px;align-items:flex-start}.sr-trend{color:#555;font-size:12px}
.sr-bar{display:block;height:9px;background:#4c78a8;margin:0}
.sr-muted{color:#777}
.sr-warning{color:#9a6700;font-weight:600}.sr-error{color:#c62828;font-weight:600}.sr-info{color:#1565c0}
.sr-find{margin:2px 0 6px 0}
</style>"""


def esc(value: Any) -> str:
    """``value`` as text safe inside HTML, attribute values included."""
    return html.escape(str(value), quote=True)


def count_text(n: int) -> str:
    """A count as people read it, thousands grouped: ``12,345``."""
    return f"{n:,}"


class StateTable:
    """A state table read through :class:`~state_reader.fronts.notebook.Checkpoint`: a ``pyarrow.Table`` that
    shows its head rows."""

    HEAD = 10

    def __init__(self, table: pa.Table, what: str) -> None:
        self.table = table
        self.what = what

    def __getattr__(self, name: str) -> Any:
        return getattr(self.table, name)

    def __len__(self) -> int:
        return self.table.num_rows

    def to_pandas(self, **kwargs: Any) -> Any:
        return self.table.to_pandas(**kwargs)

    def _batch(self) -> str:
        meta = self.table.schema.metadata or {}
        batch = meta.get(b"state_reader.batch_id")
        start = meta.get(b"state_reader.change_start_batch_id")
        if batch and start:  # a change feed covers a range of batches
            return (
                f" in batch {batch.decode()}" if start == batch else f" in batches {start.decode()}..{batch.decode()}"
            )
        return f" at batch {batch.decode()}" if batch else ""

    def __repr__(self) -> str:
        head = flatten_table(self.table.slice(0, self.HEAD), render_nested=True)
        lines = [f"{self.what}{self._batch()}: {self.table.num_rows} rows × {self.table.num_columns} columns"]
        lines.append("  ".join(head.column_names))
        lines += ["  ".join(str(v) for v in row.values()) for row in head.to_pylist()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = flatten_table(self.table.slice(0, self.HEAD), render_nested=True)
        rows = "".join(
            "<tr>" + "".join(f"<td>{esc('' if v is None else v)}</td>" for v in row.values()) + "</tr>"
            for row in head.to_pylist()
        )
        more = (
            f'<div class="sr-muted">… {self.table.num_rows - self.HEAD} more rows</div>'
            if self.table.num_rows > self.HEAD
            else ""
        )
        return (
            f'{CSS}<div class="sr-cp"><div><b>{esc(self.what)}</b>{esc(self._batch())} · '
            f"{self.table.num_rows} rows × {self.table.num_columns} columns</div><table><tr>"
            + "".join(f"<th>{esc(c)}</th>" for c in head.column_names)
            + f"</tr>{rows}</table>{more}</div>"
        )


def _number(value: Any) -> float | None:
    """A value as one number to draw: itself, or a struct's first numeric field."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        return next((_number(v) for v in value.values() if _number(v) is not None), None)
    return None


def _story_chart(story: KeyStory, width: int = 320, height: int = 60) -> str:
    """An inline SVG of the key's value (when it is a number) and the watermark over batches, each on its
    own scale: the value in blue, the watermark in grey."""
    entries = [e for e in story.timeline if e.change_type != "delete"]
    if len(entries) < 2:
        return ""
    first, last = entries[0].batch_id, entries[-1].batch_id
    left, right, pad = 6, 6, 6

    def x(batch: int) -> float:
        return left + (batch - first) / ((last - first) or 1) * (width - left - right)

    def line(points: list[tuple[int, float]], colour: str) -> str:
        if len(points) < 2:
            return ""
        lo, hi = min(v for _, v in points), max(v for _, v in points)
        span = (hi - lo) or 1.0
        coords = " ".join(f"{x(b):.1f},{pad + (1 - (v - lo) / span) * (height - 2 * pad - 10):.1f}" for b, v in points)
        return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>'

    values = [(e.batch_id, n) for e in entries if (n := _number(e.value)) is not None]
    marks = [(e.batch_id, float(e.watermark_ms)) for e in entries if e.watermark_ms > 0]
    label = 'font-size="9" fill="#777"'
    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="value and watermark over batches '
        f'{first}..{last}">{line(marks, "#aaa")}{line(values, "#4c78a8")}'
        f'<text x="{left}" y="{height - 1}" {label}>batch {first}</text>'
        f'<text x="{width - right}" y="{height - 1}" text-anchor="end" {label}>{last}</text></svg>'
    )


class KeyStories:
    """:func:`~state_reader.inspect.explain.explain` as a notebook shows it: per key, the timeline as a table,
    a small chart of the value beside the watermark, and the verdict. The result itself is ``.result``."""

    def __init__(self, result: Explanation) -> None:
        self.result = result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)

    def __repr__(self) -> str:
        lines = [f"explain {self.result.key_filter}: {len(self.result.keys)} keys"]
        if self.result.message:
            lines.append(self.result.message)
        for story in self.result.keys:
            lines.append(f"key {render_compact(story.key)}: {story.verdict.event}: {story.verdict.summary}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        parts = [f'{CSS}<div class="sr-cp"><div><b>explain</b> {esc(self.result.key_filter)}</div>']
        if self.result.message:
            parts.append(f'<div class="sr-warning">{esc(self.result.message)}</div>')
        for story in self.result.keys:
            rows = "".join(
                f"<tr><td>{e.batch_id}</td><td>{esc(iso_time(e.batch_time_ms or None))}</td>"
                f"<td>{esc(iso_time(e.watermark_ms) if e.watermark_ms else '')}</td><td>{esc(e.change_type)}</td>"
                f"<td>{esc('' if e.value is None else render_compact(e.value))}</td></tr>"
                for e in story.timeline
            )
            style = "sr-warning" if story.verdict.overdue else "sr-info"
            parts.append(
                f"<details open><summary>key {esc(render_compact(story.key))}</summary>"
                f'<div class="{style}">{esc(story.verdict.event)}: {esc(story.verdict.summary)}</div>'
                f'<div class="sr-row"><table><tr><th>batch</th><th>batch time</th><th>watermark</th><th>change</th>'
                f"<th>value</th></tr>{rows}</table>{_story_chart(story)}</div></details>"
            )
        return "".join(parts) + "</div>"


def _leaving_chart(bins: list[dict[str, int]], now: int, clock: str, width: int = 480, height: int = 90) -> str:
    """An inline SVG of keys over the ``clock`` (ms) at which they leave state, a bar per span of ``bins``,
    with where the clock stands now drawn in (a red line; at the edge, with an arrow, when off the chart)."""
    if not bins:
        return ""
    left, right, top_pad, bottom = 40, 8, 5, 24
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    low, high = bins[0]["from_ms"], bins[-1]["to_ms"] + 1
    top = max(b["keys"] for b in bins) or 1

    def x(ms: float) -> float:
        return left + (min(max(ms, low), high) - low) / ((high - low) or 1) * plot_w

    bars = "".join(
        f'<rect x="{x(b["from_ms"]):.1f}" y="{top_pad + (1 - b["keys"] / top) * plot_h:.1f}" '
        f'width="{max(x(b["to_ms"] + 1) - x(b["from_ms"]) - 1, 2):.1f}" height="{b["keys"] / top * plot_h:.1f}" '
        f'fill="#4c78a8"><title>{count_text(b["keys"])} keys: {esc(iso_time(b["from_ms"]))}..'
        f"{esc(iso_time(b['to_ms']))}</title></rect>"
        for b in bins
    )
    mark = "◀ " if now < low else (" ▶" if now > high else "")
    label = 'font-size="9" fill="#777"'
    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="keys over the {esc(clock)} at which they '
        f'leave state, {esc(iso_time(low))}..{esc(iso_time(high - 1))}; the {esc(clock)} now {esc(iso_time(now))}">'
        f'<line x1="{left}" y1="{top_pad + plot_h}" x2="{width - right}" y2="{top_pad + plot_h}" stroke="#999"/>'
        f'<text x="{left - 3}" y="{top_pad + 8}" text-anchor="end" {label}>{count_text(top)}</text>{bars}'
        f'<line x1="{x(now):.1f}" y1="{top_pad}" x2="{x(now):.1f}" y2="{top_pad + plot_h}" stroke="#c62828" '
        f'stroke-width="1.5"/>'
        f'<text x="{left}" y="{height - 12}" {label}>{esc(iso_time(low))}</text>'
        f'<text x="{width - right}" y="{height - 12}" text-anchor="end" {label}>{esc(iso_time(high - 1))}</text>'
        f'<text x="{left}" y="{height - 1}" fill="#c62828" font-size="9">{mark}the {esc(clock)} now: '
        f"{esc(iso_time(now))}</text></svg>"
    )


class StoreVerdicts:
    """Every key's verdict of one store as a notebook shows it: keys per verdict, a chart of keys over the
    watermark (or time) at which they leave with the watermark now drawn in, their ages, a few keys. The
    table is ``.table``; the summary itself ``.summary``."""

    def __init__(self, summary: VerdictSummary) -> None:
        self.summary = summary
        self.table: pa.Table = summary.table if summary.table is not None else pa.table({})

    def __getattr__(self, name: str) -> Any:
        return getattr(self.summary, name)

    def __len__(self) -> int:
        return self.table.num_rows

    def to_pandas(self, **kwargs: Any) -> Any:
        return self.table.to_pandas(**kwargs)

    def __repr__(self) -> str:
        s = self.summary
        counts = ", ".join(f"{e} {n}" for e, n in s.counts.items()) or "no key"
        lines = [f"verdicts of operator {s.operator_id} at batch {s.latest_batch_id}: {s.keys} keys ({counts})"]
        lines += describe_leaving(s)
        lines.append(f"overdue: {s.overdue}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        s = self.summary
        counts = "".join(
            f"<tr><td>{esc(e)}</td><td class='sr-n'>{count_text(n)}</td></tr>" for e, n in s.counts.items()
        )
        charts = "".join(
            f"<div>{_leaving_chart(getattr(s, name), now, clock)}</div>"
            for name, clock, now in (
                ("leaves_by_watermark", "watermark", s.watermark_ms),
                ("leaves_by_time", "batch time", s.batch_time_ms),
            )
        )
        not_since = f"not since {s.first_batch_id}"
        ages = "".join(
            f"<tr><td>{esc(not_since if a['last_changed_batch_id'] is None else a['last_changed_batch_id'])}</td>"
            f"<td class='sr-n'>{count_text(a['keys'])}</td></tr>"
            for a in s.ages
        )
        samples = "".join(
            f"<details><summary>{esc(title)} ({len(rows)})</summary><table>"
            + "".join(
                f"<tr><td>{esc(render_compact(r['key']))}</td><td>{esc(r.get('join_side') or '')}</td>"
                f"<td>{esc(r['event'])}</td><td>{esc(r['last_changed_batch_id'])}</td>"
                f"<td><code>{esc(r['command'])}</code></td></tr>"
                for r in rows
            )
            + "</table></details>"
            for title, rows in (("oldest keys", s.oldest), ("never evicted", s.never))
            if rows
        )
        overdue = f'<div class="sr-warning">{count_text(s.overdue)} keys overdue</div>' if s.overdue else ""
        return (
            f'{CSS}<div class="sr-cp"><div><b>verdicts</b> of operator {s.operator_id} '
            f"({esc(s.operator_name or 'unknown')}) at batch {s.latest_batch_id}: {count_text(s.keys)} keys</div>"
            f'<div class="sr-row"><table><tr><th>event</th><th>keys</th></tr>{counts}</table>{charts}</div>'
            f"{overdue}<details><summary>keys by last change</summary><table><tr><th>last changed batch</th>"
            f"<th>keys</th></tr>{ages}</table></details>{samples}</div>"
        )
