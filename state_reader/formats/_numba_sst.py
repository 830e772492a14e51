"""The SST reader's kernels (:mod:`state_reader.formats.sst`), compiled by numba; imported only
when wanted, through :func:`state_reader.formats.kernels.sst_kernels`.

The index and data blocks are walked here, with every read bounds-checked, and the files'
entries merged by key. Each kernel returns a status (:data:`OK`, :data:`CORRUPT`,
:data:`UNSUPPORTED`, :data:`FULL`) that the reader turns into its errors. Each is plain Python
too (``.py_func``), which gives what the compiled code gives.
"""

from __future__ import annotations

import numba
import numpy as np

# status codes of the kernels
OK, CORRUPT, UNSUPPORTED, FULL = range(4)
# entry types (the low byte of an internal key's trailer); _SHADOWED marks an older entry of a key in the same file
_TYPE_DELETION, _TYPE_VALUE, _TYPE_SINGLE_DELETION, _SHADOWED = 0, 1, 7, 255
_VARINT32, _VARINT64 = 28, 56  # the largest shift of a varint32 / varint64


@numba.njit(cache=True, nogil=True)
def _read_varint(buf: np.ndarray, pos: int, limit: int, max_shift: int) -> tuple[int, int]:  # pragma: no cover
    """(value, next position) of a varint in ``buf[pos:limit]``; value -1 when it is not one.

    ``max_shift`` 28 reads a varint32, 56 a varint64 below 2**63.
    """
    value = 0
    shift = 0
    while pos < limit and shift <= max_shift:
        byte = np.int64(buf[pos])
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return -1, pos


@numba.njit(cache=True, nogil=True)
def _le32(buf: np.ndarray, at: int) -> int:  # pragma: no cover - compiled
    return (
        np.int64(buf[at]) | (np.int64(buf[at + 1]) << 8) | (np.int64(buf[at + 2]) << 16) | (np.int64(buf[at + 3]) << 24)
    )


@numba.njit(cache=True, nogil=True)
def index_handles(
    block: np.ndarray, delta: bool, offsets: np.ndarray, sizes: np.ndarray
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Data block handles of an index block (keys skipped) into ``offsets``/``sizes`` (compiled).

    ``delta``: values are delta-encoded (format version 4 and later: no value length,
    a full handle at restarts, else the size change, zigzag-coded, the block right
    after the previous one). Returns (handles, status).
    """
    end = len(block)
    if end < 4:
        return 0, CORRUPT
    restarts = _le32(block, end - 4)
    limit = end - 4 * (restarts + 1)
    if restarts == 0 or limit < 0:
        return 0, CORRUPT
    pos = 0
    r = 0
    n = 0
    key_len = 0
    offset = 0
    size = 0
    while pos < limit:
        at_restart = r < restarts and pos == _le32(block, limit + 4 * r)
        if at_restart:
            r += 1
        shared, pos = _read_varint(block, pos, limit, _VARINT32)
        unshared, pos = _read_varint(block, pos, limit, _VARINT32)
        value_end = limit
        if not delta:
            value_len, pos = _read_varint(block, pos, limit, _VARINT32)
            value_end = pos + unshared + value_len
            if value_len < 0:
                return n, CORRUPT
        if shared < 0 or unshared < 0 or shared > key_len or pos + unshared > limit or value_end > limit:
            return n, CORRUPT
        key_len = shared + unshared
        pos += unshared
        if not delta or at_restart:
            offset, pos = _read_varint(block, pos, value_end, _VARINT64)
            size, pos = _read_varint(block, pos, value_end, _VARINT64)
        else:
            change, pos = _read_varint(block, pos, value_end, _VARINT64)
            offset += size + 5
            size += (change >> 1) ^ -(change & 1)
        if offset < 0 or size < 0 or n >= len(offsets):
            return n + 1, CORRUPT
        if not delta:
            pos = value_end
        offsets[n] = offset
        sizes[n] = size
        n += 1
    return n, OK if pos == limit else CORRUPT


@numba.njit(cache=True, nogil=True)
def block_sizes(
    data: np.ndarray, kinds: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray
) -> int:  # pragma: no cover - compiled
    """Each compressed block's decompressed size (a varint32 first) to ``out``.

    lz4 and zstd blocks start after it (RocksDB's prefix), snappy blocks at it (the
    stream's own header). Returns the first block whose size is unreadable, or -1.
    """
    for b in range(len(kinds)):
        if kinds[b] == 0:
            continue
        size, pos = _read_varint(data, starts[b], starts[b] + lengths[b], _VARINT32)
        if size < 0:
            return b
        out[b] = size
        if kinds[b] != 1:
            lengths[b] -= pos - starts[b]
            starts[b] = pos
    return -1


@numba.njit(cache=True, nogil=True)
def walk(
    buf: np.ndarray,
    block_start: np.ndarray,
    block_end: np.ndarray,
    block_file: np.ndarray,
    key_out: np.ndarray,
    key_limit: int,
    rec_key: np.ndarray,
    rec_len: np.ndarray,
    rec_value: np.ndarray,
    rec_value_len: np.ndarray,
    rec_seq: np.ndarray,
    rec_type: np.ndarray,
    block_count: np.ndarray,
) -> tuple[int, int, int, int]:  # pragma: no cover - compiled
    """Walk the entries of the data blocks ``buf[block_start[b]:block_end[b]]`` (compiled by numba).

    Rebuilds each internal key into ``key_out[:key_limit]`` (``rec_key``/``rec_len``:
    its user key), and records where its value lies in ``buf``, its sequence number
    and type, and how many entries each block has. Checks that each file's user keys
    ascend; an older entry of the user key before it gets type ``_SHADOWED``. Every
    read is bounds-checked. Returns (entries, key bytes used, status, block at fault).
    """
    n = 0
    kpos = 0
    last = -1  # previous entry of the same file
    for b in range(len(block_start)):
        start = block_start[b]
        end = block_end[b]
        if b > 0 and block_file[b] != block_file[b - 1]:
            last = -1
        if end - start < 4:
            return n, kpos, CORRUPT, b
        restarts = _le32(buf, end - 4)
        if restarts >> 31:
            return n, kpos, UNSUPPORTED, b  # a data block hash index
        limit = end - 4 * (restarts + 1)
        if restarts == 0 or limit < start:
            return n, kpos, CORRUPT, b
        pos = start
        prev = kpos
        prev_len = 0
        first = n
        while pos < limit:
            shared, pos = _read_varint(buf, pos, limit, _VARINT32)
            unshared, pos = _read_varint(buf, pos, limit, _VARINT32)
            value_len, pos = _read_varint(buf, pos, limit, _VARINT32)
            if shared < 0 or unshared < 0 or value_len < 0:
                return n, kpos, CORRUPT, b
            length = shared + unshared
            if shared > prev_len or length < 8 or pos + unshared + value_len > limit:
                return n, kpos, CORRUPT, b
            if kpos + length > key_limit or n >= len(rec_key):
                return n, kpos, FULL, b
            # slices rather than byte loops: numba checks a signed index for wrap-around at
            # every byte, a slice's bounds once
            key_out[kpos : kpos + shared] = key_out[prev : prev + shared]
            key_out[kpos + shared : kpos + length] = buf[pos : pos + unshared]
            pos += unshared
            at = np.uint64(kpos + length - 8)
            trailer = np.int64(0)
            for i in range(8):
                trailer |= np.int64(key_out[at + np.uint64(i)]) << (8 * i)
            rec_key[n] = kpos
            rec_len[n] = length - 8
            rec_value[n] = pos
            rec_value_len[n] = value_len
            rec_seq[n] = (trailer >> 8) & 0xFFFFFFFFFFFFFF
            rec_type[n] = trailer & 0xFF
            if last >= 0:
                # the first `shared` bytes equal the previous entry's (within a block), so start there
                same = min(shared, rec_len[last], length - 8) if n > first else 0
                c = _compare(key_out, rec_key[last], rec_len[last], kpos, length - 8, same)
                if c > 0 or (c == 0 and rec_seq[n] >= rec_seq[last]):
                    return n, kpos, CORRUPT, b  # out of order
                if c == 0:
                    rec_type[n] = _SHADOWED  # an older version of the same key
            last = n
            n += 1
            prev = kpos
            prev_len = length
            kpos += length
            pos += value_len
        block_count[b] = n - first
    return n, kpos, OK, -1


@numba.njit(cache=True, nogil=True)
def _compare(key_out: np.ndarray, a: int, a_len: int, b: int, b_len: int, skip: int) -> int:  # pragma: no cover
    """memcmp-style order of two user keys in ``key_out`` whose first ``skip`` bytes are equal (compiled)."""
    ua, ub = np.uint64(a), np.uint64(b)
    for i in range(skip, min(a_len, b_len)):
        x = key_out[ua + np.uint64(i)]
        y = key_out[ub + np.uint64(i)]
        if x != y:
            return -1 if x < y else 1
    return -1 if a_len < b_len else (1 if a_len > b_len else 0)


@numba.njit(cache=True, nogil=True)
def _emit(rec_type: np.ndarray, lo: int, hi: int, keep: np.ndarray, m: int) -> tuple[int, int]:  # pragma: no cover
    """Keep the values among entries lo..hi-1 of one file; (kept so far, entry of an unknown type or -1)."""
    for i in range(lo, hi):
        kind = rec_type[i]
        if kind == _TYPE_VALUE:
            keep[m] = i
            m += 1
        elif kind != _TYPE_DELETION and kind != _TYPE_SINGLE_DELETION and kind != _SHADOWED:
            return m, i  # merge operands and other entry types: rocksdict
    return m, -1


@numba.njit(cache=True, nogil=True)
def merge(
    key_out: np.ndarray,
    rec_key: np.ndarray,
    rec_len: np.ndarray,
    rec_seq: np.ndarray,
    rec_type: np.ndarray,
    file_lo: np.ndarray,
    file_hi: np.ndarray,
    keep: np.ndarray,
) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """Merge the files' entries (each file's user keys ascending) into the live keys, in key order (compiled).

    Of all entries of one user key the one with the highest sequence number
    counts; it is kept (its index written to ``keep``) when it is a value and
    dropped when it is a deletion. Runs of one file that come before every other
    file's next key are found by galloping, so a large file merged with small
    ones costs few comparisons. Returns (kept, status, entry at fault).
    """
    files = len(file_lo)
    cur = file_lo.copy()
    m = 0
    while True:
        best = -1
        owner = -1
        for f in range(files):
            i = cur[f]
            if i >= file_hi[f]:
                continue
            if best >= 0:
                c = _compare(key_out, rec_key[i], rec_len[i], rec_key[best], rec_len[best], 0)
                if c > 0 or (c == 0 and rec_seq[i] < rec_seq[best]):
                    continue
            best = i
            owner = f
        if best < 0:
            return m, OK, -1
        # the smallest next key of the other files bounds the run taken from the owner's
        bound = -1
        for f in range(files):
            i = cur[f]
            if f == owner or i >= file_hi[f]:
                continue
            if bound < 0 or _compare(key_out, rec_key[i], rec_len[i], rec_key[bound], rec_len[bound], 0) < 0:
                bound = i
        hi = file_hi[owner]
        if bound >= 0 and _compare(key_out, rec_key[bound], rec_len[bound], rec_key[best], rec_len[best], 0) == 0:
            # the same key in several files: the newest counts, every file moves past it
            m, bad = _emit(rec_type, best, best + 1, keep, m)
            if bad >= 0:
                return m, UNSUPPORTED, bad
            for f in range(files):
                i = cur[f]
                if i < file_hi[f] and _compare(key_out, rec_key[i], rec_len[i], rec_key[best], rec_len[best], 0) == 0:
                    i += 1
                    while i < file_hi[f] and rec_type[i] == _SHADOWED:
                        i += 1
                    cur[f] = i
            continue
        end = hi
        if bound >= 0:
            # gallop: the owner's entries before the bound are best..end-1
            lo = best
            step = 1
            while (
                lo + step < hi
                and _compare(key_out, rec_key[lo + step], rec_len[lo + step], rec_key[bound], rec_len[bound], 0) < 0
            ):
                lo += step
                step *= 2
            end = min(lo + step, hi)
            while lo + 1 < end:
                mid = (lo + end) // 2
                if _compare(key_out, rec_key[mid], rec_len[mid], rec_key[bound], rec_len[bound], 0) < 0:
                    lo = mid
                else:
                    end = mid
        m, bad = _emit(rec_type, best, end, keep, m)
        if bad >= 0:
            return m, UNSUPPORTED, bad
        cur[owner] = end


@numba.njit(cache=True, nogil=True)
def changed_entries(
    key_out: np.ndarray,
    rec_key: np.ndarray,
    rec_len: np.ndarray,
    buf: np.ndarray,
    rec_value: np.ndarray,
    rec_value_len: np.ndarray,
    old_live: np.ndarray,
    new_live: np.ndarray,
    updated: np.ndarray,
    deleted: np.ndarray,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Two versions' live entries of one walk of their files, each in key order, side by side: the new
    entries whose key is new or holds other value bytes go to ``updated``, the old entries whose key is
    gone to ``deleted``. An entry live in both is the same row of both: nothing to compare. Returns
    (updated, deleted)."""
    n, m = len(new_live), len(old_live)
    i = j = n_updated = n_deleted = 0
    while i < n or j < m:
        a = new_live[i] if i < n else -1
        b = old_live[j] if j < m else -1
        if a >= 0 and a == b:
            i += 1
            j += 1
            continue
        if b < 0:
            c = -1
        elif a < 0:
            c = 1
        else:
            c = _compare(key_out, rec_key[a], rec_len[a], rec_key[b], rec_len[b], 0)
        if c < 0:
            updated[n_updated] = a
            n_updated += 1
            i += 1
        elif c > 0:
            deleted[n_deleted] = b
            n_deleted += 1
            j += 1
        else:
            if _compare(buf, rec_value[a], rec_value_len[a], rec_value[b], rec_value_len[b], 0):
                updated[n_updated] = a
                n_updated += 1
            i += 1
            j += 1
    return n_updated, n_deleted
