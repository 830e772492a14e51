"""RocksDB snapshot zips (``formats/snapshot_zip``): Spark's own, read without extracting; the ``metadata``
entry written and read back; a hostile or damaged zip refused before anything is written."""

from __future__ import annotations

import io
import zipfile

import pytest

import state_reader
from state_reader.errors import CorruptFileError, UnsafeArchiveError
from state_reader.formats.snapshot_zip import (
    SST_DIR,
    ZIP_METADATA,
    DataFile,
    build_zip,
    extract,
    metadata_entry,
    parse_metadata,
    read_metadata_entry,
)
from tests.support.paths import GOLDEN

CHECKPOINT = GOLDEN / "spark-3.5.8" / "agg_window_rocksdb_cl"


@pytest.mark.parametrize("version", [2, 4, 6])
def test_sparks_zip_names_its_ssts_and_counts_its_keys(version):
    store = CHECKPOINT / "state" / "0" / "0"
    raw = (store / f"{version}.zip").read_bytes()
    entry, wal = read_metadata_entry(raw, "x.zip")
    meta = parse_metadata(entry, "x.zip")
    assert wal == 0  # Spark flushes before it zips: no write-ahead log to replay
    assert meta.sst_files, "a snapshot of a non-empty store names its SST files"
    for sst in meta.sst_files:  # each one is in the shared SSTs/ directory, at the size recorded
        assert (store / SST_DIR / sst.dfs_name).stat().st_size == sst.size
    # numKeys is the partition's key count at that version (batch version - 1), as the reader finds it
    rows = state_reader.read_state(
        str(CHECKPOINT), batch_id=version - 1, snapshot_start_batch_id=version - 1, snapshot_partition_id=0
    )
    assert meta.num_keys == rows.num_rows


def test_a_written_metadata_entry_reads_back(tmp_path):
    ssts = [DataFile("000008.sst", "000008-1a2b.sst", 1234), DataFile("000009.sst", "000009-3c4d.sst", 99)]
    entry = metadata_entry(ssts, 42, extra={"columnFamilyMapping": {"default": 0, "$timers": 3}})
    raw = build_zip({ZIP_METADATA: entry, "CURRENT": b"MANIFEST-000005\n", "OPTIONS-000007": b"[Version]\n"})
    meta = parse_metadata(read_metadata_entry(raw, "x.zip")[0], "x.zip")
    assert (meta.sst_files, meta.num_keys, meta.column_families) == (ssts, 42, {"default": 0, "$timers": 3})
    assert extract(raw, str(tmp_path), "x.zip") == entry
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CURRENT", "OPTIONS-000007"]


def _zip_with(name: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(ZIP_METADATA, metadata_entry([], 0))
        archive.writestr(name, b"x")
    return out.getvalue()


@pytest.mark.parametrize("name", ["../escaped", "/etc/escaped", "a/../../escaped"])
def test_an_entry_that_leaves_the_target_is_refused_before_anything_is_written(tmp_path, name):
    target = tmp_path / "db"
    target.mkdir()
    with pytest.raises(UnsafeArchiveError):
        extract(_zip_with(name), str(target), "7.zip")
    assert list(target.iterdir()) == [] and not (tmp_path / "escaped").exists()


def test_damaged_metadata_says_what_is_wrong():
    with pytest.raises(CorruptFileError, match="version line 'v2'"):
        parse_metadata(b'v2\n{"sstFiles": []}', "7.zip")
    with pytest.raises(CorruptFileError, match="cannot be parsed"):
        parse_metadata(b"v1\n{not json", "7.zip")
    with pytest.raises(UnsafeArchiveError, match="not a plain file name"):
        parse_metadata(metadata_entry([DataFile("../x.sst", "x.sst", 1)], 1), "7.zip")
    with pytest.raises(CorruptFileError, match="no 'metadata' entry"):
        read_metadata_entry(build_zip({"CURRENT": b"x"}), "7.zip")
    with pytest.raises(CorruptFileError):
        read_metadata_entry(b"PK\x03\x04 not a zip", "7.zip")
