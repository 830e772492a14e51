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
    crc32c_pure,
    hadoop_checksums,
    hadoop_checksums_of,
    verify_hadoop,
    verify_spark,
)
from tests.support.damage import (
    checksums_as_lfs_pointers,
    copy_of,
    delta_in_use,
    hadoop_sidecar_path,
    latest_version,
    lfs_pointer,
)
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


# -- sidecars of the files real queries wrote, read through the API ------------------------------


def test_missing_sidecars_are_fine(checkpoints, tmp_path):
    """Object stores have no .crc files: reading without them gives the same rows."""
    cp = copy_of(checkpoints, tmp_path)
    clean = arrow_rows(state_reader.read_state(str(cp)))
    sidecars = list(cp.rglob("*.crc"))
    assert sidecars
    for sidecar in sidecars:
        sidecar.unlink()
    assert arrow_rows(state_reader.read_state(str(cp))) == clean
    assert state_reader.read_metadata(str(cp)).num_rows >= 1


@pytest.mark.parametrize(
    ("sidecar", "expected"),
    [
        (b"", "an empty file where a Hadoop checksum file belongs"),
        (b"crc\x00\x00\x00\x00\x00", "chunk size 0"),
        (b"crc\x00\x00\x00\x02\x00\x01\x02\x03", "3 bytes of checksums"),
        (b"CRC!\x00\x00\x02\x00\x00\x00\x00\x00", "where a Hadoop checksum file belongs"),
    ],
)
def test_malformed_hadoop_sidecar(checkpoints, tmp_path, caplog, sidecar, expected):
    """A .crc that is not a checksum file says nothing about the file beside it, as Hadoop's reader
    also holds: that file is read unverified, and a warning names the .crc and what it holds."""
    cp = copy_of(checkpoints, tmp_path)
    clean = arrow_rows(state_reader.read_state(str(cp)))
    delta = delta_in_use(cp)
    hadoop_sidecar_path(delta).write_bytes(sidecar)
    with caplog.at_level(logging.WARNING, logger="state_reader.io"):
        assert arrow_rows(state_reader.read_state(str(cp))) == clean
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "state_reader.io"]
    assert expected in warning and str(hadoop_sidecar_path(delta)) in warning, warning


def test_hadoop_sidecars_of_real_files_verify(checkpoints):
    """Our reading of Hadoop's .crc format agrees with every sidecar Spark left, and catches a flip."""
    root = Path(checkpoints("agg_window"))
    checked = 0
    for sidecar in root.rglob(".*.crc"):
        main = sidecar.with_name(sidecar.name[1 : -len(".crc")])
        if not main.is_file():
            continue
        data = main.read_bytes()
        verify_hadoop(data, sidecar.read_bytes(), str(main), str(sidecar))
        if data:
            with pytest.raises(ChecksumMismatchError, match=f"bytes 0..{min(len(data), 512) - 1}"):
                verify_hadoop(bytes([data[0] ^ 1]) + data[1:], sidecar.read_bytes(), str(main), "s")
        checked += 1
    assert checked > 20


# -- Spark's checksum sidecars (checkpoint format version 2) ------------------------------


@pytest.fixture(scope="module")
def v2_checkpoint(checkpoints) -> Path:
    """A RocksDB checkpoint of format version 2, whose zips and changelogs have Spark .crc sidecars."""
    return Path(checkpoints("rocksdb_v2_agg_window"))


def _spark_sidecars(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.crc") if not p.name.startswith("."))


def test_spark_sidecars_of_real_files_verify(v2_checkpoint):
    sidecars = _spark_sidecars(v2_checkpoint)
    assert len(sidecars) >= 4
    for sidecar in sidecars:
        doc = json.loads(sidecar.read_text())
        main = sidecar.with_name(sidecar.name[: -len(".crc")])
        data = main.read_bytes()
        assert doc["algorithm"] == "CRC32C" and doc["mainFileSize"] == len(data)
        assert crc32c(data) == doc["value"] & 0xFFFFFFFF
        assert crc32c_pure(data) == doc["value"] & 0xFFFFFFFF  # the fallback agrees
        verify_spark(data, sidecar.read_bytes(), str(main), str(sidecar))


def test_spark_sidecar_catches_damage(v2_checkpoint, tmp_path):
    cp = tmp_path / "cp"
    shutil.copytree(v2_checkpoint, cp)
    clean = arrow_rows(state_reader.read_state(str(cp)))
    version = latest_version(cp)
    part = cp / "state" / "0" / "0"
    # the file the latest read opens: the version's zip if there is one, else its changelog
    target = (sorted(part.glob(f"{version}_*.zip")) or sorted(part.glob(f"{version}_*.changelog")))[0]
    hadoop_sidecar_path(target).unlink()  # leave only Spark's sidecar to catch it
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x20
    target.write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatchError, match=r"CRC-32C in .*crc") as caught:
        state_reader.read_state(str(cp))
    assert str(target) in str(caught.value)
    target.write_bytes(bytes(data[:-1]))
    with pytest.raises(ChecksumMismatchError, match="mainFileSize"):
        state_reader.read_state(str(cp))
    data[len(data) // 2] ^= 0x20
    target.write_bytes(bytes(data))  # intact again
    sidecar = target.with_name(target.name + ".crc")
    sidecar.write_text("{not json")  # not a checksum file: it says nothing about the file, which is read
    assert arrow_rows(state_reader.read_state(str(cp))) == clean
    sidecar.write_text(json.dumps({"algorithm": "SHA-512", "value": 1}))  # a future algorithm: not checked
    assert arrow_rows(state_reader.read_state(str(cp))) == clean


def test_crc32c_check_value():
    assert crc32c(b"123456789") == crc32c_pure(b"123456789") == 0xE3069283
    payload = os.urandom(5000)
    assert crc32c(payload) == crc32c_pure(payload)
