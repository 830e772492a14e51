"""Multi values: the lists of a RocksDB store (transformWithState list variables, join state
format 4's rows of a key and event time), one value holding every element.

Each element is its encoded row (the state encoding's version byte, then the UnsafeRow) after
its int32 little-endian length; with row checksums, the element's CRC-32C and the length of
what it frames (that length and the row) come first. Elements are joined by the merge
operator's delimiter (``MERGE_DELIMITERS``: ',' in version 1, nothing in version 2); RocksDB
puts a ',' between operands it combines at read time whatever the version.
"""

from __future__ import annotations

import numpy as np

from state_reader.errors import CorruptFileError
from state_reader.formats.rocksdb_encode import with_row_checksums
from state_reader.formats.rocksdb_encoding import CHECKSUM_BYTES, LENGTH_BYTES, MERGE_DELIMITERS, STATE_ENCODING_VERSION
from state_reader.formats.unsaferow import PAD, RowBuffer
from state_reader.formats.unsaferow_encode import copy_spans, pack_rows

_COMMA = 0x2C


def multi_value_header(row_checksum: bool) -> int:
    """The bytes before each element's encoded row in a multi value: its length, and with row
    checksums the checksum and the length of what it frames (that length and the row) before it."""
    return (CHECKSUM_BYTES + LENGTH_BYTES if row_checksum else 0) + LENGTH_BYTES


def split_multi_value(
    value: bytes, merge_operator_version: int, row_checksum: bool, source: str
) -> list[tuple[int, int]]:
    """(start, length) of each encoded element (version byte + UnsafeRow) of a multi value.

    Elements are found by their lengths; a ',' between two elements is skipped when
    the merge operator puts one there (version 1) or when reading past it gives a
    plausible element, since RocksDB adds ',' when it combines operands at read time.
    """
    header = multi_value_header(row_checksum)
    n = len(value)

    def element_at(pos: int) -> int | None:
        """Length of a plausible element at ``pos``, else None."""
        if pos + header > n:
            return None
        size = int.from_bytes(value[pos + header - LENGTH_BYTES : pos + header], "little", signed=True)
        if size < 1 or pos + header + size > n or value[pos + header] != STATE_ENCODING_VERSION:
            return None
        if row_checksum:  # the checksum frames the element's own length and row
            framed = int.from_bytes(value[pos + CHECKSUM_BYTES : pos + 2 * LENGTH_BYTES], "little", signed=True)
            if framed != size + LENGTH_BYTES:
                return None
        return size

    out: list[tuple[int, int]] = []
    pos = 0
    while pos < n:
        size = element_at(pos)
        if size is None:
            raise CorruptFileError(f"{source}: no valid list element at byte {pos} of a {n}-byte value", path=source)
        out.append((pos + header, size))
        pos += header + size
        if pos < n and value[pos] == _COMMA and (merge_operator_version == 1 or element_at(pos + 1) is not None):
            pos += 1
    return out


def encode_multi_values(
    elements: RowBuffer,
    groups: np.ndarray,
    delimiter: bytes,
    keys: RowBuffer | None = None,
    version_byte: bool = False,
) -> RowBuffer:
    """Multi values as Spark writes them: one per group (``groups``: each element's group, 0..n-1),
    its encoded elements (version byte first) in the order given, each after its int32 length and
    joined by the merge operator's ``delimiter``. With ``keys`` (one per group, as stored) each
    element is framed with its row checksum over its group's key. ``version_byte``: ``elements`` are
    the rows without it, each written after a zero byte."""
    head = 1 if version_byte else 0
    if keys is not None:
        if version_byte:
            elements = pack_rows([(1, elements)], elements.source)
        framed = pack_rows([(LENGTH_BYTES, elements)], elements.source)
        _put_int32(framed, 0, elements.lengths)
        body, lead = with_row_checksums(keys.take(groups), framed, with_length=True), 0
    else:
        # the length (and the version byte) written in place, before each element's bytes: no framed copy
        body, lead = elements, LENGTH_BYTES + head
    order = np.argsort(groups, kind="stable")
    owner = np.asarray(groups, dtype=np.int64)[order]
    lengths = body.lengths[order] + lead
    n = int(owner[-1]) + 1 if len(owner) else 0
    counts = np.bincount(owner, minlength=n)
    width = len(delimiter)
    out_lengths = np.bincount(owner, weights=lengths, minlength=n).astype(np.int64) + width * (counts - 1)
    out_starts = np.cumsum(out_lengths) - out_lengths
    first = np.cumsum(counts) - counts  # each group's first element, in sorted order
    before = np.cumsum(lengths) - lengths
    rank = np.arange(len(owner)) - first[owner]
    at = out_starts[owner] + before - before[first[owner]] + width * rank
    size = int(out_lengths.sum())
    buf = np.zeros(size + PAD, dtype=np.uint8)
    if lead:
        head_at = at[:, None] + np.arange(LENGTH_BYTES, dtype=np.int64)
        buf[head_at] = (lengths - LENGTH_BYTES).astype("<i4").view(np.uint8).reshape(-1, LENGTH_BYTES)
    copy_spans(buf, at + lead, body.buf, body.starts[order], lengths - lead)
    if width:
        gaps = at[rank > 0] - width
        buf[gaps[:, None] + np.arange(width, dtype=np.int64)] = np.frombuffer(delimiter, dtype=np.uint8)
    return RowBuffer.wrap(buf, size, out_starts, out_lengths, elements.source)


def _put_int32(rows: RowBuffer, offset: int, numbers: np.ndarray) -> None:
    """Row i's bytes ``offset..offset+4`` set to ``numbers[i]``, int32 little-endian."""
    at = rows.starts[:, None] + offset + np.arange(LENGTH_BYTES, dtype=np.int64)
    rows.buf[at] = np.asarray(numbers).astype("<i4").view(np.uint8).reshape(-1, LENGTH_BYTES)


def rejoin_multi_value(value: bytes, merge_operator_version: int, row_checksum: bool, source: str) -> bytes:
    """A multi value with its elements joined by the delimiter of ``merge_operator_version``:
    values RocksDB combined at read time have ',' between elements, which version 2 does not write."""
    header = multi_value_header(row_checksum)
    delimiter = MERGE_DELIMITERS[merge_operator_version]
    return delimiter.join(
        value[start - header : start + size]
        for start, size in split_multi_value(value, merge_operator_version, row_checksum, source)
    )
