"""``state_reader.open(cp)``: one object a notebook keeps, that shows the whole checkpoint at a glance.

:class:`Checkpoint` is thin over the public API (``read_state``, ``changes``,
``stats``, ``diagnose``, ``plot_state_size``): it adds no second way to read.
Its display (``_repr_html_`` for notebooks, ``__repr__`` for terminals) reads the
logs, the operator metadata and file sizes only, never the state itself: the
provider, codec and checkpoint format; committed batches; per operator its
stores and partitions, the bytes on disk of each partition at the latest batch
(a bar each, so skew shows) and a sparkline of the store's size over the
retained batches; and the findings of :meth:`Checkpoint.doctor` once it ran.
The HTML is plain HTML and CSS (collapsible ``<details>``, inline SVG): no
script and no request, so it survives a static export; every name taken from
the checkpoint is escaped.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa

from state_reader.errors import StateReaderError
from state_reader.fronts.api import diagnose, read_metadata, read_state
from state_reader.fronts.changefeed import changes
from state_reader.fronts.flatten import flatten_table
from state_reader.fronts.overview import describe_checkpoint
from state_reader.fronts.plotting import plot_state_size
from state_reader.fronts.stats import stats
from state_reader.io.storage import Storage, with_one_listing
from state_reader.model.checkpoint import Checkpoint as _Logs
from state_reader.progress import progress
from state_reader.providers.store_files import StoreFiles, look_ahead, unique_id_for

_CSS = """<style>
.sr-cp{font-family:system-ui,sans-serif;font-size:13px;line-height:1.4;max-width:980px}
.sr-cp summary{cursor:pointer;font-weight:600;margin:4px 0}
.sr-cp table{border-collapse:collapse;margin:4px 0 8px 0}
.sr-cp td,.sr-cp th{padding:1px 8px;text-align:left;vertical-align:middle;border-bottom:1px solid #e5e5e5}
.sr-bar{display:inline-block;height:9px;background:#4c78a8;vertical-align:middle}
.sr-muted{color:#777}
.sr-warning{color:#9a6700;font-weight:600}.sr-error{color:#c62828;font-weight:600}.sr-info{color:#1565c0}
.sr-find{margin:2px 0 6px 0}
</style>"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _bytes(n: int | float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _sparkline(values: list[int], width: int = 160, height: int = 24) -> str:
    """An inline SVG polyline of ``values`` (no script, no request)."""
    if len(values) < 2:
        return ""
    top = max(values) or 1
    step = width / (len(values) - 1)
    points = " ".join(f"{i * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}" for i, v in enumerate(values))
    return (f'<svg width="{width}" height="{height}" role="img" aria-label="size over batches">'
            f'<polyline fill="none" stroke="#4c78a8" stroke-width="1.5" points="{points}"/></svg>')


@dataclass
class StoreSizes:
    """Bytes on disk of one store: per partition at the latest batch, and in all over the retained batches."""

    operator_id: int
    store_name: str
    partitions: dict[int, int]
    over_batches: list[tuple[int, int]]  # (batch, total bytes) at up to SPARKLINE_POINTS batches
    retained: tuple[int, int, int] | None = None  # (first, last, count) of the batches it can rebuild


class StateTable:
    """A state table read through :class:`Checkpoint`: a ``pyarrow.Table`` that shows its head rows."""

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
            return f" in batch {batch.decode()}" if start == batch else \
                f" in batches {start.decode()}..{batch.decode()}"
        return f" at batch {batch.decode()}" if batch else ""

    def __repr__(self) -> str:
        head = flatten_table(self.table.slice(0, self.HEAD), render_nested=True)
        lines = [f"{self.what}{self._batch()}: {self.table.num_rows} rows × {self.table.num_columns} columns"]
        lines.append("  ".join(head.column_names))
        lines += ["  ".join(str(v) for v in row.values()) for row in head.to_pylist()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = flatten_table(self.table.slice(0, self.HEAD), render_nested=True)
        rows = "".join("<tr>" + "".join(f"<td>{_e('' if v is None else v)}</td>" for v in row.values()) + "</tr>"
                       for row in head.to_pylist())
        more = (f'<div class="sr-muted">… {self.table.num_rows - self.HEAD} more rows</div>'
                if self.table.num_rows > self.HEAD else "")
        return (f'{_CSS}<div class="sr-cp"><div><b>{_e(self.what)}</b>{_e(self._batch())} · '
                f"{self.table.num_rows} rows × {self.table.num_columns} columns</div><table><tr>"
                + "".join(f"<th>{_e(c)}</th>" for c in head.column_names) + f"</tr>{rows}</table>{more}</div>")


class Checkpoint:
    """A checkpoint to look at: ``state_reader.open(cp)``. See the module docstring."""

    def __init__(self, path: str, storage_options: dict[str, Any] | None = None) -> None:
        self.path = path
        self.storage_options = dict(storage_options or {})
        self.diagnosis: Any = None  # the last doctor() result, shown by the display

    # -- what the checkpoint says (logs and metadata) ----------------------------------------------

    @cached_property
    def description(self) -> dict[str, Any]:
        """:func:`state_reader.fronts.overview.describe_checkpoint` of this checkpoint."""
        return describe_checkpoint(self.path, storage_options=self.storage_options)

    @property
    def operators(self) -> pa.Table:
        """Operators and stores, as ``read_metadata`` (inferred for checkpoints written before Spark 4.0)."""
        return read_metadata(self.path, infer_missing_metadata=True,
                                          storage_options=self.storage_options)

    @property
    def batches(self) -> list[int]:
        """The committed batches."""
        return _Logs(Storage(self.path, self.storage_options)).committed_batches

    # -- reads, each the public function of the same name ------------------------------------------

    def state(self, operator: int | None = None, batch: int | None = None, *, key_filter: Any = None,
              **options: Any) -> StateTable:
        """``read_state`` of one store (``store_name=``, ``state_var_name=``, ``join_side=`` as there)."""
        table = read_state(self.path, operator_id=operator, batch_id=batch, key_filter=key_filter,
                                        storage_options=self.storage_options, **options)
        return StateTable(table, f"state of operator {operator or 0}")

    def changes(self, start: int, end: int | None = None, operator: int | None = None, **options: Any) -> StateTable:
        """``changes`` of one store between two batches."""
        table = changes(self.path, start, end, operator_id=operator,
                                     storage_options=self.storage_options, **options)
        return StateTable(table, f"changes of operator {operator or 0}")

    def stats(self, **options: Any) -> pa.Table:
        """``stats``: rows and bytes per partition and batch (decodes every batch it measures)."""
        return stats(self.path, storage_options=self.storage_options, **options)

    def doctor(self, **thresholds: float) -> Any:
        """``diagnose``; the display shows its findings from then on."""
        self.diagnosis = diagnose(self.path, thresholds=thresholds or None,
                                               storage_options=self.storage_options)
        return self.diagnosis

    def plot(self, **options: Any) -> Any:
        """``plot_state_size``: a matplotlib figure of state size per partition over batches."""
        return plot_state_size(self.path, storage_options=self.storage_options, **options)

    # -- sizes from file listings ------------------------------------------------------------------

    @cached_property
    def sizes(self) -> list[StoreSizes]:
        """Bytes on disk of every store, from file listings only (no state is decoded)."""
        desc = self.description
        logs = _Logs(Storage(self.path, self.storage_options))
        committed = logs.committed_batches
        stores = [(op["operator_id"], store["store_name"]) for op in desc.get("operators", [])
                  for store in op.get("stores", [])]
        # listing a remote checkpoint takes a while: a bar after half a second
        with progress("listing state files", len(stores)) as bar:
            out = []
            for op, store in stores:
                out.append(_store_sizes(logs, op, store, desc, committed))
                bar.advance(description=f"listing operator {op} · store {store}")
        return out

    # -- display -------------------------------------------------------------------------------------

    def _summary(self) -> list[tuple[str, str]]:
        d = self.description
        b = d.get("batches") or {}
        # batches whose state every store can still rebuild from the files on disk
        spans = [s.retained for s in self.sizes if s.retained]
        first = max((r[0] for r in spans), default=None)
        last = min((r[1] for r in spans), default=None)
        retained = [b for b in self.batches if first is not None and first <= b <= last]
        return [("provider", str(d.get("provider"))), ("codec", str(d.get("codec"))),
                ("checkpoint format", str(d.get("checkpoint_format_version"))),
                ("committed batches", f"{b.get('first')}..{b.get('last')} ({b.get('count')})"),
                ("retained batches", f"{retained[0]}..{retained[-1]} ({len(retained)})" if retained else "none"),
                ("shuffle partitions", str(d.get("shuffle_partitions")))]

    @with_one_listing  # the summary, the sizes and the batches from one listing of a remote checkpoint
    def __repr__(self) -> str:
        try:
            summary = self._summary()
            sizes = self.sizes
        except StateReaderError as exc:
            return f"state_reader.Checkpoint({self.path!r}): {exc.message}"
        lines = [f"state_reader.Checkpoint {self.path}"] + [f"  {k}: {v}" for k, v in summary]
        for op in self.description.get("operators", []):
            lines.append(f"  operator {op['operator_id']} ({op.get('operator_name') or 'unknown'})")
            for s in (s for s in sizes if s.operator_id == op["operator_id"]):
                total = sum(s.partitions.values())
                lines.append(f"    store {s.store_name}: {len(s.partitions)} partitions, {_bytes(total)} on disk")
        if self.diagnosis is not None:
            lines.append(f"  doctor: {len(self.diagnosis.findings)} findings")
            lines += [f"    {f.severity} {f.kind}: {f.summary}" for f in self.diagnosis.findings]
        return "\n".join(lines)

    @with_one_listing
    def _repr_html_(self) -> str:
        try:
            summary = self._summary()
            sizes = self.sizes
        except StateReaderError as exc:  # a damaged checkpoint shows its error, not a traceback
            return (f'{_CSS}<div class="sr-cp"><b>state_reader.Checkpoint</b> {_e(self.path)}'
                    f'<div class="sr-error">{_e(exc.error_class)}: {_e(exc.message)}</div></div>')
        parts = [_CSS, '<div class="sr-cp">', f"<div><b>state_reader.Checkpoint</b> {_e(self.path)}</div><table>"]
        parts += [f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in summary]
        parts.append("</table>")
        for op in self.description.get("operators", []):
            stores = [s for s in sizes if s.operator_id == op["operator_id"]]
            parts.append(f'<details open class="sr-op"><summary>operator {_e(op["operator_id"])} · '
                         f'{_e(op.get("operator_name") or "unknown")} · {len(stores)} store'
                         f'{"s" if len(stores) != 1 else ""}</summary>')
            for s in stores:
                parts.append(_store_html(s))
            parts.append("</details>")
        parts.append(self._findings_html())
        parts.append("</div>")
        return "".join(parts)

    def _findings_html(self) -> str:
        if self.diagnosis is None:
            return '<div class="sr-muted">doctor: not run (call .doctor())</div>'
        findings = self.diagnosis.findings
        if not findings:
            return '<details><summary>doctor: nothing found</summary></details>'
        items = "".join(
            f'<div class="sr-find"><span class="sr-{_e(f.severity)}">{_e(f.severity)} {_e(f.kind)}</span>'
            f'{"" if f.operator_id is None else f" · operator {_e(f.operator_id)}, store {_e(f.store_name)}"}'
            f"<br>{_e(f.summary)}<br><span class=\"sr-muted\">{_e(f.action)}</span></div>" for f in findings)
        return f'<details open><summary>doctor: {len(findings)} findings</summary>{items}</details>'


SPARKLINE_POINTS = 24  # batches sized for a sparkline: a few dozen points draw the trend


def _store_sizes(logs: _Logs, operator_id: int, store_name: str, desc: dict[str, Any],
                 committed: list[int]) -> StoreSizes:
    """Bytes on disk per partition at the latest batch, and the store's total at up to
    :data:`SPARKLINE_POINTS` batches from the oldest it can still rebuild to the latest."""
    provider, codec = desc.get("provider_class") or "", desc.get("codec")
    partitions = logs.partition_ids(operator_id)
    files = {pid: StoreFiles(logs.storage, logs.store_dir(operator_id, pid, store_name), provider, codec)
             for pid in partitions}

    def sizes(batch: int) -> dict[int, int] | None:
        """Bytes of each partition's files for ``batch``; None once cleanup took any of them."""
        out = {}
        look_ahead((store, batch + 1, unique_id_for(logs, store, batch + 1, operator_id, pid, store_name))
                   for pid, store in files.items())  # each partition's snapshot zip, all at once
        for pid, store in files.items():
            version = store.version_files(batch + 1, unique_id_for(logs, store, batch + 1, operator_id, pid,
                                                                   store_name))
            if not version.complete:
                return None
            out[pid] = version.bytes_on_disk
        return out

    if not committed or not partitions:
        return StoreSizes(operator_id, store_name, dict.fromkeys(partitions, 0), [])
    latest = sizes(committed[-1]) or {}
    # cleanup takes the oldest batches first: the oldest one still rebuildable, by bisection
    lo, hi = 0, len(committed) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if sizes(committed[mid]) is None:
            lo = mid + 1
        else:
            hi = mid
    kept = committed[lo:]
    step = max(1, -(-len(kept) // SPARKLINE_POINTS))
    points = sorted({*kept[::step], kept[-1]})
    over = [(b, sum(found.values())) for b in points if (found := sizes(b)) is not None]
    return StoreSizes(operator_id, store_name, {p: latest.get(p, 0) for p in partitions}, over,
                      retained=(kept[0], kept[-1], len(kept)))


def _store_html(s: StoreSizes) -> str:
    top = max(s.partitions.values(), default=0) or 1
    bars = "".join(f'<tr><td>{p}</td><td><span class="sr-bar" style="width:{max(1, round(160 * n / top))}px">'
                   f'</span></td><td>{_e(_bytes(n))}</td></tr>' for p, n in s.partitions.items())
    trend = [n for _, n in s.over_batches]
    span = f"batches {s.retained[0]}..{s.retained[1]}" if s.retained else ""
    return (f'<details><summary>store {_e(s.store_name)} · {len(s.partitions)} partitions · '
            f'{_e(_bytes(sum(s.partitions.values())))} on disk {_sparkline(trend)} '
            f'<span class="sr-muted">{_e(span)}</span></summary><table><tr><th>partition</th><th>bytes on disk</th>'
            f'<th></th></tr>{bars}</table></details>')


def open_checkpoint(path: str, **storage_options: Any) -> Checkpoint:
    """``state_reader.open(cp, **storage_options)``: a :class:`Checkpoint` to look at."""
    return Checkpoint(path, storage_options)
