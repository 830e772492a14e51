"""The record walk of :mod:`state_reader.formats.kernels`, compiled by numba (imported only when wanted).

Same contract as ``kernels._walk_exact``: writes the start of each record to
``out`` and returns (records, status, byte position, length); the status codes
are those of :mod:`state_reader.formats.kernels`.
"""

from __future__ import annotations

import numba
import numpy as np

from state_reader.io.integrity import CRC32C_TABLE as _CRC32C_BYTES

# Indexes are cast to unsigned before use: a signed index makes numba check it for
# wrap-around (negative indexing) byte by byte, which keeps LLVM from merging the byte
# loads of a word into one load (the key hash ran 5x slower that way).


@numba.njit(cache=True, nogil=True)
def _be32(buf: np.ndarray, at: int) -> int:  # pragma: no cover - compiled
    u = np.uint64(at)
    return np.int32(
        (np.uint32(buf[u]) << np.uint32(24))
        | (np.uint32(buf[u + np.uint64(1)]) << np.uint32(16))
        | (np.uint32(buf[u + np.uint64(2)]) << np.uint32(8))
        | np.uint32(buf[u + np.uint64(3)])
    )


@numba.njit(cache=True, nogil=True)
def _le64(buf: np.ndarray, u: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    return (
        np.uint64(buf[u])
        | (np.uint64(buf[u + np.uint64(1)]) << np.uint64(8))
        | (np.uint64(buf[u + np.uint64(2)]) << np.uint64(16))
        | (np.uint64(buf[u + np.uint64(3)]) << np.uint64(24))
        | (np.uint64(buf[u + np.uint64(4)]) << np.uint64(32))
        | (np.uint64(buf[u + np.uint64(5)]) << np.uint64(40))
        | (np.uint64(buf[u + np.uint64(6)]) << np.uint64(48))
        | (np.uint64(buf[u + np.uint64(7)]) << np.uint64(56))
    )


@numba.njit(cache=True, nogil=True)
def walk(
    buf: np.ndarray, start: int, end: int, allow_removes: bool, value_skip: int, out: np.ndarray
) -> tuple[int, int, int, int]:  # pragma: no cover - compiled
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
def _identity(buf: np.ndarray, pos: int, row_checksum: bool) -> tuple[int, int]:  # pragma: no cover - compiled
    """(start, length) of the key bytes that identify the record at ``pos``: a removal's
    key carries a 4-byte row checksum in front when row checksums are on."""
    length = _be32(buf, pos)
    start = pos + 4
    if row_checksum and _be32(buf, start + length) == -1:
        cut = min(length, 4)
        return start + cut, length - cut
    return start, length


@numba.njit(cache=True, nogil=True)
def live_records(
    buf: np.ndarray, positions: np.ndarray, value_skip: int, row_checksum: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """Spans (key start, key length, value start, value length) of the records at ``positions``
    (walked, so in bounds, in file order) that are the last write of their key and not a removal.

    One pass from the end through an open-addressing hash table of the keys'
    bytes (exact compare on a hash match), then the survivors' spans in file
    order; value lengths are cut to whole words after ``value_skip`` bytes, as
    ``hdfs._Records.at`` does.
    """
    n = len(positions)
    keep = np.zeros(n, dtype=np.bool_)
    cap = 16
    while 2 * cap < 3 * n:  # load factor at most 2/3
        cap *= 2
    mask = np.uint64(cap - 1)
    # one 8-byte slot: the hash's high 32 bits and the record index + 1, so a probe
    # touches one cache line and the table stays small enough for the caches
    table = np.zeros(cap, dtype=np.uint64)
    low = np.uint64(0xFFFFFFFF)
    live = 0
    for i in range(n - 1, -1, -1):
        start, length = _identity(buf, positions[i], row_checksum)
        h = _hash(buf, start, length)
        tag = h >> np.uint64(32)
        s = h & mask
        while True:
            entry = table[s]
            if entry == 0:
                table[s] = (tag << np.uint64(32)) | np.uint64(i + 1)
                pos = positions[i]
                if _be32(buf, pos + 4 + _be32(buf, pos)) != -1:
                    keep[i] = True
                    live += 1
                break
            if entry >> np.uint64(32) == tag:
                other_start, other_length = _identity(buf, positions[np.int64(entry & low) - 1], row_checksum)
                if other_length == length and _same(buf, start, other_start, length):
                    break
            s = (s + np.uint64(1)) & mask
    key_start = np.empty(live, dtype=np.int64)
    key_len = np.empty(live, dtype=np.int64)
    value_start = np.empty(live, dtype=np.int64)
    value_len = np.empty(live, dtype=np.int64)
    j = 0
    for i in range(n):
        if keep[i]:
            pos = positions[i]
            k = _be32(buf, pos)
            key_start[j] = pos + 4
            key_len[j] = k
            value_start[j] = pos + 8 + k + value_skip
            value_len[j] = (_be32(buf, pos + 4 + k) - value_skip) // 8 * 8
            j += 1
    return key_start, key_len, value_start, value_len


@numba.njit(cache=True, nogil=True)
def row_words(buf: np.ndarray, base: np.ndarray, n_words: int, out: np.ndarray) -> None:  # pragma: no cover
    """``out[i, w]`` = the little-endian word at ``base[i] + 8 w``; a base past the last full
    row (a null row's 0 never is) reads the last ``n_words`` words of ``buf``."""
    last = np.uint64(len(buf) - 8 * n_words)
    for i in range(len(base)):
        b = min(np.uint64(base[i]), last)
        for w in range(n_words):
            out[i, w] = _le64(buf, b + np.uint64(8 * w))


_MASK32 = np.uint64(0xFFFFFFFF)
_P1, _P2, _P3 = np.uint64(2654435761), np.uint64(2246822519), np.uint64(3266489917)
_P4, _P5 = np.uint64(668265263), np.uint64(374761393)


@numba.njit(cache=True, nogil=True)
def _rotl32(x: np.uint64, r: int) -> np.uint64:  # pragma: no cover - compiled
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & _MASK32


@numba.njit(cache=True, nogil=True)
def _le32(buf: np.ndarray, u: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    return (
        np.uint64(buf[u])
        | (np.uint64(buf[u + np.uint64(1)]) << np.uint64(8))
        | (np.uint64(buf[u + np.uint64(2)]) << np.uint64(16))
        | (np.uint64(buf[u + np.uint64(3)]) << np.uint64(24))
    )


@numba.njit(cache=True, nogil=True)
def _xxh32(buf: np.ndarray, start: int, length: int, seed: int) -> np.uint64:  # pragma: no cover - compiled
    """XXH32 of ``buf[start:start+length]`` (32-bit arithmetic carried in 64-bit words, masked)."""
    at = np.uint64(start)
    end = np.uint64(start + length)
    s = np.uint64(seed) & _MASK32
    if length >= 16:
        v1 = (s + _P1 + _P2) & _MASK32
        v2 = (s + _P2) & _MASK32
        v3 = s
        v4 = (s - _P1) & _MASK32
        limit = end - np.uint64(16)
        while at <= limit:
            v1 = (_rotl32((v1 + _le32(buf, at) * _P2) & _MASK32, 13) * _P1) & _MASK32
            v2 = (_rotl32((v2 + _le32(buf, at + np.uint64(4)) * _P2) & _MASK32, 13) * _P1) & _MASK32
            v3 = (_rotl32((v3 + _le32(buf, at + np.uint64(8)) * _P2) & _MASK32, 13) * _P1) & _MASK32
            v4 = (_rotl32((v4 + _le32(buf, at + np.uint64(12)) * _P2) & _MASK32, 13) * _P1) & _MASK32
            at += np.uint64(16)
        h = (_rotl32(v1, 1) + _rotl32(v2, 7) + _rotl32(v3, 12) + _rotl32(v4, 18)) & _MASK32
    else:
        h = (s + _P5) & _MASK32
    h = (h + np.uint64(length)) & _MASK32
    while at + np.uint64(4) <= end:
        h = (_rotl32((h + _le32(buf, at) * _P3) & _MASK32, 17) * _P4) & _MASK32
        at += np.uint64(4)
    while at < end:
        h = (_rotl32((h + np.uint64(buf[at]) * _P5) & _MASK32, 11) * _P1) & _MASK32
        at += np.uint64(1)
    h ^= h >> np.uint64(15)
    h = (h * _P2) & _MASK32
    h ^= h >> np.uint64(13)
    h = (h * _P3) & _MASK32
    h ^= h >> np.uint64(16)
    return h


@numba.njit(cache=True, nogil=True)
def xxh32_spans(
    buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: int, out: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``out[i]`` = XXH32 of ``buf[starts[i]:starts[i]+lengths[i]]`` with ``seed``."""
    for i in range(len(starts)):
        out[i] = _xxh32(buf, starts[i], lengths[i], seed)


@numba.njit(cache=True, nogil=True)
def copy_spans(
    dst: np.ndarray, dst_starts: np.ndarray, src: np.ndarray, src_starts: np.ndarray, lengths: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``dst[dst_starts[i]:+lengths[i]] = src[src_starts[i]:+lengths[i]]`` for every i (spans that do not
    overlap)."""
    for i in range(len(lengths)):
        # unsigned, as above: signed byte indexes made spans of 16 to 40 bytes ~10x slower. LLVM vectorises
        # the byte loop: it beats copying through two array views (slices) at every length, by ~6x at 64 bytes
        at, frm, n = np.uint64(dst_starts[i]), np.uint64(src_starts[i]), np.uint64(lengths[i])
        j = np.uint64(0)
        while j < n:
            dst[at + j] = src[frm + j]
            j += np.uint64(1)


CRC32C_TABLE = np.array(_CRC32C_BYTES, dtype=np.uint64)  # io/integrity's table, as numba reads it


@numba.njit(cache=True, nogil=True)
def _crc32c_update(
    crc: np.uint64, buf: np.ndarray, start: int, length: int, table: np.ndarray
) -> np.uint64:  # pragma: no cover - compiled
    for j in range(start, start + length):
        crc = table[(crc ^ np.uint64(buf[j])) & np.uint64(0xFF)] ^ (crc >> np.uint64(8))
    return crc


@numba.njit(cache=True, nogil=True)
def crc32c_pairs(
    kbuf: np.ndarray,
    kstarts: np.ndarray,
    klengths: np.ndarray,
    vbuf: np.ndarray,
    vstarts: np.ndarray,
    vlengths: np.ndarray,
    table: np.ndarray,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """``out[i]`` = CRC-32C of the key span i's bytes followed by the value span i's."""
    for i in range(len(kstarts)):
        crc = _crc32c_update(_MASK32, kbuf, kstarts[i], klengths[i], table)
        crc = _crc32c_update(crc, vbuf, vstarts[i], vlengths[i], table)
        out[i] = crc ^ _MASK32


@numba.njit(cache=True, nogil=True)
def gather_spans(
    buf: np.ndarray, start: np.ndarray, size: np.ndarray, valid: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, bool]:  # pragma: no cover - compiled
    """The bytes of each valid span ``buf[start[i]:start[i]+size[i]]`` one after another, with
    their ``offsets`` (n + 1, filled here); an invalid span is empty. Also whether every byte
    is ASCII (then the bytes are valid UTF-8 as they are)."""
    n = len(start)
    total = 0
    offsets[0] = 0
    for i in range(n):
        if valid[i]:
            total += size[i]
        offsets[i + 1] = total
    data = np.empty(total, dtype=np.uint8)
    for i in range(n):
        # byte by byte (vectorised by LLVM): slicing makes two array views per span, which costs more at
        # every length, as in copy_spans
        at = np.uint64(offsets[i])
        end = np.uint64(offsets[i + 1])
        src = np.uint64(start[i])
        while at < end:
            data[at] = buf[src]
            at += np.uint64(1)
            src += np.uint64(1)
    high = np.uint8(0)
    for i in range(total):
        high |= data[i]
    return data, high < 0x80


@numba.njit(cache=True, nogil=True)
def splice_sizes(
    buf: np.ndarray, starts: np.ndarray, in_bits: int, lo: int, variable: np.ndarray, lengths: np.ndarray
) -> None:  # pragma: no cover - compiled
    """Add to ``lengths[r]`` the bytes (padded to words) that the set variable-length fields ``lo + j``
    (where ``variable[j]``) of the UnsafeRow at ``starts[r]`` take in a new row's variable region."""
    for r in range(len(starts)):
        base = np.uint64(starts[r])
        for j in range(len(variable)):
            if not variable[j]:
                continue
            i = lo + j
            bits = _le64(buf, base + np.uint64(8 * (i // 64)))
            if (bits >> np.uint64(i % 64)) & np.uint64(1):
                continue
            size = _le64(buf, base + np.uint64(8 * (in_bits + i))) & _MASK32
            lengths[r] += np.int64((size + np.uint64(7)) // np.uint64(8) * np.uint64(8))


@numba.njit(cache=True, nogil=True)
def splice_part(
    buf: np.ndarray,
    starts: np.ndarray,
    in_bits: int,
    lo: int,
    variable: np.ndarray,
    out: np.ndarray,
    out_starts: np.ndarray,
    out_bits: int,
    first: int,
    cursor: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Fields ``lo + j`` of each UnsafeRow at ``starts[r]`` written as fields ``first + j`` of the new row at
    ``out_starts[r]`` (zeroed, ``out_bits`` bitset words): null bits and fixed-width slots copied, each set
    variable-length value moved to ``cursor[r]`` (from the new row's start; advanced by its padded size) with
    its slot ``offset << 32 | size``; a null one keeps a zero slot. ``out`` is ``uint64`` words and every
    new row starts on one."""
    for r in range(len(starts)):
        base = np.uint64(starts[r])
        row = np.uint64(out_starts[r]) // np.uint64(8)
        for j in range(len(variable)):
            i = lo + j
            k = first + j
            null = (_le64(buf, base + np.uint64(8 * (i // 64))) >> np.uint64(i % 64)) & np.uint64(1)
            out[row + np.uint64(k // 64)] |= null << np.uint64(k % 64)
            word = _le64(buf, base + np.uint64(8 * (in_bits + i)))
            slot = row + np.uint64(out_bits + k)
            if not variable[j]:
                out[slot] = word
                continue
            if null:
                continue
            size = word & _MASK32
            at = np.uint64(cursor[r])
            out[slot] = (at << np.uint64(32)) | size
            src = base + (word >> np.uint64(32))
            dst = row + at // np.uint64(8)
            # whole words, then the last few bytes into a zeroed word: the padding stays zero
            full = size // np.uint64(8)
            for w in range(full):
                out[dst + np.uint64(w)] = _le64(buf, src + np.uint64(8 * w))
            rest = size - full * np.uint64(8)
            if rest:
                tail = np.uint64(0)
                at_tail = src + full * np.uint64(8)
                for b in range(rest):
                    tail |= np.uint64(buf[at_tail + np.uint64(b)]) << np.uint64(8 * b)
                out[dst + full] = tail
            cursor[r] += np.int64((size + np.uint64(7)) // np.uint64(8) * np.uint64(8))
