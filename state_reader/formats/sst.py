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
The compiled loops are :mod:`state_reader.formats._numba_sst`, loaded by
:func:`state_reader.formats.kernels.sst_kernels`.

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

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from state_reader.errors import CorruptFileError
from state_reader.formats import kernels
from state_reader.formats.unsaferow import PAD as _ROW_PAD
from state_reader.formats.unsaferow import RowBuffer, unaligned_view
from state_reader.io.integrity import crc32c

SST_MAGIC = 0x88E241B785F4CFF7
_FOOTER_SIZE = 53
_TRAILER_SIZE = 5
_SST_FORMAT_VERSIONS = range(2, 6)
_NO_COMPRESSION, _SNAPPY, _LZ4, _LZ4HC, _ZSTD = 0, 1, 4, 5, 7
_COMPRESSIONS = (_NO_COMPRESSION, _SNAPPY, _LZ4, _LZ4HC, _ZSTD)
_CHECKSUM_NONE, _CHECKSUM_CRC32C, _CHECKSUM_XXHASH, _CHECKSUM_XXHASH64, _CHECKSUM_XXH3 = range(5)
_MASK32 = 0xFFFFFFFF
_NOTHING = np.zeros(0, dtype=np.int64)  # an array let go of


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
        compiled = kernels.sst_kernels()
        found, status = compiled.index_handles(
            index, self.prop_int(b"rocksdb.index.value.is.delta.encoded", 0) == 1, self.offsets, self.sizes
        )
        if status != compiled.OK or found != blocks:
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
        stored = unaligned_view(raw, "<u4")[trailer + 1]
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
        block_sizes = kernels.sst_kernels().block_sizes
        if block_sizes(np.frombuffer(self.data, dtype=np.uint8), kinds, starts, lengths, out) >= 0:
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


def _padded(n: int) -> np.ndarray:
    """``n`` bytes to fill and the zero padding RowBuffer.wrap wants after them."""
    buf = np.empty(n + _ROW_PAD, dtype=np.uint8)
    buf[n:] = 0
    return buf


@dataclass
class _Walked:
    """The entries of some SST files, walked once: keys rebuilt into ``key_out``, values where they lie in
    ``buf`` (the decompressed blocks), per entry its key, value, sequence number and type; each file's
    entries are ``file_hi - counts .. file_hi``."""

    compiled: Any  # the kernels module
    tables: list[_SstFile]
    buf: np.ndarray
    total: int
    key_out: np.ndarray
    used: int
    n: int
    rec_key: np.ndarray
    rec_len: np.ndarray
    rec_value: np.ndarray
    rec_value_len: np.ndarray
    rec_seq: np.ndarray
    rec_type: np.ndarray
    counts: np.ndarray
    file_hi: np.ndarray

    def live(self, of_files: list[int]) -> np.ndarray:
        """The live entries of the DB made of the files ``of_files`` (positions among the walked ones), in
        key order: the newest entry of each key, deletions dropped."""
        lo, hi = (self.file_hi - self.counts)[of_files], self.file_hi[of_files]
        keep = np.empty(int((hi - lo).sum()), dtype=np.int64)
        kept, status, bad = self.compiled.merge(
            self.key_out, self.rec_key, self.rec_len, self.rec_seq, self.rec_type, lo, hi, keep
        )
        if status == self.compiled.UNSUPPORTED:
            raise SstNotSupportedError(f"entry type {self.rec_type[bad]}")
        if status != self.compiled.OK:  # the walk checked the order, so this cannot happen
            table = self.tables[int(np.searchsorted(self.file_hi, bad, side="right"))]
            raise table.corrupt(f"its keys are out of order at entry {bad}")
        return keep[:kept]


def _walk_files(files: Iterable[tuple[bytes, str]], source: str) -> _Walked:
    """Decompress and walk every entry of the files (contents, name shown); see :func:`read_sst_rows`."""
    compiled = kernels.sst_kernels()
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
    if status == compiled.UNSUPPORTED:
        raise SstNotSupportedError("a data block hash index")
    if status != compiled.OK:
        table = tables[block_owner[bad]]
        why = (
            "holds more entries or key bytes than its properties record"
            if status == compiled.FULL
            else "is damaged (an entry runs past its end, or its keys are out of order)"
        )
        raise table.corrupt(f"data block {bad - int(np.searchsorted(block_owner, block_owner[bad]))} {why}")
    counts = np.bincount(block_owner, weights=block_count, minlength=len(tables)).astype(np.int64)
    for table, expected, got in zip(tables, entries, counts.tolist(), strict=True):
        if expected != got:
            raise table.corrupt(f"its data blocks hold {got} entries, its properties record {expected}")
    file_hi = np.cumsum(counts)
    return _Walked(
        compiled=compiled,
        tables=tables,
        buf=buf,
        total=total,
        key_out=key_out,
        used=used,
        n=n,
        rec_key=rec_key,
        rec_len=rec_len,
        rec_value=rec_value,
        rec_value_len=rec_value_len,
        rec_seq=rec_seq,
        rec_type=rec_type,
        counts=counts,
        file_hi=file_hi,
    )


def read_sst_rows(files: Iterable[tuple[bytes, str]], source: str) -> tuple[RowBuffer, RowBuffer]:
    """Live keys and values of a DB made of these SST files (contents, name shown), in file order.

    A file's compressed bytes are let go once its blocks are decompressed (pass them as a
    generator that keeps no other reference, and memory holds the compressed and the
    decompressed state at once for one file only).
    Raises SstNotSupportedError for what is left to rocksdict, CorruptFileError naming the file for damage.
    """
    w = _walk_files(files, source)
    kept = w.live(list(range(len(w.file_hi))))
    # rows in buffer order (each file's, one file after the other) rather than key order: the
    # decoders copy strings out in one pass when their spans follow each other through the buffer
    live_mask = np.zeros(w.n, dtype=np.bool_)
    live_mask[kept] = True
    del kept
    w.rec_seq = w.rec_type = _NOTHING  # let go before the rows are gathered
    live = np.flatnonzero(live_mask)
    del live_mask
    keys = RowBuffer.wrap(w.key_out, w.used, w.rec_key[live], w.rec_len[live], source + " key")
    w.rec_key = w.rec_len = _NOTHING
    values = RowBuffer.wrap(w.buf, w.total, w.rec_value[live], w.rec_value_len[live], source + " value")
    return keys, values


def read_sst_changes(
    files: Iterable[tuple[bytes, str]], old: list[int], new: list[int], source: str
) -> tuple[RowBuffer, RowBuffer, RowBuffer]:
    """Between two versions of a DB, the union of whose SST files is ``files`` (contents, name shown; the
    new version's first, in the order its snapshot lists them), ``old`` and ``new`` each version's files
    (positions in ``files``, in its snapshot's order): the keys and values the new version added or
    changed, in the order :func:`read_sst_rows` gives the new version's rows, and the keys it dropped, in
    the old version's row order.

    Each file is read once. A file both versions list holds the same entries for both, so an entry live
    in both versions is the same row of both and is not compared; only the others are, by their bytes.
    """
    w = _walk_files(files, source)
    old_live, new_live = w.live(old), w.live(new)
    updated = np.empty(len(new_live), dtype=np.int64)
    deleted = np.empty(len(old_live), dtype=np.int64)
    n_updated, n_deleted = w.compiled.changed_entries(
        w.key_out, w.rec_key, w.rec_len, w.buf, w.rec_value, w.rec_value_len, old_live, new_live, updated, deleted
    )
    updated = np.sort(updated[:n_updated])  # the new version's files come first, in its order: its row order
    deleted = deleted[:n_deleted]
    owner = np.searchsorted(w.file_hi, deleted, side="right").astype(np.int64)
    place = np.full(len(w.file_hi), len(w.file_hi), dtype=np.int64)
    place[old] = np.arange(len(old))
    deleted = deleted[np.lexsort((deleted, place[owner]))]  # the old version's row order
    return (
        RowBuffer.wrap(w.key_out, w.used, w.rec_key[updated], w.rec_len[updated], source + " key"),
        RowBuffer.wrap(w.buf, w.total, w.rec_value[updated], w.rec_value_len[updated], source + " value"),
        RowBuffer.wrap(w.key_out, w.used, w.rec_key[deleted], w.rec_len[deleted], source + " key"),
    )
