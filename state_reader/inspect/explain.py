"""``state_reader.explain`` and ``state-reader why``: one key's story across the retained batches, and
when Spark will emit, expire or evict it.

For the keys a key filter selects (reading only the partitions they can be in), :func:`explain`
reads the store at the first batch the checkpoint can still rebuild, then the change feed from the
next batch to the latest, and lays out per key a timeline: each batch's time, the watermark the
operator saw in it (the offset log's), what happened to the key and its value. The verdict, from
the operator's own rules, is in :mod:`state_reader.inspect.explain_rules`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from state_reader.core.changefeed import changes
from state_reader.core.key_filter import KeyFilter, KeyFilterSpec, as_key_filter
from state_reader.core.live import read_consistently
from state_reader.core.options import DEFAULT_OPERATOR_ID, from_kwargs, python_api
from state_reader.core.planner import plan_state_read, snapshots_give_the_change_feed
from state_reader.core.retained import first_retained, name_of_operator, offset_entries
from state_reader.core.scan import read_table
from state_reader.core.verdicts import files_plan, sides, store_selectors, timers
from state_reader.errors import InvalidOptionError, StorageError
from state_reader.formats.flatten import json_values, with_unique_field_names
from state_reader.inspect.explain_rules import (
    DELETE,
    INSERT,
    SNAPSHOT,
    UNCHANGED,
    UPDATE,
    KeyFacts,
    TimelineEntry,
    Verdict,
    verdict,
)
from state_reader.io.integrity import with_checksum_report
from state_reader.io.storage import Storage
from state_reader.model import operators
from state_reader.model.checkpoint import CheckpointDir, OffsetEntry
from state_reader.model.plan import StateReadPlan

# each key (canonical JSON, in order of appearance) -> its timeline and its rows last read (Arrow)
Stories = dict[str, tuple[list[TimelineEntry], pa.Table]]

MAX_KEYS = 20  # keys explained at most; a filter that selects more is told to narrow


@dataclass
class KeyStory:
    """One key: its timeline over the retained batches and the verdict on it."""

    key: Any  # as read_state shows it (JSON-ready)
    timeline: list[TimelineEntry]
    verdict: Verdict
    join_side: str | None = None  # a stream-stream join: the side whose buffered rows these are

    @property
    def in_state(self) -> bool:
        """Whether the key is in state at the latest batch."""
        return bool(self.timeline) and self.timeline[-1].change_type != DELETE

    def as_dict(self) -> dict[str, Any]:
        out = {"key": self.key, "timeline": [asdict(e) for e in self.timeline], "verdict": self.verdict.as_dict()}
        if self.join_side is not None:
            out["join_side"] = self.join_side
        return out


@dataclass
class Explanation:
    """What :func:`explain` found for the keys a key filter selects."""

    checkpoint: str
    operator_id: int
    store_name: str | None
    state_var_name: str | None
    operator_name: str | None
    key_filter: str
    first_batch_id: int  # the first retained batch: where the timelines start
    latest_batch_id: int
    keys: list[KeyStory] = field(default_factory=list)
    keys_matched: int = 0  # keys the filter selects, of which the first MAX_KEYS are explained
    message: str | None = None  # why there is no key, or why some were left out

    @property
    def capped(self) -> bool:
        return self.keys_matched > len(self.keys)

    def as_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "operator_id": self.operator_id,
            "store_name": self.store_name,
            "state_var_name": self.state_var_name,
            "operator_name": self.operator_name,
            "key_filter": self.key_filter,
            "first_batch_id": self.first_batch_id,
            "latest_batch_id": self.latest_batch_id,
            "keys_matched": self.keys_matched,
            "capped": self.capped,
            "message": self.message,
            "keys": [k.as_dict() for k in self.keys],
        }

    def table(self) -> pa.Table:
        """Every timeline entry of every key, one row each (``key`` and ``value`` as JSON text)."""
        rows = [
            {
                "key": _canonical(story.key),
                "join_side": story.join_side,
                **{name: getattr(entry, name) for name in ("batch_id", "batch_time_ms", "watermark_ms")},
                "change_type": entry.change_type,
                "value": None if entry.value is None else _canonical(entry.value),
            }
            for story in self.keys
            for entry in story.timeline
        ]
        schema = pa.schema(
            [
                ("key", pa.string()),
                ("join_side", pa.string()),
                ("batch_id", pa.int64()),
                ("batch_time_ms", pa.int64()),
                ("watermark_ms", pa.int64()),
                ("change_type", pa.string()),
                ("value", pa.string()),
            ]
        )
        return pa.Table.from_pylist(rows, schema=schema)

    def to_pandas(self) -> Any:
        return self.table().to_pandas()


@python_api
@with_checksum_report  # one warning for all the files read
def explain(
    checkpoint: str,
    key_filter: KeyFilterSpec,
    *,
    operator_id: int | None = None,
    store_name: str | None = None,
    state_var_name: str | None = None,
    change_feed_from_snapshots: bool | None = None,
    history: str | None = None,
    max_keys: int = MAX_KEYS,
    key_schema: str | None = None,
    value_schema: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Explanation:
    """Why the keys ``key_filter`` selects are in state (or not), and when they leave it.

    Per key: its ``timeline`` over the retained batches (batch id and time, the watermark the
    operator saw, what happened to the key, its value) and a ``verdict``: the ``event`` that ends
    it (``emit``, ``expire``, ``evict``, ``fire``, ``never``, or ``gone`` for a key no longer in
    state) and when, as the watermark (``when_watermark_ms``) or the processing time
    (``when_time_ms``) it waits for. Only the partitions the filter can match are read. At most
    ``max_keys`` keys are explained; ``keys_matched`` says how many the filter selects.
    ``change_feed_from_snapshots``: for a RocksDB store written without changelogs, whose change
    feed is computed by comparing snapshots (None: when there is no changelog). ``history``: a Parquet
    history kept by following the query (``examples/state_history.py``): the timelines then start at
    its first snapshot, before the checkpoint's retention. ``key_schema`` and ``value_schema`` (DDL, both
    or neither) read a store without a schema file, as in ``read_state``. ``explain(cp, "user = 'ann'")``
    and ``explain(cp, key_filter="user = 'ann'")`` are the same call.
    """
    if key_filter is None or (isinstance(key_filter, str) and not key_filter.strip()):
        raise InvalidOptionError(f"explain of {checkpoint} needs a key_filter that selects the keys to explain")
    if max_keys < 1:
        raise InvalidOptionError(f"explain of {checkpoint}: max_keys must be at least 1 (got {max_keys})")
    storage = Storage(checkpoint, dict(storage_options or {}))
    cp = CheckpointDir(storage)
    latest = cp.latest_committed_batch()
    op = DEFAULT_OPERATOR_ID if operator_id is None else operator_id
    operator_name = name_of_operator(cp, op, latest)
    selectors = store_selectors(
        operator_id=operator_id,
        store_name=store_name,
        state_var_name=state_var_name,
        key_schema=key_schema,
        value_schema=value_schema,
        storage_options=storage_options,
    )
    found: list[tuple[str | None, StateReadPlan, dict[int, OffsetEntry], Stories]] = []
    starts: list[int] = []  # where each side's timelines start: its first retained batch, or the history's
    for side in sides(operator_name, selectors):
        at_latest = {**selectors, "join_side": side, "batch_id": latest}
        plan = plan_state_read(from_kwargs(checkpoint, at_latest), cp)
        first = first_retained(cp, files_plan(checkpoint, selectors, plan, cp))
        first = latest if first is None else first
        entries = offset_entries(cp, (b for b in cp.committed_batches if first <= b <= latest))
        if side is None:
            before = _read_at(checkpoint, selectors, first, key_filter, cp)
            from_snapshots = change_feed_from_snapshots
            if from_snapshots is None:  # a store without changelogs has its changes in its snapshots
                from_snapshots = snapshots_give_the_change_feed(plan)
            feed = _feed(checkpoint, selectors, first, latest, key_filter, from_snapshots)
            earlier, start = _history(history, key_filter, first) if history is not None else (None, None)
            stories = _stories(before, feed, first, latest, entries, earlier, start)
            first = first if start is None else min(first, start)
        else:  # a join side has no change feed: each retained batch is read (only the partitions of the keys)
            reads = {
                b: _read_at(checkpoint, {**selectors, "join_side": side}, b, key_filter, cp)
                for b in range(first, latest + 1)
                if b in entries
            }
            stories = _stories_of_reads(reads, entries)
        found.append((side, plan, entries, stories))
        starts.append(first)
    timers, clock = (
        _timers(checkpoint, selectors, latest, key_filter, cp)
        if operators.is_transform_with_state(operator_name)
        else ({}, None)
    )

    result = Explanation(
        checkpoint=cp.location,
        operator_id=op,
        store_name=store_name,
        state_var_name=state_var_name,
        operator_name=operator_name,
        key_filter=key_filter if isinstance(key_filter, str) else repr(key_filter),
        first_batch_id=min(starts),
        latest_batch_id=latest,
        keys_matched=sum(len(stories) for _, _, _, stories in found),
    )
    for side, plan, entries, stories in found:
        for key, (timeline, arrow_rows) in stories.items():
            if len(result.keys) >= max_keys:
                break
            facts = KeyFacts(
                operator_name=operator_name,
                plan=plan,
                timeline=timeline,
                row=arrow_rows,
                entries=entries,
                latest_batch_id=latest,
                operators=len(cp.operator_ids),
                timers=timers.get(key, []),
                timer_clock=clock,
            )
            result.keys.append(KeyStory(json.loads(key), timeline, verdict(facts), side))
    result.message = _message(result)
    return result


def _message(result: Explanation) -> str | None:
    span = f"batches {result.first_batch_id}..{result.latest_batch_id}"
    if not result.keys_matched:
        return (
            f"no key matching {result.key_filter} is in state at any retained batch ({span}) or in the change feed "
            "between them: it never was in state since then, or the filter names no key of this store"
        )
    if result.capped:
        return (
            f"the key filter selects {result.keys_matched} keys; the first {len(result.keys)} are explained "
            "(narrow the filter to see the others)"
        )
    return None


def _read_at(
    checkpoint: str, selectors: dict[str, Any], batch_id: int, key_filter: KeyFilterSpec | KeyFilter, cp: CheckpointDir
) -> pa.Table:
    """The store at ``batch_id``, only the keys the filter selects (from the partitions they can be in)."""
    options = from_kwargs(checkpoint, {**selectors, "batch_id": batch_id})

    def read(plan: StateReadPlan) -> pa.Table:
        return read_table(plan, key_filter=key_filter, show_progress=False)

    return with_unique_field_names(read_consistently(options, read, checkpoint=cp))


def _feed(
    checkpoint: str,
    selectors: dict[str, Any],
    first: int,
    latest: int,
    key_filter: KeyFilterSpec | KeyFilter,
    from_snapshots: bool,
) -> pa.Table | None:
    """The change feed of batches ``first + 1``..``latest`` for the filtered keys (None: no batch after
    ``first``); ``from_snapshots``: computed by comparing snapshots (a store that keeps no changelog)."""
    if latest <= first:
        return None
    kwargs = {**selectors, "key_filter": key_filter, "show_progress": False}
    return changes(checkpoint, first + 1, latest, change_feed_from_snapshots=from_snapshots, **kwargs)


def _timers(
    checkpoint: str, selectors: dict[str, Any], latest: int, key_filter: KeyFilterSpec | KeyFilter, cp: CheckpointDir
) -> tuple[dict[str, list[int]], str | None]:
    """A transformWithState operator's registered timers at the latest batch, by key (canonical JSON),
    and their clock; none when the operator keeps no timers."""
    table, clock = timers(checkpoint, selectors, latest, key_filter, cp=cp)
    if table is None:
        return {}, None
    out: dict[str, list[int]] = {}
    keys = [_canonical(k) for k in json_values(table.column("key"))]
    for key, due in zip(keys, table.column("expiration_timestamp_ms").to_pylist(), strict=True):
        if due is not None:
            out.setdefault(key, []).append(int(due))
    return out, clock


# how a store shows a key's value: one row (a value, or several rows such as a join's buffered rows), the
# elements of a list variable (``list_element``), the entries of a map variable (``user_map_key``/``_value``)
ROWS, LIST, MAP = "rows", "list", "map"
# one row of a key's value: (the map entry's user key as canonical JSON, or None; the row, JSON-ready)
Held = tuple[str | None, Any]


def _keyed(table: pa.Table) -> tuple[list[str], list[Held], str]:
    """Each row's key as canonical JSON (what keys are matched by), its value row, and how the store shows
    a key's value (:data:`ROWS`, :data:`LIST`, :data:`MAP`, from the columns ``read_state`` gives)."""
    keys = [_canonical(k) for k in json_values(table.column("key"))]
    names = table.column_names
    if "user_map_key" in names:  # a map variable: one row per entry, changed and deleted entry by entry
        user_keys = json_values(table.column("user_map_key"))
        user_values = json_values(table.column("user_map_value"))
        held: list[Held] = [
            (_canonical(k), {"user_map_key": k, "user_map_value": v})
            for k, v in zip(user_keys, user_values, strict=True)
        ]
        return keys, held, MAP
    if "list_element" in names:  # a list variable: one row per element
        return keys, [(None, v) for v in json_values(table.column("list_element"))], LIST
    values = json_values(table.column("value")) if "value" in names else [None] * table.num_rows
    return keys, [(None, v) for v in values], ROWS


def _canonical(value: Any) -> str:
    """A JSON-ready value as one text, the same for equal values (what keys are matched by)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _one(held: list[Held], shape: str = ROWS) -> Any:
    """A key's value as the timeline shows it: a list variable's elements in order, a map variable's entries
    by user key, else the one row's value, or every row's for a key with several (a join's buffers)."""
    values = [value for _, value in held]
    if shape == MAP:
        return [value for _, value in sorted(held, key=lambda row: row[0] or "")]
    if shape == LIST:
        return values
    return values[0] if len(values) == 1 else values


def _stories(
    before: pa.Table,
    feed: pa.Table | None,
    first: int,
    latest: int,
    entries: dict[int, OffsetEntry],
    history: pa.Table | None = None,
    history_start: int | None = None,
) -> Stories:
    """Each key (canonical JSON, in order of appearance) -> its timeline and its last row read (Arrow).

    ``history``: the rows of a history kept by following the query (a snapshot, then changes) up to
    ``first``, starting with its snapshot at ``history_start``; the timelines then start there, before the
    checkpoint's retention.
    """
    order: dict[str, None] = {}
    state: dict[str, list[Held]] = {}
    rows: dict[str, pa.Table] = {}
    by_batch: dict[int, dict[str, list[tuple[str, Held, int]]]] = {}
    start = first if history_start is None else min(first, history_start)
    keys, values, shape = _keyed(before)
    if history is not None and history.num_rows:
        h_keys, h_values, _ = _keyed(history)
        kinds = history.column("change_type").to_pylist()
        batches = history.column("batch_id").to_pylist()
        for key, value, kind, batch in zip(h_keys, h_values, kinds, batches, strict=True):
            order.setdefault(key)
            if kind == SNAPSHOT and batch == start:
                state.setdefault(key, []).append(value)
            elif start < batch <= first:
                by_batch.setdefault(batch, {}).setdefault(key, []).append((kind, value, -1))
    for i, (key, value) in enumerate(zip(keys, values, strict=True)):
        order.setdefault(key)
        if start == first:
            state.setdefault(key, []).append(value)
        rows[key] = before.slice(i, 1)
    if feed is not None and feed.num_rows:
        f_keys, f_values, _ = _keyed(feed)
        kinds = feed.column("change_type").to_pylist()
        batches = feed.column("batch_id").to_pylist()
        for i, (key, value, kind, batch) in enumerate(zip(f_keys, f_values, kinds, batches, strict=True)):
            order.setdefault(key)
            by_batch.setdefault(batch, {}).setdefault(key, []).append((kind, value, i))

    def entry(batch: int, change: str, value: Any) -> TimelineEntry:
        known = entries.get(batch)  # a batch before the checkpoint's retention may have left the offset log
        return TimelineEntry(
            batch, known.timestamp_ms if known else 0, known.watermark_ms if known else 0, change, value
        )

    out: Stories = {}
    for key in order:
        timeline: list[TimelineEntry] = []
        current = state.get(key)
        if current is not None:
            timeline.append(entry(start, SNAPSHOT, _one(current, shape)))
        for batch in range(start + 1, latest + 1):
            changed = by_batch.get(batch, {}).get(key)
            if changed:
                current = _applied(current, changed)
                kind = (
                    DELETE
                    if current is None
                    else (UPDATE if timeline and timeline[-1].change_type != DELETE else INSERT)
                )
                timeline.append(entry(batch, kind, None if current is None else _one(current, shape)))
                if feed is not None and current is not None and changed[-1][2] >= 0:
                    rows[key] = feed.slice(changed[-1][2], 1)
            elif current is not None:
                timeline.append(entry(batch, UNCHANGED, _one(current, shape)))
        out[key] = (timeline, rows.get(key, before.slice(0, 0)))
    return out


def _history(path: str, key_filter: KeyFilterSpec | KeyFilter, first: int) -> tuple[pa.Table, int | None]:
    """The rows of a history kept by following the query (Parquet: ``batch_id``, ``change_type``,
    ``key``, ``value``, as ``follow`` and the streaming source write them) up to batch ``first``, for the
    keys the filter selects, and the batch of its snapshot (where it starts; None: an empty history)."""
    import pyarrow.dataset as ds

    try:
        table = ds.dataset(path, format="parquet").to_table()
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise StorageError(f"the history {path} cannot be read as Parquet: {exc}", path=path) from exc
    missing = {"batch_id", "change_type", "key", "value"} - set(table.column_names)
    if missing:
        raise InvalidOptionError(f"the history {path} has no column {', '.join(sorted(missing))}")
    table = table.filter(pc.less_equal(table.column("batch_id"), first))
    if not table.num_rows:
        return table, None
    # the snapshot of every key starts the history, whichever keys the filter keeps
    snapshots = table.filter(pc.equal(table.column("change_type"), SNAPSHOT)).column("batch_id")
    start = pc.min(snapshots if len(snapshots) else table.column("batch_id")).as_py()
    chosen = as_key_filter(key_filter, table.schema.field("key").type)
    if chosen is not None:
        table = table.filter(chosen.mask(table.column("key")))
    order = pc.sort_indices(table.select(["batch_id"]), sort_keys=[("batch_id", "ascending")])
    return with_unique_field_names(table.take(order)), start


def _stories_of_reads(reads: dict[int, pa.Table], entries: dict[int, OffsetEntry]) -> Stories:
    """Each key (canonical JSON) -> its timeline and its rows at the last batch it was in, from the store
    read at every batch (a key with several rows, as a join's buffered rows, has them all as its value)."""
    order: dict[str, None] = {}
    per_batch: dict[int, dict[str, tuple[list[Held], list[int]]]] = {}
    shape = ROWS
    for batch, table in reads.items():
        keys, values, shape = _keyed(table)
        held: dict[str, tuple[list[Held], list[int]]] = {}
        for i, (key, value) in enumerate(zip(keys, values, strict=True)):
            order.setdefault(key)
            held.setdefault(key, ([], []))[0].append(value)
            held[key][1].append(i)
        per_batch[batch] = held
    out: Stories = {}
    batches = sorted(reads)
    for key in order:
        timeline: list[TimelineEntry] = []
        rows = reads[batches[0]].slice(0, 0)
        previous: list[Held] | None = None
        for n, batch in enumerate(batches):
            held_now = per_batch[batch].get(key)
            now = held_now[0] if held_now else None
            known = entries[batch]
            if n == 0:
                change = SNAPSHOT if now is not None else None
            elif now is None:
                change = DELETE if previous is not None else None
            else:
                change = INSERT if previous is None else (UNCHANGED if now == previous else UPDATE)
            if change is not None:
                shown = None if now is None else _one(now, shape)
                timeline.append(TimelineEntry(batch, known.timestamp_ms, known.watermark_ms, change, shown))
            if held_now:
                rows = reads[batch].take(held_now[1])
            previous = now
        out[key] = (timeline, rows)
    return out


def _applied(current: list[Held] | None, changed: list[tuple[str, Held, int]]) -> list[Held] | None:
    """A key's value rows after one batch's changes: an update replaces them (the last one wins), a
    delete removes them, an append (an element of a list) adds one; a map variable's entry is updated or
    deleted alone (its user key says which)."""
    rows = list(current or [])
    for kind, (entry, value), _ in changed:
        if entry is not None:
            rows = [row for row in rows if row[0] != entry]
            if kind != "delete":
                rows.append((entry, value))
        elif kind == "delete":
            rows = []
        elif kind == "append":
            rows.append((entry, value))
        else:
            rows = [(entry, value)]
    return rows or None
