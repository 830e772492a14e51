"""Encoded rows as Python values, for comparing bytes in tests."""

from __future__ import annotations

from state_reader.formats.unsaferow import RowBuffer


def row_bytes(rows: RowBuffer) -> list[bytes]:
    """The bytes of each row of ``rows``, in order."""
    return [bytes(rows.buf[s : s + n]) for s, n in zip(rows.starts.tolist(), rows.lengths.tolist(), strict=True)]
