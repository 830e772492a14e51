"""Reading RocksDB block-based SST files directly (numba kernels).

rocksdict hands out one Python ``bytes`` object per key and per value (about
0.5 µs an entry, holding the GIL). When numba is there, the snapshot's
block-based SST files are read here instead: their blocks are checked
(checksums, as RocksDB does by default) and decompressed with Python and
cramjam, the entries walked by a compiled loop (prefix-compressed keys
rebuilt into one buffer, values left where they lie), and the files merged by
key, newest sequence number first, dropping deletions, as a RocksDB iterator
over the whole DB would. The files are those the zip's metadata lists: Spark
lists the files of a RocksDB checkpoint, which are the DB's live files, so the
MANIFEST has nothing to add. Anything this reader does not handle (other table
formats, compression types or checksum types, merge operands, range
deletions, a non-empty WAL, another comparator) goes to rocksdict instead.

Block-based table layout (format versions 2 to 5): data blocks, meta blocks,
the metaindex block, the index block, then a 53-byte footer: checksum type,
metaindex and index block handles (varint64 offset and size), padding,
format version (fixed32) and magic (fixed64). Each block is followed by a
5-byte trailer: compression type and a fixed32 checksum. A block holds entries
(varint32 shared key bytes, varint32 non-shared key bytes, varint32 value
length — not in delta-encoded index blocks —, key suffix, value), then the
restart offsets (fixed32 each) and their count (fixed32). Data block keys are
internal keys: the user key and a fixed64 of sequence number << 8 | type.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from state_reader.errors import CorruptFileError
from state_reader.formats.unsaferow import PAD as _ROW_PAD
from state_reader.formats.unsaferow import RowBuffer, byte_view
from state_reader.io.integrity import crc32c

SST_MAGIC = 0x88E241B785F4CFF7
_FOOTER_SIZE = 53
_TRAILER_SIZE = 5
_SST_FORMAT_VERSIONS = range(2, 6)
_NO_COMPRESSION, _SNAPPY, _LZ4, _LZ4HC, _ZSTD = 0, 1, 4, 5, 7
_COMPRESSIONS = (_NO_COMPRESSION, _SNAPPY, _LZ4, _LZ4HC, _ZSTD)
_CHECKSUM_NONE, _CHECKSUM_CRC32C, _CHECKSUM_XXHASH, _CHECKSUM_XXHASH64, _CHECKSUM_XXH3 = range(5)
# entry types (the low byte of an internal key's trailer); _SHADOWED marks an older entry of a key in the same file
_TYPE_DELETION, _TYPE_VALUE, _TYPE_SINGLE_DELETION, _SHADOWED = 0, 1, 7, 255
_MASK32 = 0xFFFFFFFF
# status codes of the compiled kernels
_SST_OK, _SST_CORRUPT, _SST_UNSUPPORTED, _SST_FULL = range(4)


class SstNotSupportedError(Exception):
    """An SST feature this reader leaves to rocksdict."""


def _varint(data: bytes | memoryview, pos: int, limit: int) -> tuple[int, int]:
    """(value, next position) of a varint64 at ``pos``; ValueError when it runs past ``limit``."""
    result = shift = 0
    while pos < limit and shift <= 63:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    raise ValueError(f"bad varint before byte {limit}")


def _block_entries(block: bytes) -> list[tuple[bytes, bytes]]:
    """(key, value) of every entry of a small block (metaindex, properties), in Python."""
    if len(block) < 4:
        raise ValueError("block shorter than its restart count")
    restarts = int.from_bytes(block[-4:], "little")
    limit = len(block) - 4 * (restarts + 1)
    if restarts == 0 or limit < 0:
        raise ValueError(f"bad restart count {restarts}")
    out: list[tuple[bytes, bytes]] = []
    key = b""
    pos = 0
    while pos < limit:
        shared, pos = _varint(block, pos, limit)
        unshared, pos = _varint(block, pos, limit)
        length, pos = _varint(block, pos, limit)
        if shared > len(key) or pos + unshared + length > limit:
            raise ValueError(f"entry at byte {pos} runs past its block")
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        out.append((key, block[pos : pos + length]))
        pos += length
    if pos != limit:
        raise ValueError("entries overrun the restart offsets")
    return out


def _handle(raw: bytes) -> tuple[int, int]:
    offset, pos = _varint(raw, 0, len(raw))
    return offset, _varint(raw, pos, len(raw))[0]


def _xxh3_block_checksum(contents_hash: Any, type_byte: Any) -> Any:
    """A block's XXH3 checksum as RocksDB stores it: the low 32 bits of XXH3-64 of the block's
    contents with its compression-type byte mixed in (scalars or numpy arrays alike)."""
    mask = np.uint64(_MASK32)
    return (np.asarray(contents_hash, dtype=np.uint64) & mask) ^ (
        (np.asarray(type_byte, dtype=np.uint64) * np.uint64(0x6B9083D9)) & mask
    )


class _SstFile:
    """One block-based SST file: its footer, properties and data block handles, checked."""

    def __init__(self, data: bytes, shown: str) -> None:
        self.data = data
        self.view = memoryview(data)
        self.shown = shown
        if len(data) < _FOOTER_SIZE:
            raise self.corrupt(f"{len(data)} bytes, shorter than an SST footer")
        footer = data[-_FOOTER_SIZE:]
        magic = int.from_bytes(footer[-8:], "little")
        if magic != SST_MAGIC:
            raise SstNotSupportedError(f"magic {magic:#x}")  # another table format, or damage: RocksDB decides
        self.format_version = int.from_bytes(footer[-12:-8], "little")
        if self.format_version not in _SST_FORMAT_VERSIONS:
            raise SstNotSupportedError(f"format version {self.format_version}")
        self.checksum_type = footer[0]
        if self.checksum_type > _CHECKSUM_XXH3:
            raise SstNotSupportedError(f"checksum type {self.checksum_type}")
        try:
            offset, pos = _varint(footer, 1, 41)
            size, pos = _varint(footer, pos, 41)
            self.metaindex = (offset, size)
            offset, pos = _varint(footer, pos, 41)
            self.index = (offset, _varint(footer, pos, 41)[0])
        except ValueError as exc:
            raise self.corrupt(f"unreadable footer: {exc}") from None
        try:
            meta = dict(_block_entries(self.block(*self.metaindex, "metaindex")))
        except ValueError as exc:
            raise self.corrupt(f"unreadable metaindex block: {exc}") from None
        if b"rocksdb.properties" not in meta:
            raise self.corrupt("no properties block")
        if b"rocksdb.range_del" in meta:
            raise SstNotSupportedError("range deletions")
        try:
            props = dict(_block_entries(self.block(*_handle(meta[b"rocksdb.properties"]), "properties")))
        except ValueError as exc:
            raise self.corrupt(f"unreadable properties block: {exc}") from None
        self.props = props
        self._check_properties()
        index = np.frombuffer(self.block(*self.index, "index"), dtype=np.uint8)
        blocks = self.prop_int(b"rocksdb.num.data.blocks")
        self.offsets = np.empty(blocks, dtype=np.int64)
        self.sizes = np.empty(blocks, dtype=np.int64)
        found, status = _compiled().index_handles(
            index, self.prop_int(b"rocksdb.index.value.is.delta.encoded", 0) == 1, self.offsets, self.sizes
        )
        if status != _SST_OK or found != blocks:
            raise self.corrupt(
                f"unreadable index block (it lists {found} data blocks or more, the properties record {blocks})"
            )

    def corrupt(self, why: str) -> CorruptFileError:
        return CorruptFileError(f"{self.shown}: {why}", path=self.shown)

    def prop_int(self, name: bytes, default: int | None = None) -> int:
        raw = self.props.get(name)
        if raw is None:
            if default is None:
                raise self.corrupt(f"no property {name.decode()}")
            return default
        try:
            return _varint(raw, 0, len(raw))[0]
        except ValueError:
            raise self.corrupt(f"unreadable property {name.decode()}") from None

    def _check_properties(self) -> None:
        props = self.props
        expect = {b"rocksdb.comparator": b"leveldb.BytewiseComparator", b"rocksdb.column.family.name": b"default"}
        for name, value in expect.items():
            if props.get(name, value) != value:
                raise SstNotSupportedError(f"{name.decode()} {props[name]!r}")
        if props.get(b"rocksdb.block.based.table.index.type", bytes(4)) != bytes(4):
            raise SstNotSupportedError("an index other than binary search")
        if b"rocksdb.external_sst_file.version" in props:
            raise SstNotSupportedError("an ingested file (global sequence number)")
        if self.prop_int(b"rocksdb.merge.operands", 0) or self.prop_int(b"rocksdb.num.range-deletions", 0):
            raise SstNotSupportedError("merge operands or range deletions")

    def verify(self, offset: int, size: int, what: str) -> None:
        """The block trailer's checksum, computed as RocksDB does (format versions below 6)."""
        import xxhash  # a dependency; without it, ImportError leaves the file to rocksdict

        kind = self.checksum_type
        if kind == _CHECKSUM_NONE:
            return
        stored = int.from_bytes(self.data[offset + size + 1 : offset + size + _TRAILER_SIZE], "little")
        if kind == _CHECKSUM_XXH3:
            actual = int(
                _xxh3_block_checksum(
                    xxhash.xxh3_64_intdigest(self.view[offset : offset + size]), self.data[offset + size]
                )
            )
        elif kind == _CHECKSUM_CRC32C:  # masked, over the contents and the type byte
            crc = crc32c(self.view[offset : offset + size + 1])
            actual = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & _MASK32
        elif kind == _CHECKSUM_XXHASH:
            actual = xxhash.xxh32_intdigest(self.view[offset : offset + size + 1])
        else:
            actual = xxhash.xxh64_intdigest(self.view[offset : offset + size + 1]) & _MASK32
        if actual != stored:
            raise self.corrupt(
                f"block checksum mismatch in the {what} block at byte {offset} "
                f"(stored {stored:#010x}, computed {actual:#010x})"
            )

    def verify_data_blocks(self) -> None:
        """:meth:`verify` of every data block; XXH3 checksums (RocksDB's default) with the
        trailers read at once and one hash call per block, the first bad block named."""
        if self.checksum_type != _CHECKSUM_XXH3 or not len(self.offsets):
            for offset, size in zip(self.offsets.tolist(), self.sizes.tolist(), strict=True):
                self.verify(offset, size, "data")
            return
        import xxhash

        raw = np.frombuffer(self.data, dtype=np.uint8)
        trailer = self.offsets + self.sizes
        stored = byte_view(raw, "<u4")[trailer + 1]
        digest, view = xxhash.xxh3_64_intdigest, self.view
        spans = zip(self.offsets.tolist(), self.sizes.tolist(), strict=True)
        hashes = np.fromiter((digest(view[o : o + n]) for o, n in spans), dtype=np.uint64, count=len(self.offsets))
        bad = np.flatnonzero(_xxh3_block_checksum(hashes, raw[trailer]) != stored)
        if len(bad):
            self.verify(int(self.offsets[bad[0]]), int(self.sizes[bad[0]]), "data")

    def _check_handle(self, offset: int, size: int, what: str) -> None:
        if offset < 0 or size < 0 or offset + size + _TRAILER_SIZE > len(self.data) - _FOOTER_SIZE:
            raise self.corrupt(f"the {what} block at byte {offset} ({size} bytes) runs past the end")

    def block(self, offset: int, size: int, what: str) -> bytes:
        """Contents of a (small) block, checked and decompressed."""
        self._check_handle(offset, size, what)
        self.verify(offset, size, what)
        kind = self.data[offset + size]
        raw = self.view[offset : offset + size]
        if kind == _NO_COMPRESSION:
            return bytes(raw)
        if kind not in _COMPRESSIONS:
            raise SstNotSupportedError(f"compression type {kind}")
        try:
            length, start = _varint(raw, 0, len(raw))
        except ValueError:
            raise self.corrupt(f"the {what} block at byte {offset} has no readable decompressed size") from None
        out = bytearray(length)
        self.decompress(kind, raw[0 if kind == _SNAPPY else start :], memoryview(out), offset)
        return bytes(out)

    def decompress(self, kind: int, raw: memoryview, target: memoryview, offset: int) -> None:
        """Decompress one block into ``target``, which it must fill exactly."""
        if not _DECOMPRESS_INTO:
            _DECOMPRESS_INTO.update(_decompressors())
        try:
            written = _DECOMPRESS_INTO[kind](raw, target)
        except Exception as exc:  # cramjam raises plain exceptions
            raise self.corrupt(f"the block at byte {offset} does not decompress: {exc}") from None
        if written != len(target):
            raise self.corrupt(f"the block at byte {offset} decompressed to {written} bytes, not {len(target)}")

    def data_layout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Compressed start, compressed size, compression type and decompressed size of each data block.

        Bounds and types are checked here; checksums as the blocks are decompressed.
        """
        offsets, sizes = self.offsets, self.sizes
        bad = np.flatnonzero(
            (offsets < 0) | (sizes < 0) | (offsets + sizes + _TRAILER_SIZE > len(self.data) - _FOOTER_SIZE)
        )
        if len(bad):
            self._check_handle(int(offsets[bad[0]]), int(sizes[bad[0]]), "data")
        kinds = np.frombuffer(self.data, dtype=np.uint8)[offsets + sizes]
        other = np.flatnonzero(~np.isin(kinds, _COMPRESSIONS))
        if len(other):
            raise SstNotSupportedError(f"compression type {kinds[other[0]]}")
        starts, lengths, out = offsets.copy(), sizes.copy(), sizes.copy()
        if _compiled().block_sizes(np.frombuffer(self.data, dtype=np.uint8), kinds, starts, lengths, out) >= 0:
            raise self.corrupt("a data block has no readable decompressed size")
        return starts, lengths, kinds, out


def _cramjam_lz4_into() -> Any:
    """cramjam's lz4 raw-block decoder into a given buffer."""
    import cramjam

    return cramjam.lz4.decompress_block_into


def _decompressors() -> dict[int, Any]:
    """Compression type -> decompress(raw, target) returning the bytes written (cramjam, a dependency)."""
    import cramjam

    def lz4(raw: memoryview, target: memoryview) -> int:
        return cramjam.lz4.decompress_block_into(raw, target, output_len=len(target))

    return {_SNAPPY: cramjam.snappy.decompress_raw_into, _LZ4: lz4, _LZ4HC: lz4, _ZSTD: cramjam.zstd.decompress_into}


_DECOMPRESS_INTO: dict[int, Any] = {}
_VARINT32, _VARINT64 = 28, 56  # the largest shift of a varint32 / varint64


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


def _le32(buf: np.ndarray, at: int) -> int:  # pragma: no cover - compiled
    return (
        np.int64(buf[at]) | (np.int64(buf[at + 1]) << 8) | (np.int64(buf[at + 2]) << 16) | (np.int64(buf[at + 3]) << 24)
    )


def _index_handles(
    block: np.ndarray, delta: bool, offsets: np.ndarray, sizes: np.ndarray
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Data block handles of an index block (keys skipped) into ``offsets``/``sizes`` (compiled).

    ``delta``: values are delta-encoded (format version 4 and later: no value length,
    a full handle at restarts, else the size change, zigzag-coded, the block right
    after the previous one). Returns (handles, status).
    """
    end = len(block)
    if end < 4:
        return 0, _SST_CORRUPT
    restarts = _k_le32(block, end - 4)
    limit = end - 4 * (restarts + 1)
    if restarts == 0 or limit < 0:
        return 0, _SST_CORRUPT
    pos = 0
    r = 0
    n = 0
    key_len = 0
    offset = 0
    size = 0
    while pos < limit:
        at_restart = r < restarts and pos == _k_le32(block, limit + 4 * r)
        if at_restart:
            r += 1
        shared, pos = _k_varint(block, pos, limit, _VARINT32)
        unshared, pos = _k_varint(block, pos, limit, _VARINT32)
        value_end = limit
        if not delta:
            value_len, pos = _k_varint(block, pos, limit, _VARINT32)
            value_end = pos + unshared + value_len
            if value_len < 0:
                return n, _SST_CORRUPT
        if shared < 0 or unshared < 0 or shared > key_len or pos + unshared > limit or value_end > limit:
            return n, _SST_CORRUPT
        key_len = shared + unshared
        pos += unshared
        if not delta or at_restart:
            offset, pos = _k_varint(block, pos, value_end, _VARINT64)
            size, pos = _k_varint(block, pos, value_end, _VARINT64)
        else:
            change, pos = _k_varint(block, pos, value_end, _VARINT64)
            offset += size + 5
            size += (change >> 1) ^ -(change & 1)
        if offset < 0 or size < 0 or n >= len(offsets):
            return n + 1, _SST_CORRUPT
        if not delta:
            pos = value_end
        offsets[n] = offset
        sizes[n] = size
        n += 1
    return n, _SST_OK if pos == limit else _SST_CORRUPT


def _block_sizes(
    data: np.ndarray, kinds: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray
) -> int:  # pragma: no cover - compiled
    """Each compressed block's decompressed size (a varint32 first) to ``out``.

    lz4 and zstd blocks start after it (RocksDB's prefix), snappy blocks at it (the
    stream's own header). Returns the first block whose size is unreadable, or -1.
    """
    for b in range(len(kinds)):
        if kinds[b] == 0:
            continue
        size, pos = _k_varint(data, starts[b], starts[b] + lengths[b], _VARINT32)
        if size < 0:
            return b
        out[b] = size
        if kinds[b] != 1:
            lengths[b] -= pos - starts[b]
            starts[b] = pos
    return -1


def _sst_walk(
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
            return n, kpos, _SST_CORRUPT, b
        restarts = _k_le32(buf, end - 4)
        if restarts >> 31:
            return n, kpos, _SST_UNSUPPORTED, b  # a data block hash index
        limit = end - 4 * (restarts + 1)
        if restarts == 0 or limit < start:
            return n, kpos, _SST_CORRUPT, b
        pos = start
        prev = kpos
        prev_len = 0
        first = n
        while pos < limit:
            shared, pos = _k_varint(buf, pos, limit, _VARINT32)
            unshared, pos = _k_varint(buf, pos, limit, _VARINT32)
            value_len, pos = _k_varint(buf, pos, limit, _VARINT32)
            if shared < 0 or unshared < 0 or value_len < 0:
                return n, kpos, _SST_CORRUPT, b
            length = shared + unshared
            if shared > prev_len or length < 8 or pos + unshared + value_len > limit:
                return n, kpos, _SST_CORRUPT, b
            if kpos + length > key_limit or n >= len(rec_key):
                return n, kpos, _SST_FULL, b
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
                c = _k_compare(key_out, rec_key[last], rec_len[last], kpos, length - 8, same)
                if c > 0 or (c == 0 and rec_seq[n] >= rec_seq[last]):
                    return n, kpos, _SST_CORRUPT, b  # out of order
                if c == 0:
                    rec_type[n] = _SHADOWED  # an older version of the same key
            last = n
            n += 1
            prev = kpos
            prev_len = length
            kpos += length
            pos += value_len
        block_count[b] = n - first
    return n, kpos, _SST_OK, -1


def _compare(key_out: np.ndarray, a: int, a_len: int, b: int, b_len: int, skip: int) -> int:  # pragma: no cover
    """memcmp-style order of two user keys in ``key_out`` whose first ``skip`` bytes are equal (compiled)."""
    ua, ub = np.uint64(a), np.uint64(b)
    for i in range(skip, min(a_len, b_len)):
        x = key_out[ua + np.uint64(i)]
        y = key_out[ub + np.uint64(i)]
        if x != y:
            return -1 if x < y else 1
    return -1 if a_len < b_len else (1 if a_len > b_len else 0)


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


def _sst_merge(
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
                c = _k_compare(key_out, rec_key[i], rec_len[i], rec_key[best], rec_len[best], 0)
                if c > 0 or (c == 0 and rec_seq[i] < rec_seq[best]):
                    continue
            best = i
            owner = f
        if best < 0:
            return m, _SST_OK, -1
        # the smallest next key of the other files bounds the run taken from the owner's
        bound = -1
        for f in range(files):
            i = cur[f]
            if f == owner or i >= file_hi[f]:
                continue
            if bound < 0 or _k_compare(key_out, rec_key[i], rec_len[i], rec_key[bound], rec_len[bound], 0) < 0:
                bound = i
        hi = file_hi[owner]
        if bound >= 0 and _k_compare(key_out, rec_key[bound], rec_len[bound], rec_key[best], rec_len[best], 0) == 0:
            # the same key in several files: the newest counts, every file moves past it
            m, bad = _k_emit(rec_type, best, best + 1, keep, m)
            if bad >= 0:
                return m, _SST_UNSUPPORTED, bad
            for f in range(files):
                i = cur[f]
                if i < file_hi[f] and _k_compare(key_out, rec_key[i], rec_len[i], rec_key[best], rec_len[best], 0) == 0:
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
                and _k_compare(key_out, rec_key[lo + step], rec_len[lo + step], rec_key[bound], rec_len[bound], 0) < 0
            ):
                lo += step
                step *= 2
            end = min(lo + step, hi)
            while lo + 1 < end:
                mid = (lo + end) // 2
                if _k_compare(key_out, rec_key[mid], rec_len[mid], rec_key[bound], rec_len[bound], 0) < 0:
                    lo = mid
                else:
                    end = mid
        m, bad = _k_emit(rec_type, best, end, keep, m)
        if bad >= 0:
            return m, _SST_UNSUPPORTED, bad
        cur[owner] = end


# the helpers the kernels call: plain Python until _compiled() replaces them by their compiled versions
_k_varint: Any = _read_varint
_k_le32: Any = _le32
_k_compare: Any = _compare
_k_emit: Any = _emit


class _Kernels(NamedTuple):
    index_handles: Any
    block_sizes: Any
    walk: Any
    merge: Any


_sst_kernels: _Kernels | None = None
_compile_lock = threading.Lock()


def _compiled() -> _Kernels:
    """The kernels above, compiled by numba on first use (machine code cached on disk)."""
    global _sst_kernels, _k_varint, _k_le32, _k_compare, _k_emit
    with _compile_lock:  # read_table's threads may get here together
        if _sst_kernels is None:
            import numba

            jit = numba.njit(cache=True, nogil=True)
            _k_varint, _k_le32 = jit(_read_varint), jit(_le32)
            _k_compare, _k_emit = jit(_compare), jit(_emit)
            _sst_kernels = _Kernels(jit(_index_handles), jit(_block_sizes), jit(_sst_walk), jit(_sst_merge))
        return _sst_kernels


def _padded(n: int) -> np.ndarray:
    """``n`` bytes to fill and the zero padding RowBuffer.wrap wants after them."""
    buf = np.empty(n + _ROW_PAD, dtype=np.uint8)
    buf[n:] = 0
    return buf


def read_sst_rows(files: Iterable[tuple[bytes, str]], source: str) -> tuple[RowBuffer, RowBuffer]:
    """Live keys and values of a DB made of these SST files (contents, name shown), in file order.

    A file's compressed bytes are let go once its blocks are decompressed (pass them as a
    generator that keeps no other reference, and memory holds the compressed and the
    decompressed state at once for one file only).
    Raises SstNotSupportedError for what is left to rocksdict, CorruptFileError naming the file for damage.
    """
    compiled = _compiled()
    tables = [_SstFile(data, shown) for data, shown in files]
    layouts = [t.data_layout() for t in tables]
    total = int(sum(int(layout[3].sum()) for layout in layouts))
    buf = _padded(total)
    ends: list[np.ndarray] = []
    owner = []
    at = 0
    for i, (table, (starts, lengths, kinds, out)) in enumerate(zip(tables, layouts, strict=True)):
        table.verify_data_blocks()
        decompress, view, target = table.decompress, table.view, buf.data
        lz4 = _cramjam_lz4_into()
        for offset, start, length, kind, n_out in zip(
            table.offsets.tolist(), starts.tolist(), lengths.tolist(), kinds.tolist(), out.tolist(), strict=True
        ):
            if kind == _NO_COMPRESSION:
                target[at : at + n_out] = view[start : start + length]
            elif kind == _LZ4:  # the common case, without the generic call's overhead
                try:
                    written = lz4(view[start : start + length], target[at : at + n_out], output_len=n_out)
                except Exception:  # cramjam raises plain exceptions
                    written = -1
                if written != n_out:
                    decompress(kind, view[start : start + length], target[at : at + n_out], offset)
            else:
                decompress(kind, view[start : start + length], target[at : at + n_out], offset)
            at += n_out
        del view
        table.data, table.view = b"", memoryview(b"")  # what is left to read of the file was read when it was opened
        ends.append(out)
        owner.append(np.full(len(out), i, dtype=np.int64))
    block_end = np.cumsum(np.concatenate(ends)) if ends else np.zeros(0, dtype=np.int64)
    block_start = block_end - np.concatenate(ends) if ends else block_end
    block_owner = np.concatenate(owner) if owner else np.zeros(0, dtype=np.int64)
    entries = [t.prop_int(b"rocksdb.num.entries") for t in tables]
    key_bytes = sum(t.prop_int(b"rocksdb.raw.key.size") for t in tables)
    key_out = _padded(key_bytes)
    rec_key, rec_len, rec_value, rec_value_len, rec_seq = (np.empty(sum(entries), dtype=np.int64) for _ in range(5))
    rec_type = np.empty(sum(entries), dtype=np.uint8)
    block_count = np.zeros(len(block_start), dtype=np.int64)
    n, used, status, bad = compiled.walk(
        buf,
        block_start,
        block_end,
        block_owner,
        key_out,
        key_bytes,
        rec_key,
        rec_len,
        rec_value,
        rec_value_len,
        rec_seq,
        rec_type,
        block_count,
    )
    if status == _SST_UNSUPPORTED:
        raise SstNotSupportedError("a data block hash index")
    if status != _SST_OK:
        table = tables[block_owner[bad]]
        why = (
            "holds more entries or key bytes than its properties record"
            if status == _SST_FULL
            else "is damaged (an entry runs past its end, or its keys are out of order)"
        )
        raise table.corrupt(f"data block {bad - int(np.searchsorted(block_owner, block_owner[bad]))} {why}")
    counts = np.bincount(block_owner, weights=block_count, minlength=len(tables)).astype(np.int64)
    for table, expected, got in zip(tables, entries, counts.tolist(), strict=True):
        if expected != got:
            raise table.corrupt(f"its data blocks hold {got} entries, its properties record {expected}")
    file_hi = np.cumsum(counts)
    keep = np.empty(n, dtype=np.int64)
    kept, status, bad = compiled.merge(key_out, rec_key, rec_len, rec_seq, rec_type, file_hi - counts, file_hi, keep)
    if status == _SST_UNSUPPORTED:
        raise SstNotSupportedError(f"entry type {rec_type[bad]}")
    if status != _SST_OK:  # the walk checked the order, so this cannot happen
        table = tables[int(np.searchsorted(file_hi, bad, side="right"))]
        raise table.corrupt(f"its keys are out of order at entry {bad}")
    # rows in buffer order (each file's, one file after the other) rather than key order: the
    # decoders copy strings out in one pass when their spans follow each other through the buffer
    live_mask = np.zeros(n, dtype=np.bool_)
    live_mask[keep[:kept]] = True
    del keep, rec_seq, rec_type
    live = np.flatnonzero(live_mask)
    del live_mask
    keys = RowBuffer.wrap(key_out, used, rec_key[live], rec_len[live], source + " key")
    del rec_key, rec_len
    values = RowBuffer.wrap(buf, total, rec_value[live], rec_value_len[live], source + " value")
    return keys, values
