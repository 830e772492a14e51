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

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from state_reader.core import eviction
from state_reader.core.eviction import (
    EVENT_TIME,
    EVENT_TIME_TIMERS,
    EVENTS,
    EXPIRY,
    SESSION_END,
    WINDOW_END,
    Clocks,
    KeyVerdicts,
    join_row_leaves_at,
    key_verdicts,
)
from state_reader.model import operators
from state_reader.units import iso_time

if TYPE_CHECKING:
    from state_reader.model.checkpoint import OffsetEntry
    from state_reader.model.plan import StateReadPlan

__all__ = ["EVENTS", "KeyFacts", "TimelineEntry", "Verdict", "join_row_leaves_at", "verdict"]

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


def _since(moved: int | None) -> str:
    """When the watermark last moved, in words (nothing when it never did in the retained batches)."""
    return "" if moved is None else f" (since batch {moved})"


def _clock_text(clock: str, now: int, when: int, since: str = "") -> str:
    """Where a clock stands, and how long it has to go to ``when`` (nothing once it is there)."""
    text = f"; the {clock} is {iso_time(now)}{since}"
    return text if now >= when else text + f", {(when - now) / 1000:g} s to go"


def _null_row(table: pa.Table) -> pa.Table:
    """One row of nulls of ``table``'s columns: the rules' input for a key whose rows were not read."""
    return pa.table({name: pa.nulls(1, table.schema.field(name).type) for name in table.column_names})


def _join_row_schema(plan: StateReadPlan) -> Any:
    return plan.join.row_value_schema if plan.join is not None else plan.value_schema


def verdict(facts: KeyFacts) -> Verdict:
    """The verdict on one key, in words: the verdict :func:`state_reader.core.eviction.key_verdicts` gives
    its row (the rules every key's verdict in ``verdicts`` comes from too), or ``gone``."""
    clocks = Clocks.of(facts.entries)
    if not facts.timeline or facts.timeline[-1].change_type == DELETE:
        return _gone(facts, clocks)
    row = facts.row if facts.row.num_rows else _null_row(facts.row)
    timers = pa.array([min(facts.timers) if facts.timers else None] * row.num_rows, pa.int64())
    found = key_verdicts(
        row,
        operator_name=facts.operator_name,
        key_schema=facts.plan.key_schema,
        clocks=clocks,
        join_row_schema=_join_row_schema(facts.plan) if facts.operator_name == operators.JOIN else None,
        timers_ms=timers,
        timer_clock=facts.timer_clock,
    )
    if not len(found):  # a join key with no row read
        return Verdict(
            "never",
            "its rows hold no event time",
            watermark_ms=clocks.watermark_ms,
            watermark_moved_batch_id=clocks.watermark_moved_batch_id,
        )
    return _WORDS[str(found.rule[0])](facts, found, clocks)


def _base(found: KeyVerdicts, clocks: Clocks, summary: str, **details: Any) -> Verdict:
    """The verdict of the key ``found`` holds (its first), with ``summary`` and ``details``."""
    when = int(found.when_ms[0]) if found.has_when[0] else None
    clock_now = clocks.watermark_ms if found.on_watermark[0] else clocks.batch_time_ms
    return Verdict(
        str(found.event[0]),
        summary,
        when_watermark_ms=when if found.on_watermark[0] else None,
        when_time_ms=None if found.on_watermark[0] else when,
        watermark_ms=clocks.watermark_ms,
        watermark_moved_batch_id=clocks.watermark_moved_batch_id,
        to_go_ms=None if when is None else max(when - clock_now, 0),
        overdue=bool(found.overdue[0]),
        details=details,
    )


def _never_because(found: KeyVerdicts, clocks: Clocks, why: str, summary: str, **details: Any) -> Verdict:
    """A verdict that says ``why`` a key stays: in its ``summary`` (where ``{why}`` stands) and its details."""
    return _base(found, clocks, summary.format(why=why), why=why, **details)


def _never(facts: KeyFacts, found: KeyVerdicts, clocks: Clocks) -> Verdict:
    """A window, deduplication or session key that no watermark can take (or none yet)."""
    if found.rule[0] == eviction.RULE_NO_WATERMARK_YET:
        why = "the query defines no watermark (yet): no batch has moved one"
        return _never_because(
            found,
            clocks,
            why,
            "never evicted while the query has no watermark: {why}",
            event_time_ms=int(found.due_ms[0]),
        )
    why = (
        "the query defines no watermark"
        if found.rule[0] == eviction.RULE_NO_WATERMARK
        else "the key holds no watermarked event-time column, so the watermark cannot expire it"
    )
    return _never_because(
        found, clocks, why, "never evicted: {why}; the key stays in state until the query's own logic removes it"
    )


def _by_watermark(facts: KeyFacts, found: KeyVerdicts, clocks: Clocks) -> Verdict:
    """A window, deduplication or session key: gone once the watermark reaches its time."""
    when, now = int(found.when_ms[0]), clocks.watermark_ms
    what = _OF[found.time_kind or EVENT_TIME].format(found.time_column)
    event = str(found.event[0])
    action = {"evict": "evicted", "expire": "expires", "emit": "emitted and evicted"}[event]
    summary = f"{action} when the watermark reaches {iso_time(when)} ({what})"
    if found.overdue[0]:
        summary += (
            f"; the watermark ({iso_time(now)}) is past it, yet the key is still in state: "
            "complete output mode keeps every key, and a later one of several stateful operators evicts by "
            "an earlier operator's output"
        )
    else:
        summary += _clock_text("watermark", now, when, _since(clocks.watermark_moved_batch_id))
    details: dict[str, Any] = {"of": what}
    if event == "evict" and facts.operator_name in (operators.AGGREGATION, operators.SESSION_WINDOW):
        details["append_mode"] = "in append output mode its row is emitted in the same batch"
    if facts.operators > 1:
        details["operators"] = (
            f"the query has {facts.operators} stateful operators: a later one evicts by the watermark of the "
            "rows the one before it emits"
        )
    return _base(found, clocks, summary, **details)


# what a key's time is, in the verdict's words
_OF = {
    WINDOW_END: "the end of its window ({}.end)",
    EVENT_TIME: "its event time ({})",
    EXPIRY: "the expiry stored with it (its event time + the watermark delay)",
    SESSION_END: "the end of its session",
}


def _gone(facts: KeyFacts, clocks: Clocks) -> Verdict:
    now, moved = clocks.watermark_ms, clocks.watermark_moved_batch_id
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


def _due(found: KeyVerdicts, clocks: Clocks, what: str, *, at_due: bool, **details: Any) -> Verdict:
    """Something due when a clock (the watermark or the batch time) passes (``at_due``: reaches) its time:
    Spark takes it in the first batch whose clock does."""
    event, due, when = str(found.event[0]), int(found.due_ms[0]), int(found.when_ms[0])
    clock = "watermark" if found.on_watermark[0] else "batch time"
    clock_now = clocks.watermark_ms if found.on_watermark[0] else clocks.batch_time_ms
    reaches = "reaches" if at_due else "is past"
    summary = f"{what} at {iso_time(due)}: {event}s in the first batch whose {clock} {reaches} it"
    if found.overdue[0]:
        summary += f"; the last batch's {clock} ({iso_time(clock_now)}) already does, so the next batch takes it"
    else:
        since = _since(clocks.watermark_moved_batch_id) if clock == "watermark" else ""
        summary += _clock_text(clock, clock_now, when, since)
    return _base(found, clocks, summary, due_ms=due, clock=clock, **details)


def _timeout(facts: KeyFacts, found: KeyVerdicts, clocks: Clocks) -> Verdict:
    """A group of (flat)mapGroupsWithState or applyInPandasWithState: its timeout (its kind is taken
    from the clock it is nearer: the watermark for event time, else the batch time)."""
    kind = "event time" if found.on_watermark[0] else "processing time"
    return _due(
        found,
        clocks,
        f"{kind} timeout",
        at_due=False,
        timeout=kind,
        removed="the function is called with the group timed out, and removes it or sets another timeout",
    )


def _no_timeout(facts: KeyFacts, found: KeyVerdicts, clocks: Clocks) -> Verdict:
    why = "no timeout is set for this group (GroupStateTimeout.NoTimeout, or the function set none)"
    return _never_because(found, clocks, why, "never times out: {why}; only the function removes it")


def _timer_details(facts: KeyFacts) -> dict[str, Any]:
    return {"timers": sorted(facts.timers), "timer_clock": facts.timer_clock}


def _timer(facts: KeyFacts, found: KeyVerdicts, clocks: Clocks) -> Verdict:
    """A transformWithState key's earliest registered timer."""
    timer_now = clocks.watermark_ms if facts.timer_clock == EVENT_TIME_TIMERS else clocks.batch_time_ms
    return _due(
        found,
        clocks,
        f"its {facts.timer_clock or 'processing time'} timer",
        at_due=True,
        **_timer_details(facts),
        overdue_timers=sum(t <= timer_now for t in facts.timers),
    )


def _ttl(facts: KeyFacts, found: KeyVerdicts, clocks: Clocks) -> Verdict:
    """A value whose TTL lapses: gone in the first batch whose batch time reaches it."""
    expiry, when, batch_time = int(found.due_ms[0]), int(found.when_ms[0]), clocks.batch_time_ms
    summary = f"its TTL lapses at {iso_time(expiry)}: expires in the first batch whose batch time reaches it"
    summary += (
        f"; the last batch's time ({iso_time(batch_time)}) already does, so the next batch clears it"
        if found.overdue[0]
        else _clock_text("batch time", batch_time, when)
    )
    return _base(found, clocks, summary, ttl_expiration_ms=expiry, **_timer_details(facts))


def _no_ttl(facts: KeyFacts, found: KeyVerdicts, clocks: Clocks) -> Verdict:
    why = "the variable has no TTL and the key no timer"
    return _never_because(
        found, clocks, why, "never expires: {why}; only the processor clears it", **_timer_details(facts)
    )


def _join_key(facts: KeyFacts, found: KeyVerdicts, clocks: Clocks) -> Verdict:
    """A join key whose event time (or window) is a join key: gone once the watermark reaches it."""
    when, now = int(found.when_ms[0]), clocks.watermark_ms
    column = found.join_column
    kind = facts.row.schema.field("value").type.field(column).type if column else None
    what = (
        f"the end of its window ({column}.end)"
        if kind is not None and pa.types.is_struct(kind)
        else f"its event time ({column})"
    )
    summary = f"dropped when the watermark reaches {iso_time(when)} ({what}, a join key: key time <= watermark)"
    summary += _clock_text("watermark", now, when, _since(clocks.watermark_moved_batch_id))
    return _base(found, clocks, summary, of=what, rule="state key watermark: key time <= watermark")


def _join_no_watermark(facts: KeyFacts, found: KeyVerdicts, clocks: Clocks) -> Verdict:
    why = "this side's input has no watermark" if clocks.ever_watermark else "the query defines no watermark"
    return _never_because(
        found, clocks, why, "never dropped by the watermark: {why}; its rows stay buffered for every later match"
    )


def _join_no_time(facts: KeyFacts, found: KeyVerdicts, clocks: Clocks) -> Verdict:
    return _base(found, clocks, "its rows hold no event time")


def _join_range(facts: KeyFacts, found: KeyVerdicts, clocks: Clocks) -> Verdict:
    """A join key's buffered rows, dropped by the state value watermark of the join condition's range:
    see :func:`state_reader.core.eviction.join_row_leaves_at`."""
    last, first, rows = int(found.when_ms[0]), int(found.first_row_ms[0]), int(found.rows[0])
    column = found.join_column
    count = f"{rows} buffered row{'s' if rows != 1 else ''}"
    summary = (
        f"{count}, event times {iso_time(first - 1)}..{iso_time(int(found.due_ms[0]))} "
        f"({column}): each is "
        "dropped in the first batch whose watermark is past its event time plus the range the join condition "
        "allows the other side (Spark drops a row once event time <= watermark - range - 1 ms for an inclusive "
        "bound, <= watermark - range for a strict one); with no range and an inclusive bound, the last at "
        f"{iso_time(last)}"
    )
    summary += _clock_text("watermark", clocks.watermark_ms, last, _since(clocks.watermark_moved_batch_id))
    return _base(
        found,
        clocks,
        summary,
        event_time_column=column,
        rows=rows,
        first_row_ms=first,
        rule=(
            "state value watermark: a row goes once its event time <= watermark - range - 1 ms (an inclusive "
            "bound: <=, >=, BETWEEN) or <= watermark - range (a strict bound: <, >)"
        ),
        range="the time range the join condition gives the other input (not in the checkpoint): "
        "when_watermark_ms is for no range and an inclusive bound; add the range, and with a strict bound "
        "take 1 ms off",
    )


# each rule's words (core/eviction decides which rule a key falls under)
_WORDS = {
    eviction.RULE_WATERMARK: _by_watermark,
    eviction.RULE_NO_WATERMARK: _never,
    eviction.RULE_NO_EVENT_TIME: _never,
    eviction.RULE_NO_WATERMARK_YET: _never,
    eviction.RULE_TIMEOUT: _timeout,
    eviction.RULE_NO_TIMEOUT: _no_timeout,
    eviction.RULE_TTL: _ttl,
    eviction.RULE_TIMER: _timer,
    eviction.RULE_NO_TTL_NO_TIMER: _no_ttl,
    eviction.RULE_JOIN_KEY: _join_key,
    eviction.RULE_JOIN_RANGE: _join_range,
    eviction.RULE_JOIN_NO_WATERMARK: _join_no_watermark,
    eviction.RULE_JOIN_NO_TIME: _join_no_time,
}
