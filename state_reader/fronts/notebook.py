"""``state_reader.open(cp)``: one object a notebook keeps, that shows the whole checkpoint at a glance.

:class:`Checkpoint` is thin over the public API (``read_state``, ``changes``,
``stats``, ``diagnose``, ``plot_state_size``): it adds no second way to read.
Its display (``_repr_html_`` for notebooks, ``__repr__`` for terminals) reads the
logs, the operator metadata and file sizes only, never the state itself: the
provider, codec and checkpoint format; committed batches; per operator its
stores (and a transformWithState operator's state variables and timers) and
partitions, with the size of each partition at the latest batch (a bar each, on
one scale for the whole display, so skew shows) and a sparkline of the size over
the retained batches on a scale from 0; and the findings of
:meth:`Checkpoint.doctor` once it ran.

Sizes are drawn from what records them, and say which: the rows
:meth:`Checkpoint.stats` measured (the state's size, :mod:`state_reader.core.size`),
else the keys RocksDB's snapshots record, else the bytes of the files on disk,
labelled as such and never drawn over batches (deltas pile up until the next
snapshot whatever the state does).
The HTML is plain HTML and CSS (collapsible ``<details>``, inline SVG): no
script and no request, so it survives a static export; every name taken from
the checkpoint is escaped.

What its reads and analyses return (``state``, ``changes``, ``explain``,
``verdicts``) shows itself as well: :mod:`state_reader.fronts.notebook_results`,
which also holds the style sheet and the escaping every display shares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa

from state_reader.core.changefeed import changes
from state_reader.core.options import DEFAULT_OPERATOR_ID
from state_reader.core.retained import retained_batches
from state_reader.deprecation import renamed_keywords, warn_renamed
from state_reader.errors import StateReaderError
from state_reader.fronts.api import diagnose, read_metadata, read_state
from state_reader.fronts.notebook_results import CSS, KeyStories, StateTable, StoreVerdicts, count_text, esc
from state_reader.fronts.plotting import plot_state_size
from state_reader.inspect.explain import explain
from state_reader.inspect.overview import describe_checkpoint
from state_reader.inspect.stats import stats
from state_reader.inspect.verdict_summary import summarize_verdicts
from state_reader.io.calls import with_one_listing
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from state_reader.model.state_variables import TIMERS
from state_reader.progress import progress
from state_reader.providers.store_files import StoreFiles, look_ahead, unique_id_for
from state_reader.units import human_bytes

BAR_WIDTH = 160  # px of the largest partition of the whole display (.sr-track)


def _sparkline(points: list[tuple[int, int]], measure: str, width: int = 240, height: int = 42) -> str:
    """An inline SVG line of ``points`` (batch, value) over a scale from 0, its ends and batches labelled
    (no script, no request): a line that rises is a size that grew."""
    if len(points) < 2:
        return ""
    left, right, top_pad, bottom = 40, 8, 5, 12
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    top = max(v for _, v in points) or 1
    first, last = points[0][0], points[-1][0]

    def x(batch: int) -> float:
        return left + (batch - first) / ((last - first) or 1) * plot_w

    def y(value: int) -> float:
        return top_pad + (1 - value / top) * plot_h

    line = " ".join(f"{x(b):.1f},{y(v):.1f}" for b, v in points)
    label = 'font-size="9" fill="#777"'
    return (
        f'<svg width="{width}" height="{height}" role="img" '
        f'aria-label="{esc(measure)} over batches {first}..{last}, on a scale from 0 to {top}">'
        f'<line x1="{left}" y1="{y(top):.1f}" x2="{width - right}" y2="{y(top):.1f}" stroke="#eee"/>'
        f'<line x1="{left}" y1="{y(0):.1f}" x2="{width - right}" y2="{y(0):.1f}" stroke="#999"/>'
        f'<text x="{left - 3}" y="{y(top) + 3:.1f}" text-anchor="end" {label}>{count_text(top)}</text>'
        f'<text x="{left - 3}" y="{y(0) + 3:.1f}" text-anchor="end" {label}>0</text>'
        f'<text x="{left}" y="{height - 1}" {label}>batch {first}</text>'
        f'<text x="{width - right}" y="{height - 1}" text-anchor="end" {label}>{last}</text>'
        f'<polyline fill="none" stroke="#4c78a8" stroke-width="1.5" points="{line}"/></svg>'
    )


@dataclass
class StoreSizes:
    """Bytes on disk of one store: per partition at the latest batch, and in all over the retained batches."""

    operator_id: int
    store_name: str
    partitions: dict[int, int]
    over_batches: list[tuple[int, int]]  # (batch, total bytes) at up to SPARKLINE_POINTS batches
    retained: tuple[int, int, int] | None = None  # (first, last, count) of the batches it can rebuild
    # keys per partition at the latest batch as its RocksDB snapshots record them (None: not every
    # partition has a snapshot of that version), and their total at the batches where every one has
    keys: dict[int, int] | None = None
    keys_over_batches: list[tuple[int, int]] = field(default_factory=list)


# what a view's numbers are: the state's rows, the keys RocksDB snapshots record, or file bytes
ROWS, KEYS, ON_DISK = "rows", "keys", "bytes on disk"


@dataclass
class SizeView:
    """What the display draws for one store or state variable: one measure per partition at one batch,
    where the numbers come from, and the total of the same measure over batches."""

    title: str
    measure: str  # ROWS, KEYS or ON_DISK
    source: str  # where the numbers come from, shown beside them
    partitions: dict[int, int] = field(default_factory=dict)
    over_batches: list[tuple[int, int]] = field(default_factory=list)  # never file bytes
    state_bytes: int | None = None  # the state bytes at that batch, when measured
    on_disk: int | None = None

    def summary(self) -> str:
        """Partitions and sizes in a few words."""
        if not self.partitions:
            return self.source
        total = sum(self.partitions.values())
        parts = [f"{len(self.partitions)} partitions"]
        if self.measure == ON_DISK:
            parts.append(f"{human_bytes(total)} on disk")
        else:
            parts.append(f"{count_text(total)} {self.measure}")
            if self.state_bytes is not None:
                parts.append(f"{human_bytes(self.state_bytes)} state")
            if self.on_disk is not None:
                parts.append(f"{human_bytes(self.on_disk)} on disk")
        return " · ".join(parts)


class Checkpoint:
    """A checkpoint to look at: ``state_reader.open(cp)``. See the module docstring."""

    def __init__(self, path: str, storage_options: dict[str, Any] | None = None) -> None:
        self.path = path
        self.storage_options = dict(storage_options or {})
        self.diagnosis: Any = None  # the last doctor() result, shown by the display
        self.measured: pa.Table | None = None  # the last stats() table, whose rows the display draws

    # -- what the checkpoint says (logs and metadata) ----------------------------------------------

    @cached_property
    def description(self) -> dict[str, Any]:
        """:func:`state_reader.inspect.overview.describe_checkpoint` of this checkpoint."""
        return describe_checkpoint(self.path, storage_options=self.storage_options)

    @property
    def operators(self) -> pa.Table:
        """Operators and stores, as ``read_metadata`` (inferred for checkpoints written before Spark 4.0)."""
        return read_metadata(self.path, infer_missing_metadata=True, storage_options=self.storage_options)

    @property
    def batches(self) -> list[int]:
        """The committed batches."""
        return CheckpointDir(Storage(self.path, self.storage_options)).committed_batches

    # -- reads, each the public function of the same name ------------------------------------------

    @renamed_keywords("Checkpoint.state", operator="operator_id", batch="batch_id")
    def state(
        self, operator_id: int | None = None, batch_id: int | None = None, *, key_filter: Any = None, **options: Any
    ) -> StateTable:
        """``read_state`` of one store (``store_name=``, ``state_var_name=``, ``join_side=`` as there)."""
        table = read_state(
            self.path,
            operator_id=operator_id,
            batch_id=batch_id,
            key_filter=key_filter,
            storage_options=self.storage_options,
            **options,
        )
        return StateTable(table, f"state of operator {DEFAULT_OPERATOR_ID if operator_id is None else operator_id}")

    @renamed_keywords(
        "Checkpoint.changes", start="change_start_batch_id", end="change_end_batch_id", operator="operator_id"
    )
    def changes(
        self,
        change_start_batch_id: int,
        change_end_batch_id: int | None = None,
        operator_id: int | None = None,
        **options: Any,
    ) -> StateTable:
        """``changes`` of one store between two batches."""
        table = changes(
            self.path,
            change_start_batch_id,
            change_end_batch_id,
            operator_id=operator_id,
            storage_options=self.storage_options,
            **options,
        )
        return StateTable(table, f"changes of operator {DEFAULT_OPERATOR_ID if operator_id is None else operator_id}")

    def explain(self, key_filter: Any, operator_id: int | None = None, **options: Any) -> KeyStories:
        """``explain``: each selected key's timeline (a table, and its value drawn over batches beside the
        watermark) and the verdict on it (``store_name=``, ``state_var_name=`` as there)."""
        return KeyStories(
            explain(
                self.path,
                key_filter=key_filter,
                operator_id=operator_id,
                storage_options=self.storage_options,
                **options,
            )
        )

    def verdicts(self, operator_id: int | None = None, **options: Any) -> StoreVerdicts:
        """``verdicts``: every key's verdict of one store (``.table``), summed up and drawn: keys over the
        watermark (or time) at which they leave, the watermark now drawn in (``store_name=``,
        ``state_var_name=``, ``key_schema=``, ``value_schema=`` as there)."""
        return StoreVerdicts(
            summarize_verdicts(self.path, operator_id=operator_id, storage_options=self.storage_options, **options)
        )

    def stats(self, **options: Any) -> pa.Table:
        """``stats``: rows and state bytes per partition and batch (loads every batch it measures);
        the display draws the rows it measured from then on."""
        self.measured = stats(self.path, storage_options=self.storage_options, **options)
        return self.measured

    def doctor(
        self,
        thresholds: dict[str, float] | None = None,
        *,
        key_schema: str | None = None,
        value_schema: str | None = None,
        **deprecated: float,
    ) -> Any:
        """``diagnose`` (``thresholds``, ``key_schema`` and ``value_schema`` as there); the display shows its
        findings from then on."""
        if deprecated:
            warn_renamed("Checkpoint.doctor(name=value)", "doctor(thresholds={name: value})")
            thresholds = {**deprecated, **(thresholds or {})}
        self.diagnosis = diagnose(
            self.path,
            thresholds=thresholds or None,
            key_schema=key_schema,
            value_schema=value_schema,
            storage_options=self.storage_options,
        )
        return self.diagnosis

    def plot(self, **options: Any) -> Any:
        """``plot_state_size``: a matplotlib figure of state size per partition over batches."""
        return plot_state_size(self.path, storage_options=self.storage_options, **options)

    # -- sizes from file listings ------------------------------------------------------------------

    @cached_property
    def sizes(self) -> list[StoreSizes]:
        """Bytes on disk of every store, from file listings only (no state is decoded)."""
        desc = self.description
        logs = CheckpointDir(Storage(self.path, self.storage_options))
        committed = logs.committed_batches
        stores = [
            (op["operator_id"], store["store_name"])
            for op in desc.get("operators", [])
            for store in op.get("stores", [])
        ]
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
        retained = [b for b in self.batches if first is not None and last is not None and first <= b <= last]
        return [
            ("provider", str(d.get("provider"))),
            ("codec", str(d.get("codec"))),
            ("checkpoint format", str(d.get("checkpoint_format_version"))),
            ("committed batches", f"{b.get('first')}..{b.get('last')} ({b.get('count')})"),
            ("retained batches", f"{retained[0]}..{retained[-1]} ({len(retained)})" if retained else "none"),
            ("shuffle partitions", str(d.get("shuffle_partitions"))),
        ]

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
            for view in self._views(op, sizes):
                shown = view.summary()
                lines.append(f"    {view.title}: {shown}" + ("" if shown == view.source else f" ({view.source})"))
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
            return (
                f'{CSS}<div class="sr-cp"><b>state_reader.Checkpoint</b> {esc(self.path)}'
                f'<div class="sr-error">{esc(exc.error_class)}: {esc(exc.message)}</div></div>'
            )
        parts = [CSS, '<div class="sr-cp">', f"<div><b>state_reader.Checkpoint</b> {esc(self.path)}</div><table>"]
        parts += [f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in summary]
        parts.append("</table>")
        views = {op["operator_id"]: self._views(op, sizes) for op in self.description.get("operators", [])}
        # one scale per measure for every bar of the display, so that partitions compare across stores
        tops: dict[str, int] = {}
        for view in (v for vs in views.values() for v in vs):
            tops[view.measure] = max(tops.get(view.measure, 0), *view.partitions.values(), 0)
        for op in self.description.get("operators", []):
            stores = [s for s in sizes if s.operator_id == op["operator_id"]]
            variables = [v for v in op.get("state_variables") or [] if v["kind"] != TIMERS]
            timers = len(variables) != len(op.get("state_variables") or [])
            what = (
                (
                    f"{len(variables)} state variable{'s' if len(variables) != 1 else ''}"
                    f"{' and timers' if timers else ''} in "
                )
                if op.get("state_variables")
                else ""
            )
            parts.append(
                f'<details open class="sr-op"><summary>operator {esc(op["operator_id"])} · '
                f"{esc(op.get('operator_name') or 'unknown')} · {what}{len(stores)} store"
                f"{'s' if len(stores) != 1 else ''}</summary>"
            )
            parts += [_view_html(view, tops) for view in views[op["operator_id"]]]
            parts.append("</details>")
        parts.append(self._findings_html())
        parts.append("</div>")
        return "".join(parts)

    def _measured_view(self, operator_id: int, name: str, title: str, variable: bool = False) -> SizeView | None:
        """The rows (and state bytes) :meth:`stats` measured for one store or variable, if it did."""
        if self.measured is None:
            return None
        rows = [r for r in self.measured.to_pylist() if r["operator_id"] == operator_id and r["store_name"] == name]
        if not rows:
            return None
        latest = max(r["batch_id"] for r in rows)
        totals: dict[int, int] = {}
        for r in rows:
            totals[r["batch_id"]] = totals.get(r["batch_id"], 0) + r["rows"]
        at = [r for r in rows if r["batch_id"] == latest]
        # a variable's files are its store's, shared with the others: only a store's are its own
        on_disk = None if variable else sum(r["bytes_on_disk"] for r in at)
        return SizeView(
            title,
            ROWS,
            f"at batch {latest}, measured by stats()",
            {r["partition_id"]: r["rows"] for r in at},
            sorted(totals.items()),
            state_bytes=sum(r["state_bytes"] for r in at),
            on_disk=on_disk,
        )

    def _views(self, op: dict[str, Any], sizes: list[StoreSizes]) -> list[SizeView]:
        """What the display draws for one operator: its stores, then a transformWithState operator's
        state variables and timers (one store holds them all, a column family each)."""
        operator_id = op["operator_id"]
        variables = op.get("state_variables")
        out = []
        for s in (s for s in sizes if s.operator_id == operator_id):
            title = f"store {s.store_name}"
            measured = None if variables else self._measured_view(operator_id, s.store_name, title)
            out.append(measured or _files_view(s, title))
        for v in variables or []:
            title = v["described"] if v["kind"] == TIMERS else f"variable {v['name']} · {v['described']}"
            out.append(
                self._measured_view(operator_id, v["name"], title, variable=True)
                or SizeView(
                    title, ROWS, "not measured yet: .stats() measures the rows and state bytes of each variable"
                )
            )
        return out

    def _findings_html(self) -> str:
        if self.diagnosis is None:
            return '<div class="sr-muted">doctor: not run (call .doctor())</div>'
        findings = self.diagnosis.findings
        if not findings:
            return "<details><summary>doctor: nothing found</summary></details>"
        items = "".join(
            f'<div class="sr-find"><span class="sr-{esc(f.severity)}">{esc(f.severity)} {esc(f.kind)}</span>'
            f"{'' if f.operator_id is None else f' · operator {esc(f.operator_id)}, store {esc(f.store_name)}'}"
            f'<br>{esc(f.summary)}<br><span class="sr-muted">{esc(f.action)}</span></div>'
            for f in findings
        )
        return f"<details open><summary>doctor: {len(findings)} findings</summary>{items}</details>"


SPARKLINE_POINTS = 24  # batches sized for a sparkline: a few dozen points draw the trend


def _store_sizes(
    logs: CheckpointDir, operator_id: int, store_name: str, desc: dict[str, Any], committed: list[int]
) -> StoreSizes:
    """Bytes on disk per partition at the latest batch, and the store's total at up to
    :data:`SPARKLINE_POINTS` batches from the oldest it can still rebuild to the latest."""
    provider, codec = desc.get("provider_class") or "", desc.get("codec")
    partitions = logs.partition_ids(operator_id)
    # sizes only: a zip is looked into for the SSTs it names, not read as state, so its sidecar is not fetched
    files = {
        pid: StoreFiles(logs.storage, logs.store_dir(operator_id, pid, store_name), provider, codec, checked=False)
        for pid in partitions
    }

    def uid(store: StoreFiles, batch: int, pid: int) -> str | None:
        return unique_id_for(logs, store, batch + 1, operator_id, pid, store_name)

    def sizes(batch: int) -> tuple[dict[int, int], dict[int, int] | None] | None:
        """Bytes of each partition's files for ``batch`` and the keys their snapshots record (None unless
        every partition has a snapshot of that version); None once cleanup took any of the files."""
        out, keys = {}, {}
        look_ahead(
            (store, batch + 1, uid(store, batch, pid)) for pid, store in files.items()
        )  # each partition's snapshot zip, all at once
        for pid, store in files.items():
            version = store.version_files(
                batch + 1, unique_id_for(logs, store, batch + 1, operator_id, pid, store_name)
            )
            if not version.complete:
                return None
            out[pid] = version.bytes_on_disk
            if version.recorded_keys is not None:
                keys[pid] = version.recorded_keys
        return out, (keys if len(keys) == len(out) else None)

    if not committed or not partitions:
        return StoreSizes(operator_id, store_name, dict.fromkeys(partitions, 0), [])
    # the batches every partition can still rebuild, as stats, doctor and why take them; a partition that
    # can rebuild none: the latest batch alone
    kept = retained_batches(logs, files.values()) or committed[-1:]
    step = max(1, -(-len(kept) // SPARKLINE_POINTS))
    points = sorted({*kept[::step], kept[-1]})
    # the latest batch's and every point's snapshot zips at once: one or two round trips for the
    # whole store, not one per point
    look_ahead(
        (store, b + 1, uid(store, b, pid)) for b in sorted({*points, committed[-1]}) for pid, store in files.items()
    )
    latest, latest_keys = sizes(committed[-1]) or ({}, None)
    found = {b: at for b in points if (at := sizes(b)) is not None}
    over = [(b, sum(at[0].values())) for b, at in found.items()]
    keys_over = [(b, sum(at[1].values())) for b, at in found.items() if at[1] is not None]
    return StoreSizes(
        operator_id,
        store_name,
        {p: latest.get(p, 0) for p in partitions},
        over,
        retained=(kept[0], kept[-1], len(kept)),
        keys=latest_keys,
        keys_over_batches=keys_over,
    )


def _files_view(s: StoreSizes, title: str) -> SizeView:
    """A store's size from its files alone: the keys its RocksDB snapshots record, else file bytes."""
    at = f"at batch {s.retained[1]}" if s.retained else "at the latest batch"
    on_disk = sum(s.partitions.values())
    if s.keys is not None:
        return SizeView(
            title,
            KEYS,
            f"{at}, as its RocksDB snapshots record them; .stats() measures rows and state bytes",
            s.keys,
            s.keys_over_batches,
            on_disk=on_disk,
        )
    return SizeView(
        title,
        ON_DISK,
        f"{at}: the files that batch is rebuilt from (snapshot and deltas), not the state's size; .stats() measures it",
        s.partitions,
    )


def _view_html(view: SizeView, tops: dict[str, int]) -> str:
    """One store or variable: its summary, where its numbers come from, the sparkline and a bar per partition."""
    head = f"<summary>{esc(view.title)} · {esc(view.summary())}</summary>"
    if not view.partitions:
        return f"<details>{head}</details>"
    top = tops.get(view.measure) or 1
    shown = human_bytes if view.measure == ON_DISK else count_text
    bars = "".join(
        f'<tr><td class="sr-p">{p}</td><td class="sr-b"><div class="sr-track"><div class="sr-bar" '
        f'style="width:{round(BAR_WIDTH * n / top)}px"></div></div></td>'
        f'<td class="sr-n">{esc(shown(n))}</td></tr>'
        for p, n in sorted(view.partitions.items())
    )
    trend = _sparkline(view.over_batches, view.measure)
    trend_html = f'<div class="sr-trend">{esc(view.measure)} over batches<br>{trend}</div>' if trend else ""
    return (
        f'<details>{head}<div class="sr-muted">{esc(view.measure)} {esc(view.source)}; bars from 0 to '
        f"{esc(shown(top))} {esc(view.measure)}, one scale for every bar of {esc(view.measure)} in this display</div>"
        f'<div class="sr-row"><table><tr><th>partition</th>'
        f"<th>{esc(view.measure)}</th><th></th></tr>{bars}</table>{trend_html}</div></details>"
    )


@renamed_keywords("open", path="checkpoint")
def open_checkpoint(checkpoint: str, storage_options: dict[str, Any] | None = None, **deprecated: Any) -> Checkpoint:
    """``state_reader.open(cp, storage_options={...})``: a :class:`Checkpoint` to look at."""
    if deprecated:  # the storage options were once given as keyword arguments of their own
        warn_renamed("open(cp, key=value)", "open(cp, storage_options={key: value})")
        storage_options = {**deprecated, **(storage_options or {})}
    return Checkpoint(checkpoint, storage_options)
