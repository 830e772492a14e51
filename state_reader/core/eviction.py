"""When a key leaves state, by the rule of the operator that keeps it: the one rule ``doctor`` (rows past
the watermark, state that is never evicted) and ``why`` (a key's verdict) both apply.

A batch whose offset log says watermark ``W`` (ms) evicts by it (Spark compares ``W * 1000`` with times
in microseconds):

* windowed aggregation: a key whose window ends at or before ``W``;
* dropDuplicates with a watermark: a key whose event-time column is at or before ``W``;
* dropDuplicatesWithinWatermark: a key whose stored expiry (``expiresAtMicros``) is at or before ``W``;
* session windows: a session whose end (``session_window.end``, in the value) is at or before ``W``;
* stream-stream joins: a buffered row by the state key watermark (its event time is a join key) or the
  state value watermark (the condition's range), :func:`join_row_leaves_at`;
* (flat)mapGroupsWithState: a group whose timeout is before the batch's clock, :func:`timeout_fires_at`;
* transformWithState: a timer or a TTL the batch's clock reaches, :func:`due_at`.

Each is given as the first watermark (or clock) at which the key is gone.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_reader.grouping import group_ids
from state_reader.model import operators
from state_reader.model.checkpoint import WATERMARK_METADATA

# what a store's rows are evicted by
WINDOW_END = "window end"  # a window in the key: its end
EVENT_TIME = "event time"  # a timestamp in the key
EXPIRY = "expiry"  # dropDuplicatesWithinWatermark: the expiry stored in the value
SESSION_END = "session end"  # a session window: its end, in the value

# a row that holds no time: past every watermark
NONE_MS = np.iinfo(np.int64).max // 1000


def ceil_ms(micros: int) -> int:
    """The first watermark (ms) at or after a time in microseconds: Spark compares ``W * 1000 >= t``."""
    return -((-micros) // 1000)


@dataclass(frozen=True)
class EvictionTimes:
    """The time by which the watermark evicts each row of a store, and what that time is."""

    micros: pa.ChunkedArray | pa.Array  # int64 microseconds, one per row (null: the row holds none)
    kind: str  # WINDOW_END, EVENT_TIME, EXPIRY or SESSION_END
    column: str  # the field the time is read from: a key field, expiresAtMicros or session_window
    event: str  # how the key's stay ends: "evict", or "expire" (deduplication)

    def leaves_at_ms(self) -> np.ndarray:
        """The first watermark (ms) at which each row is gone (:data:`NONE_MS` for a row holding no time)."""
        micros = self.micros.fill_null(NONE_MS * 1000).to_numpy(zero_copy_only=False)
        return -((-np.asarray(micros, dtype=np.int64)) // 1000)


def _micros(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    return pc.cast(column, pa.timestamp("us", tz=getattr(column.type, "tz", None))).cast(pa.int64())


def eviction_times(key_schema: Any, table: pa.Table, operator_name: str | None) -> EvictionTimes | None:
    """The times by which the watermark evicts the rows of ``table`` (a store's ``key`` and ``value``
    columns, as read), or None when no watermark can (no event-time column in the key, no expiry or
    session in the value).

    ``key_schema``: the store's key schema, whose watermarked event-time column carries the watermark
    delay in its metadata. The value's expiry and session come first, as Spark evicts by them whatever
    the key holds.
    """
    value_type = table.schema.field("value").type if "value" in table.column_names else None
    names = [f.name for f in value_type] if value_type is not None and pa.types.is_struct(value_type) else []
    if "expiresAtMicros" in names:  # dropDuplicatesWithinWatermark: its event time + the watermark delay
        expires = pc.struct_field(table.column("value"), "expiresAtMicros").cast(pa.int64())
        return EvictionTimes(expires, EXPIRY, "expiresAtMicros", "expire")
    if "session_window" in names:  # a session window keeps its bounds in the value
        window = pc.struct_field(table.column("value"), "session_window")
        return EvictionTimes(_micros(pc.struct_field(window, "end")), SESSION_END, "session_window", "evict")
    if "key" not in table.column_names:
        return None
    event = "expire" if operator_name == operators.DEDUP else "evict"
    for f in key_schema.fields:
        if WATERMARK_METADATA not in (f.metadata or {}):
            continue
        column = pc.struct_field(table.column("key"), f.name)
        if pa.types.is_struct(column.type):  # a window: its end
            return EvictionTimes(_micros(pc.struct_field(column, "end")), WINDOW_END, f.name, event)
        if pa.types.is_timestamp(column.type):
            return EvictionTimes(_micros(column), EVENT_TIME, f.name, event)
    return None


def join_row_leaves_at(event_time_us: int, range_ms: int = 0, *, inclusive: bool = True) -> int:
    """The first watermark (ms) at which Spark drops a join side's buffered row of event time
    ``event_time_us``, when the join condition bounds that side's time from below by the other side's
    time minus ``range_ms`` (the range of the condition that keeps it matchable), with an inclusive bound
    (``<=``, ``>=``, ``BETWEEN``) or a strict one (``<``, ``>``).

    Spark's state value watermark is ``W - range - 1`` (inclusive) or ``W - range`` (strict), and the
    predicate drops the rows whose event time is ``<=`` it (``t_us <= state watermark * 1000``).
    """
    return ceil_ms(event_time_us) + range_ms + (1 if inclusive else 0)


def timeout_fires_at(timeout_ms: int) -> int:
    """The first clock (ms: the watermark, or the batch time) at which a (flat)mapGroupsWithState group
    whose timeout is ``timeout_ms`` times out: Spark takes the groups whose timeout is before the clock."""
    return timeout_ms + 1


def due_at(due_ms: int) -> int:
    """The first clock (ms) at which a transformWithState timer fires or a TTL lapses: Spark takes them
    once the clock reaches them."""
    return due_ms


# --- the verdict on every key: the rules above, over arrays -------------------------------------------

# how a key's stay in state ends (a verdict's event); ``gone``: it has already left
EMIT, EXPIRE, EVICT, FIRE, NEVER, GONE = "emit", "expire", "evict", "fire", "never", "gone"
EVENTS = (EMIT, EXPIRE, EVICT, FIRE, NEVER, GONE)

# which rule decided a key's verdict (what its words in ``why`` say)
RULE_WATERMARK = "watermark"  # evicted (or expired) when the watermark reaches its time
RULE_NO_WATERMARK = "no watermark"  # no event-time column, and the query defines no watermark
RULE_NO_EVENT_TIME = "no event time"  # the key holds no watermarked event-time column
RULE_NO_WATERMARK_YET = "no watermark yet"  # it has a time, but no retained batch has moved a watermark
RULE_TIMEOUT = "timeout"  # a group's timeout, on the watermark or the batch time
RULE_NO_TIMEOUT = "no timeout"
RULE_TTL = "ttl"  # a transformWithState value's TTL
RULE_TIMER = "timer"  # a transformWithState key's earliest timer
RULE_NO_TTL_NO_TIMER = "no ttl and no timer"
RULE_JOIN_KEY = "join key"  # a join side's event time is a join key: key time <= watermark
RULE_JOIN_RANGE = "join range"  # the state value watermark of the join condition's range
RULE_JOIN_NO_WATERMARK = "join no watermark"  # the side's rows have no watermarked event time
RULE_JOIN_NO_TIME = "join no time"  # the key's buffered rows hold no event time
RULES = (
    RULE_WATERMARK,
    RULE_NO_WATERMARK,
    RULE_NO_EVENT_TIME,
    RULE_NO_WATERMARK_YET,
    RULE_TIMEOUT,
    RULE_NO_TIMEOUT,
    RULE_TTL,
    RULE_TIMER,
    RULE_NO_TTL_NO_TIMER,
    RULE_JOIN_KEY,
    RULE_JOIN_RANGE,
    RULE_JOIN_NO_WATERMARK,
    RULE_JOIN_NO_TIME,
)
# events and rules are kept per key as their place in EVENTS and RULES: one byte, not a Python string
_CODES = {"event": {e: i for i, e in enumerate(EVENTS)}, "rule": {r: i for i, r in enumerate(RULES)}}

# the clocks a query's verdicts are taken against
WATERMARK_CLOCK, BATCH_TIME_CLOCK = "watermark", "batch time"
EVENT_TIME_TIMERS = "event time"  # transformWithState timers on the watermark (else the batch time)


@dataclass(frozen=True)
class Clocks:
    """Where the query's clocks stand: at the latest retained batch, from the offset log."""

    watermark_ms: int  # the latest batch's watermark (0: none yet)
    batch_time_ms: int  # the latest batch's processing time
    ever_watermark: bool  # a retained batch has a watermark
    watermark_moved_batch_id: int | None = None  # the batch in which the watermark last moved

    @classmethod
    def of(cls, entries: dict[int, Any]) -> Clocks:
        """The clocks of the offset log's entries of the retained batches (``OffsetEntry`` by batch)."""
        batches = sorted(entries)
        if not batches:
            return cls(0, 0, False)
        moved = None
        for prev, batch in itertools.pairwise(batches):
            if entries[batch].watermark_ms != entries[prev].watermark_ms:
                moved = batch
        last = entries[batches[-1]]
        return cls(last.watermark_ms, last.timestamp_ms, any(e.watermark_ms > 0 for e in entries.values()), moved)


def _ints(column: pa.ChunkedArray | pa.Array | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, valid) of an integer or time column as int64 numpy arrays (none: every value null)."""
    if column is None or pa.types.is_null(column.type):
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    values = column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return values, valid


def _value_field(table: pa.Table, name: str) -> pa.ChunkedArray | None:
    """A field of the ``value`` struct, when the store's value has one."""
    if "value" not in table.column_names:
        return None
    typ = table.schema.field("value").type
    if not pa.types.is_struct(typ) or name not in [f.name for f in typ]:
        return None
    return pc.struct_field(table.column("value"), name)


def _ceil_ms(micros: np.ndarray) -> np.ndarray:
    return -((-micros) // 1000)


def _rows_per_key(table: pa.Table, operator_name: str | None) -> np.ndarray | None:
    """Each row's key number when a key has several rows (a join side's buffered rows, a list's elements,
    a map's entries), in order of first appearance; None when each row is a key of its own."""
    several = operator_name == operators.JOIN or {"list_element", "user_map_key"} & set(table.column_names)
    if not several or "key" not in table.column_names:
        return None
    return group_ids(table.column("key").combine_chunks())


@dataclass(frozen=True)
class KeyVerdicts:
    """The verdict of each key of a store, from :func:`key_verdicts`: arrays of one value per key."""

    row: np.ndarray  # the row of the input table that stands for the key (its last)
    event_code: np.ndarray  # int8: the event's place in EVENTS
    rule_code: np.ndarray  # int8: the place in RULES of the rule that decided it
    when_ms: np.ndarray  # int64: the watermark or the batch time at which it happens (valid where has_when)
    has_when: np.ndarray  # bool
    on_watermark: np.ndarray  # bool: when_ms is a watermark (else a batch time)
    overdue: np.ndarray  # bool: the time has come and the key is still in state
    due_ms: np.ndarray  # int64: the timeout, timer, TTL expiry or event time behind it (valid where has_due)
    has_due: np.ndarray  # bool
    rows: np.ndarray  # int64: a join key's buffered rows holding an event time
    first_row_ms: np.ndarray  # int64: a join key's first buffered row's time to go (no range, inclusive)
    time_kind: str | None = None  # the watermark rule's time (WINDOW_END, EVENT_TIME, ...) and its column
    time_column: str | None = None
    join_column: str | None = None  # a join side's watermarked event-time column

    def __len__(self) -> int:
        return len(self.row)

    @property
    def event(self) -> np.ndarray:
        """Each key's event, one of EVENTS (an object array of str)."""
        return np.asarray(EVENTS, dtype=object)[self.event_code]

    @property
    def rule(self) -> np.ndarray:
        """Each key's rule, one of RULES (an object array of str)."""
        return np.asarray(RULES, dtype=object)[self.rule_code]

    @property
    def events(self) -> pa.Array:
        """Each key's event as Arrow strings."""
        return pa.array(np.asarray(EVENTS), pa.string()).take(pa.array(self.event_code))

    @property
    def when_watermark_ms(self) -> pa.Array:
        return pa.array(self.when_ms, pa.int64(), mask=~(self.has_when & self.on_watermark))

    @property
    def when_time_ms(self) -> pa.Array:
        return pa.array(self.when_ms, pa.int64(), mask=~(self.has_when & ~self.on_watermark))


def key_verdicts(
    table: pa.Table,
    *,
    operator_name: str | None,
    key_schema: Any,
    clocks: Clocks,
    join_row_schema: Any = None,
    timers_ms: pa.Array | None = None,
    timer_clock: str | None = None,
) -> KeyVerdicts:
    """The verdict of every key of ``table`` (a store's rows as read: ``key`` and ``value``, or a list's
    elements, a map's entries, a join side's buffered rows), by the rules of the operator that keeps it.

    ``key_schema``: the store's key schema (its watermarked event-time column); ``join_row_schema``: a join
    side's row schema (its watermarked event-time column); ``timers_ms``: per row, the earliest
    transformWithState timer of its key (null: none), on ``timer_clock`` (:data:`EVENT_TIME_TIMERS`: the
    watermark, else the batch time). One key's verdict in ``why`` and every key's in ``verdicts`` both
    come from here.
    """
    n = table.num_rows
    keys = _rows_per_key(table, operator_name)
    if keys is None:
        row = np.arange(n, dtype=np.int64)
    else:
        row = np.full(int(keys.max()) + 1 if n else 0, -1, dtype=np.int64)
        np.maximum.at(row, keys, np.arange(n, dtype=np.int64))
    m = len(row)
    out: dict[str, Any] = {
        "event_code": np.full(m, _CODES["event"][NEVER], dtype=np.int8),
        "rule_code": np.full(m, _CODES["rule"][RULE_NO_WATERMARK], dtype=np.int8),
        "when_ms": np.zeros(m, dtype=np.int64),
        "has_when": np.zeros(m, dtype=bool),
        "on_watermark": np.ones(m, dtype=bool),
        "overdue": np.zeros(m, dtype=bool),
        "due_ms": np.zeros(m, dtype=np.int64),
        "has_due": np.zeros(m, dtype=bool),
        "rows": np.zeros(m, dtype=np.int64),
        "first_row_ms": np.zeros(m, dtype=np.int64),
    }
    extra: dict[str, Any] = {}
    if operators.is_transform_with_state(operator_name):
        chosen = table.take(row) if keys is not None else table
        timers = timers_ms.take(pa.array(row)) if keys is not None and timers_ms is not None else timers_ms
        _transform_with_state(chosen, timers, timer_clock, clocks, out)
    elif operator_name == operators.JOIN:
        extra["join_column"] = _join(table, keys, join_row_schema, clocks, out)
    else:
        chosen = table.take(row) if keys is not None else table
        timeout = _value_field(chosen, "timeoutTimestamp")
        if timeout is not None or operator_name in operators.FLAT_MAP_GROUPS_WITH_STATE:
            _timeout(timeout, m, clocks, out)
        else:
            extra.update(_watermark(chosen, key_schema, operator_name, clocks, out))
    return KeyVerdicts(row=row, **out, **extra)


def _set(out: dict[str, np.ndarray], where: np.ndarray, **values: Any) -> None:
    """Set ``values`` (scalars, or arrays as long as the keys) of the keys ``where`` says."""
    for name, value in values.items():
        if name in _CODES:
            name, value = f"{name}_code", _CODES[name][value]
        out[name][where] = value[where] if isinstance(value, np.ndarray) else value


def _due(
    out: dict[str, np.ndarray],
    where: np.ndarray,
    event: str,
    rule: str,
    due: np.ndarray,
    when: np.ndarray,
    on_watermark: np.ndarray | bool,
    clocks: Clocks,
) -> None:
    """Keys due when a clock (the watermark, or the batch time) reaches ``when``: overdue once it has."""
    on = np.broadcast_to(np.asarray(on_watermark, dtype=bool), where.shape)
    clock_now = np.where(on, clocks.watermark_ms, clocks.batch_time_ms)
    _set(
        out,
        where,
        event=event,
        rule=rule,
        due_ms=due,
        has_due=True,
        when_ms=when,
        has_when=True,
        on_watermark=on.copy(),
        overdue=clock_now >= when,
    )


def _watermark(
    table: pa.Table, key_schema: Any, operator_name: str | None, clocks: Clocks, out: dict[str, np.ndarray]
) -> dict[str, str | None]:
    """Windows, deduplication, sessions: gone once the watermark reaches the key's time."""
    n = table.num_rows
    found = eviction_times(key_schema, table, operator_name) if n else None
    micros, valid = _ints(None if found is None else found.micros, n)
    never = RULE_NO_EVENT_TIME if clocks.ever_watermark else RULE_NO_WATERMARK
    _set(out, ~valid, event=NEVER, rule=never)
    if found is None:
        return {}
    when = _ceil_ms(micros)
    if not clocks.ever_watermark:
        _set(out, valid, event=NEVER, rule=RULE_NO_WATERMARK_YET, due_ms=when, has_due=True)
    else:
        _due(out, valid, found.event, RULE_WATERMARK, when, when, True, clocks)
    return {"time_kind": found.kind, "time_column": found.column}


def _timeout(timeout: pa.ChunkedArray | None, n: int, clocks: Clocks, out: dict[str, np.ndarray]) -> None:
    """(flat)mapGroupsWithState, applyInPandasWithState: a timeout nearer the watermark than the batch time
    is taken for an event-time one (the kind is the query's, not the checkpoint's)."""
    stamp, valid = _ints(None if timeout is None else timeout.cast(pa.int64()), n)
    set_ = valid & (stamp >= 0)  # -1: no timeout set
    _set(out, ~set_, event=NEVER, rule=RULE_NO_TIMEOUT)
    event_time = (clocks.watermark_ms > 0) & (
        np.abs(stamp - clocks.watermark_ms) < np.abs(stamp - clocks.batch_time_ms)
    )
    _due(out, set_, FIRE, RULE_TIMEOUT, stamp, stamp + 1, event_time, clocks)  # timeout_fires_at


def _transform_with_state(
    table: pa.Table,
    timers_ms: pa.Array | None,
    timer_clock: str | None,
    clocks: Clocks,
    out: dict[str, np.ndarray],
) -> None:
    """A TTL first (unless a batch-time timer comes earlier), else the key's earliest timer, else never."""
    m = table.num_rows
    expiry, has_ttl = _ints(_value_field(table, "ttlExpirationMs"), m)
    timer, has_timer = _ints(timers_ms, m)
    on_watermark = timer_clock == EVENT_TIME_TIMERS
    ttl = has_ttl & (~has_timer | on_watermark | (expiry <= timer))  # due_at: the clock reaching it
    _set(out, ~(ttl | has_timer), event=NEVER, rule=RULE_NO_TTL_NO_TIMER)
    _due(out, ttl, EXPIRE, RULE_TTL, expiry, expiry, False, clocks)
    _due(out, has_timer & ~ttl, FIRE, RULE_TIMER, timer, timer, on_watermark, clocks)


def _join(
    table: pa.Table,
    keys: np.ndarray | None,
    row_schema: Any,
    clocks: Clocks,
    out: dict[str, np.ndarray],
) -> str | None:
    """A join key's buffered rows on one side: by the state key watermark when the event time (or a
    window) is a join key, else by the state value watermark (:func:`join_row_leaves_at`, for no range
    and an inclusive bound)."""
    n = table.num_rows
    m = len(out["event_code"])
    _set(out, np.ones(m, dtype=bool), event=NEVER, rule=RULE_JOIN_NO_WATERMARK)
    marked = [f.name for f in row_schema.fields if WATERMARK_METADATA in (f.metadata or {})] if row_schema else []
    value_type = table.schema.field("value").type if "value" in table.column_names else None
    names = [f.name for f in value_type] if value_type is not None and pa.types.is_struct(value_type) else []
    column = next((name for name in marked if name in names), None)
    if column is None or not n or keys is None:
        return column
    times = pc.struct_field(table.column("value"), column).combine_chunks()
    key = table.column("key").combine_chunks()
    keyed = np.zeros(m, dtype=bool)
    for f in key.type:
        held = pc.struct_field(key, f.name)
        if held.type != times.type:
            continue
        if not (pa.types.is_struct(held.type) or pa.types.is_timestamp(held.type)):
            continue
        same = group_ids(pa.concat_arrays([held, times]))
        differs = (same[:n] != same[n:]).astype(np.int64)
        every = (np.bincount(keys, weights=differs, minlength=m) == 0) & ~keyed  # every row of the key holds it
        if not every.any():
            continue
        at = _micros(pc.struct_field(held, "end")) if pa.types.is_struct(held.type) else _micros(held)
        micros = np.asarray(at.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        latest = np.full(m, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(latest, keys, micros)
        when = _ceil_ms(latest)
        _due(out, every, EVICT, RULE_JOIN_KEY, when, when, True, clocks)
        keyed |= every
    micros, valid = _ints(_micros(times), n)
    count = np.bincount(keys, weights=valid.astype(np.int64), minlength=m).astype(np.int64)
    high = np.full(m, np.iinfo(np.int64).min, dtype=np.int64)
    low = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
    np.maximum.at(high, keys[valid], micros[valid])
    np.minimum.at(low, keys[valid], micros[valid])
    ranged = ~keyed & (count > 0)
    _set(out, ~keyed & (count == 0), event=NEVER, rule=RULE_JOIN_NO_TIME)
    last = _ceil_ms(np.where(ranged, high, 0)) + 1  # join_row_leaves_at, no range and an inclusive bound
    _set(out, ranged, event=EVICT, rule=RULE_JOIN_RANGE, when_ms=last, has_when=True, on_watermark=True)
    _set(out, ranged, due_ms=_ceil_ms(np.where(ranged, high, 0)), has_due=True, overdue=False, rows=count)
    _set(out, ranged, first_row_ms=_ceil_ms(np.where(ranged, low, 0)) + 1)
    return column
