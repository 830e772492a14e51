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
* (flat)mapGroupsWithState, applyInPandasWithState: a group whose timeout timestamp is before the
  batch's clock times out (its function is called to remove it or set a new timeout): the watermark
  for event-time timeouts, the batch time for processing-time ones; without a timeout set, never;
* transformWithState: a timer fires in the first batch whose clock (the batch time, or the watermark
  for event-time timers) reaches it (Spark 4's timer index hands out the timers at or before the
  clock); a value with a TTL expires in the first batch whose batch time reaches its expiry;
* stream-stream joins (Spark's StreamingSymmetricHashJoinHelper and StreamingJoinHelper), per side:

  - the event time (or a window) is a join key: a row goes once ``key time <= W`` (the state key
    watermark predicate; a window's end), so in the first batch whose watermark reaches its time. The
    schema numbers a join key's fields without the watermark's mark: a key field that holds each
    row's event time (or window) is taken for it;
  - else the join condition bounds this side's time from below by the other side's: with a range ``R``
    (ms; ``rts BETWEEN lts AND lts + R`` gives the left side ``R``, the right side 0), Spark solves the
    bound with the other side's watermark into a state value watermark, ``W - R`` for a strict bound
    (``<``, ``>``) and ``W - R - 1`` for an inclusive one (``<=``, ``>=``, ``BETWEEN``: a row exactly
    at the bound may still match), and drops the rows whose event time is ``<=`` it. A row at event
    time ``t`` goes in the first batch whose watermark reaches ``t + R`` (strict) or ``t + R + 1 ms``
    (inclusive): :func:`join_row_leaves_at`. The condition is not in the checkpoint, so the verdict
    gives the time for no range and an inclusive bound (the bound of the right side of a ``BETWEEN``);
* a key without an event-time column, or a query without a watermark: never, as ``doctor`` says.

A no-data batch runs as soon as the watermark moves past a stateful operator's last, so a key
leaves state in the first batch whose watermark reaches its time.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from state_reader.core.eviction import (
    EVENT_TIME,
    EXPIRY,
    SESSION_END,
    WINDOW_END,
    ceil_ms,
    due_at,
    eviction_times,
    join_row_leaves_at,
    timeout_fires_at,
)
from state_reader.model import operators
from state_reader.model.checkpoint import WATERMARK_METADATA
from state_reader.units import iso_time

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
    timers: list[int] = field(default_factory=list)  # transformWithState: the key's registered timers (ms)
    timer_clock: str | None = None  # their clock: "processing time" or "event time"


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


def _since(moved: int | None) -> str:
    """When the watermark last moved, in words (nothing when it never did in the retained batches)."""
    return "" if moved is None else f" (since batch {moved})"


def _clock_text(clock: str, now: int, when: int, since: str = "") -> str:
    """Where a clock stands, and how long it has to go to ``when`` (nothing once it is there)."""
    text = f"; the {clock} is {iso_time(now)}{since}"
    return text if now >= when else text + f", {(when - now) / 1000:g} s to go"


def _micros(column: pa.ChunkedArray | pa.Array) -> int | None:
    value = pc.cast(column, pa.timestamp("us", tz=getattr(column.type, "tz", None))).cast(pa.int64())[0].as_py()
    return None if value is None else int(value)


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
    if operators.is_transform_with_state(facts.operator_name):
        return _transform_with_state(facts, now, moved)
    if facts.operator_name == operators.JOIN:
        return _join_rows(facts, now, moved)
    timeout = _value_field(facts, "timeoutTimestamp")
    if timeout is not None or facts.operator_name in operators.FLAT_MAP_GROUPS_WITH_STATE:
        return _timeout(facts, timeout, now, moved)
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
    when = ceil_ms(micros)
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
    summary = f"{action} when the watermark reaches {iso_time(when)} ({what})"
    if overdue:
        summary += (
            f"; the watermark ({iso_time(now)}) is past it, yet the key is still in state: "
            "complete output mode keeps every key, and a later one of several stateful operators evicts by "
            "an earlier operator's output"
        )
    else:
        summary += _clock_text("watermark", now, when, _since(moved))
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


# what a key's time is, in the verdict's words
_OF = {
    WINDOW_END: "the end of its window ({}.end)",
    EVENT_TIME: "its event time ({})",
    EXPIRY: "the expiry stored with it (its event time + the watermark delay)",
    SESSION_END: "the end of its session",
}


def _eviction_time(facts: KeyFacts) -> tuple[int, str, str] | None:
    """(micros, what it is, event) at which the watermark ends the key's stay, or None when it cannot: the
    rule ``doctor`` applies too (:func:`state_reader.core.eviction.eviction_times`)."""
    if not facts.row.num_rows:
        return None
    found = eviction_times(facts.plan.key_schema, facts.row, facts.operator_name)
    if found is None:
        return None
    micros = found.micros[0].as_py()
    if micros is None:
        return None
    return int(micros), _OF[found.kind].format(found.column), found.event


def _gone(facts: KeyFacts, now: int, moved: int | None) -> Verdict:
    left = facts.timeline[-1] if facts.timeline else None
    if left is None:
        return Verdict("gone", "not in state at any retained batch", watermark_ms=now, watermark_moved_batch_id=moved)
    return Verdict(
        "gone",
        f"left state in batch {left.batch_id} (watermark {iso_time(left.watermark_ms)}, batch time "
        f"{iso_time(left.batch_time_ms)})",
        when_watermark_ms=left.watermark_ms or None,
        when_time_ms=left.batch_time_ms or None,
        watermark_ms=now,
        watermark_moved_batch_id=moved,
        batch_id=left.batch_id,
    )


def _batch_time_now(facts: KeyFacts) -> int:
    return facts.entries[max(facts.entries)].timestamp_ms if facts.entries else 0


def _due(
    event: str,
    what: str,
    due_ms: int,
    clock: str,
    now: int,
    moved: int | None,
    facts: KeyFacts,
    *,
    at_due: bool = False,
    **details: Any,
) -> Verdict:
    """A verdict for something due when ``clock`` (the watermark or the batch time) passes ``due_ms``
    (``at_due``: reaches it): Spark takes it in the first batch whose clock does."""
    when = due_at(due_ms) if at_due else timeout_fires_at(due_ms)
    clock_now = now if clock == "watermark" else _batch_time_now(facts)
    overdue = clock_now >= when
    reaches = "reaches" if at_due else "is past"
    summary = f"{what} at {iso_time(due_ms)}: {event}s in the first batch whose {clock} {reaches} it"
    if overdue:
        summary += f"; the last batch's {clock} ({iso_time(clock_now)}) already does, so the next batch takes it"
    else:
        since = _since(moved) if clock == "watermark" else ""
        summary += _clock_text(clock, clock_now, when, since)
    return Verdict(
        event,
        summary,
        when_watermark_ms=when if clock == "watermark" else None,
        when_time_ms=when if clock != "watermark" else None,
        watermark_ms=now,
        watermark_moved_batch_id=moved,
        to_go_ms=max(when - clock_now, 0),
        overdue=overdue,
        details={"due_ms": due_ms, "clock": clock, **details},
    )


def _timeout(facts: KeyFacts, timeout: pa.ChunkedArray | None, now: int, moved: int | None) -> Verdict:
    """A group of (flat)mapGroupsWithState or applyInPandasWithState: its timeout.

    The kind of timeout is the query's, not the checkpoint's: a timestamp nearer the watermark than
    the batch time is taken for an event-time timeout (which needs a watermark), else processing time.
    """
    stamp = None if timeout is None else timeout.cast(pa.int64())[0].as_py()
    if stamp is None or stamp < 0:  # -1: no timeout set (NoTimeout, or none set for this group)
        why = "no timeout is set for this group (GroupStateTimeout.NoTimeout, or the function set none)"
        return Verdict(
            "never",
            f"never times out: {why}; only the function removes it",
            watermark_ms=now,
            watermark_moved_batch_id=moved,
            details={"why": why},
        )
    batch_time = _batch_time_now(facts)
    event_time = now > 0 and abs(stamp - now) < abs(stamp - batch_time)
    kind = "event time" if event_time else "processing time"
    return _due(
        "fire",
        f"{kind} timeout",
        stamp,
        "watermark" if event_time else "batch time",
        now,
        moved,
        facts,
        timeout=kind,
        removed="the function is called with the group timed out, and removes it or sets another timeout",
    )


def _transform_with_state(facts: KeyFacts, now: int, moved: int | None) -> Verdict:
    """A key of a transformWithState variable: its TTL, and the key's registered timers."""
    ttl = _value_field(facts, "ttlExpirationMs")
    expiry = None if ttl is None else ttl.cast(pa.int64())[0].as_py()
    timer = min(facts.timers) if facts.timers else None
    clock = "watermark" if facts.timer_clock == "event time" else "batch time"
    timer_when = None if timer is None else due_at(timer)  # the first batch whose clock reaches it
    timer_now = now if clock == "watermark" else _batch_time_now(facts)
    details: dict[str, Any] = {"timers": sorted(facts.timers), "timer_clock": facts.timer_clock}
    if expiry is not None and (timer_when is None or clock != "batch time" or expiry <= timer_when):
        verdict = _ttl(expiry, now, moved, facts)
        verdict.details.update(details)
        return verdict
    if timer is not None:
        return _due(
            "fire",
            f"its {facts.timer_clock or 'processing time'} timer",
            timer,
            clock,
            now,
            moved,
            facts,
            at_due=True,
            **details,
            overdue_timers=sum(t <= timer_now for t in facts.timers),
        )
    why = "the variable has no TTL and the key no timer"
    return Verdict(
        "never",
        f"never expires: {why}; only the processor clears it",
        watermark_ms=now,
        watermark_moved_batch_id=moved,
        details={"why": why, **details},
    )


def _ttl(expiry: int, now: int, moved: int | None, facts: KeyFacts) -> Verdict:
    """A value whose TTL lapses at ``expiry``: gone in the first batch whose batch time reaches it."""
    batch_time = _batch_time_now(facts)
    when = due_at(expiry)
    overdue = batch_time >= when
    summary = f"its TTL lapses at {iso_time(expiry)}: expires in the first batch whose batch time reaches it"
    summary += (
        f"; the last batch's time ({iso_time(batch_time)}) already does, so the next batch clears it"
        if overdue
        else _clock_text("batch time", batch_time, when)
    )
    return Verdict(
        "expire",
        summary,
        when_time_ms=when,
        watermark_ms=now,
        watermark_moved_batch_id=moved,
        to_go_ms=max(when - batch_time, 0),
        overdue=overdue,
        details={"ttl_expiration_ms": expiry},
    )


def _join_key_time(facts: KeyFacts, column: str) -> tuple[int, str] | None:
    """(micros, what) when the event-time column ``column`` of a join side's rows is one of its join keys:
    a key field (the schema names them ``field0``.. without the watermark's mark) that holds the row's event
    time, or its window, in every row; its time (a window's end) is what Spark's state key watermark drops
    the rows by."""
    if not facts.row.num_rows or "key" not in facts.row.column_names:
        return None
    times = pc.struct_field(facts.row.column("value"), column)
    key = facts.row.column("key")
    for f in key.type:
        held = pc.struct_field(key, f.name)
        if held.type != times.type or held.to_pylist() != times.to_pylist():
            continue
        if pa.types.is_struct(held.type):  # a window: its end
            micros = max(_micros(pc.struct_field(held.slice(i, 1), "end")) or 0 for i in range(len(held)))
            return micros, f"the end of its window ({column}.end)"
        if pa.types.is_timestamp(held.type):
            micros = max(_micros(held.slice(i, 1)) or 0 for i in range(len(held)))
            return micros, f"its event time ({column})"
    return None


def _join_rows(facts: KeyFacts, now: int, moved: int | None) -> Verdict:
    """The buffered rows of one join key on one side: dropped by the watermark on their event time, by
    the state key watermark (the event time is a join key) or the state value watermark (the condition's
    range): see :func:`join_row_leaves_at`."""
    schema = facts.plan.join.row_value_schema if facts.plan.join is not None else facts.plan.value_schema
    marked = [f.name for f in schema.fields if WATERMARK_METADATA in (f.metadata or {})]
    value_type = facts.row.schema.field("value").type if "value" in facts.row.column_names else None
    names = [f.name for f in value_type] if value_type is not None and pa.types.is_struct(value_type) else []
    column = next((name for name in marked if name in names), None)
    keyed = _join_key_time(facts, column) if column is not None else None
    if keyed is not None:  # the event time (or a window) is a join key: gone once the watermark reaches it
        micros, what = keyed
        when = ceil_ms(micros)
        overdue = now >= when
        summary = f"dropped when the watermark reaches {iso_time(when)} ({what}, a join key: key time <= watermark)"
        summary += _clock_text("watermark", now, when, _since(moved))
        return Verdict(
            "evict",
            summary,
            when_watermark_ms=when,
            watermark_ms=now,
            watermark_moved_batch_id=moved,
            to_go_ms=max(when - now, 0),
            overdue=overdue,
            details={"of": what, "rule": "state key watermark: key time <= watermark"},
        )
    if column is None or not facts.row.num_rows:
        why = (
            "this side's input has no watermark"
            if any(e.watermark_ms > 0 for e in facts.entries.values())
            else "the query defines no watermark"
        )
        return Verdict(
            "never",
            f"never dropped by the watermark: {why}; its rows stay buffered for every later match",
            watermark_ms=now,
            watermark_moved_batch_id=moved,
            details={"why": why},
        )
    times = pc.cast(pc.struct_field(facts.row.column("value"), column), pa.timestamp("us")).cast(pa.int64())
    event_micros = [int(t) for t in times.to_pylist() if t is not None]
    if not event_micros:
        return Verdict("never", "its rows hold no event time", watermark_ms=now, watermark_moved_batch_id=moved)
    first, last = join_row_leaves_at(min(event_micros)), join_row_leaves_at(max(event_micros))
    count = f"{len(event_micros)} buffered row{'s' if len(event_micros) != 1 else ''}"
    summary = (
        f"{count}, event times {iso_time(ceil_ms(min(event_micros)))}..{iso_time(ceil_ms(max(event_micros)))} "
        f"({column}): each is "
        "dropped in the first batch whose watermark is past its event time plus the range the join condition "
        "allows the other side (Spark drops a row once event time <= watermark - range - 1 ms for an inclusive "
        "bound, <= watermark - range for a strict one); with no range and an inclusive bound, the last at "
        f"{iso_time(last)}"
    )
    summary += _clock_text("watermark", now, last, _since(moved))
    return Verdict(
        "evict",
        summary,
        when_watermark_ms=last,
        watermark_ms=now,
        watermark_moved_batch_id=moved,
        to_go_ms=max(last - now, 0),
        overdue=False,  # the condition's range may keep them longer: not known to be late
        details={
            "event_time_column": column,
            "rows": len(event_micros),
            "first_row_ms": first,
            "rule": (
                "state value watermark: a row goes once its event time <= watermark - range - 1 ms (an inclusive "
                "bound: <=, >=, BETWEEN) or <= watermark - range (a strict bound: <, >)"
            ),
            "range": "the time range the join condition gives the other input (not in the checkpoint): "
            "when_watermark_ms is for no range and an inclusive bound; add the range, and with a strict bound "
            "take 1 ms off",
        },
    )
