"""The verdict on one key of :func:`state_reader.inspect.explain.explain`: the event that ends its stay in
state and when, by the rules of the operator that keeps it.

Spark's rules, as each operator applies them in a batch whose offset log says watermark ``W``
(the watermark the operator evicts by in that batch):

* windowed aggregation: a key whose window ends at or before ``W`` is evicted (and, in append
  output mode, its row emitted) in that batch;
* dropDuplicates with a watermark: a key whose event-time column is at or before ``W`` is dropped;
* dropDuplicatesWithinWatermark: a key whose stored expiry is at or before ``W`` is dropped;
* session windows: a session whose end is at or before ``W`` is closed (and, in append mode,
  emitted);
* a key without an event-time column, or a query without a watermark: never, as ``doctor`` says.

A no-data batch runs as soon as the watermark moves past a stateful operator's last, so a key
leaves state in the first batch whose watermark reaches its time.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from state_reader.inspect.doctor_state import WATERMARK_METADATA
from state_reader.model import operators

if TYPE_CHECKING:
    from state_reader.model.checkpoint import OffsetEntry
    from state_reader.model.plan import StateReadPlan

EVENTS = ("emit", "expire", "evict", "fire", "never", "gone")

# what happened to a key in a batch
SNAPSHOT, INSERT, UPDATE, DELETE, UNCHANGED = "snapshot", "insert", "update", "delete", "unchanged"


@dataclass
class TimelineEntry:
    """One batch of a key's story."""

    batch_id: int
    batch_time_ms: int  # the batch's processing time (offset log)
    watermark_ms: int  # the watermark the operator saw in this batch (offset log; 0: none yet)
    change_type: str  # snapshot (the first retained batch), insert, update, delete, unchanged
    value: Any  # the value after the batch as read_state shows it (JSON-ready); None once deleted


@dataclass
class Verdict:
    """How one key's stay in state ends: ``event`` and when (a watermark, or a processing time)."""

    event: str  # one of EVENTS
    summary: str  # one line, in words
    when_watermark_ms: int | None = None  # the watermark at which it happens (event time)
    when_time_ms: int | None = None  # the batch time at which it happens (processing time)
    watermark_ms: int = 0  # the watermark of the latest batch
    watermark_moved_batch_id: int | None = None  # the batch in which the watermark last moved
    to_go_ms: int | None = None  # how far the watermark (or the clock) has still to go
    overdue: bool = False  # the time has come and the key is still in state
    batch_id: int | None = None  # gone: the batch it left state in
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class KeyFacts:
    """What the rules look at for one key."""

    operator_name: str | None
    plan: StateReadPlan  # the store at the latest batch: its schemas (and their watermark marks)
    timeline: list[TimelineEntry]
    row: pa.Table  # the key's last row read (key, value), as Arrow
    entries: dict[int, OffsetEntry]  # the offset log's entries of the retained batches
    latest_batch_id: int
    operators: int = 1  # stateful operators in the query


def iso(ms: int | None) -> str:
    """A time in ms as UTC ISO 8601 (milliseconds shown only when there are some)."""
    if ms is None:
        return "-"
    stamp = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    return stamp.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")


def _ceil_ms(micros: int) -> int:
    """The first watermark (ms) at or after a time in microseconds: Spark compares ``W * 1000 >= t``."""
    return -((-micros) // 1000)


def _watermark_now(facts: KeyFacts) -> tuple[int, int | None]:
    """(the latest batch's watermark, the batch in which it last moved)."""
    batches = sorted(facts.entries)
    if not batches:
        return 0, None
    now = facts.entries[batches[-1]].watermark_ms
    moved = None
    for prev, batch in itertools.pairwise(batches):
        if facts.entries[batch].watermark_ms != facts.entries[prev].watermark_ms:
            moved = batch
    return now, moved


def _micros(column: pa.ChunkedArray | pa.Array) -> int | None:
    value = pc.cast(column, pa.timestamp("us", tz=getattr(column.type, "tz", None))).cast(pa.int64())[0].as_py()
    return None if value is None else int(value)


def _key_event_time(facts: KeyFacts) -> tuple[int, str] | None:
    """(micros, what) of the key's watermarked event-time column: a window's end, or a timestamp."""
    row = facts.row
    if not row.num_rows or "key" not in row.column_names:
        return None
    for f in facts.plan.key_schema.fields:
        if WATERMARK_METADATA not in (f.metadata or {}):
            continue
        column = pc.struct_field(row.column("key"), f.name)
        if pa.types.is_struct(column.type):
            micros = _micros(pc.struct_field(column, "end"))
            return (micros, f"the end of its window ({f.name}.end)") if micros is not None else None
        if pa.types.is_timestamp(column.type):
            micros = _micros(column)
            return (micros, f"its event time ({f.name})") if micros is not None else None
    return None


def _value_field(facts: KeyFacts, name: str) -> pa.ChunkedArray | None:
    row = facts.row
    if not row.num_rows or "value" not in row.column_names:
        return None
    typ = row.schema.field("value").type
    if not pa.types.is_struct(typ) or name not in [f.name for f in typ]:
        return None
    return pc.struct_field(row.column("value"), name)


def verdict(facts: KeyFacts) -> Verdict:
    """The verdict on one key; see the module docstring."""
    now, moved = _watermark_now(facts)
    if not facts.timeline or facts.timeline[-1].change_type == DELETE:
        return _gone(facts, now, moved)
    ever_watermark = any(e.watermark_ms > 0 for e in facts.entries.values())
    found = _eviction_time(facts)
    if found is None:
        why = (
            "the query defines no watermark"
            if not ever_watermark
            else "the key holds no watermarked event-time column, so the watermark cannot expire it"
        )
        return Verdict(
            "never",
            f"never evicted: {why}; the key stays in state until the query's own logic removes it",
            watermark_ms=now,
            watermark_moved_batch_id=moved,
            details={"why": why},
        )
    micros, what, event = found
    when = _ceil_ms(micros)
    if not ever_watermark:
        why = "the query defines no watermark (yet): no batch has moved one"
        return Verdict(
            "never",
            f"never evicted while the query has no watermark: {why}",
            watermark_ms=now,
            watermark_moved_batch_id=moved,
            details={"why": why, "event_time_ms": when},
        )
    overdue = now >= when
    action = {"evict": "evicted", "expire": "expires", "emit": "emitted and evicted"}[event]
    summary = f"{action} when the watermark reaches {iso(when)} ({what})"
    if overdue:
        summary += (
            f"; the watermark ({iso(now)}) is past it, yet the key is still in state: "
            "complete output mode keeps every key, and a later one of several stateful operators evicts by "
            "an earlier operator's output"
        )
    else:
        summary += f"; the watermark is {iso(now)}, {(when - now) / 1000:g} s to go"
    details: dict[str, Any] = {"of": what}
    if event == "evict" and facts.operator_name in (operators.AGGREGATION, operators.SESSION_WINDOW):
        details["append_mode"] = "in append output mode its row is emitted in the same batch"
    if facts.operators > 1:
        details["operators"] = (
            f"the query has {facts.operators} stateful operators: a later one evicts by the watermark of the "
            "rows the one before it emits"
        )
    return Verdict(
        event,
        summary,
        when_watermark_ms=when,
        watermark_ms=now,
        watermark_moved_batch_id=moved,
        to_go_ms=max(when - now, 0),
        overdue=overdue,
        details=details,
    )


def _eviction_time(facts: KeyFacts) -> tuple[int, str, str] | None:
    """(micros, what it is, event) at which the watermark ends the key's stay, or None when it cannot."""
    name = facts.operator_name
    expires = _value_field(facts, "expiresAtMicros")
    if expires is not None:  # dropDuplicatesWithinWatermark
        micros = expires.cast(pa.int64())[0].as_py()
        return (
            (int(micros), "the expiry stored with it (its event time + the watermark delay)", "expire")
            if (micros is not None)
            else None
        )
    session = _value_field(facts, "session_window")
    if session is not None:  # a session window keeps its bounds in the value
        micros = _micros(pc.struct_field(session, "end"))
        return (micros, "the end of its session", "evict") if micros is not None else None
    found = _key_event_time(facts)
    if found is None:
        return None
    micros, what = found
    event = "expire" if name == operators.DEDUP else "evict"
    return micros, what, event


def _gone(facts: KeyFacts, now: int, moved: int | None) -> Verdict:
    left = facts.timeline[-1] if facts.timeline else None
    if left is None:
        return Verdict("gone", "not in state at any retained batch", watermark_ms=now, watermark_moved_batch_id=moved)
    return Verdict(
        "gone",
        f"left state in batch {left.batch_id} (watermark {iso(left.watermark_ms)}, batch time "
        f"{iso(left.batch_time_ms)})",
        when_watermark_ms=left.watermark_ms or None,
        when_time_ms=left.batch_time_ms or None,
        watermark_ms=now,
        watermark_moved_batch_id=moved,
        batch_id=left.batch_id,
    )
