"""Sizes in bytes as every front shows them."""

from __future__ import annotations

from state_reader.units import byte_unit, human_bytes


def test_human_bytes():
    assert human_bytes(None) == "-"
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(5 * 1024**3) == "5.0 GiB"
    assert human_bytes(3 * 1024**4) == "3.0 TiB"  # the notebook showed "3072.0 GiB"
    assert human_bytes(5 * 1024**5) == "5120.0 TiB"


def test_byte_unit_is_the_unit_human_bytes_picks():
    for n in (0, 1000, 1024, 3 << 20, 7 << 30, 9 << 40):
        unit, scale = byte_unit(n)
        assert human_bytes(n).endswith(unit) and (unit == "B" or 1 <= n / scale < 1024)
