"""Hadoop's checksum sidecars (``.crc``), computed and verified chunk by chunk."""

from __future__ import annotations

import os

import pytest

from state_reader.errors import ChecksumMismatchError
from state_reader.io.integrity import hadoop_checksums, hadoop_checksums_of, verify_hadoop

DATA = [b"\xff" * 4, b"state " * 20000, os.urandom(70_001), bytes(32 * 1024)]


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
