"""Sizes in bytes as people read them (``1536`` -> ``1.5 KiB``): one way for every front."""

from __future__ import annotations

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
