"""RocksDB changelog files (``formats/changelog``): the ones Spark wrote, and each format version built by hand
from the format notes (Java ``DataOutputStream`` output), damaged or not."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pyarrow.compute as pc
import pytest

import state_reader
from state_reader.errors import CorruptFileError, TruncatedFileError
from state_reader.formats import codecs
from state_reader.formats.changelog import (
    DELETE,
    DELETE_RANGE,
    MERGE,
    PUT,
    LineageItem,
    parse_changelog,
    read_lineage,
)
from state_reader.io.integrity import crc32c
from state_reader.io.storage import Storage
from state_reader.providers.rocksdb import RocksDBStore
from tests.support.paths import GOLDEN

CHECKPOINT = GOLDEN / "spark-3.5.8" / "agg_window_rocksdb_cl"


def _utf(text: str) -> bytes:
    """Java's writeUTF: an unsigned 16-bit length, then the (ASCII here) bytes."""
    raw = text.encode("utf-8")
    return struct.pack(">H", len(raw)) + raw


def _record(key: bytes, value: bytes | None, kind: int | None = None) -> bytes:
    head = b"" if kind is None else bytes([kind])
    body = struct.pack(">i", len(key)) + key
    return head + body + (struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value)


def _changelog(path: Path) -> bytes:
    return codecs.decompress(path.read_bytes(), "lz4", str(path))


@pytest.mark.parametrize("version", [1, 2, 3])
def test_sparks_changelogs_hold_the_batch_change_feed_of_their_partition(version):
    """Version v of partition 0 holds what batch v - 1 changed there: as many puts and deletes as the change feed."""
    parsed = parse_changelog(_changelog(CHECKPOINT / "state" / "0" / "0" / f"{version}.changelog"), "x")
    assert parsed.format_version == 1 and parsed.lineage == []  # Spark 3.5: no column families, format 1
    feed = state_reader.changes(str(CHECKPOINT), version - 1, version - 1)
    feed = feed.filter(pc.equal(feed.column("partition_id"), 0))
    kinds = feed.column("change_type").to_pylist()
    assert parsed.records, "the batch changed nothing in partition 0: pick another version"
    assert sum(k == PUT for k, _, _ in parsed.records) == kinds.count("update")
    assert sum(k == DELETE for k, _, _ in parsed.records) == kinds.count("delete")
    assert all((v is None) == (k == DELETE) for k, _, v in parsed.records)


def test_every_format_version_reads_back():
    records = [(b"k1", b"v1", PUT), (b"k2", None, DELETE), (b"k3", b"e", MERGE)]
    lineage = [{"version": 3, "checkpointUniqueId": "a-b"}, {"version": 4, "checkpointUniqueId": "c-d"}]
    plain = b"".join(_record(k, v) for k, v, _ in records[:2])
    typed = b"".join(_record(k, v, kind) for k, v, kind in records)
    files = {
        1: plain + struct.pack(">i", -1),
        2: _utf("v2") + typed + b"\x00",
        3: _utf("v3") + _utf(json.dumps(lineage)) + plain + struct.pack(">i", -1),
        4: _utf("v4") + _utf(json.dumps(lineage)) + typed + b"\x00",
    }
    for version, data in files.items():
        parsed = parse_changelog(data, "x.changelog")
        assert parsed.format_version == version
        # v2 and v4 carry a type per record (merges too); v1 and v3 only puts and deletes
        expected = [(kind, k, v) for k, v, kind in (records if version in (2, 4) else records[:2])]
        assert parsed.records == expected
        items = [LineageItem(3, "a-b"), LineageItem(4, "c-d")] if version >= 3 else []
        assert parsed.lineage == items
        assert read_lineage(data, "x.changelog") == (version, items)


def test_damaged_changelogs_say_what_is_wrong():
    whole = _utf("v2") + _record(b"key", b"value", PUT) + b"\x00"
    for cut in (len(whole) - 1, len(whole) - 4):
        with pytest.raises(TruncatedFileError, match="truncated"):
            parse_changelog(whole[:cut], "9.changelog")
    with pytest.raises(CorruptFileError, match="unknown record type 0x07"):
        parse_changelog(_utf("v2") + _record(b"k", b"v", 0x07) + b"\x00", "9.changelog")
    with pytest.raises(CorruptFileError, match="follow the end-of-file record"):
        parse_changelog(whole + b"junk", "9.changelog")
    with pytest.raises(CorruptFileError, match="format version 9 is not supported"):
        parse_changelog(_utf("v9") + whole, "9.changelog")
    with pytest.raises(CorruptFileError, match="not a valid JSON list"):
        parse_changelog(_utf("v3") + _utf("{nope") + struct.pack(">i", -1), "9.changelog")


# -- Spark 4.3's delete range record (0x20): its first key and its end key, each length-prefixed ---------------


def _delete_range(begin: bytes, end: bytes) -> bytes:
    """A delete range record as Spark 4.3's changelog writer (v2/v4) frames it: the type, then the first key and
    the end key as a put frames its key and value."""
    return bytes([DELETE_RANGE]) + struct.pack(">i", len(begin)) + begin + struct.pack(">i", len(end)) + end


def test_a_delete_range_record_reads_back_with_its_first_and_end_keys():
    lineage = _utf(json.dumps([{"version": 1, "checkpointUniqueId": "a-b"}]))
    body = _record(b"\x00\x01k", b"v", PUT) + _delete_range(b"\x00\x01", b"\x00\x02") + _record(b"\x00\x01z", b"w", PUT)
    for data in (_utf("v2") + body + b"\x00", _utf("v4") + lineage + body + b"\x00"):
        parsed = parse_changelog(data, "2.changelog")
        assert parsed.records == [
            (PUT, b"\x00\x01k", b"v"),
            (DELETE_RANGE, b"\x00\x01", b"\x00\x02"),
            (PUT, b"\x00\x01z", b"w"),
        ]
        assert parsed.path == "2.changelog"
    # v1 and v3 carry no record types: a delete range cannot be written there (Spark's v1 writer refuses it)
    with pytest.raises(CorruptFileError, match="end key size -1"):
        parse_changelog(_utf("v2") + bytes([DELETE_RANGE]) + _record(b"k", None) + b"\x00", "2.changelog")
    with pytest.raises(TruncatedFileError, match=r"runs past the end|does not fit"):
        parse_changelog(_utf("v2") + _delete_range(b"\x00\x01", b"\x00\x02")[:-1], "2.changelog")


def _store_with_changelogs(tmp_path: Path, logs: list[bytes], codec: str = "lz4") -> RocksDBStore:
    """A RocksDB store of changelogs alone (versions 1..n, no snapshot: version 0 is the empty store), each
    compressed as Spark compresses them."""
    directory = tmp_path / "state" / "0" / "0"
    directory.mkdir(parents=True)
    for version, data in enumerate(logs, start=1):
        (directory / f"{version}.changelog").write_bytes(codecs.compress(data, codec))
    return RocksDBStore(Storage(str(tmp_path)), "state/0/0", codec)


def _v2(*records: bytes) -> bytes:
    return _utf("v2") + b"".join(records) + b"\x00"


# keys as a store with column families holds them: a 2-byte family id, then the encoded key
CF1, CF2 = b"\x01\x00", b"\x02\x00"
KEYS = [CF1 + b"\x00a", CF1 + b"\x00a\x00", CF1 + b"\x00b", CF1 + b"\x00\xff", CF1 + b"\x01", CF2 + b"\x00a", CF2]


def test_a_delete_range_removes_the_keys_from_its_first_key_to_its_end_key_compared_as_bytes(tmp_path):
    """As Spark's replay applies it (RocksDB's deleteRange, bytewise comparator): the first key included, the
    end key excluded, keys compared as unsigned bytes, column family id and all; records before it are
    removed by it, records after it stay."""
    first = _v2(*(_record(k, b"v" + k, PUT) for k in KEYS))
    second = _v2(
        _delete_range(CF1 + b"\x00a\x00", CF1 + b"\x01"),  # \x00a\x00 .. \x00\xff (not \x00a, not \x01)
        _record(CF1 + b"\x00c", b"new", PUT),  # inside the range, but after it: kept
        _delete_range(CF2 + b"\x00b", CF2 + b"\x00b"),  # empty: nothing
    )
    store = _store_with_changelogs(tmp_path, [first, second])
    assert store.load(2).entries == {
        CF1 + b"\x00a": b"v" + CF1 + b"\x00a",
        CF1 + b"\x00c": b"new",
        CF1 + b"\x01": b"v" + CF1 + b"\x01",
        CF2 + b"\x00a": b"v" + CF2 + b"\x00a",
        CF2: b"v" + CF2,
    }
    # a whole column family: from its id bytes to the next two bytes in byte order (ids are little-endian, so
    # 0x0101 would follow family 1, not family 2)
    whole = _store_with_changelogs(tmp_path / "whole", [first, _v2(_delete_range(CF1, b"\x01\x01"))])
    assert sorted(whole.load(2).entries) == [CF2, CF2 + b"\x00a"]


def test_a_delete_range_with_row_checksums_frames_its_end_key_as_a_value(tmp_path):
    """With row checksums Spark frames the end key as it frames a value (checksum of the first and end keys,
    length, key); the first key is written bare."""
    begin, end = CF1 + b"\x00a\x00", CF1 + b"\x01"
    framed = struct.pack("<Ii", crc32c(begin + end), len(end)) + end
    first = _v2(*(_record(k, b"v", PUT) for k in KEYS))
    store = _store_with_changelogs(tmp_path, [first, _v2(_delete_range(begin, framed))])
    store.row_checksum = True
    assert sorted(store.load(2).entries) == sorted([CF1 + b"\x00a", CF1 + b"\x01", CF2 + b"\x00a", CF2])
    bare = _store_with_changelogs(tmp_path / "bare", [first, _v2(_delete_range(begin, end))])
    bare.row_checksum = True
    with pytest.raises(CorruptFileError, match=r"2\.changelog: the end key of a delete range record .* not framed"):
        bare.load(2)


def test_a_reversed_delete_range_is_refused_naming_the_file(tmp_path):
    """RocksDB refuses a range that ends before it begins, so Spark cannot rebuild such a version either."""
    store = _store_with_changelogs(tmp_path, [_v2(_record(CF1 + b"a", b"v", PUT), _delete_range(CF2, CF1))])
    with pytest.raises(CorruptFileError, match=r"1\.changelog: a delete range record ends \(0100\) before it begins"):
        store.load(1)


def test_sparks_reader_and_ours_replay_a_delete_range_in_a_real_changelog_alike(spark, checkpoints, tmp_path):
    """A transformWithState checkpoint whose last changelog in partition 0 gains, before its end, a delete
    range over the map variable's whole column family and then a put of one of its entries back: Spark 4.3's
    reader (which replays the record itself) and ours see the same map, that entry the only one of partition 0;
    the change feed of that version is refused, as Spark's is."""
    import shutil

    from tests.core.test_rewrite_upsert_families import _store

    src = checkpoints("tws")
    copy = tmp_path / "cp"
    shutil.copytree(src, copy)
    rows = _store(src)
    plan = rows.plan
    directory = copy / "state" / "0" / "0"
    path = directory / f"{plan.version}.changelog"
    assert not (directory / f"{plan.version}.zip").exists(), "the version is a snapshot: no changelog replayed"
    log = parse_changelog(codecs.decompress(path.read_bytes(), plan.codec, str(path)), str(path))
    assert log.format_version == 2
    cf = rows.mapping["counters"].to_bytes(2, "little")
    keys, values = rows.load(0)
    mine = [
        (bytes(keys.buf[k : k + kn]), bytes(values.buf[v : v + vn]))
        for k, kn, v, vn in zip(keys.starts, keys.lengths, values.starts, values.lengths, strict=True)
        if bytes(keys.buf[k : k + 2]) == cf
    ]
    assert len(mine) > 1
    kept_key, kept_value = mine[-1]
    # the family's keys: from its id bytes to those bytes with the second one incremented
    records = [_record(k, v, kind) for kind, k, v in log.records]
    records += [_delete_range(cf, cf[:1] + bytes([cf[1] + 1])), _record(kept_key, kept_value, PUT)]
    path.write_bytes(codecs.compress(_utf("v2") + b"".join(records) + b"\x00", plan.codec))
    (directory / f".{path.name}.crc").unlink()  # Hadoop's checksum of the file as Spark wrote it

    def spark_rows(checkpoint) -> list[dict]:
        df = spark.read.format("statestore").option("stateVarName", "counters").load(str(checkpoint))
        return sorted((r.asDict(recursive=True) for r in df.collect()), key=repr)

    ours = state_reader.read_state(str(copy), state_var_name="counters").to_pylist()
    before = state_reader.read_state(src, state_var_name="counters").to_pylist()
    (kept,) = [r for r in ours if r["partition_id"] == 0]
    assert [r for r in ours if r["partition_id"] != 0] == [r for r in before if r["partition_id"] != 0]
    want = [
        r
        for r in spark_rows(src)
        if r["partition_id"] != 0 or (r["key"], r["user_map_key"]) == (kept["key"], kept["user_map_key"])
    ]
    assert spark_rows(copy) == want and len(want) == len(ours)
    with pytest.raises(state_reader.UnsupportedOptionError, match="delete range"):
        state_reader.changes(str(copy), plan.version - 1, state_var_name="counters")
