"""Checksum sidecars written next to checkpoint files, and their verification.

Two kinds exist (see the state format notes, sections 1.8 and 1.9):

* Hadoop's ``ChecksumFileSystem`` writes a hidden ``.<name>.crc`` beside every
  file it writes on a local filesystem::

      "crc\\0" | int32 BE bytes-per-checksum (512) | uint32 BE CRC-32 of each chunk

* Spark 4.1+ (checkpoint format version 2) writes a visible ``<name>.crc`` beside
  RocksDB ``.zip`` and ``.changelog`` files: one JSON object whose ``value`` is the
  CRC-32C of the whole file as a signed int32, with ``mainFileSize``.

Object stores usually have neither; a missing sidecar is never an error. Nor is a
sidecar that is not a checksum file of its kind at all (a repository that keeps ``*.crc``
through Git LFS holds pointer text in their place): it tells nothing about the file beside
it, so the verifiers raise :class:`NotAChecksumFileError` and the caller reads that file
unverified. A well-formed sidecar that disagrees with its file is ChecksumMismatchError.
The storages of one operation collect the sidecars met that are not checksum files
(:class:`MalformedChecksums`), and one warning on the ``state_reader.io`` logger names them
when the operation ends (:func:`checksum_report`).
"""

from __future__ import annotations

import json
import logging
import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from typing import Any, TypeVar

import numpy as np

from state_reader.errors import ChecksumMismatchError

HADOOP_MAGIC = b"crc\x00"
_HADOOP_HEADER = struct.Struct(">4si")
# Hadoop writes 512; anything outside this range is not a checksum file it wrote.
_MAX_BYTES_PER_CHECKSUM = 1 << 24

SIDECAR_SUFFIX = ".crc"

# what a repository tracking a file through Git LFS holds in its place until `git lfs pull`
_LFS_POINTER = b"version https://git-lfs.github.com/spec/"


class NotAChecksumFileError(Exception):
    """A sidecar that is not a checksum file of its kind: nothing can be verified against it, and
    nothing is known to be wrong with the file beside it. ``reason`` says what was found."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _found(sidecar: bytes) -> str:
    """What a sidecar that is not a checksum file holds, in a few words."""
    if sidecar.startswith(_LFS_POINTER):
        return "a Git LFS pointer"
    if not sidecar:
        return "an empty file"
    return f"{len(sidecar)} bytes starting {sidecar[:8]!r}"


def hadoop_sidecar(name: str) -> str:
    """Name of the hidden Hadoop checksum file of ``name``."""
    return f".{name}{SIDECAR_SUFFIX}"


def spark_sidecar(name: str) -> str:
    """Name of Spark's checksum sidecar of ``name``."""
    return f"{name}{SIDECAR_SUFFIX}"


# -- CRC-32C --------------------------------------------------------------------


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


# the byte table of CRC-32C (Castagnoli), also the compiled kernels' (formats/_numba_walk)
CRC32C_TABLE = _crc32c_table()


def crc32c_pure(data: bytes | memoryview) -> int:
    """CRC-32C (Castagnoli) in plain Python: slow, used only when no binding is installed."""
    crc = 0xFFFFFFFF
    table = CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _pick_crc32c() -> Callable[[bytes | memoryview], int]:
    try:
        import google_crc32c

        return lambda data: int(google_crc32c.value(bytes(data)))
    except ImportError:
        pass
    try:
        import crc32c

        return lambda data: int(crc32c.crc32c(data))
    except ImportError:
        pass
    return crc32c_pure


crc32c: Callable[[bytes | memoryview], int] = _pick_crc32c()


# -- verification -----------------------------------------------------------------


# -- combining CRC-32s --------------------------------------------------------------
# CRC-32 is linear: crc(A + B) = M_len(B)(crc(A)) ^ crc(B), where M_n ("append n zero bytes to
# the CRC register") is a linear map of 32 bits. So the CRCs a Hadoop sidecar stores for each
# chunk combine into the CRC of the whole file, which zlib computes in one call without the
# GIL; when the two agree, the file is intact (a damage that leaves them equal is as unlikely
# as one that a CRC-32 of the whole file misses, 2^-32). Only a mismatch walks the chunks,
# to say which one is bad. The chunks are combined 16 at a time, a level of the tree at a
# time, each level one vectorised step: each M_n is applied through four 256-entry tables,
# one per byte of the register (16-wide levels: three steps for a 256 KB file, where pairs
# took nine, and the steps' fixed costs were most of the time).

_FAN = 16  # CRCs combined per group at each level


def _zeros_operator(n: int) -> np.ndarray:
    """M_n as the images of the 32 single-bit registers (a uint32 each), from zlib itself:
    M_n(r) = ~crc32(n zero bytes, start=~r)."""
    zeros = bytes(n)
    return np.array([0xFFFFFFFF ^ zlib.crc32(zeros, (1 << bit) ^ 0xFFFFFFFF) for bit in range(32)], dtype=np.uint32)


def _byte_tables(images: np.ndarray) -> np.ndarray:
    """(4, 256) tables: entry [j, b] is the map applied to the register holding byte b at byte j."""
    bits = (np.arange(256, dtype=np.uint32)[:, None] >> np.arange(8, dtype=np.uint32)) & 1  # (256, 8)
    tables = np.zeros((4, 256), dtype=np.uint32)
    for j in range(4):
        for k in range(8):
            tables[j] ^= np.where(bits[:, k] == 1, images[8 * j + k], np.uint32(0))
    return tables


def _apply(tables: np.ndarray, v: np.ndarray) -> np.ndarray:
    return tables[0][v & 0xFF] ^ tables[1][(v >> 8) & 0xFF] ^ tables[2][(v >> 16) & 0xFF] ^ tables[3][v >> 24]


_UNIT = np.uint32(1) << np.arange(32, dtype=np.uint32)  # the single-bit registers
# chunk size -> per level, the tables of M_{(FAN-1-j) * chunk * FAN^level} for j = 0..FAN-1,
# flattened to (FAN * 4 * 256,)
_LEVELS: dict[int, list[np.ndarray]] = {}
_LEVELS_LOCK = threading.Lock()  # a scan verifies files on several threads; each level is built once
# where group member j's four tables start in a level's flat tables
_MEMBER = (np.arange(_FAN, dtype=np.int64) * 1024)[::-1].copy()


def _level_tables(chunk: int, level: int) -> np.ndarray:
    with _LEVELS_LOCK:
        levels = _LEVELS.setdefault(chunk, [])
        if not levels:
            step = _byte_tables(_zeros_operator(chunk))
        while len(levels) <= level:
            if levels:  # this level's step: M_{FAN * s} = M_s after M_{(FAN-1) * s}, s the last level's
                last = levels[-1].reshape(_FAN, 4, 256)
                step = _byte_tables(_apply(last[1], _apply(last[_FAN - 1], _UNIT)))
            images, members = _UNIT.copy(), []
            for _ in range(_FAN):  # M_0, M_step, M_2step, ...
                members.append(_byte_tables(images))
                images = _apply(step, images)
            levels.append(np.concatenate([t.reshape(-1) for t in members]))
        return levels[level]


def _combined_crc32(stored: np.ndarray, chunk: int, size: int) -> int:
    """The CRC-32 of a file of ``size`` bytes whose ``chunk``-byte chunks have the CRCs ``stored``."""
    crcs = stored.astype(np.uint32)
    full = size // chunk
    if not full:
        return int(crcs[0]) if len(crcs) else 0
    level_crcs = crcs[:full]
    level = 0
    while len(level_crcs) > 1:
        # zeros in front change nothing (a linear map sends 0 to 0): pad to whole groups
        pad = -len(level_crcs) % _FAN
        if pad:
            level_crcs = np.concatenate([np.zeros(pad, dtype=np.uint32), level_crcs])
        v = level_crcs.reshape(-1, _FAN)
        tables = _level_tables(chunk, level)
        level_crcs = np.bitwise_xor.reduce(
            tables[_MEMBER + (v & 0xFF)]
            ^ tables[_MEMBER + 256 + ((v >> 8) & 0xFF)]
            ^ tables[_MEMBER + 512 + ((v >> 16) & 0xFF)]
            ^ tables[_MEMBER + 768 + (v >> 24)],
            axis=1,
        )
        level += 1
    total = int(level_crcs[0])
    rest = size - full * chunk
    if rest:  # the last, shorter chunk: M_rest applied to one register is one zlib call
        total = (0xFFFFFFFF ^ zlib.crc32(bytes(rest), total ^ 0xFFFFFFFF)) ^ int(crcs[full])
    return total


def verify_hadoop(data: bytes, sidecar: bytes, shown: str, sidecar_shown: str) -> None:
    """Check ``data`` against a Hadoop ``.crc`` file; ChecksumMismatchError names the first bad chunk.

    NotAChecksumFileError when ``sidecar`` is not a Hadoop checksum file (no magic, an impossible
    chunk size, checksums that are not whole 4-byte words).
    """
    if len(sidecar) < _HADOOP_HEADER.size or sidecar[:4] != HADOOP_MAGIC:
        raise NotAChecksumFileError(f"{_found(sidecar)} where a Hadoop checksum file belongs")
    _, chunk = _HADOOP_HEADER.unpack_from(sidecar)
    body = len(sidecar) - _HADOOP_HEADER.size
    if not 0 < chunk <= _MAX_BYTES_PER_CHECKSUM or body % 4:
        raise NotAChecksumFileError(f"a Hadoop checksum header with chunk size {chunk} and {body} bytes of checksums")
    stored = np.frombuffer(sidecar, dtype=">u4", offset=_HADOOP_HEADER.size)
    needed = -(-len(data) // chunk)
    if needed != len(stored):
        raise ChecksumMismatchError(
            f"{shown} has {len(data)} bytes, but its checksum file {sidecar_shown} covers "
            f"{len(stored)} chunks of {chunk} bytes (a file of {max(0, (len(stored) - 1) * chunk) + 1}.."
            f"{len(stored) * chunk} bytes): the file was truncated or extended after it was written",
            path=shown,
        )
    if _combined_crc32(stored, chunk, len(data)) == zlib.crc32(data):
        return  # the chunks' CRCs, combined, are the whole file's: every chunk matches (see below)
    view = memoryview(data)
    for i, expected in enumerate(stored.tolist()):
        actual = zlib.crc32(view[i * chunk : (i + 1) * chunk]) & 0xFFFFFFFF
        if actual != expected:
            end = min(len(data), (i + 1) * chunk)
            raise ChecksumMismatchError(
                f"{shown}: bytes {i * chunk}..{end - 1} do not match the CRC-32 in {sidecar_shown} "
                f"(stored 0x{expected:08x}, computed 0x{actual:08x}): the file is damaged",
                path=shown,
            )


def hadoop_checksums(data: bytes | memoryview, chunk: int = 512) -> bytes:
    """The Hadoop ``.crc`` file of ``data``, as ``ChecksumFileSystem`` writes it beside each file."""
    return hadoop_checksums_of([data], chunk)


def hadoop_checksums_of(pieces: Iterable[bytes | memoryview], chunk: int = 512) -> bytes:
    """:func:`hadoop_checksums` of the concatenation of ``pieces`` (a file read piece by piece)."""
    sums = HadoopChecksums(chunk)
    for piece in pieces:
        sums.update(piece)
    return sums.sidecar()


class HadoopChecksums:
    """The Hadoop ``.crc`` file of bytes fed piece by piece, whatever the piece boundaries
    (a file checksummed as it is written)."""

    def __init__(self, chunk: int = 512) -> None:
        self.chunk = chunk
        self._sums: list[int] = []
        self._carry = b""  # the start of a chunk that the next piece completes

    def update(self, piece: bytes | memoryview) -> None:
        chunk = self.chunk
        view = memoryview(piece).cast("B")
        if self._carry:
            take = min(chunk - len(self._carry), len(view))
            self._carry += bytes(view[:take])
            view = view[take:]
            if len(self._carry) < chunk:
                return
            self._sums.append(zlib.crc32(self._carry) & 0xFFFFFFFF)
            self._carry = b""
        whole = len(view) - len(view) % chunk
        self._sums += [zlib.crc32(view[at : at + chunk]) & 0xFFFFFFFF for at in range(0, whole, chunk)]
        self._carry = bytes(view[whole:])

    def sidecar(self) -> bytes:
        sums = self._sums + ([zlib.crc32(self._carry) & 0xFFFFFFFF] if self._carry else [])
        return _HADOOP_HEADER.pack(HADOOP_MAGIC, self.chunk) + np.asarray(sums, dtype=">u4").tobytes()


def verify_spark(data: bytes, sidecar: bytes, shown: str, sidecar_shown: str) -> None:
    """Check ``data`` against a Spark checksum sidecar (JSON with the CRC-32C of the whole file).

    NotAChecksumFileError when ``sidecar`` is not such a JSON object.
    """
    try:
        doc = json.loads(sidecar.decode("utf-8"))
        algorithm = str(doc["algorithm"])
        value = int(doc["value"])
        size = doc.get("mainFileSize")
        size = None if size is None else int(size)
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
        what = _found(sidecar) if sidecar.startswith(_LFS_POINTER) or not sidecar else f"{exc!r}"
        raise NotAChecksumFileError(f"{what} where a Spark checksum file (JSON) belongs") from exc
    if algorithm.upper().replace("-", "") != "CRC32C":
        return  # written by a later Spark with another algorithm: nothing we can check
    if size is not None and size != len(data):
        raise ChecksumMismatchError(
            f"{shown} has {len(data)} bytes, but {sidecar_shown} records mainFileSize {size}: "
            "the file was truncated, extended or replaced after it was written",
            path=shown,
        )
    actual = crc32c(data)
    if actual != value & 0xFFFFFFFF:
        raise ChecksumMismatchError(
            f"{shown} does not match the CRC-32C in {sidecar_shown} (stored 0x{value & 0xFFFFFFFF:08x}, "
            f"computed 0x{actual:08x}): the file is damaged",
            path=shown,
        )


# -- sidecars that are not checksum files, reported ------------------------------------------

log = logging.getLogger("state_reader.io")
F = TypeVar("F", bound=Callable[..., Any])
# this thread's checksum_report() under way (``.malformed``: its MalformedChecksums, else None)
_REPORT = threading.local()


@dataclass(frozen=True)
class MalformedChecksum:
    """A checksum sidecar that is not a checksum file: the file beside it was read unverified."""

    sidecar: str  # as shown to the user
    file: str  # the file it should have verified
    kind: str  # "hadoop" (the hidden .<name>.crc) or "spark" (<name>.crc, checkpoint format 2)
    reason: str


class MalformedChecksums:
    """The checksum sidecars met that are not checksum files, shared by the storages of one
    operation (several threads verify at once), and which of them a warning has named."""

    SHOWN = 5  # sidecars a warning names; the rest are counted

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: dict[str, MalformedChecksum] = {}
        self._warned: set[str] = set()
        self.deferred = False  # within held(): its end gives the warning

    def add(self, found: MalformedChecksum) -> None:
        with self._lock:
            self._found.setdefault(found.sidecar, found)

    def found(self) -> list[MalformedChecksum]:
        """Every one met so far, by path (reads on several threads meet them in no fixed order)."""
        with self._lock:
            return sorted(self._found.values(), key=lambda f: f.sidecar)

    @contextmanager
    def held(self, *, warn: bool = True) -> Iterator[MalformedChecksums]:
        """Within it, the reads that end keep what they met for one warning at its end (``warn=False``:
        none; the caller reports them). Nested uses: the outermost one's end."""
        if self.deferred:
            yield self
            return
        self.deferred = True
        try:
            yield self
        finally:
            self.deferred = False
            if warn:
                self.warn()

    def warn(self) -> None:
        """One warning naming those that no warning has named yet, if any."""
        with self._lock:
            new = sorted((f for key, f in self._found.items() if key not in self._warned), key=lambda f: f.sidecar)
            self._warned.update(f.sidecar for f in new)
        if new:
            log.warning("%s", describe_malformed(new))


def describe_malformed(found: list[MalformedChecksum]) -> str:
    """The warning about checksum sidecars that are not checksum files: how many, why, the first few."""
    reasons = list(dict.fromkeys(f.reason for f in found))
    shown = ", ".join(f.sidecar for f in found[: MalformedChecksums.SHOWN])
    more = len(found) - MalformedChecksums.SHOWN
    one = len(found) == 1
    text = (
        f"{len(found)} .crc file{' is not a checksum file' if one else 's are not checksum files'} "
        f"({'; '.join(reasons[:3])}{'; …' if len(reasons) > 3 else ''}), so the "
        f"file{'' if one else 's'} beside {'it was' if one else 'them were'} read without checksum "
        f"verification: {shown}{f' and {more} more' if more > 0 else ''}. Nothing says "
        f"{'that file is' if one else 'those files are'} damaged; restore the real checksum files "
        "(`git lfs pull` where a repository keeps *.crc in Git LFS) to have them verified"
    )
    if any(f.kind == "spark" for f in found):
        text += "; Spark itself fails to load RocksDB files whose own <name>.crc is not a checksum file"
    return text


@contextmanager
def checksum_report(*, warn: bool = True) -> Iterator[MalformedChecksums]:
    """Within it, the storages made on this thread share one :class:`MalformedChecksums`; at its
    end one warning names the sidecars they met that are not checksum files (``warn=False``: the
    caller reports them itself, as ``doctor`` and ``verify`` do). Nested uses share the
    outermost one's."""
    outer = getattr(_REPORT, "malformed", None)
    if outer is not None:
        yield outer
        return
    record = MalformedChecksums()
    _REPORT.malformed = record
    try:
        with record.held(warn=warn):
            yield record
    finally:
        _REPORT.malformed = None


def with_checksum_report(func: F) -> F:
    """``func`` run within :func:`checksum_report`: one warning for all it reads."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with checksum_report():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def current_report() -> MalformedChecksums | None:
    """The :class:`MalformedChecksums` of the :func:`checksum_report` under way on this thread, or None."""
    return getattr(_REPORT, "malformed", None)
