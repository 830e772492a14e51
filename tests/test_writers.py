"""The writers beside the readers: compressed streams, Hadoop checksum files, snapshot framing,
and the destination a rewrite writes to. (Spark reading what they write is tested by the resume
oracle in test_rewrite.py.)"""

from __future__ import annotations

import itertools
import os
import struct

import numpy as np
import pytest

from state_reader.errors import ChecksumMismatchError, DestinationNotEmptyError, StorageError
from state_reader.formats import codecs
from state_reader.io.destination import Destination
from state_reader.io.integrity import hadoop_checksums, hadoop_checksums_of, verify_hadoop
from state_reader.io.storage import Storage
from state_reader.providers.hdfs import END_OF_FILE, HDFSStore, frame_records, framed_rows, snapshot_file

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


def test_hadoop_checksums_verify():
    for data in [*DATA, b""]:
        sidecar = hadoop_checksums(data)
        verify_hadoop(data, sidecar, "f", ".f.crc")
        assert sidecar[:8] == b"crc\x00\x00\x00\x02\x00" and len(sidecar) == 8 + 4 * -(-len(data) // 512)
        # the same read piece by piece, whatever the pieces
        pieces = [data[:1], data[1:700], data[700:1024], data[1024:]]
        assert hadoop_checksums_of(pieces) == sidecar


@pytest.mark.parametrize("size", [1, 511, 512, 513, 512 * 37, 512 * 64 + 5, 300_001])
def test_hadoop_verify_names_the_damaged_chunk(size):
    # an intact file passes on the chunk CRCs combined into the whole file's; a damaged one
    # is still found chunk by chunk, wherever the damage is
    data = os.urandom(size)
    sidecar = hadoop_checksums(data)
    verify_hadoop(data, sidecar, "f", "s")
    for at in {0, size // 2, size - 1}:
        bad = bytearray(data)
        bad[at] ^= 0x10
        with pytest.raises(ChecksumMismatchError, match=f"bytes {at // 512 * 512}\\.\\."):
            verify_hadoop(bytes(bad), sidecar, "f", "s")
    swapped = bytearray(sidecar)  # the sidecar damaged instead
    swapped[-1] ^= 1
    with pytest.raises(ChecksumMismatchError, match="do not match"):
        verify_hadoop(data, bytes(swapped), "f", "s")


@pytest.mark.parametrize("row_checksum", [False, True])
def test_snapshot_framing_reads_back(tmp_path, row_checksum):
    rng = np.random.default_rng(3)
    skip = 4 if row_checksum else 0
    records = {
        bytes(rng.integers(0, 256, 8 * k, dtype=np.uint8)): bytes(rng.integers(0, 256, 8 * v + skip, dtype=np.uint8))
        for k, v in zip(rng.integers(1, 5, 300), rng.integers(0, 6, 300), strict=True)
    }
    stream = b"".join(struct.pack(">i", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in records.items())
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "1.snapshot").write_bytes(codecs.compress(stream + END_OF_FILE, "lz4"))
    store = HDFSStore(Storage(str(tmp_path)), "in", "lz4", row_checksum)
    keys, values = store.load_rows(1)
    order = np.arange(len(keys.starts))[::-1]
    framed, lengths = frame_records(keys.take(order), values.take(order))
    assert int(lengths.sum()) == len(framed)
    # streamed in chunks of whole records through the destination, as a rewrite writes a partition
    cuts = np.r_[0, np.cumsum(lengths)][[0, 1, 100, 101, len(lengths)]]
    for codec in ("zstd", "lz4"):
        chunks = [framed[lo:hi] for lo, hi in itertools.pairwise(cuts)]
        Destination(str(tmp_path)).write(f"{codec}/1.snapshot", snapshot_file(chunks, codec))
        if codec == "lz4":  # block by block: the same file however the records arrive
            assert (tmp_path / codec / "1.snapshot").read_bytes() == b"".join(snapshot_file([framed], codec))
        again = HDFSStore(Storage(str(tmp_path)), codec, codec, row_checksum).load(1)
        assert again == {k: v[skip:] for k, v in records.items()}
    # and the framed records read back as rows, as a rewrite reads its routed rows
    back_keys, back_values = framed_rows(framed.tobytes(), "routed")
    assert [bytes(back_keys.buf[s : s + n]) for s, n in zip(back_keys.starts, back_keys.lengths, strict=True)] == [
        bytes(keys.buf[s : s + n]) for s, n in zip(keys.starts[order], keys.lengths[order], strict=True)
    ]
    assert int(back_values.lengths.sum()) == int(values.lengths.sum())


def test_destination_writes_only_into_an_empty_directory(tmp_path):
    dest = Destination(str(tmp_path / "new"))
    dest.require_empty()
    dest.write("state/0/1/2.snapshot", b"abc")
    assert (tmp_path / "new" / "state" / "0" / "1" / "2.snapshot").read_bytes() == b"abc"
    sidecar = (tmp_path / "new" / "state" / "0" / "1" / ".2.snapshot.crc").read_bytes()
    verify_hadoop(b"abc", sidecar, "f", "s")
    assert sorted(p.name for p in (tmp_path / "new" / "state" / "0" / "1").iterdir()) == [
        ".2.snapshot.crc",
        "2.snapshot",
    ]
    with pytest.raises(DestinationNotEmptyError, match="not empty"):
        Destination(str(tmp_path / "new")).require_empty()
    (tmp_path / "file").write_text("x")
    with pytest.raises(DestinationNotEmptyError, match="is a file"):
        Destination(str(tmp_path / "file")).require_empty()


def test_destination_streams_whole_files_or_none(tmp_path):
    dest = Destination(str(tmp_path / "new"))
    assert dest.write("a/x", (piece for piece in [b"ab", memoryview(b"cd"), b""])) == 4
    assert (tmp_path / "new" / "a" / "x").read_bytes() == b"abcd"

    def failing():
        yield b"partial"
        raise OSError("disk full")

    with pytest.raises(StorageError, match="disk full"):
        dest.write("a/y", failing())
    assert sorted(p.name for p in (tmp_path / "new" / "a").iterdir()) == [".x.crc", "x"]
