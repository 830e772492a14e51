"""RocksDB snapshot and changelog files that are hostile, missing, or remote."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

import pytest

import state_reader
from state_reader.errors import MissingStateFileError, UnsafeArchiveError
from state_reader.formats import snapshot_zip
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from tests.support.oracle import arrow_rows


def _latest_version(path: Path) -> int:
    return CheckpointDir(Storage(str(path))).committed_batches[-1] + 1


def _rewrite_zip(zip_path: Path, extra: list[tuple[zipfile.ZipInfo, bytes]], metadata: dict | None = None) -> None:
    """Rewrite a snapshot zip with extra entries and/or other Spark metadata."""
    with zipfile.ZipFile(zip_path) as src:
        entries = [(info, src.read(info)) for info in src.infolist()]
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as out:
        for info, data in entries:
            if info.filename == "metadata" and metadata is not None:
                data = ("v1\n" + json.dumps(metadata)).encode()
            out.writestr(info, data)
        for info, data in extra:
            out.writestr(info, data)
    # a crafted zip comes without a matching checksum sidecar
    (zip_path.parent / f".{zip_path.name}.crc").unlink(missing_ok=True)
    (zip_path.parent / f"{zip_path.name}.crc").unlink(missing_ok=True)


def _symlink(name: str, target: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3  # unix, so the mode bits are meaningful
    info.external_attr = 0o120777 << 16
    return (info, target.encode())


@pytest.fixture
def redirected_tmp(tmp_path, monkeypatch):
    """Make the reader's temporary directories land in a directory the test can inspect."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "metadata_sst", "metadata_log"])
def test_hostile_zip_is_refused(checkpoints, tmp_path, redirected_tmp, kind):
    copy = shutil.copytree(checkpoints("rocksdb_agg_fmt2"), tmp_path / "checkpoint")
    version = _latest_version(copy)
    zip_path = copy / "state" / "0" / "0" / f"{version}.zip"
    outside = tmp_path / "escaped"
    with zipfile.ZipFile(zip_path) as z:
        metadata = json.loads(z.read("metadata").decode().split("\n", 1)[1])
    if kind == "dotdot":
        entry = "../../escaped"
        _rewrite_zip(zip_path, [(zipfile.ZipInfo(entry), b"x")])
    elif kind == "absolute":
        entry = str(outside)
        _rewrite_zip(zip_path, [(zipfile.ZipInfo(entry), b"x")])
    elif kind == "symlink":
        entry = "CURRENT.link"
        _rewrite_zip(zip_path, [_symlink(entry, str(outside))])
    elif kind == "metadata_sst":
        entry = "../escaped"
        metadata["sstFiles"][0]["localFileName"] = entry
        _rewrite_zip(zip_path, [], metadata)
    else:
        entry = "/tmp/escaped.log"
        metadata["logFiles"] = [{"localFileName": entry, "dfsLogFileName": "1.log", "sizeBytes": 1}]
        _rewrite_zip(zip_path, [], metadata)

    with pytest.raises(UnsafeArchiveError) as info:
        state_reader.read_state(str(copy), batch_id=version - 1)
    message = str(info.value)
    assert f"{version}.zip" in message and entry in message
    assert not outside.exists()
    assert not (redirected_tmp / "escaped").exists()
    assert list(redirected_tmp.iterdir()) == [], "the temporary directory was not removed"
    # other snapshots of the same checkpoint are still read
    assert state_reader.read_state(str(copy), batch_id=version - 2).num_rows > 0


def test_oversized_zip_is_refused(checkpoints, tmp_path, monkeypatch, redirected_tmp):
    copy = shutil.copytree(checkpoints("rocksdb_agg_fmt2"), tmp_path / "checkpoint")
    version = _latest_version(copy)
    monkeypatch.setattr(snapshot_zip, "MAX_ZIP_BYTES", 1024)
    with pytest.raises(UnsafeArchiveError, match=rf"{version}\.zip.*more than the 1024"):
        state_reader.read_state(str(copy))
    assert list(redirected_tmp.iterdir()) == []


def test_temporary_directory_removed_after_reading(checkpoints, redirected_tmp):
    assert state_reader.read_state(checkpoints("rocksdb_agg_fmt2")).num_rows > 0
    assert state_reader.read_state(checkpoints("rocksdb_cl_agg_fmt2")).num_rows > 0
    assert list(redirected_tmp.iterdir()) == []


def _partitions(checkpoint: Path) -> list[Path]:
    return sorted(p for p in (checkpoint / "state" / "0").iterdir() if p.name.isdigit())


def _versions(directory: Path, suffix: str) -> list[int]:
    return sorted(int(p.stem) for p in directory.glob(f"*{suffix}") if p.stem.isdigit())


def test_missing_changelog_is_named(checkpoints, tmp_path):
    copy = shutil.copytree(checkpoints("rocksdb_cl_agg_window"), tmp_path / "checkpoint")
    # a version that only a changelog holds, so reading it needs that changelog
    part, version = next(
        (part, v)
        for part in _partitions(copy)
        for v in _versions(part, ".changelog")
        if v not in _versions(part, ".zip")
    )
    victim = part / f"{version}.changelog"
    victim.unlink()
    with pytest.raises(MissingStateFileError) as info:
        state_reader.read_state(str(copy), batch_id=version - 1)
    message = str(info.value)
    assert str(victim) in message
    assert "zips" in message and "changelogs" in message


def _sst_names(zip_path: Path) -> list[str]:
    with zipfile.ZipFile(zip_path) as z:
        return [f["dfsSstFileName"] for f in json.loads(z.read("metadata").decode().split("\n", 1)[1])["sstFiles"]]


def test_missing_zip_and_sst_are_named(checkpoints, tmp_path):
    copy = shutil.copytree(checkpoints("rocksdb_agg_window"), tmp_path / "checkpoint")
    version = _latest_version(copy)
    part = copy / "state" / "0" / "0"
    victim = part / f"{version}.zip"
    victim.unlink()
    with pytest.raises(MissingStateFileError, match=re.escape(str(victim))):
        state_reader.read_state(str(copy))
    ssts = _sst_names(part / f"{version - 1}.zip")
    assert ssts
    (part / "SSTs" / ssts[0]).unlink()
    with pytest.raises(MissingStateFileError, match=re.escape(ssts[0])):
        state_reader.read_state(str(copy), batch_id=version - 2)


def test_remote_read_downloads_only_needed_files(checkpoints, monkeypatch):
    """Through an fsspec URL only the zip, its SSTs and the later changelogs of the version are read."""
    import fsspec

    local = Path(checkpoints("rocksdb_cl_agg_window"))
    fs = fsspec.filesystem("memory")
    root = "/rocksdb_cl_agg_window"
    if fs.exists(root):
        fs.rm(root, recursive=True)
    fs.put(str(local), root, recursive=True)
    read: list[str] = []
    original = Storage.read_bytes

    def spy(self, rel):
        read.append(rel)
        return original(self, rel)

    monkeypatch.setattr(Storage, "read_bytes", spy)
    batches = CheckpointDir(Storage(str(local))).committed_batches
    for batch in (batches[-1], batches[len(batches) // 2]):
        expected_rows = arrow_rows(state_reader.read_state(str(local), batch_id=batch))
        read.clear()
        assert arrow_rows(state_reader.read_state(f"memory://{root}", batch_id=batch)) == expected_rows
        version = batch + 1
        expected = set()
        for part in _partitions(local):
            rel = f"state/0/{part.name}"
            zips = [v for v in _versions(part, ".zip") if v <= version]
            start = zips[-1] if zips else 0
            if start:
                expected.add(f"{rel}/{start}.zip")
                expected |= {f"{rel}/SSTs/{name}" for name in _sst_names(part / f"{start}.zip")}
            expected |= {f"{rel}/{v}.changelog" for v in range(start + 1, version + 1)}
        state_reads = {r for r in read if r.startswith("state/0/") and "/_metadata/" not in r}
        assert state_reads == expected
        assert len(state_reads) == len([r for r in read if r in state_reads]), "a file was read twice"
    fs.rm(root, recursive=True)
    assert os.path.isdir(local)


def test_corrupt_sst_block_is_reported_not_skipped(tmp_path, monkeypatch):
    """RocksDB stops an items() walk quietly at a bad block; the reader must raise instead."""
    import state_reader
    from tests.support.damage import golden_copy_with_damaged_ssts

    monkeypatch.setenv("STATE_READER_NUMBA", "0")  # through rocksdict (test_sst covers the SST reader)
    copy = golden_copy_with_damaged_ssts(tmp_path)
    with pytest.raises(state_reader.CorruptFileError, match="block checksum mismatch"):
        state_reader.read_state(str(copy))
