"""The names of a checkpoint's stores (a join's four, a side's two) and of the fields Spark adds to
their rows: plain names, importable without the file access the rest of the model brings."""

from __future__ import annotations

DEFAULT_STORE = "default"
JOIN_STORES = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")
# join state format 4: column families of the default store, keys carry the event time
JOIN_V4_STORES = ("left-keyWithTsToValues", "left-tsWithKey", "right-keyWithTsToValues", "right-tsWithKey")
JOIN_SIDES = ("left", "right")
# the last field of a join row as stored from state format 2 on: whether the row has found a match
MATCHED_FIELD = "matched"
# join state format 4: the last field of a side's keys, the row's event time (µs), as the schema files name it
EVENT_TIME_FIELD = "__event_time"
# the metadata Spark puts on an event-time column (a key's or a join row's) in the schema files
WATERMARK_METADATA = "spark.watermarkDelayMs"


def join_side_stores(side: str, v4: bool = False) -> tuple[str, str]:
    """The two stores of one side of a join: its counts and its rows (``keyToNumValues``,
    ``keyWithIndexToValue``), or in state format 4 its rows and their event-time index."""
    first, second = (s for s in (JOIN_V4_STORES if v4 else JOIN_STORES) if s.startswith(side + "-"))
    return first, second
