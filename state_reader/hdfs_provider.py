"""HDFSBackedStateStoreProvider files: ``<version>.delta`` and ``<version>.snapshot``.

Both are compressed with the checkpoint's codec and hold, once decompressed,
records framed with Java big-endian ints::

    put    : int32 keyLen | key | int32 valueLen | value
    remove : int32 keyLen | key | int32 -1           (deltas only)
    end    : int32 -1

Version V = the newest snapshot S <= V, then deltas S+1..V applied in order.
"""

from __future__ import annotations

import re
import struct
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from .checkpoint import CONF_ROW_CHECKSUM
from .codecs import decompress
from .errors import CorruptFileError, MissingStateFileError, TruncatedFileError
from .storage import Storage
from .unsaferow import RowBuffer, decode_rows

if TYPE_CHECKING:
    from .reader import StateReadPlan


_FILE_RE = re.compile(r"^(\d+)\.(delta|snapshot)$")
_INT = struct.Struct(">i")

# Records as parsed: (key bytes, value bytes or None for a removal)
Record = tuple[bytes, "bytes | None"]


def parse_records(data: bytes, path: str, allow_removes: bool = True, value_skip: int = 0) -> list[Record]:
    """Split a decompressed delta/snapshot stream into records.

    ``value_skip`` bytes that precede each value's UnsafeRow (a row checksum) are dropped.
    """
    out: list[Record] = []
    pos, n = 0, len(data)
    unpack = _INT.unpack_from
    while True:
        if pos + 4 > n:
            raise TruncatedFileError(
                f"{path}: ends at byte {n} without the end-of-file marker", path=path)
        (key_len,) = unpack(data, pos)
        pos += 4
        if key_len == -1:
            break
        if key_len < 0:
            raise CorruptFileError(f"{path}: negative key size {key_len} at byte {pos - 4}", path=path)
        if pos + key_len + 4 > n:
            raise TruncatedFileError(
                f"{path}: key of {key_len} bytes at byte {pos} runs past the end ({n} bytes)", path=path)
        key = data[pos:pos + key_len]
        pos += key_len
        (value_len,) = unpack(data, pos)
        pos += 4
        if value_len == -1:
            if not allow_removes:
                raise CorruptFileError(f"{path}: a snapshot holds a remove record at byte {pos - 4}", path=path)
            out.append((key, None))
            continue
        if value_len < 0:
            raise CorruptFileError(f"{path}: negative value size {value_len} at byte {pos - 4}", path=path)
        if pos + value_len > n or value_len < value_skip:
            raise TruncatedFileError(
                f"{path}: value of {value_len} bytes at byte {pos} runs past the end ({n} bytes)", path=path)
        # Spark <= 2.2 appended 4 junk bytes to values; Spark reads whole words only
        row_len = ((value_len - value_skip) // 8) * 8
        out.append((key, data[pos + value_skip:pos + value_skip + row_len]))
        pos += value_len
    if pos != n:
        raise CorruptFileError(f"{path}: {n - pos} bytes follow the end-of-file marker", path=path)
    return out


class HDFSStore:
    """The files of one store (operator, partition, store name) of the HDFS provider."""

    def __init__(self, storage: Storage, directory: str, codec: str | None,
                 row_checksum: bool = False) -> None:
        self.storage = storage
        # Spark 4.1+ row checksums: int32 CRC-32C before each value, and before the key of a removal
        self.row_checksum = row_checksum
        self.directory = directory
        self.codec = codec
        names = storage.list_names(directory) or []
        self.deltas: set[int] = set()
        self.snapshots: set[int] = set()
        for name in names:
            m = _FILE_RE.match(name)
            if m:
                (self.deltas if m.group(2) == "delta" else self.snapshots).add(int(m.group(1)))

    def _read(self, version: int, kind: str) -> list[Record]:
        rel = f"{self.directory}/{version}.{kind}"
        shown = self.storage.display(rel)
        try:
            raw = self.storage.read_bytes(rel)
        except FileNotFoundError:
            raise self._missing(version, kind) from None
        return parse_records(decompress(raw, self.codec, shown), shown, allow_removes=(kind == "delta"),
                             value_skip=4 if self.row_checksum else 0)

    def _missing(self, version: int, kind: str) -> MissingStateFileError:
        shown = self.storage.display(f"{self.directory}/{version}.{kind}")
        return MissingStateFileError(
            f"{shown} does not exist; it is needed to rebuild the state. Files present in "
            f"{self.storage.display(self.directory)}: snapshots {sorted(self.snapshots) or 'none'}, "
            f"deltas {_ranges(self.deltas)}", path=shown)

    def load(self, version: int, start_snapshot: int | None = None) -> dict[bytes, bytes]:
        """Key -> value bytes of the store at ``version``.

        ``start_snapshot`` forces the snapshot to start from (0 = empty state);
        by default the newest snapshot at or below ``version`` is used.
        """
        if start_snapshot is None:
            start = max((s for s in self.snapshots if s <= version), default=0)
        else:
            start = start_snapshot
            if start > 0 and start not in self.snapshots:
                raise MissingStateFileError(
                    f"Cannot replay from the snapshot of version {start}: "
                    f"{self.storage.display(f'{self.directory}/{start}.snapshot')} does not exist "
                    f"(snapshots in {self.storage.display(self.directory)}: "
                    f"{sorted(self.snapshots) or 'none'})", path=self.storage.display(self.directory))
        missing = [v for v in range(start + 1, version + 1) if v not in self.deltas]
        if missing:
            raise self._missing(missing[0], "delta")
        state: dict[bytes, bytes] = {}
        if start > 0:
            state.update(self._read(start, "snapshot"))  # type: ignore[arg-type]
        for v in range(start + 1, version + 1):
            for key, value in self._read(v, "delta"):
                if value is None:
                    state.pop(key[4:] if self.row_checksum else key, None)
                else:
                    state[key] = value
        return state


def _ranges(versions: set[int]) -> str:
    """'1..4, 6' style summary of a set of versions."""
    if not versions:
        return "none"
    items = sorted(versions)
    parts, lo, prev = [], items[0], items[0]
    for v in items[1:]:
        if v != prev + 1:
            parts.append(f"{lo}..{prev}" if lo != prev else f"{lo}")
            lo = v
        prev = v
    parts.append(f"{lo}..{prev}" if lo != prev else f"{lo}")
    return ", ".join(parts)


def _store(plan: StateReadPlan, directory: str) -> HDFSStore:
    row_checksum = plan.conf.get(CONF_ROW_CHECKSUM, "false").lower() == "true"
    return HDFSStore(plan.storage, directory, plan.codec, row_checksum)


def read_store(plan: StateReadPlan, directory: str) -> tuple[pa.StructArray, pa.StructArray]:
    """Keys and values of one HDFS store at the plan's version, as Arrow."""
    state = _store(plan, directory).load(plan.version, start_snapshot=plan.snapshot_start_version)
    keys = list(state)
    values = list(state.values())
    del state
    source = f"{plan.storage.display(directory)} (version {plan.version})"
    return (decode_rows(RowBuffer.from_rows(keys, source + " key"), plan.key_schema),
            decode_rows(RowBuffer.from_rows(values, source + " value"), plan.value_schema))


def read_changes(plan: StateReadPlan, directory: str,
                 version: int) -> tuple[list[str], pa.StructArray, pa.StructArray]:
    """The records of ``version.delta`` in file order: change types, keys, values (null for removals)."""
    store = _store(plan, directory)
    if version not in store.deltas:
        raise store._missing(version, "delta")
    records = store._read(version, "delta")
    keys = [k[4:] if v is None and store.row_checksum else k for k, v in records]
    values = [v or b"" for _, v in records]
    kinds = ["update" if v is not None else "delete" for _, v in records]
    valid = np.array([v is not None for _, v in records], dtype=bool)
    source = plan.storage.display(f"{directory}/{version}.delta")
    return (kinds, decode_rows(RowBuffer.from_rows(keys, source + " key"), plan.key_schema),
            decode_rows(RowBuffer.from_rows(values, source + " value"), plan.value_schema, valid=valid))
