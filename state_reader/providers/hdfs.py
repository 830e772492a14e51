"""HDFSBackedStateStoreProvider files: ``<version>.delta`` and ``<version>.snapshot``.

Both are compressed with the checkpoint's codec and hold, once decompressed,
records framed with Java big-endian ints::

    put    : int32 keyLen | key | int32 valueLen | value
    remove : int32 keyLen | key | int32 -1           (deltas only)
    end    : int32 -1

Version V = the newest snapshot S <= V, then deltas S+1..V applied in order.

The files of a version are decompressed into one buffer, each record is found
once (:mod:`state_reader.formats.kernels`: the only step that has to go record by
record) and from then on records are columns of positions: the chain is
merged by hashing the key bytes in Arrow, and the surviving rows are decoded
where they lie, without copying a row into a Python object.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from state_reader.errors import CorruptFileError, MissingStateFileError, StateReaderError, TruncatedFileError
from state_reader.formats import codecs, kernels
from state_reader.formats.unsaferow import PAD, RowBuffer, decode_rows, int_array, unaligned_view
from state_reader.formats.unsaferow_encode import copy_spans
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import first_missing, parse_state_file_name, state_file_name, version_ranges
from state_reader.model.plan import StateReadPlan

# Each file starts at a multiple of this in the shared buffer (its words stay aligned).
_ALIGN = 8
# Bytes per record assumed when guessing how many records a read walks (a small
# UnsafeRow key and value plus their two lengths).
_BYTES_PER_RECORD = 48

# Records as parsed: (key bytes, value bytes or None for a removal)
Record = tuple[bytes, "bytes | None"]


def _framing_error(status: int, path: str, at: int, value: int, size: int) -> StateReaderError:
    """The exception for a walk that stopped with ``status`` (positions relative to the file)."""
    if status == kernels.NO_END_MARKER:
        return TruncatedFileError(f"{path}: ends at byte {size} without the end-of-file marker", path=path)
    if status == kernels.REMOVE_IN_SNAPSHOT:
        return CorruptFileError(f"{path}: a snapshot holds a remove record at byte {at}", path=path)
    # a record's key and its value fail alike: a negative size, or more bytes than the file has left
    for part, negative, past_end in (
        ("key", kernels.NEGATIVE_KEY, kernels.KEY_PAST_END),
        ("value", kernels.NEGATIVE_VALUE, kernels.VALUE_PAST_END),
    ):
        if status == negative:
            return CorruptFileError(f"{path}: negative {part} size {value} at byte {at}", path=path)
        if status == past_end:
            return TruncatedFileError(
                f"{path}: {part} of {value} bytes at byte {at} runs past the end ({size} bytes)", path=path
            )
    return CorruptFileError(f"{path}: {size - at} bytes follow the end-of-file marker", path=path)


def _walk(
    buf: np.ndarray, start: int, end: int, path: str, allow_removes: bool, value_skip: int, use_numba: bool
) -> np.ndarray:
    """Start of each record of the stream in ``buf[start:end]``; our exception for a bad stream."""
    positions, status, at, value = kernels.walk_records(buf, start, end, allow_removes, value_skip, use_numba)
    if status != kernels.OK:
        raise _framing_error(status, path, at - start, value, end - start)
    return positions


@dataclass
class _Records:
    """Records as columns: spans in a shared buffer. ``value_len`` is -1 for a removal."""

    key_start: np.ndarray
    key_len: np.ndarray
    value_start: np.ndarray
    value_len: np.ndarray

    @classmethod
    def at(cls, buf: np.ndarray, positions: np.ndarray, value_skip: int) -> _Records:
        """The spans of the records starting at ``positions`` (already walked, so in bounds; the
        array becomes the keys' starts)."""
        # in place where it can be: these arrays are a third of the bytes of rows of ~60 bytes
        be32 = unaligned_view(buf, ">i4")
        key_len = be32[positions].astype(np.int64)
        key_start = positions
        key_start += 4
        value_start = key_start + key_len
        raw_len = be32[value_start]
        value_start += 4 + value_skip
        value_len = raw_len.astype(np.int64)
        # Spark <= 2.2 appended 4 junk bytes to values; Spark reads whole words only
        value_len -= value_skip
        value_len //= 8
        value_len *= 8
        value_len[raw_len == -1] = -1
        return cls(key_start, key_len, value_start, value_len)

    def keep(self, index: np.ndarray) -> None:
        """Keep the records at ``index`` only (one field at a time, so at most one field is copied twice)."""
        for name in ("key_start", "key_len", "value_start", "value_len"):
            setattr(self, name, getattr(self, name)[index])

    def identity(self, row_checksum: bool) -> tuple[np.ndarray, np.ndarray]:
        """Spans of the bytes that identify each record's key: a removal's key carries a
        4-byte row checksum in front when row checksums are on."""
        if not row_checksum:
            return self.key_start, self.key_len
        removal = self.value_len < 0
        cut = np.where(removal, np.minimum(self.key_len, 4), 0)
        return self.key_start + cut, self.key_len - cut


def parse_records(data: bytes, path: str, allow_removes: bool = True, value_skip: int = 0) -> list[Record]:
    """Split a decompressed delta/snapshot stream into records.

    ``value_skip`` bytes that precede each value's UnsafeRow (a row checksum) are dropped.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    records = _Records.at(buf, _walk(buf, 0, len(buf), path, allow_removes, value_skip, False), value_skip)
    out: list[Record] = []
    for ks, kl, vs, vl in zip(
        records.key_start.tolist(),
        records.key_len.tolist(),
        records.value_start.tolist(),
        records.value_len.tolist(),
        strict=True,
    ):
        out.append((data[ks : ks + kl], None if vl < 0 else data[vs : vs + vl]))
    return out


def _last_writes(buf: np.ndarray, key_start: np.ndarray, key_len: np.ndarray) -> np.ndarray:
    """Index of the last record of each distinct key, ascending (without numba; with it,
    :func:`kernels.live_records_numba` does this in one pass with a hash table).

    Records lie in file order in ``buf``, so their key spans follow each other;
    Arrow copies the keys out and sorts them stably (equal keys stay in file
    order), and the last of each run of equal keys is that key's last write. A
    sort needs less memory than Arrow's hash-based dictionary encoding (about
    60 % at a million keys) and takes as long.
    """
    n = len(key_start)
    if n < 2:
        return np.arange(n, dtype=np.int64)
    bounds = np.empty(2 * n, dtype=np.int64)
    bounds[0::2] = key_start
    bounds[1::2] = key_start + key_len
    large = len(buf) >= 2**31
    spans = pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(),
        2 * n - 1,
        [None, pa.py_buffer(bounds if large else bounds.astype(np.int32)), pa.py_buffer(buf)],
    )
    del bounds
    import pyarrow.compute as pc  # here: commands that list files but decode nothing skip its import

    # temporaries from the system allocator: Arrow's default pool would keep their pages after the read
    pool = pa.system_memory_pool()
    keys = pc.take(spans, int_array(np.arange(0, 2 * n, 2, dtype=np.int64), pa.int64()), memory_pool=pool)
    order = np.frombuffer(pc.sort_indices(keys, memory_pool=pool).buffers()[1], dtype=np.uint64, count=n).astype(
        np.int64
    )
    in_order = pc.take(keys, int_array(order, pa.int64()), memory_pool=pool)
    del keys
    same = pc.equal(in_order.slice(1), in_order.slice(0, n - 1), memory_pool=pool)
    last_of_run = np.ones(n, dtype=bool)
    last_of_run[:-1] = ~same.to_numpy(zero_copy_only=False)
    return np.sort(order[last_of_run])


class HDFSStore:
    """The files of one store (operator, partition, store name) of the HDFS provider."""

    def __init__(self, storage: Storage, directory: str, codec: str | None, row_checksum: bool = False) -> None:
        self.storage = storage
        # Spark 4.1+ row checksums: int32 CRC-32C before each value, and before the key of a removal
        self.row_checksum = row_checksum
        self.directory = directory
        self.codec = codec
        names = storage.list_names(directory) or []
        self.deltas: set[int] = set()
        self.snapshots: set[int] = set()
        for name in names:
            parsed = parse_state_file_name(name)
            if parsed is not None and parsed[1] is None and parsed[2] in ("delta", "snapshot"):
                (self.deltas if parsed[2] == "delta" else self.snapshots).add(parsed[0])

    @property
    def value_skip(self) -> int:
        return 4 if self.row_checksum else 0

    def _read(self, version: int, kind: str) -> list[Record]:
        rel = f"{self.directory}/{state_file_name(version, kind)}"
        shown = self.storage.display(rel)
        try:
            raw = self.storage.read_bytes(rel)
        except FileNotFoundError:
            raise self._missing(version, kind) from None
        return parse_records(
            codecs.decompress(raw, self.codec, shown),
            shown,
            allow_removes=(kind == "delta"),
            value_skip=self.value_skip,
        )

    def _missing(
        self, version: int, kind: str, why: str = "it is needed to rebuild the state"
    ) -> MissingStateFileError:
        shown = self.storage.display(f"{self.directory}/{state_file_name(version, kind)}")
        return MissingStateFileError(
            f"{shown} does not exist; {why}. Files present in "
            f"{self.storage.display(self.directory)}: snapshots {sorted(self.snapshots) or 'none'}, "
            f"deltas {version_ranges(self.deltas)}",
            path=shown,
        )

    def chain(self, version: int, start_snapshot: int | None = None) -> list[tuple[int, str]]:
        """The files ``version`` is rebuilt from, in order: (version, 'snapshot' | 'delta').

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
                    f"{sorted(self.snapshots) or 'none'})",
                    path=self.storage.display(self.directory),
                )
        gap = first_missing(self.deltas, start + 1, version)
        if gap is not None:  # checked first: past it, the chain is no longer than the deltas on disk
            base = f"the snapshot of version {start}" if start else "the empty state"
            raise self._missing(
                gap,
                "delta",
                f"version {version} (batch {version - 1}) is rebuilt from {base} and the deltas {start + 1}..{version}",
            )
        files = [(start, "snapshot")] if start > 0 else []
        return files + [(v, "delta") for v in range(start + 1, version + 1)]

    def _decompress(
        self, files: list[tuple[int, str]], records_hint_scale: int = 1
    ) -> tuple[np.ndarray, int, np.ndarray, bool]:
        """Decompress ``files`` into one buffer and find their records.

        Returns the buffer (with ``PAD`` spare bytes), its used size, the start
        of every record of all files in order and whether the numba kernels are
        in use. lz4 streams are decompressed straight into place.
        """
        rels = [f"{self.directory}/{state_file_name(version, kind)}" for version, kind in files]
        try:
            raws = self.storage.read_many(rels)
        except FileNotFoundError as exc:
            raise self._missing(*files[rels.index(exc.filename)]) from None
        shown = [self.storage.display(f"{self.directory}/{state_file_name(v, k)}") for v, k in files]
        # sizes first, so everything lands in one allocation
        sizes: list[int] = []
        decoded: list[bytes | None] = []
        blocks: list[list | None] = []
        for raw, path in zip(raws, shown, strict=True):
            data, lz4_blocks = None, None
            if raw and codecs.stream_codec(raw, self.codec) == "lz4":
                try:
                    lz4_blocks = codecs.lz4_blocks(raw, path)
                except StateReaderError:
                    data = codecs.decompress(raw, self.codec, path)  # raises the error in stream order
            else:
                data = codecs.decompress(raw, self.codec, path)
            sizes.append(len(data) if data is not None else sum(b[4] for b in lz4_blocks or ()))
            decoded.append(data)
            blocks.append(lz4_blocks)
        starts = []
        total = 0
        for size in sizes:
            starts.append(total)
            total += -(-size // _ALIGN) * _ALIGN
        buf = np.empty(total + PAD, dtype=np.uint8)
        buf[total:] = 0
        use_numba = kernels.numba_wanted(total // _BYTES_PER_RECORD * records_hint_scale)
        positions = []
        for i, ((_, kind), raw, path) in enumerate(zip(files, raws, shown, strict=True)):
            start, size = starts[i], sizes[i]
            data = decoded[i]
            if data is None:
                codecs.decompress_lz4_into(raw, path, buf[start : start + size], blocks[i])
            else:
                buf[start : start + size] = np.frombuffer(data, dtype=np.uint8)
                decoded[i] = data = None
            raws[i] = b""
            positions.append(_walk(buf, start, start + size, path, kind == "delta", self.value_skip, use_numba))
        walked = positions[0] if len(positions) == 1 else np.concatenate(positions or [np.zeros(0, np.int64)])
        del positions
        return buf, total, walked, use_numba

    def load_records(
        self, version: int, start_snapshot: int | None = None, records_hint_scale: int = 1
    ) -> tuple[np.ndarray, int, _Records]:
        """The live (key, value) spans of the store at ``version``, in the order of their last write.

        Returns the shared buffer, its used size and the records that survive
        the chain (no removals among them).
        """
        buf, size, positions, use_numba = self._decompress(self.chain(version, start_snapshot), records_hint_scale)
        if use_numba and len(positions) < 2**31:  # the kernel packs record indexes in 32 bits
            # one compiled pass: spans, last write of each key, removals dropped
            return buf, size, _Records(*kernels.live_records_numba(buf, positions, self.value_skip, self.row_checksum))
        records = _Records.at(buf, positions, self.value_skip)
        last = _last_writes(buf, *records.identity(self.row_checksum))
        records.keep(last[records.value_len[last] >= 0])
        return buf, size, records

    def load_rows(self, version: int) -> tuple[RowBuffer, RowBuffer]:
        """Keys and values (as stored: a row checksum stays in front of its value) at ``version``."""
        buf, size, live = self.load_records(version)
        source = f"{self.storage.display(self.directory)} (version {version})"
        skip = self.value_skip
        return (
            RowBuffer.wrap(buf, size, live.key_start, live.key_len, source + " key"),
            RowBuffer.wrap(
                buf,
                size,
                live.value_start - skip if skip else live.value_start,
                live.value_len + skip if skip else live.value_len,
                source + " value",
            ),
        )

    def load(self, version: int, start_snapshot: int | None = None) -> dict[bytes, bytes]:
        """Key -> value bytes of the store at ``version``.

        ``start_snapshot`` forces the snapshot to start from (0 = empty state);
        by default the newest snapshot at or below ``version`` is used.
        """
        buf, _, live = self.load_records(version, start_snapshot)
        data = buf.data
        return {
            bytes(data[ks : ks + kl]): bytes(data[vs : vs + vl])
            for ks, kl, vs, vl in zip(
                live.key_start.tolist(),
                live.key_len.tolist(),
                live.value_start.tolist(),
                live.value_len.tolist(),
                strict=True,
            )
        }


def _store(plan: StateReadPlan, directory: str) -> HDFSStore:
    return HDFSStore(plan.storage, directory, plan.codec, plan.store_conf.row_checksum)


def load_rows(plan: StateReadPlan, directory: str, partition_id: int) -> tuple[RowBuffer, RowBuffer]:
    """Keys and values of one HDFS store at the plan's version as stored, not decoded."""
    return _store(plan, directory).load_rows(plan.version)


def read_store(plan: StateReadPlan, directory: str, partition_id: int) -> tuple[pa.StructArray, pa.StructArray]:
    """Keys and values of one HDFS store at the plan's version, as Arrow."""
    keys, values, _ = _read_store(plan, directory, stored=False)
    return keys, values


def read_store_rows(
    plan: StateReadPlan, directory: str, partition_id: int
) -> tuple[pa.StructArray, pa.StructArray, RowBuffer, RowBuffer]:
    """:func:`read_store`'s keys and values, and the same rows as stored (:func:`load_rows`'), from one load."""
    keys, values, stored = _read_store(plan, directory, stored=True)
    assert stored is not None
    return keys, values, *stored


def _read_store(
    plan: StateReadPlan, directory: str, stored: bool
) -> tuple[pa.StructArray, pa.StructArray, tuple[RowBuffer, RowBuffer] | None]:
    store = _store(plan, directory)
    buf, size, live = store.load_records(
        plan.version, start_snapshot=plan.snapshot_start_version, records_hint_scale=max(len(plan.partitions), 1)
    )
    source = f"{plan.storage.display(directory)} (version {plan.version})"
    key_rows = RowBuffer.wrap(buf, size, live.key_start, live.key_len, source + " key")
    keys = decode_rows(key_rows, plan.key_schema)
    values = RowBuffer.wrap(buf, size, live.value_start, live.value_len, source + " value")
    rows = None
    if stored:  # as load_rows gives them: a row checksum stays in front of its value
        skip = store.value_skip
        rows = key_rows, RowBuffer.wrap(buf, size, live.value_start - skip, live.value_len + skip, source + " value")
    del live
    return keys, plan.declared_values(decode_rows(values, plan.stored_value_schema), source), rows


def read_changes(
    plan: StateReadPlan, directory: str, partition_id: int, version: int
) -> tuple[list[str], pa.StructArray, pa.StructArray]:
    """The records of ``version.delta`` in file order: change types, keys, values (null for removals)."""
    store = _store(plan, directory)
    if version not in store.deltas:
        raise store._missing(version, "delta")
    buf, size, positions, _ = store._decompress([(version, "delta")])
    records = _Records.at(buf, positions, store.value_skip)
    removal = records.value_len < 0
    key_start, key_len = records.identity(store.row_checksum)
    source = plan.storage.display(f"{directory}/{state_file_name(version, 'delta')}")
    kinds = np.where(removal, "delete", "update").tolist()
    keys = RowBuffer.wrap(buf, size, key_start, key_len, source + " key")
    values = RowBuffer.wrap(
        buf, size, np.where(removal, 0, records.value_start), np.where(removal, 0, records.value_len), source + " value"
    )
    return (
        kinds,
        decode_rows(keys, plan.key_schema),
        plan.declared_values(decode_rows(values, plan.stored_value_schema, valid=~removal), source),
    )


# --- writing: snapshot files -----------------------------------------------------

END_OF_FILE = b"\xff\xff\xff\xff"  # the int32 -1 that ends every delta and snapshot stream


def frame_records(keys: RowBuffer, values: RowBuffer) -> tuple[np.ndarray, np.ndarray]:
    """Put records ``keyLen key valueLen value`` (lengths big-endian) of each key and value, one
    after another, and each record's framed length."""
    lengths = 8 + keys.lengths + values.lengths
    starts = np.cumsum(lengths) - lengths
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    headers = np.empty((len(lengths), 2), dtype=">i4")
    headers[:, 0] = keys.lengths
    headers[:, 1] = values.lengths
    raw = headers.view(np.uint8).reshape(-1)
    at = 8 * np.arange(len(lengths), dtype=np.int64)
    four = np.full(len(lengths), 4, dtype=np.int64)
    copy_spans(out, starts, raw, at, four)
    copy_spans(out, starts + 4, keys.buf, keys.starts, keys.lengths)
    copy_spans(out, starts + 4 + keys.lengths, raw, at + 4, four)
    copy_spans(out, starts + 8 + keys.lengths, values.buf, values.starts, values.lengths)
    return out, lengths


def framed_rows(data: bytes | np.ndarray, path: str) -> tuple[RowBuffer, RowBuffer]:
    """The keys and values of a run of whole put records (as :func:`frame_records` writes them,
    without the end-of-stream marker), where they lie in one buffer."""
    raw = np.frombuffer(data, dtype=np.uint8)
    size = len(raw) + len(END_OF_FILE)
    buf = np.zeros(size + PAD, dtype=np.uint8)
    buf[: len(raw)] = raw
    buf[len(raw) : size] = np.frombuffer(END_OF_FILE, dtype=np.uint8)
    positions = _walk(buf, 0, size, path, False, 0, False)
    be32 = unaligned_view(buf, ">i4")
    key_len = be32[positions].astype(np.int64)
    value_at = positions + 8 + key_len
    value_len = be32[value_at - 4].astype(np.int64)
    return (
        RowBuffer.wrap(buf, size, positions + 4, key_len, path + " key"),
        RowBuffer.wrap(buf, size, value_at, value_len, path + " value"),
    )


def snapshot_file(framed: Iterable[bytes | memoryview | np.ndarray], codec: str | None) -> Iterator[bytes]:
    """A ``<version>.snapshot`` file, piece by piece: the ``framed`` records (chunks of whole records
    as :func:`frame_records` frames them), the end-of-stream marker, compressed with ``codec``."""
    return codecs.compress_stream(itertools.chain(framed, (END_OF_FILE,)), codec)
