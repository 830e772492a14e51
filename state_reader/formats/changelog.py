"""RocksDB provider changelog files: ``<version>.changelog`` and ``<version>_<uuid>.changelog``.

A changelog holds the changes one state store version made. It is compressed with
the checkpoint's state codec (see :mod:`state_reader.formats.codecs`); once decompressed it
is Java ``DataOutputStream`` output (big-endian ints, ``writeUTF`` strings)::

    v1: record*  int32 -1
        record = int32 keyLen | key | int32 valueLen | value      (put)
               | int32 keyLen | key | int32 -1                    (delete)
    v2: writeUTF("v2") | record* | byte 0x00
        record = u8 type | int32 keyLen | key | int32 valueLen | value
        type 0x01 put, 0x11 merge (value = one element to append),
             0x10 delete (valueLen is -1 and no value follows),
             0x20 delete range (Spark 4.3+): key = the range's first key,
                  value = its end key (excluded), see :func:`delete_range_end`
    v3: writeUTF("v3") | writeUTF(lineage JSON) | records and end as v1
    v4: writeUTF("v4") | writeUTF(lineage JSON) | records and end as v2

v1 has no header: a file whose first ``writeUTF`` string is not ``v<digits>``
(including an empty string, as the first key length of a v1 file reads) is v1
and is parsed from byte 0. v2/v4 are written for stores with virtual column
families, v3/v4 for checkpoint format version 2.

The lineage is a JSON array of ``{"version": n, "checkpointUniqueId": "<uuid>"}``
naming the files this version is built on, from the newest snapshot up to the
previous version (``[]`` when there is none).

Keys and values are stored exactly as RocksDB holds them (see
:mod:`state_reader.formats.rocksdb_encoding`).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

from state_reader.errors import CorruptFileError, TruncatedFileError
from state_reader.formats.schema_files import decode_modified_utf8

PUT = 0x01
DELETE = 0x10
MERGE = 0x11
# every key from the record's key (included) to its value (excluded), compared as unsigned bytes (Spark 4.3's
# RocksDB.deleteRange; no operator of 4.3.0 writes one)
DELETE_RANGE = 0x20
_END = 0x00
# as Spark's change feed names each record type (it refuses a delete range there)
RECORD_TYPE_NAMES = {PUT: "update", DELETE: "delete", MERGE: "append", DELETE_RANGE: "delete_range"}

SUPPORTED_VERSIONS = (1, 2, 3, 4)
_INT = struct.Struct(">i")
_USHORT = struct.Struct(">H")

# (record type, key bytes, value bytes or None for a delete); a delete range's value is its end key as written
Record = tuple[int, bytes, "bytes | None"]


@dataclass(frozen=True)
class LineageItem:
    """One entry of a changelog's lineage: a version and the unique id of its files."""

    version: int
    unique_id: str


@dataclass
class Changelog:
    """A parsed changelog: its format version, lineage (v3/v4) and records in order."""

    format_version: int
    lineage: list[LineageItem] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    # the file, as errors about its records name it
    path: str = ""


def _header(data: bytes) -> tuple[int, int]:
    """(format version, offset after the version string); v1 files have no header."""
    if len(data) < 2:
        return 1, 0
    (n,) = _USHORT.unpack_from(data, 0)
    if n < 2 or 2 + n > len(data):
        return 1, 0
    text = data[2 : 2 + n]
    if text[:1] != b"v" or not text[1:].isdigit():
        return 1, 0
    return int(text[1:]), 2 + n


def _lineage(data: bytes, pos: int, path: str) -> tuple[list[LineageItem], int]:
    if pos + 2 > len(data):
        raise TruncatedFileError(f"{path}: ends before the lineage at byte {pos}", path=path)
    (n,) = _USHORT.unpack_from(data, pos)
    start = pos + 2
    if start + n > len(data):
        raise TruncatedFileError(
            f"{path}: lineage of {n} bytes at byte {start} runs past the end ({len(data)} bytes)", path=path
        )
    try:
        items = json.loads(decode_modified_utf8(data[start : start + n]))
        lineage = [LineageItem(int(i["version"]), str(i["checkpointUniqueId"])) for i in items]
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
        raise CorruptFileError(
            f"{path}: the lineage at byte {start} is not a valid JSON list: {exc}", path=path
        ) from exc
    return lineage, start + n


def _records(data: bytes, pos: int, path: str, typed: bool) -> list[Record]:
    """Records up to the end marker: v1/v3 (``typed`` False) or v2/v4 (a type byte per record)."""
    out: list[Record] = []
    n = len(data)
    unpack = _INT.unpack_from
    end = "end-of-file record" if typed else "end-of-file marker"
    while True:
        start = pos
        kind = PUT
        if typed:
            if pos >= n:
                raise TruncatedFileError(f"{path}: ends at byte {n} without the {end}", path=path)
            kind = data[pos]
            pos += 1
            if kind == _END:
                break
            if kind not in RECORD_TYPE_NAMES:
                raise CorruptFileError(f"{path}: unknown record type 0x{kind:02x} at byte {start}", path=path)
        if pos + 4 > n:
            raise TruncatedFileError(
                f"{path}: ends at byte {n} without the {end}"
                if not typed
                else f"{path}: record at byte {start} is cut off",
                path=path,
            )
        (key_len,) = unpack(data, pos)
        pos += 4
        if key_len == -1 and not typed:
            break
        if key_len < 0:
            raise CorruptFileError(f"{path}: negative key size {key_len} at byte {pos - 4}", path=path)
        if pos + key_len + 4 > n:
            raise TruncatedFileError(
                f"{path}: key of {key_len} bytes at byte {pos} runs past the end ({n} bytes)", path=path
            )
        key = data[pos : pos + key_len]
        pos += key_len
        (value_len,) = unpack(data, pos)
        pos += 4
        # v1/v3: any negative size marks a delete, as Spark reads it; v2/v4 say so in the type
        if kind == DELETE or (not typed and value_len < 0):
            if typed and value_len != -1:
                raise CorruptFileError(
                    f"{path}: delete record at byte {start} has value size {value_len}, expected -1", path=path
                )
            out.append((DELETE, key, None))
            continue
        if kind == DELETE_RANGE and value_len < 0:
            raise CorruptFileError(
                f"{path}: delete range record at byte {start} has end key size {value_len}", path=path
            )
        if value_len < 0 or pos + value_len > n:
            raise TruncatedFileError(
                f"{path}: value of {value_len} bytes at byte {pos} does not fit in the file ({n} bytes)", path=path
            )
        out.append((kind, key, data[pos : pos + value_len]))
        pos += value_len
    if pos != n:
        raise CorruptFileError(f"{path}: {n - pos} bytes follow the {end}", path=path)
    return out


def read_lineage(data: bytes, path: str) -> tuple[int, list[LineageItem]]:
    """(format version, lineage) of a decompressed changelog, without parsing its records."""
    version, pos = _header(data)
    if version not in SUPPORTED_VERSIONS:
        raise CorruptFileError(f"{path}: changelog format version {version} is not supported (known: 1-4)", path=path)
    if version >= 3:
        return version, _lineage(data, pos, path)[0]
    return version, []


def parse_changelog(data: bytes, path: str) -> Changelog:
    """Parse a decompressed changelog of any format version (1-4)."""
    version, pos = _header(data)
    if version not in SUPPORTED_VERSIONS:
        raise CorruptFileError(f"{path}: changelog format version {version} is not supported (known: 1-4)", path=path)
    lineage: list[LineageItem] = []
    if version >= 3:
        lineage, pos = _lineage(data, pos, path)
    records = _records(data, pos, path, typed=has_column_families(version))
    return Changelog(format_version=version, lineage=lineage, records=records, path=path)


def has_column_families(format_version: int) -> bool:
    """Whether a changelog of this format version carries record types (and column families)."""
    return format_version in (2, 4)
