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

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
