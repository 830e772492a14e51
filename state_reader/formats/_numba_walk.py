"""The record walk of :mod:`state_reader.formats.kernels`, compiled by numba (imported only when wanted).

Same contract as ``kernels._walk_exact``: writes the start of each record to
``out`` and returns (records, status, byte position, length); the status codes
are those of :mod:`state_reader.formats.kernels`.
"""

from __future__ import annotations

import numba
import numpy as np

# Indexes are cast to unsigned before use: a signed index makes numba check it for
# wrap-around (negative indexing) byte by byte, which keeps LLVM from merging the byte
# loads of a word into one load (the key hash ran 5x slower that way).


@numba.njit(cache=True, nogil=True)
def _be32(buf: np.ndarray, at: int) -> int:  # pragma: no cover - compiled
    u = np.uint64(at)
    return np.int32((np.uint32(buf[u]) << np.uint32(24)) | (np.uint32(buf[u + np.uint64(1)]) << np.uint32(16))
                    | (np.uint32(buf[u + np.uint64(2)]) << np.uint32(8)) | np.uint32(buf[u + np.uint64(3)]))


@numba.njit(cache=True, nogil=True)
def _le64(buf: np.ndarray, u: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    return (np.uint64(buf[u]) | (np.uint64(buf[u + np.uint64(1)]) << np.uint64(8))
            | (np.uint64(buf[u + np.uint64(2)]) << np.uint64(16)) | (np.uint64(buf[u + np.uint64(3)]) << np.uint64(24))
            | (np.uint64(buf[u + np.uint64(4)]) << np.uint64(32)) | (np.uint64(buf[u + np.uint64(5)]) << np.uint64(40))
            | (np.uint64(buf[u + np.uint64(6)]) << np.uint64(48)) | (np.uint64(buf[u + np.uint64(7)]) << np.uint64(56)))


@numba.njit(cache=True, nogil=True)
def walk(buf: np.ndarray, start: int, end: int, allow_removes: bool, value_skip: int,
         out: np.ndarray) -> tuple[int, int, int, int]:  # pragma: no cover - compiled
    pos = start
    n = 0
    while True:
        if pos + 4 > end:
            return n, 1, pos, 0
        k = _be32(buf, pos)
        if k == -1:
            pos += 4
            break
        if k < 0:
            return n, 2, pos, k
        if pos + 8 + k > end:
            return n, 3, pos + 4, k
        at = pos + 4 + k
        v = _be32(buf, at)
        if v == -1:
            if not allow_removes:
                return n, 4, at, 0
            out[n] = pos
            n += 1
            pos = at + 4
            continue
        if v < 0:
            return n, 5, at, v
        if at + 4 + v > end or v < value_skip:
            return n, 6, at + 4, v
        out[n] = pos
        n += 1
        pos = at + 4 + v
    if pos != end:
        return n, 7, pos, 0
    return n, 0, pos, 0


@numba.njit(cache=True, nogil=True)
def _hash(buf: np.ndarray, start: int, length: int) -> np.uint64:  # pragma: no cover - compiled
    h = np.uint64(length) * np.uint64(0x9E3779B97F4A7C15)
    at = np.uint64(start)
    end = np.uint64(start + length)
    while at + np.uint64(8) <= end:
        h = (h ^ _le64(buf, at)) * np.uint64(0xC2B2AE3D27D4EB4F)
        h ^= h >> np.uint64(29)
        at += np.uint64(8)
    if at < end:
        word = np.uint64(0)
        shift = np.uint64(0)
        while at < end:
            word |= np.uint64(buf[at]) << shift
            shift += np.uint64(8)
            at += np.uint64(1)
        h = (h ^ word) * np.uint64(0xC2B2AE3D27D4EB4F)
        h ^= h >> np.uint64(29)
    return h


@numba.njit(cache=True, nogil=True)
def _same(buf: np.ndarray, a: int, b: int, length: int) -> bool:  # pragma: no cover - compiled
    """Whether ``buf[a:a+length]`` and ``buf[b:b+length]`` hold the same bytes (a word at a time)."""
    ua, ub, n = np.uint64(a), np.uint64(b), np.uint64(length)
    at = np.uint64(0)
    while at + np.uint64(8) <= n:
        if _le64(buf, ua + at) != _le64(buf, ub + at):
            return False
        at += np.uint64(8)
    while at < n:
        if buf[ua + at] != buf[ub + at]:
            return False
        at += np.uint64(1)
    return True


@numba.njit(cache=True, nogil=True)
def last_writes(buf: np.ndarray, key_start: np.ndarray, key_len: np.ndarray,
                keep: np.ndarray) -> None:  # pragma: no cover - compiled
    """Set ``keep[i]`` where no later record has the same key bytes (open addressing, exact compare)."""
    n = len(key_start)
    cap = 16
    while 2 * cap < 3 * n:  # load factor at most 2/3
        cap *= 2
    mask = np.uint64(cap - 1)
    # one 8-byte slot: the hash's high 32 bits and the record index + 1, so a probe
    # touches one cache line and the table stays small enough for the caches
    table = np.zeros(cap, dtype=np.uint64)
    low = np.uint64(0xFFFFFFFF)
    for i in range(n - 1, -1, -1):
        start = key_start[i]
        length = key_len[i]
        h = _hash(buf, start, length)
        tag = h >> np.uint64(32)
        s = h & mask
        while True:
            entry = table[s]
            if entry == 0:
                table[s] = (tag << np.uint64(32)) | np.uint64(i + 1)
                keep[i] = True
                break
            if entry >> np.uint64(32) == tag:
                other_i = np.int64(entry & low) - 1
                if key_len[other_i] == length and _same(buf, start, key_start[other_i], length):
                    keep[i] = False
                    break
            s = (s + np.uint64(1)) & mask
