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
from state_reader.formats.changelog import DELETE, MERGE, PUT, LineageItem, parse_changelog, read_lineage
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
