"""The codecs of state files (lz4 as lz4-java writes it, zstd, snappy, lzf): real files decoded, damage
caught, and streams written back."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from state_reader import errors
from state_reader.formats import codecs
from state_reader.providers.hdfs import parse_records


def _delta(checkpoints, name: str) -> bytes:
    return (Path(checkpoints(name)) / "state" / "0" / "0" / "1.delta").read_bytes()


@pytest.mark.parametrize(
    ("name", "codec"), [("agg_window", "lz4"), ("agg_zstd", "zstd"), ("agg_snappy", "snappy"), ("agg_lzf", "lzf")]
)
def test_codecs_decode_real_files(checkpoints, name, codec):
    raw = _delta(checkpoints, name)
    assert codecs.sniff(raw) == codec
    data = codecs.decompress(raw, codec, "1.delta")
    records = parse_records(data, "1.delta")
    assert records and all(len(k) % 8 == 0 for k, _ in records)
    # a wrong or missing recorded codec falls back to the stream's magic
    assert codecs.decompress(raw, None if codec != "lz4" else "zstd", "1.delta") == data


def test_lz4_block_checksum_is_verified(checkpoints):
    raw = bytearray(_delta(checkpoints, "agg_window"))
    header = 21
    raw[header + 5] ^= 0x40  # flip a bit inside the first block's payload
    with pytest.raises((errors.ChecksumMismatchError, errors.CorruptFileError), match=r"1\.delta"):
        codecs.decompress(bytes(raw), "lz4", "1.delta")
    clean = _delta(checkpoints, "agg_window")
    checksum_at = 17
    bad = clean[:checksum_at] + bytes([clean[checksum_at] ^ 1]) + clean[checksum_at + 1 :]
    with pytest.raises(errors.ChecksumMismatchError, match="checksum"):
        codecs.decompress(bad, "lz4", "1.delta")


@pytest.mark.parametrize("name", ["agg_window", "agg_zstd", "agg_snappy", "agg_lzf"])
def test_truncated_streams_raise_our_errors(checkpoints, name):
    raw = _delta(checkpoints, name)
    for cut in (len(raw) // 3, len(raw) - 3):
        with pytest.raises(errors.StateReaderError) as caught:
            parse_records(codecs.decompress(raw[:cut], None, "1.delta"), "1.delta")
        if isinstance(caught.value, errors.TruncatedFileError):  # called so, whichever format noticed
            assert "truncated" in caught.value.message
    with pytest.raises(errors.TruncatedFileError, match="truncated"):
        codecs.decompress(raw[:-3], None, "1.delta")


def test_unknown_codec_names_itself():
    with pytest.raises(errors.CodecUnavailableError, match="brotli"):
        codecs.decompress(b"\x00\x01\x02", "brotli", "x.delta")


DATA = [b"\xff" * 4, b"state " * 20000, os.urandom(70_001), bytes(32 * 1024)]


@pytest.mark.parametrize("codec", ["lz4", "zstd", "snappy", "lzf"])
def test_compressed_streams_read_back(codec):
    for data in DATA:
        packed = codecs.compress(data, codec)
        assert codecs.sniff(packed) == codec
        assert codecs.decompress(packed, codec, "x") == data


def test_lz4_stream_is_lz4_javas():
    packed = codecs.compress(b"a" * 32768 + os.urandom(5000), "lz4")
    tokens, at = [], 0
    while at < len(packed):
        magic, token, clen, dlen, _ = struct.unpack_from("<8sBiii", packed, at)
        assert magic == b"LZ4Block"
        tokens.append((token, dlen))
        at += 21 + clen
    # 32 KiB blocks (level 5), compressed where it pays, stored where not, then the empty end block
    assert tokens == [(0x25, 32768), (0x15, 5000), (0x15, 0)]
