"""Helpers for tests that damage, hash or rebuild checkpoint files.

Written from the format notes, independently of the decoders under test: an
lz4-java block stream writer, the delta/changelog (v1) record framing, Hadoop
``.crc`` sidecars (and the Git LFS pointers a repository may hold in their place), and a
fingerprint of every file of a directory tree.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import lz4.block
import xxhash

from tests.support.paths import GOLDEN

# lz4-java LZ4BlockOutputStream: magic, token, compressed len, decompressed len, checksum (LE)
_LZ4_MAGIC = b"LZ4Block"
_LZ4_BLOCK = 32 * 1024
_LZ4_SEED = 0x9747B28C
_INT = struct.Struct(">i")


def lz4_java(data: bytes, block_size: int = _LZ4_BLOCK) -> bytes:
    """``data`` as lz4-java's LZ4BlockOutputStream writes it (with its end block)."""
    level = max(0, block_size.bit_length() - 1 - 10)
    out = []
    for lo in range(0, len(data), block_size):
        chunk = data[lo : lo + block_size]
        packed = lz4.block.compress(chunk, store_size=False)
        method, payload = (0x20, packed) if len(packed) < len(chunk) else (0x10, chunk)
        checksum = xxhash.xxh32_intdigest(chunk, seed=_LZ4_SEED) & 0x0FFFFFFF
        out.append(_LZ4_MAGIC + bytes([method | level]) + struct.pack("<iii", len(payload), len(chunk), checksum))
        out.append(payload)
    out.append(_LZ4_MAGIC + bytes([0x10 | level]) + struct.pack("<iii", 0, 0, 0))
    return b"".join(out)


def lz4_java_decode(data: bytes) -> bytes:
    """Decompress an intact lz4-java block stream (no damage expected: tests feed real files)."""
    out, pos = [], 0
    while pos < len(data):
        assert data[pos : pos + 8] == _LZ4_MAGIC, "not an lz4-java stream"
        token = data[pos + 8]
        clen, dlen, _ = struct.unpack_from("<iii", data, pos + 9)
        payload = data[pos + 21 : pos + 21 + clen]
        if dlen:
            out.append(payload if token & 0xF0 == 0x10 else lz4.block.decompress(payload, uncompressed_size=dlen))
        pos += 21 + clen
    return b"".join(out)


@dataclass
class Record:
    """One framed record of a delta, snapshot or v1 changelog; value None = removal."""

    key: bytes
    value: bytes | None


def parse_frames(data: bytes) -> list[Record]:
    """Records of an intact decompressed delta/snapshot/v1 changelog stream."""
    out, pos = [], 0
    while True:
        (key_len,) = _INT.unpack_from(data, pos)
        pos += 4
        if key_len == -1:
            break
        key = data[pos : pos + key_len]
        pos += key_len
        (value_len,) = _INT.unpack_from(data, pos)
        pos += 4
        if value_len < 0:
            out.append(Record(key, None))
            continue
        out.append(Record(key, data[pos : pos + value_len]))
        pos += value_len
    assert pos == len(data), "not an intact stream"
    return out


def frame(records: list[Record], size_edits: dict[tuple[int, str], int] | None = None) -> bytes:
    """Frame records back into a stream; ``size_edits[(i, "key"|"value")]`` overrides a size field."""
    edits = size_edits or {}
    parts = []
    for i, rec in enumerate(records):
        parts.append(_INT.pack(edits.get((i, "key"), len(rec.key))))
        parts.append(rec.key)
        parts.append(_INT.pack(edits.get((i, "value"), -1 if rec.value is None else len(rec.value))))
        if rec.value is not None:
            parts.append(rec.value)
    parts.append(_INT.pack(-1))
    return b"".join(parts)


def hadoop_crc(data: bytes, chunk: int = 512) -> bytes:
    """A Hadoop ChecksumFileSystem ``.crc`` file for ``data``."""
    sums = [zlib.crc32(data[i : i + chunk]) & 0xFFFFFFFF for i in range(0, len(data), chunk)]
    return b"crc\x00" + struct.pack(">i", chunk) + b"".join(struct.pack(">I", s) for s in sums)


def hadoop_sidecar_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.crc")


def copy_of(checkpoints, tmp_path: Path, name: str = "agg_window") -> Path:
    """A copy, to damage, of the test checkpoint ``name`` (``checkpoints``: the session's fixture)."""
    return Path(shutil.copytree(checkpoints(name), tmp_path / name))


def fingerprint(root: str | Path) -> dict[str, tuple]:
    """Every entry under ``root``: kind, size, SHA-256, mode and mtime (directories too, whose
    mtime changes when anything is created or removed in them, even briefly)."""
    root = Path(root)
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path), st.st_mtime_ns)
            elif path.is_dir():
                out[rel] = ("dir", st.st_mode, st.st_mtime_ns)
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[rel] = ("file", st.st_size, digest, st.st_mode, st.st_mtime_ns)
    st = root.stat()
    out["."] = ("dir", st.st_mode, st.st_mtime_ns)
    return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class StallingProxy:
    """A TCP proxy on 127.0.0.1 in front of a real server, which can be told to stall:
    from then on it accepts connections and holds them open but forwards nothing, as a
    server does that went away mid-read behind a load balancer. Stops with :meth:`close`."""

    def __init__(self, upstream_port: int) -> None:
        import threading

        self.upstream = ("127.0.0.1", upstream_port)
        self.stalled = threading.Event()
        self.closed = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        import threading

        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            self.sockets.append(client)
            if self.stalled.is_set():
                continue  # hold it open, answer nothing
            upstream = socket.create_connection(self.upstream, timeout=5)
            self.sockets.append(upstream)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(0.2)
        while not self.closed.is_set():
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            while self.stalled.is_set() and not self.closed.is_set():
                self.closed.wait(0.2)  # the bytes in hand are never delivered
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.closed.set()
        self.thread.join(timeout=5)
        for sock in [self.listener, *self.sockets]:
            try:
                sock.close()
            except OSError:
                pass


def golden_copy_with_damaged_ssts(tmp_path: Path) -> Path:
    """A copy of a golden RocksDB checkpoint (Spark 4.0.5) with one byte of each SST of partition 0 flipped."""
    import shutil

    golden = GOLDEN / "spark-4.0.5" / "agg_window_rocksdb_cl"
    copy = tmp_path / "cp"
    shutil.copytree(golden, copy)
    ssts = sorted((copy / "state" / "0" / "0" / "SSTs").glob("*.sst"))
    assert ssts
    for sst in ssts:
        data = bytearray(sst.read_bytes())
        data[100] ^= 0xFF
        sst.chmod(0o644)
        sst.write_bytes(bytes(data))
        (sst.parent / f".{sst.name}.crc").unlink(missing_ok=True)  # no sidecar to catch it first
    return copy


def lfs_pointer(data: bytes) -> bytes:
    """The Git LFS pointer text that a repository tracking a file through LFS holds in its place."""
    oid = hashlib.sha256(data).hexdigest()
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(data)}\n".encode("ascii")


def checksums_as_lfs_pointers(root: str | Path) -> list[Path]:
    """Every ``*.crc`` file under ``root`` (Hadoop's hidden ``.<name>.crc``, Spark's ``<name>.crc``
    and Hadoop's ``.<name>.crc.crc`` beside those) replaced by its Git LFS pointer, as a clone of a
    repository that tracks ``*.crc`` through LFS holds them without ``git lfs pull``. Returns the
    files replaced, sorted."""
    replaced = sorted(Path(root).rglob("*.crc"))
    for path in replaced:
        data = path.read_bytes()
        path.chmod(0o644)
        path.write_bytes(lfs_pointer(data))
    return replaced


def without_schema_files(root: str | Path) -> list[Path]:
    """The key and value schema files of every store under ``root`` (``state/<op>/<p>/_metadata/schema``,
    ``state/<op>/<p>/<store>/_metadata/schema`` for the stores of a join) deleted with their ``.crc``
    sidecars, as in a checkpoint written before Spark 3.1 or one that lost them. Returns the files
    deleted, sorted."""
    state = Path(root) / "state"
    schemas = sorted([*state.glob("*/*/_metadata/schema"), *state.glob("*/*/*/_metadata/schema")])
    for path in schemas:
        path.unlink()
        hadoop_sidecar_path(path).unlink(missing_ok=True)
    return schemas


def logs_cleaned_below(root: str | Path, batch: int) -> list[Path]:
    """Remove the commit and offset log entries (and their ``.crc`` sidecars) of batches before ``batch``,
    keeping every state file, as a copy published without its oldest log entries holds; what was removed."""
    removed = []
    for log in ("commits", "offsets"):
        for path in sorted((Path(root) / log).iterdir()):
            number = path.name.lstrip(".").split(".")[0]
            if number.isdigit() and int(number) < batch:
                path.unlink()
                removed.append(path)
    return removed


def latest_version(cp: Path) -> int:
    return max(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit()) + 1


def delta_in_use(cp: Path) -> Path:
    """The delta the latest state of partition 0 is rebuilt from. Snapshot placement is up to
    Spark's maintenance timing, so a snapshot of that very version is removed (it holds the
    same state as the older snapshot plus the deltas after it)."""
    version = latest_version(cp)
    part = cp / "state" / "0" / "0"
    snapshot = part / f"{version}.snapshot"
    if snapshot.exists():
        snapshot.unlink()
        hadoop_sidecar_path(snapshot).unlink()
    return part / f"{version}.delta"


def damage_partitions_but(checkpoint: Path, keep: list[int], partitions: list[int]) -> None:
    """Overwrite every state file of operator 0's ``partitions`` other than ``keep``: a read that
    touches one of them fails, so one that succeeds read only ``keep``."""
    for pid in partitions:
        if pid not in keep:
            for f in (checkpoint / "state" / "0" / str(pid)).rglob("*"):
                if f.is_file() and not f.name.startswith((".", "_")):
                    f.write_bytes(b"not a state file")
