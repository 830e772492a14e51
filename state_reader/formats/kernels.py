"""The one sequential step of reading HDFS state files, and the other steps of a read that
numba compiles when it is there.

A decompressed ``.delta``/``.snapshot`` stream is a chain of records whose
lengths say where the next one starts (see :mod:`state_reader.providers.hdfs`),
so finding the records cannot be vectorised. Everything after that is
columnar numpy/Arrow work. This module walks the chain and returns the start
of every record:

* with numba (in the base install; it can be missing on a platform without
  its wheels) a compiled loop, a few nanoseconds per record, that releases the
  GIL; a compiled hash table then keeps the last write of each key and drops
  removals in one pass (:func:`live_records_numba`); and once numba is loaded,
  the row decoder gathers row words and string spans through :func:`row_words`
  and :func:`gather_spans`, lz4 blocks are checksummed by :func:`xxh32_spans`, and
  the row writers copy spans and splice fields of rows into new rows through
  :func:`copy_spans` and :func:`splice_rows`;
* without it, a Python loop that checks runs of equally long records in bulk
  with numpy (fixed-width keys and values make long runs), about 0.3 µs per
  record otherwise, and hands anything irregular to a byte-exact loop that also
  produces the errors.

Both return the same positions and the same status for every input. numba is
imported lazily and only for reads big enough to repay its start-up (about
0.2 s for the import and the cached machine code), or when it is already
loaded; ``STATE_READER_NUMBA=0`` / ``1`` turns it off / on regardless.

The compiled code is loaded here alone: the walks above from :mod:`state_reader.formats._numba_walk`,
and the SST reader's kernels (:mod:`state_reader.formats.sst`) from
:mod:`state_reader.formats._numba_sst` (:func:`sst_kernels`).
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

# Status codes of a walk; hdfs_provider turns them into exceptions.
OK = 0
NO_END_MARKER = 1  # the stream ends before the -1 marker
NEGATIVE_KEY = 2  # key length < -1
KEY_PAST_END = 3  # key (or the value length after it) runs past the end
REMOVE_IN_SNAPSHOT = 4  # a removal where removals are not allowed
NEGATIVE_VALUE = 5  # value length < -1
VALUE_PAST_END = 6  # value runs past the end, or is shorter than its checksum
TRAILING_BYTES = 7  # bytes after the end marker

# Records walked by one read below which a process that has not loaded numba yet
# stays with the Python path: importing numba and loading its cached code (~0.2 s)
# costs about what the compiled walk, merge and word gathers save on a read of
# about 1.5M records (a fresh process's first read of 1M keys in 64 partitions
# takes as long either way; every later read in the process is then ~1.7x faster).
NUMBA_MIN_RECORDS = 1_000_000
# a copy this large (a partition of a large store) loads the compiled kernels (~0.2 s): later copies repay it
NUMBA_MIN_COPY_BYTES = 4 << 20
_ENV = "STATE_READER_NUMBA"

WalkResult = tuple[np.ndarray, int, int, int]

_INT = struct.Struct(">i")
# Python walk: records walked one by one between bulk checks, the most records one
# bulk check covers, and the most blocks skipped between bulk checks that failed.
_BLOCK = 32
_MAX_JUMP = 1 << 16
_MAX_BACKOFF = 64
_numba_walk: Callable[..., Any] | None = None
_numba_live_records: Callable[..., Any] | None = None
_numba_row_words: Callable[..., Any] | None = None
_numba_xxh32_spans: Callable[..., Any] | None = None
_numba_crc32c_pairs: Callable[..., Any] | None = None
_numba_copy_spans: Callable[..., Any] | None = None
_numba_gather_spans: Callable[..., Any] | None = None
_numba_splice: tuple[Callable[..., Any], Callable[..., Any]] | None = None
_numba_failed = False


def _compile() -> Callable[..., Any] | None:
    """The numba walk, compiled (or loaded from numba's cache) on first use; None without numba."""
    global _numba_walk, _numba_live_records, _numba_row_words, _numba_xxh32_spans, _numba_gather_spans
    global _numba_crc32c_pairs, _numba_copy_spans, _numba_splice
    global _numba_failed
    if _numba_walk is not None or _numba_failed:
        return _numba_walk
    try:
        from state_reader.formats._numba_walk import (
            copy_spans,
            crc32c_pairs,
            gather_spans,
            live_records,
            row_words,
            splice_part,
            splice_sizes,
            walk,
            xxh32_spans,
        )
    except ImportError:
        _numba_failed = True
        return None
    _numba_live_records = live_records
    _numba_row_words = row_words
    _numba_xxh32_spans = xxh32_spans
    _numba_crc32c_pairs = crc32c_pairs
    _numba_copy_spans = copy_spans
    _numba_gather_spans = gather_spans
    _numba_splice = (splice_sizes, splice_part)
    _numba_walk = walk
    return walk


def sst_kernels() -> ModuleType:
    """The SST reader's kernels (:mod:`state_reader.formats._numba_sst`), loaded with the others on
    first use; ImportError without numba. Whether a read takes them is :func:`numba_wanted`'s to say."""
    if _compile() is None:
        raise ImportError("numba is not available")
    from state_reader.formats import _numba_sst

    return _numba_sst


def _setting() -> str | None:
    """``STATE_READER_NUMBA`` read as "off", "on" or None (the automatic choice)."""
    value = os.environ.get(_ENV, "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return "off"
    if value in ("1", "true", "yes", "on"):
        return "on"
    return None


def numba_wanted(records_hint: int) -> bool:
    """Whether a read that walks about ``records_hint`` records should use numba."""
    setting = _setting()
    if setting == "on":
        return _compile() is not None
    if setting == "off":
        return False
    return compiled_loaded() or (records_hint >= NUMBA_MIN_RECORDS and _compile() is not None)


def numba_available() -> bool:
    """Whether numba can be imported (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("numba") is not None


def describe() -> str:
    """Which walker this process uses for large reads, for benchmark reports."""
    setting = _setting()
    if setting == "off":
        return "record walk: Python loop (numba off by STATE_READER_NUMBA=0)"
    if not numba_available():
        return "record walk: Python loop (numba not installed)"
    from importlib.metadata import version

    if setting == "on":
        return f"record walk: numba {version('numba')} (forced on)"
    return (
        f"record walk: numba {version('numba')} for reads of about {NUMBA_MIN_RECORDS:,} records "
        "or more, or once loaded; Python loop otherwise"
    )


def walk_records(
    buf: np.ndarray, start: int, end: int, allow_removes: bool, value_skip: int, use_numba: bool = False
) -> WalkResult:
    """Start of every record in ``buf[start:end]``, then (status, byte position, length) of the walk.

    Positions are absolute in ``buf``; on an error they cover the records before it.
    """
    kernel = _compile() if use_numba else None
    if kernel is not None:
        # room for the most records the bytes can hold; only the pages written become resident
        out = np.empty(max((end - start) // 8, 1), dtype=np.int64)
        n, status, at, value = kernel(buf, start, end, allow_removes, value_skip, out)
        return out[:n], int(status), int(at), int(value)
    return _walk_python(buf, start, end, allow_removes, value_skip)


def _walk_python(buf: np.ndarray, start: int, end: int, allow_removes: bool, value_skip: int) -> WalkResult:
    # Fast part: plainly well-formed records one at a time, in blocks; after a
    # block of equally long records, the records that follow are checked in
    # bulk with numpy and stepped over while they repeat both lengths (fixed-width
    # keys and values make long runs). The first thing that does not fit (the end
    # marker, a negative length, anything past the end) hands over to the exact
    # loop, which also produces the status.
    unpack = _INT.unpack_from
    data = buf.data  # struct unpacks from a memoryview of the array a little faster than from the array
    be32 = _view_be32(buf)
    chunks: list[np.ndarray] = []
    found: list[int] = []
    append = found.append
    pos = start
    skip = 0  # blocks to walk before the next bulk check
    backoff = 1
    jump = 4 * _BLOCK
    walking = True
    while walking:
        for _ in range(_BLOCK):
            if pos + 4 > end:
                walking = False
                break
            (k,) = unpack(data, pos)
            at = pos + 4 + k
            if k < 0 or at + 4 > end:
                walking = False
                break
            (v,) = unpack(data, at)
            if v < value_skip:
                if v != -1 or not allow_removes:
                    walking = False
                    break
                nxt = at + 4
            else:
                nxt = at + 4 + v
                if nxt > end:
                    walking = False
                    break
            append(pos)
            pos = nxt
        else:
            if skip:
                skip -= 1
                continue
            step = pos - found[-1]
            if len(found) < _BLOCK or pos - found[-_BLOCK] != _BLOCK * step:
                continue
            # the block's records were (very likely) all this long: check the next ones at once
            count = min(jump, (end - pos) // step)
            if count <= 0:
                continue
            (k,) = unpack(data, found[-1])
            (v,) = unpack(data, found[-1] + 4 + k)
            if 8 + k + max(v, 0) != step:
                continue
            cand = pos + step * np.arange(count, dtype=np.int64)
            same = (be32[cand] == k) & (be32[cand + 4 + k] == v)
            run = count if bool(same.all()) else int(np.argmin(same))
            if run:
                chunks.append(np.array(found, dtype=np.int64))
                found.clear()
                chunks.append(cand[:run])
                pos += step * run
            if run == count:
                jump = min(2 * jump, _MAX_JUMP)
                backoff = 1
            else:
                jump = 4 * _BLOCK
                if run < 2 * _BLOCK:
                    # a bulk check costs about as much as walking a few dozen
                    # records: where runs stay short, check less and less often
                    skip = backoff
                    backoff = min(2 * backoff, _MAX_BACKOFF)
    chunks.append(np.array(found, dtype=np.int64))
    fast = np.concatenate(chunks)
    rest, status, at, value = _walk_exact(buf, pos, end, allow_removes, value_skip)
    return (np.concatenate([fast, rest]) if len(rest) else fast), status, at, value


def _view_be32(buf: np.ndarray) -> np.ndarray:
    """``buf`` as overlapping big-endian int32s: element i is the one whose bytes start at i."""
    return np.ndarray(shape=(max(len(buf) - 3, 0),), dtype=">i4", buffer=buf, strides=(1,))


def _walk_exact(buf: Any, pos: int, end: int, allow_removes: bool, value_skip: int) -> WalkResult:
    """Byte-exact walk with every check, in stream order (the reference for the kernel)."""
    unpack = _INT.unpack_from
    found: list[int] = []
    while True:
        if pos + 4 > end:
            return np.array(found, dtype=np.int64), NO_END_MARKER, pos, 0
        (k,) = unpack(buf, pos)
        if k == -1:
            pos += 4
            break
        if k < 0:
            return np.array(found, dtype=np.int64), NEGATIVE_KEY, pos, k
        if pos + 8 + k > end:
            return np.array(found, dtype=np.int64), KEY_PAST_END, pos + 4, k
        at = pos + 4 + k
        (v,) = unpack(buf, at)
        if v == -1:
            if not allow_removes:
                return np.array(found, dtype=np.int64), REMOVE_IN_SNAPSHOT, at, 0
            found.append(pos)
            pos = at + 4
            continue
        if v < 0:
            return np.array(found, dtype=np.int64), NEGATIVE_VALUE, at, v
        if at + 4 + v > end or v < value_skip:
            return np.array(found, dtype=np.int64), VALUE_PAST_END, at + 4, v
        found.append(pos)
        pos = at + 4 + v
    status = OK if pos == end else TRAILING_BYTES
    return np.array(found, dtype=np.int64), status, pos, 0


def live_records_numba(
    buf: np.ndarray, positions: np.ndarray, value_skip: int, row_checksum: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(key start, key length, value start, value length) of the records walked at ``positions``
    that are the last write of their key (exact byte comparison) and not a removal, in file
    order; numba only."""
    if _compile() is None or _numba_live_records is None:
        raise RuntimeError("numba is not available")
    return _numba_live_records(buf, np.ascontiguousarray(positions, dtype=np.int64), value_skip, row_checksum)


def compiled_loaded() -> bool:
    """Whether this process has loaded the compiled kernels and they are not turned off
    (what uses them only when they are already there asks this, so it never pays for
    loading numba itself)."""
    if _setting() == "off" or _numba_failed:
        return False
    if _numba_walk is None and "numba" in sys.modules:  # numba's import is paid: our cached code is cheap
        _compile()
    return _numba_walk is not None


def xxh32_spans(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: int) -> np.ndarray:
    """XXH32 (with ``seed``) of each span ``buf[starts[i]:starts[i]+lengths[i]]``, in one
    compiled call; only once :func:`compiled_loaded`."""
    if _numba_xxh32_spans is None:
        raise RuntimeError("the compiled kernels are not loaded")
    out = np.empty(len(starts), dtype=np.uint32)
    _numba_xxh32_spans(
        buf, np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(lengths, dtype=np.int64), seed, out
    )
    return out


def crc32c_pairs(
    kbuf: np.ndarray,
    kstarts: np.ndarray,
    klengths: np.ndarray,
    vbuf: np.ndarray,
    vstarts: np.ndarray,
    vlengths: np.ndarray,
) -> np.ndarray:
    """CRC-32C of each key span's bytes followed by its value span's (a row checksum), in one compiled
    call; only once :func:`compiled_loaded`."""
    if _numba_crc32c_pairs is None:
        raise RuntimeError("the compiled kernels are not loaded")
    from state_reader.formats._numba_walk import CRC32C_TABLE

    out = np.empty(len(kstarts), dtype=np.uint64)
    as64 = [np.ascontiguousarray(a, dtype=np.int64) for a in (kstarts, klengths, vstarts, vlengths)]
    _numba_crc32c_pairs(kbuf, as64[0], as64[1], vbuf, as64[2], as64[3], CRC32C_TABLE, out)
    return out.astype(np.uint32)


def gather_spans(
    buf: np.ndarray, start: np.ndarray, size: np.ndarray, valid: np.ndarray
) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """(offsets as int64, n + 1; bytes; whether every byte is ASCII) of the valid spans
    ``buf[start:start+size]`` one after another (an invalid span is empty), compiled; None
    unless :func:`compiled_loaded`."""
    if not compiled_loaded() or _numba_gather_spans is None:
        return None
    offsets = np.empty(len(start) + 1, dtype=np.int64)
    data, ascii_only = _numba_gather_spans(
        buf,
        np.ascontiguousarray(start, dtype=np.int64),
        np.ascontiguousarray(size, dtype=np.int64),
        np.ascontiguousarray(valid),
        offsets,
    )
    return offsets, data, bool(ascii_only)


def _copy_wanted(size: int) -> bool:
    """Whether a copy of ``size`` bytes takes the compiled kernels: once loaded, or when it is large enough to
    repay loading them."""
    return numba_wanted(NUMBA_MIN_RECORDS if size >= NUMBA_MIN_COPY_BYTES else 0)


def copy_spans(
    dst: np.ndarray, dst_starts: np.ndarray, src: np.ndarray, src_starts: np.ndarray, lengths: np.ndarray
) -> bool:
    """``dst[dst_starts[i]:+lengths[i]] = src[src_starts[i]:+lengths[i]]`` for every i, compiled; False (nothing
    copied) unless numba is loaded already or the copy is large enough to repay loading it."""
    if not _copy_wanted(int(np.sum(lengths))) or _numba_copy_spans is None:
        return False
    as64 = [np.ascontiguousarray(a, dtype=np.int64) for a in (dst_starts, src_starts, lengths)]
    _numba_copy_spans(dst, as64[0], src, as64[1], as64[2])
    return True


# one part of a splice: its rows (buffer, starts, lengths), the bitset words of their schema, the first field
# taken, and which fields from it on are variable-length
SplicePart = tuple[np.ndarray, np.ndarray, np.ndarray, int, int, np.ndarray]


def splice_rows(parts: list[SplicePart], width: int, pad: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(buffer, ``pad`` zero bytes after the rows; starts; lengths) of new UnsafeRows of ``width`` fields, each
    the fields of every part's row in turn, as ``unsaferow_encode.splice_rows`` writes them, in two compiled
    passes over the rows; None (nothing done) where :func:`copy_spans` would not be compiled either."""
    if not _copy_wanted(sum(int(np.sum(p[2])) for p in parts)) or _numba_splice is None:
        return None
    sizes, put = _numba_splice
    n = len(parts[0][1])
    out_bits = (width + 63) // 64
    head = 8 * (out_bits + width)
    lengths = np.full(n, head, dtype=np.int64)
    typed = [
        (buf, np.ascontiguousarray(starts, dtype=np.int64), bits, lo, np.asarray(variable, dtype=np.bool_))
        for buf, starts, _, bits, lo, variable in parts
    ]
    for part in typed:
        if part[4].any():
            sizes(*part, lengths)
    starts_out = np.cumsum(lengths) - lengths
    total = int(lengths.sum())
    out = np.zeros(total + pad, dtype=np.uint8)
    words = out[: (total + pad) // 8 * 8].view(np.uint64)
    cursor = np.full(n, head, dtype=np.int64)
    first = 0
    for buf, starts, bits, lo, variable in typed:
        put(buf, starts, bits, lo, variable, words, starts_out, out_bits, first, cursor)
        first += len(variable)
    return out, starts_out, lengths


def row_words(buf: np.ndarray, base: np.ndarray, n_words: int) -> np.ndarray | None:
    """(len(base), n_words) little-endian words at each of ``base`` (a base past the last
    full row reads the last ones), compiled; None unless this process has loaded numba
    already (decoding alone never pays for loading it)."""
    if not compiled_loaded() or _numba_row_words is None:
        return None
    out = np.empty((len(base), n_words), dtype=np.uint64)
    _numba_row_words(buf, np.ascontiguousarray(base, dtype=np.int64), n_words, out)
    return out
