"""A RocksDB snapshot written as Spark writes one (``providers/rocksdb_snapshot``): the SSTs it yields
are the ones its zip's ``metadata`` names, and the key counts it records are the rows given. No Spark."""

from __future__ import annotations

from state_reader.formats import snapshot_zip
from state_reader.formats.unsaferow import RowBuffer
from state_reader.providers.rocksdb_snapshot import snapshot_files


def _snapshot(rows, extra=None):
    ssts, zipped = {}, None
    for name, data in snapshot_files(rows, extra):
        if name is None:
            zipped = data
        else:
            ssts[name] = b"".join(data)
    raw, _ = snapshot_zip.read_metadata_entry(zipped, "1.zip")
    return ssts, snapshot_zip.parse_metadata(raw, "1.zip")


def test_the_zip_names_every_sst_yielded_and_counts_the_keys_given():
    keys = RowBuffer.from_rows([f"k{i:04d}".encode() for i in range(3000)], "keys")
    values = RowBuffer.from_rows([f"v{i}".encode() for i in range(3000)], "values")
    ssts, metadata = _snapshot([(keys, values)])
    assert ssts and {f.dfs_name for f in metadata.sst_files} == set(ssts)
    assert all(f.size == len(ssts[f.dfs_name]) for f in metadata.sst_files)
    assert metadata.num_keys == 3000


def test_keys_of_sparks_internal_families_count_apart():
    # column family ids are the keys' first two bytes (little-endian): 0 a variable's, 1 Spark's own
    rows = [b"\x00\x00a", b"\x00\x00b", b"\x01\x00c"]
    keys, values = RowBuffer.from_rows(rows, "keys"), RowBuffer.from_rows([b"x"] * 3, "values")
    extra = {"columnFamilyMapping": {"v": 0, "$ttl_v": 1}, "columnFamilyTypeMap": {"v": False, "$ttl_v": True}}
    _, metadata = _snapshot([(keys, values)], extra)
    assert metadata.num_keys == 2
