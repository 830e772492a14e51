"""Decompression and compression of state files (HDFS .delta/.snapshot, RocksDB .changelog).

Spark compresses these with ``spark.sql.streaming.stateStore.compression.codec``
(lz4 by default), using the stream formats of the JVM libraries it bundles:
lz4-java's ``LZ4BlockOutputStream``, zstd-jni, snappy-java's
``SnappyOutputStream`` and ning's ``LZFOutputStream``. Each is decoded here from
its framing; the block payloads go to well-kept Python bindings. The writers beside
them produce the same streams (lz4 and snappy in 32 KiB blocks, zstd at level 1, as
Spark does by default).
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from state_reader.errors import ChecksumMismatchError, CodecUnavailableError, CorruptFileError, TruncatedFileError
from state_reader.formats import kernels

# --- lz4-java block stream ----------------------------------------------------
# header: magic(8) token(1) compressedLen(4 LE) decompressedLen(4 LE) checksum(4 LE)
_LZ4_MAGIC = b"LZ4Block"
_LZ4_HEADER = struct.Struct("<8sBiii")
_LZ4_METHOD_RAW = 0x10
_LZ4_METHOD_LZ4 = 0x20
_LZ4_XXHASH_SEED = 0x9747B28C
_LZ4_MAX_BLOCK = 1 << 25  # lz4-java caps block size at 32 MiB

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SNAPPY_MAGIC = b"\x82SNAPPY\x00"
_LZF_MAGIC = b"ZV"


def _need(module: str, package: str, codec: str, path: str):
    # import_module, not __import__(fromlist=...): the latter probes the file system for a
    # submodule on every call, once per file read
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise CodecUnavailableError(
            f"{path} is compressed with {codec}; install the '{package}' package to read it",
            path=path,
        ) from exc


def _lz4_blocks(data: bytes, path: str) -> Iterator[tuple[int, int, int, int, int, int]]:
    """Check and yield the data blocks of an lz4-java stream in order:
    (header position, method, payload start, payload length, decompressed length, stored checksum)."""
    pos, n = 0, len(data)
    while pos < n:
        if n - pos < _LZ4_HEADER.size:
            raise TruncatedFileError(
                f"{path}: lz4 block header at byte {pos} is cut off ({n - pos} of {_LZ4_HEADER.size} bytes)", path=path
            )
        magic, token, clen, dlen, checksum = _LZ4_HEADER.unpack_from(data, pos)
        if magic != _LZ4_MAGIC:
            raise CorruptFileError(
                f"{path}: expected lz4 block magic 'LZ4Block' at byte {pos}, found {magic!r}", path=path
            )
        method = token & 0xF0
        if clen < 0 or dlen < 0 or dlen > _LZ4_MAX_BLOCK or clen > _LZ4_MAX_BLOCK:
            raise CorruptFileError(
                f"{path}: lz4 block at byte {pos} has impossible lengths (compressed {clen}, decompressed {dlen})",
                path=path,
            )
        start = pos + _LZ4_HEADER.size
        end = start + clen
        if end > n:
            raise TruncatedFileError(
                f"{path}: lz4 block at byte {pos} needs {clen} payload bytes, file has {n - start}", path=path
            )
        if dlen:  # a zero-length block ends a stream; concatenated streams may follow
            if method == _LZ4_METHOD_RAW:
                if clen != dlen:
                    raise CorruptFileError(
                        f"{path}: raw lz4 block at byte {pos} has lengths {clen} != {dlen}", path=path
                    )
            elif method != _LZ4_METHOD_LZ4:
                raise CorruptFileError(f"{path}: lz4 block at byte {pos} has unknown method 0x{token:02x}", path=path)
            yield pos, method, start, clen, dlen, checksum & 0xFFFFFFFF
        pos = end


def _lz4_check(xxhash: Any, chunk: Any, pos: int, checksum: int, path: str) -> None:
    actual = xxhash.xxh32_intdigest(chunk, seed=_LZ4_XXHASH_SEED) & 0x0FFFFFFF
    if actual != checksum:
        raise ChecksumMismatchError(
            f"{path}: lz4 block at byte {pos} fails its checksum (stored 0x{checksum:08x}, computed 0x{actual:08x})",
            path=path,
        )


def _lz4_length_check(written: int, dlen: int, pos: int, path: str) -> None:
    if written != dlen:
        raise CorruptFileError(
            f"{path}: lz4 block at byte {pos} decompressed to {written} bytes, header says {dlen}", path=path
        )


def _lz4_failed(pos: int, path: str, exc: Exception) -> CorruptFileError:
    return CorruptFileError(f"{path}: lz4 block at byte {pos} does not decompress: {exc}", path=path)


def decompress_lz4(data: bytes, path: str) -> bytes:
    """Decode an lz4-java LZ4BlockOutputStream stream, verifying each block's checksum."""
    block = _need("lz4.block", "lz4", "lz4", path)
    xxhash = _need("xxhash", "xxhash", "lz4", path)
    out = []
    for pos, method, start, clen, dlen, checksum in _lz4_blocks(data, path):
        payload = data[start : start + clen]
        if method == _LZ4_METHOD_RAW:
            chunk = payload
        else:
            try:
                chunk = block.decompress(payload, uncompressed_size=dlen)
            except Exception as exc:
                raise _lz4_failed(pos, path, exc) from exc
            _lz4_length_check(len(chunk), dlen, pos, path)
        _lz4_check(xxhash, chunk, pos, checksum, path)
        out.append(chunk)
    return b"".join(out)


def lz4_blocks(data: bytes, path: str) -> list[tuple[int, int, int, int, int, int]]:
    """Every data block of an lz4-java stream, headers checked as by :func:`decompress_lz4`:
    (header position, method, payload start, payload length, decompressed length, stored checksum).
    The decompressed size of the stream is the sum of the fifth items."""
    return list(_lz4_blocks(data, path))


def decompress_lz4_into(
    data: bytes, path: str, out: np.ndarray, blocks: list[tuple[int, int, int, int, int, int]] | None = None
) -> int:
    """Decode an lz4-java stream straight into ``out`` (uint8, at least the decompressed size).

    Same checks and errors as :func:`decompress_lz4`, without assembling the
    output from per-block copies; ``blocks`` are those of :func:`lz4_blocks`
    when the caller already has them. Returns the number of bytes written.

    Where the compiled kernels are loaded, the blocks' checksums are computed
    in one call after the stream is decoded (without the GIL: a call per block
    kept two threads waiting on each other); the first bad block in stream
    order is still the one named.
    """
    xxhash = _need("xxhash", "xxhash", "lz4", path)
    digest = xxhash.xxh32_intdigest
    view = memoryview(data)
    target_view = out.data
    into = _lz4_block_into()
    block: Any = None if into is not None else _need("lz4.block", "lz4", "lz4", path)  # used only without into
    deferred = kernels.compiled_loaded()
    done: list[tuple[int, int, int, int, int, int]] = []
    at = 0
    try:
        for pos, method, start, clen, dlen, checksum in blocks if blocks is not None else _lz4_blocks(data, path):
            target = target_view[at : at + dlen]
            if method == _LZ4_METHOD_RAW:
                target[:] = view[start : start + clen]
            elif into is not None:
                try:
                    written = into(view[start : start + clen], target, output_len=dlen)
                except Exception as exc:
                    raise _lz4_failed(pos, path, exc) from exc
                _lz4_length_check(written, dlen, pos, path)
            else:
                try:
                    chunk = block.decompress(view[start : start + clen], uncompressed_size=dlen)
                except Exception as exc:
                    raise _lz4_failed(pos, path, exc) from exc
                _lz4_length_check(len(chunk), dlen, pos, path)
                target[:] = chunk
            if deferred:
                done.append((pos, method, start, clen, dlen, checksum))
            elif digest(target, seed=_LZ4_XXHASH_SEED) & 0x0FFFFFFF != checksum:
                _lz4_check(xxhash, target, pos, checksum, path)
            at += dlen
    except (CorruptFileError, TruncatedFileError):
        _check_lz4_blocks(xxhash, out, done, path)  # a bad checksum before the failed block comes first
        raise
    _check_lz4_blocks(xxhash, out, done, path)
    return at


def _check_lz4_blocks(
    xxhash: Any, out: np.ndarray, blocks: list[tuple[int, int, int, int, int, int]], path: str
) -> None:
    """Every block's checksum against the bytes decoded into ``out``, in one compiled call."""
    if not blocks:
        return
    table = np.array(blocks, dtype=np.int64)
    lengths = table[:, 4]
    starts = np.cumsum(lengths) - lengths
    computed = kernels.xxh32_spans(out, starts, lengths, _LZ4_XXHASH_SEED)
    # each mismatch is checked again by xxhash itself, which raises on the first bad block
    for i in np.flatnonzero((computed.astype(np.int64) & 0x0FFFFFFF) != table[:, 5]).tolist():
        _lz4_check(
            xxhash, out.data[int(starts[i]) : int(starts[i] + lengths[i])], int(table[i, 0]), int(table[i, 5]), path
        )


def _lz4_block_into() -> Callable[..., int] | None:
    """cramjam's raw-block decoder that writes into a given buffer (releases the GIL), if present."""
    try:
        import cramjam
    except ImportError:
        return None
    return getattr(getattr(cramjam, "lz4", None), "decompress_block_into", None)


def decompress_zstd(data: bytes, path: str) -> bytes:
    """Decode a zstd stream: one or more frames, content size not recorded."""
    zstandard = _need("zstandard", "zstandard", "zstd", path)
    out = []
    rest = data
    try:
        while rest:
            frame = zstandard.ZstdDecompressor().decompressobj()
            out.append(frame.decompress(rest))
            if not frame.eof:
                raise TruncatedFileError(f"{path}: zstd stream ends inside a frame", path=path)
            rest = frame.unused_data
    except zstandard.ZstdError as exc:
        raise CorruptFileError(f"{path}: zstd stream does not decompress: {exc}", path=path) from exc
    return b"".join(out)


def decompress_snappy(data: bytes, path: str) -> bytes:
    """Decode snappy-java's SnappyOutputStream: header, then length-prefixed raw chunks."""
    cramjam = _need("cramjam", "cramjam", "snappy", path)
    if len(data) < 16 or data[:8] != _SNAPPY_MAGIC:
        raise CorruptFileError(f"{path}: missing snappy-java stream header", path=path)
    out = []
    pos, n = 16, len(data)
    while pos < n:
        if n - pos < 4:
            raise TruncatedFileError(f"{path}: snappy chunk length at byte {pos} is cut off", path=path)
        (clen,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if clen < 0 or pos + clen > n:
            raise TruncatedFileError(
                f"{path}: snappy chunk at byte {pos - 4} claims {clen} bytes, file has {n - pos}", path=path
            )
        try:
            out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + clen])))
        except Exception as exc:
            raise CorruptFileError(
                f"{path}: snappy chunk at byte {pos - 4} does not decompress: {exc}", path=path
            ) from exc
        pos += clen
    return b"".join(out)


def _lzf_chunk(src: bytes, out_len: int, path: str) -> bytes:
    # liblzf: control byte < 32 = literal run, otherwise back reference
    out = bytearray()
    i, n = 0, len(src)
    try:
        while i < n:
            ctrl = src[i]
            i += 1
            if ctrl < 32:
                run = ctrl + 1
                if i + run > n:
                    raise IndexError
                out += src[i : i + run]
                i += run
            else:
                length = ctrl >> 5
                if length == 7:
                    length += src[i]
                    i += 1
                ref = len(out) - ((ctrl & 0x1F) << 8) - src[i] - 1
                i += 1
                if ref < 0:
                    raise IndexError
                for _ in range(length + 2):
                    out.append(out[ref])
                    ref += 1
    except IndexError:
        raise CorruptFileError(f"{path}: lzf chunk is malformed", path=path) from None
    if len(out) != out_len:
        raise CorruptFileError(f"{path}: lzf chunk decompressed to {len(out)} bytes, header says {out_len}", path=path)
    return bytes(out)


def decompress_lzf(data: bytes, path: str) -> bytes:
    """Decode ning compress-lzf's LZFOutputStream chunks."""
    out = []
    pos, n = 0, len(data)
    while pos < n:
        if n - pos < 5 or data[pos : pos + 2] != _LZF_MAGIC:
            raise CorruptFileError(f"{path}: expected an lzf chunk header at byte {pos}", path=path)
        kind = data[pos + 2]
        if kind == 0:
            (length,) = struct.unpack_from(">H", data, pos + 3)
            start = pos + 5
            if start + length > n:
                raise TruncatedFileError(f"{path}: lzf chunk at byte {pos} is cut off", path=path)
            out.append(data[start : start + length])
            pos = start + length
        elif kind == 1:
            if n - pos < 7:
                raise TruncatedFileError(f"{path}: lzf chunk header at byte {pos} is cut off", path=path)
            clen, ulen = struct.unpack_from(">HH", data, pos + 3)
            start = pos + 7
            if start + clen > n:
                raise TruncatedFileError(f"{path}: lzf chunk at byte {pos} is cut off", path=path)
            out.append(_lzf_chunk(data[start : start + clen], ulen, path))
            pos = start + clen
        else:
            raise CorruptFileError(f"{path}: lzf chunk at byte {pos} has unknown type {kind}", path=path)
    return b"".join(out)


_DECODERS: dict[str, Callable[[bytes, str], bytes]] = {
    "lz4": decompress_lz4,
    "zstd": decompress_zstd,
    "snappy": decompress_snappy,
    "lzf": decompress_lzf,
}

# Spark accepts fully qualified codec class names as well as short names.
_CLASS_NAMES = {
    "org.apache.spark.io.lz4compressioncodec": "lz4",
    "org.apache.spark.io.zstdcompressioncodec": "zstd",
    "org.apache.spark.io.snappycompressioncodec": "snappy",
    "org.apache.spark.io.lzfcompressioncodec": "lzf",
}


# Spark's default for spark.sql.streaming.stateStore.compression.codec: what a checkpoint that records none used
DEFAULT_CODEC = "lz4"


def codec_name(conf_value: str | None) -> str:
    """Short codec name for the value of the compression conf (:data:`DEFAULT_CODEC` when none)."""
    if not conf_value:
        return DEFAULT_CODEC
    value = conf_value.strip().lower()
    return _CLASS_NAMES.get(value, value)


def sniff(data: bytes) -> str | None:
    """Codec whose stream magic starts ``data``, or None."""
    if data.startswith(_LZ4_MAGIC):
        return "lz4"
    if data.startswith(_ZSTD_MAGIC):
        return "zstd"
    if data.startswith(_SNAPPY_MAGIC):
        return "snappy"
    if data.startswith(_LZF_MAGIC):
        return "lzf"
    return None


def stream_codec(data: bytes, codec: str | None) -> str:
    """Short name of the codec that ``data`` is decoded with: the recorded one unless the
    bytes carry another codec's magic (a conf that was changed, or a missing offset log)."""
    name = codec_name(codec)
    sniffed = sniff(data)
    if sniffed is not None and sniffed != name:
        name = sniffed
    return name


def decompress(data: bytes, codec: str | None, path: str) -> bytes:
    """Decompress a state file written with ``codec`` (short name or class name).

    The recorded codec is trusted first; when the bytes carry another codec's
    magic (a conf that was changed, or a missing offset log) the magic wins.
    """
    name = stream_codec(data, codec)
    decoder = _DECODERS.get(name)
    if decoder is None:
        raise CodecUnavailableError(
            f"{path} uses compression codec {codec!r}, which state_reader cannot decode "
            f"(known: {', '.join(sorted(_DECODERS))})",
            path=path,
        )
    if not data:
        raise TruncatedFileError(f"{path} is empty; a {name} stream was expected", path=path)
    return decoder(data, path)


# --- compression: the same stream formats, written -------------------------------
# Block sizes are Spark's defaults (spark.io.compression.{lz4,snappy}.blockSize = 32k).
_BLOCK = 32 * 1024
_LZ4_LEVEL = 5  # log2(32 KiB) - 10: the low nibble of every lz4-java token
_LZF_MAX_CHUNK = 0xFFFF


Chunks = Iterable[bytes | bytearray | memoryview | np.ndarray]


def _blocks(chunks: Chunks, size: int) -> Iterator[memoryview]:
    """The bytes of ``chunks`` cut into blocks of ``size`` bytes (the last one shorter), whatever
    the chunk boundaries, so a stream is the same however its input arrives."""
    pending = bytearray()
    for chunk in chunks:
        # numpy declares the buffer protocol to type checkers only from Python 3.12
        view = memoryview(chunk).cast("B")  # type: ignore[arg-type]
        if pending:
            take = min(size - len(pending), len(view))
            pending += view[:take]
            view = view[take:]
            if len(pending) < size:
                continue
            yield memoryview(bytes(pending))
            pending.clear()
        whole = len(view) - len(view) % size
        for at in range(0, whole, size):
            yield view[at : at + size]
        pending += view[whole:]
    if pending:
        yield memoryview(bytes(pending))


def _compress_lz4(chunks: Chunks) -> Iterator[bytes]:
    import lz4.block
    import xxhash

    for block in _blocks(chunks, _BLOCK):
        checksum = xxhash.xxh32_intdigest(block, seed=_LZ4_XXHASH_SEED) & 0x0FFFFFFF
        packed = lz4.block.compress(block, store_size=False)
        if len(packed) < len(block):
            yield _LZ4_HEADER.pack(_LZ4_MAGIC, _LZ4_METHOD_LZ4 | _LZ4_LEVEL, len(packed), len(block), checksum) + packed
        else:  # lz4-java stores a block that does not shrink
            yield _LZ4_HEADER.pack(_LZ4_MAGIC, _LZ4_METHOD_RAW | _LZ4_LEVEL, len(block), len(block), checksum) + block
    yield _LZ4_HEADER.pack(_LZ4_MAGIC, _LZ4_METHOD_RAW | _LZ4_LEVEL, 0, 0, 0)  # the end block


def _compress_zstd(chunks: Chunks) -> Iterator[bytes]:
    import zstandard

    stream = zstandard.ZstdCompressor(level=1).compressobj()  # spark.io.compression.zstd.level
    for chunk in chunks:
        out = stream.compress(chunk)  # type: ignore[arg-type]  # any buffer, an array too; the stubs list three
        if out:
            yield out
    yield stream.flush()


def _compress_snappy(chunks: Chunks) -> Iterator[bytes]:
    import cramjam

    yield _SNAPPY_MAGIC + struct.pack(">ii", 1, 1)
    for block in _blocks(chunks, _BLOCK):
        packed = bytes(cramjam.snappy.compress_raw(block))
        yield struct.pack(">i", len(packed)) + packed


def _compress_lzf(chunks: Chunks) -> Iterator[bytes]:
    # stored (uncompressed) chunks: valid LZF streams that every reader takes, and no
    # LZF compressor among the well-kept Python packages
    for block in _blocks(chunks, _LZF_MAX_CHUNK):
        yield _LZF_MAGIC + b"\x00" + struct.pack(">H", len(block)) + block


_ENCODERS: dict[str, Callable[[Chunks], Iterator[bytes]]] = {
    "lz4": _compress_lz4,
    "zstd": _compress_zstd,
    "snappy": _compress_snappy,
    "lzf": _compress_lzf,
}


def compress_stream(chunks: Chunks, codec: str | None) -> Iterator[bytes]:
    """The bytes of ``chunks`` as a state file written with ``codec`` (short or class name), piece
    by piece: the stream format Spark's codec writes and reads back, in memory bounded by a block."""
    name = codec_name(codec)
    encoder = _ENCODERS.get(name)
    if encoder is None:
        raise CodecUnavailableError(
            f"cannot write state files with compression codec {codec!r} (known: {', '.join(sorted(_ENCODERS))})"
        )
    return encoder(chunks)


def compress(data: bytes, codec: str | None) -> bytes:
    """``data`` as a state file written with ``codec``, whole (:func:`compress_stream`)."""
    return b"".join(compress_stream((data,), codec))
