"""Sizes in bytes and times as people read them (``1536`` -> ``1.5 KiB``; a time in ms as UTC ISO 8601):
one way for every front and every analysis."""

from __future__ import annotations

import datetime as dt

BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def byte_unit(largest: float) -> tuple[str, float]:
    """The unit to show ``largest`` bytes in, and its size in bytes: the largest unit it fills one of."""
    unit, scale = BYTE_UNITS[0], 1.0
    for name in BYTE_UNITS[1:]:
        if abs(largest) < scale * 1024:
            break
        unit, scale = name, scale * 1024
    return unit, scale


def human_bytes(n: float | None) -> str:
    """``1536`` -> ``1.5 KiB``, ``100`` -> ``100 B``; ``-`` for no size."""
    if n is None:
        return "-"
    unit, scale = byte_unit(n)
    return f"{int(n)} B" if unit == "B" else f"{n / scale:.1f} {unit}"


def iso_time(ms: int | None) -> str:
    """A time in ms since the epoch as UTC ISO 8601, its milliseconds shown only when there are some
    (``2024-05-01T22:13:23+00:00``, ``2024-05-01T22:13:23.250+00:00``); ``-`` for no time."""
    if ms is None:
        return "-"
    stamp = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    return stamp.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")
