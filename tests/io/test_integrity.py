"""Checksum sidecars (``.crc``): Hadoop's computed and verified chunk by chunk, Spark's checked,
and sidecars that are not checksum files (Git LFS pointers in their place) read past, unlike
sidecars that disagree with their file."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

import pytest

import state_reader
from state_reader.errors import ChecksumMismatchError
from state_reader.io.integrity import (
    NotAChecksumFileError,
    crc32c,
    hadoop_checksums,
    hadoop_checksums_of,
    verify_hadoop,
    verify_spark,
)
from tests.support.damage import checksums_as_lfs_pointers, hadoop_sidecar_path, lfs_pointer
from tests.support.oracle import arrow_rows, assert_same_as_builtin, spark_rows
from tests.support.streaming_queries import CHECKPOINT_V2, session_confs

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


# -- sidecars that are not checksum files ------------------------------------------------------


@pytest.mark.parametrize(
    ("sidecar", "found"),
    [
        (lfs_pointer(b"crc\x00\x00\x00\x02\x00" + bytes(4)), "a Git LFS pointer where a Hadoop checksum file belongs"),
        (b"", "an empty file where a Hadoop checksum file belongs"),
        (b"CRC!\x00\x00\x02\x00\x00\x00\x00\x00", "starting b'CRC!"),
        (b"crc\x00\x00\x00\x00\x00", "chunk size 0"),  # no chunk size
        (b"crc\x00\x00\x00\x02\x00\x01\x02\x03", "3 bytes of checksums"),  # checksums of 4 bytes each
    ],
)
def test_a_hadoop_sidecar_that_is_not_one_says_nothing_about_the_data(sidecar, found):
    with pytest.raises(NotAChecksumFileError, match=re.escape(found)):
        verify_hadoop(b"state", sidecar, "f", ".f.crc")


@pytest.mark.parametrize(
    ("sidecar", "found"),
    [
        (lfs_pointer(b'{"algorithm":"CRC32C","value":1}'), "a Git LFS pointer where a Spark checksum file"),
        (b"", "an empty file where a Spark checksum file"),
        (b"{not json", "JSONDecodeError"),
        (b'{"algorithm": "CRC32C"}', "KeyError"),
    ],
)
def test_a_spark_sidecar_that_is_not_one_says_nothing_about_the_data(sidecar, found):
    with pytest.raises(NotAChecksumFileError, match=re.escape(found)):
        verify_spark(b"state", sidecar, "f", "f.crc")


def test_a_well_formed_sidecar_that_disagrees_is_still_damage():
    data = os.urandom(2000)
    sidecar = hadoop_checksums(data)
    # truncated or extended after it was written: within its last chunk, or by whole chunks
    for changed, message in (
        (data[:-1], "do not match"),
        (data + bytes(600), "truncated or extended"),
        (data[:1000], "truncated or extended"),
    ):
        with pytest.raises(ChecksumMismatchError, match=message):
            verify_hadoop(changed, sidecar, "f", "s")
    doc = json.dumps({"algorithm": "CRC32C", "value": crc32c(data), "mainFileSize": len(data)}).encode()
    verify_spark(data, doc, "f", "s")
    with pytest.raises(ChecksumMismatchError, match="CRC-32C"):
        verify_spark(bytes([data[0] ^ 1]) + data[1:], doc, "f", "s")


# -- checkpoints whose .crc files are Git LFS pointers -----------------------------------------


def _lfs_copy(checkpoint: str, tmp_path: Path) -> tuple[Path, list[str], list[Path]]:
    """A copy of ``checkpoint`` with every .crc file a Git LFS pointer; the rows read before that."""
    copy = tmp_path / "cp"
    shutil.copytree(checkpoint, copy)
    before = arrow_rows(state_reader.read_state(str(copy), exact_schema=True))
    assert before, "nothing to compare"
    replaced = checksums_as_lfs_pointers(copy)
    assert len(replaced) > 20
    return copy, before, replaced


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "state_reader.io" and r.levelno == logging.WARNING]


def _named(message: str) -> list[str]:
    """The .crc files a warning names."""
    return re.findall(r"(/\S+\.crc)\b", message)


@pytest.mark.parametrize("name", ["agg_window", "rocksdb_cl_agg_window"])
def test_lfs_pointers_over_the_checksums_read_as_spark_reads(spark, checkpoints, tmp_path, caplog, name):
    """Hadoop reads on without a .crc that is not a checksum file, and so does Spark's reader: the same
    rows, here and through every front, with one warning per read that names the .crc files."""
    copy, before, replaced = _lfs_copy(checkpoints(name), tmp_path)
    assert spark_rows(spark.read.format("statestore").load(str(copy))) == before
    assert_same_as_builtin(spark, str(copy), {})
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="state_reader.io"):
        table = state_reader.read_state(str(copy), exact_schema=True)
        assert arrow_rows(table) == before
        (warning,) = _warnings(caplog)
        named = _named(warning)
        assert named and {Path(p) for p in named} <= set(replaced), warning
        count = int(warning.split(" ", 1)[0])
        assert count > len(named) and f"and {count - len(named)} more" in warning, warning
        assert "Git LFS pointer" in warning and "read without checksum verification" in warning
        # one warning per read, naming the same files again
        caplog.clear()
        assert state_reader.read_state(str(copy), exact_schema=True).num_rows == table.num_rows
        assert _warnings(caplog) == [warning]
        # a streamed read warns once, when it has been read
        caplog.clear()
        reader = state_reader.scan_state(str(copy), exact_schema=True)
        assert _warnings(caplog) == []
        assert arrow_rows(reader.read_all()) == before
        assert len(_warnings(caplog)) == 1
        caplog.clear()
        state_reader.read_state(str(copy), verify_checksums=False)
        assert _warnings(caplog) == []


def test_a_well_formed_checksum_among_lfs_pointers_still_catches_damage(checkpoints, tmp_path):
    copy, before, _ = _lfs_copy(checkpoints("agg_window"), tmp_path)
    latest = max(int(p.name) for p in (copy / "commits").iterdir() if p.name.isdigit())
    part = copy / "state" / "0" / "0"
    # the file the latest read opens first: the version's snapshot if there is one, else its delta
    target = next(p for p in (part / f"{latest + 1}.snapshot", part / f"{latest + 1}.delta") if p.exists())
    data = bytearray(target.read_bytes())
    hadoop_sidecar_path(target).write_bytes(hadoop_checksums(bytes(data)))  # the real .crc, restored
    assert arrow_rows(state_reader.read_state(str(copy), exact_schema=True)) == before
    data[len(data) // 2] ^= 0x04
    target.write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatchError, match=re.escape(str(target))):
        state_reader.read_state(str(copy))


def test_lfs_pointers_over_sparks_own_checksums(spark, checkpoints, tmp_path, caplog):
    """Checkpoint format 2: Spark's own <name>.crc (JSON) as LFS pointers too. Spark fails on them (its
    reader and a restarted query alike); the state is read all the same, and the warning says so."""
    copy, before, replaced = _lfs_copy(checkpoints("rocksdb_v2_agg_window"), tmp_path)
    assert any(not p.name.startswith(".") for p in replaced), "no Spark checksum file"
    with session_confs(spark, CHECKPOINT_V2), pytest.raises(Exception, match="JsonParseException"):
        spark.read.format("statestore").load(str(copy)).collect()
    with caplog.at_level(logging.WARNING, logger="state_reader.io"):
        assert arrow_rows(state_reader.read_state(str(copy), exact_schema=True)) == before
    (warning,) = _warnings(caplog)
    assert "where a Spark checksum file (JSON) belongs" in warning, warning
    assert "Spark itself fails to load RocksDB files" in warning
