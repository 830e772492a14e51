"""Spark's RocksDB snapshot zips: safe extraction and the ``metadata`` entry.

A snapshot ``<v>.zip`` holds RocksDB's small files (``CURRENT``, ``MANIFEST-*``,
``OPTIONS-*``, possibly an empty ``*.log``) and Spark's ``metadata`` entry: a
``v1`` line, then JSON with ``sstFiles`` / ``logFiles`` (``[{localFileName,
dfsSstFileName | dfsLogFileName, sizeBytes}]``), ``numKeys`` and, from Spark 4.0,
``columnFamilyMapping`` (``{name: id}``). The data itself lives in the shared
``SSTs/`` directory. Every entry is checked before anything is extracted: a zip
from a damaged or hostile checkpoint cannot write outside its target.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import zipfile
import zlib
from dataclasses import dataclass
from typing import Any

from state_reader.errors import CorruptFileError, UnsafeArchiveError

SST_DIR = "SSTs"
LOG_DIR = "logs"
LOG_ARCHIVE_DIR = "archive"
ZIP_METADATA = "metadata"
ZIP_METADATA_VERSION = "v1"

# Bounds on what one snapshot zip may unpack to; Spark's zips hold a few small
# RocksDB metadata files (the data is in SSTs/), so these are generous.
MAX_ZIP_ENTRIES = 10_000
MAX_ZIP_BYTES = 1 << 30

# what zipfile raises on damaged archives
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    NotImplementedError,
    RuntimeError,
    EOFError,
    zlib.error,
    ValueError,
)


@dataclass(frozen=True)
class DataFile:
    """An SST or log file a snapshot needs: its name in the DB directory and in the checkpoint."""

    local_name: str
    dfs_name: str
    size: int


@dataclass
class SnapshotMetadata:
    """Spark's ``metadata`` entry of a snapshot zip."""

    sst_files: list[DataFile]
    log_files: list[DataFile]
    num_keys: int
    column_families: dict[str, int]


def _plain_name(name: Any) -> bool:
    """A single path component: no separators, not '.' or '..', no NUL."""
    return isinstance(name, str) and name not in ("", ".", "..") and not any(c in name for c in ("/", "\\", "\x00"))


def _check_entry(info: zipfile.ZipInfo, zip_shown: str) -> list[str]:
    """Path components of a zip entry; UnsafeArchiveError when it could leave the target directory."""
    name = info.filename

    def refuse(why: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(f"{zip_shown}: entry {name!r} {why}; refusing to extract it", path=zip_shown)

    if not name or "\x00" in name:
        raise refuse("has an empty or NUL-containing name")
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise refuse("is an absolute path")
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise refuse("contains '..'")
    if not parts:
        raise refuse("names no file")
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind == stat.S_IFLNK:
        raise refuse("is a symbolic link")
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise refuse(f"is a special file (mode {oct(info.external_attr >> 16)})")
    return parts


def _open_zip(raw: bytes, zip_shown: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BytesIO(raw))
    except _ZIP_ERRORS as exc:
        raise CorruptFileError(f"{zip_shown} is not a readable zip file: {exc}", path=zip_shown) from exc


def _checked_entries(archive: zipfile.ZipFile, zip_shown: str) -> list[tuple[zipfile.ZipInfo, list[str]]]:
    """Every entry of a snapshot zip with its path components; UnsafeArchiveError for anything hostile."""
    infos = archive.infolist()
    if len(infos) > MAX_ZIP_ENTRIES:
        raise UnsafeArchiveError(
            f"{zip_shown}: {len(infos)} entries, more than the {MAX_ZIP_ENTRIES} a snapshot may have", path=zip_shown
        )
    checked = [(info, _check_entry(info, zip_shown)) for info in infos]
    total = sum(info.file_size for info in infos)
    if total > MAX_ZIP_BYTES:
        raise UnsafeArchiveError(
            f"{zip_shown}: entries unpack to {total} bytes, more than the {MAX_ZIP_BYTES} allowed "
            f"(largest: {max(infos, key=lambda i: i.file_size).filename!r})",
            path=zip_shown,
        )
    return checked


def read_metadata_entry(raw: bytes, zip_shown: str) -> tuple[bytes, int]:
    """A snapshot zip's ``metadata`` bytes and the bytes of its WAL (``*.log``) entries, extracting nothing.

    The entries are checked as for :func:`extract`, so a hostile zip is refused either way.
    """
    with _open_zip(raw, zip_shown) as archive:
        checked = _checked_entries(archive, zip_shown)
        wal = sum(info.file_size for info, parts in checked if parts[-1].endswith(".log"))
        entry = next((info for info, parts in checked if parts == [ZIP_METADATA] and not info.is_dir()), None)
        if entry is None:
            raise CorruptFileError(f"{zip_shown} has no '{ZIP_METADATA}' entry", path=zip_shown)
        try:
            return archive.read(entry), wal
        except _ZIP_ERRORS as exc:
            raise CorruptFileError(f"{zip_shown}: cannot extract an entry: {exc}", path=zip_shown) from exc


def extract(raw: bytes, target: str, zip_shown: str) -> bytes:
    """Extract a snapshot zip into ``target`` (checked first); return its ``metadata`` bytes."""
    archive = _open_zip(raw, zip_shown)
    with archive:
        checked = _checked_entries(archive, zip_shown)
        root = os.path.realpath(target)
        metadata: bytes | None = None
        try:
            for info, parts in checked:
                if parts == [ZIP_METADATA] and not info.is_dir():
                    metadata = archive.read(info)
                    continue
                dest = os.path.join(root, *parts)
                # belt and braces: the checked components must stay under the root
                if os.path.commonpath([root, os.path.realpath(dest)]) != root:
                    raise UnsafeArchiveError(
                        f"{zip_shown}: entry {info.filename!r} resolves outside the extraction directory",
                        path=zip_shown,
                    )
                if info.is_dir():
                    os.makedirs(dest, exist_ok=True)
                    continue
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with archive.open(info) as src, open(dest, "xb") as dst:
                    shutil.copyfileobj(src, dst)
        except FileExistsError as exc:
            raise CorruptFileError(f"{zip_shown}: entry {exc.filename!r} appears twice", path=zip_shown) from exc
        except _ZIP_ERRORS as exc:
            raise CorruptFileError(f"{zip_shown}: cannot extract an entry: {exc}", path=zip_shown) from exc
    if metadata is None:
        raise CorruptFileError(f"{zip_shown} has no '{ZIP_METADATA}' entry", path=zip_shown)
    return metadata


def parse_metadata(raw: bytes, zip_shown: str) -> SnapshotMetadata:
    """Parse and check the ``metadata`` entry of a snapshot zip."""
    where = f"{zip_shown} (entry '{ZIP_METADATA}')"
    try:
        header, _, body = raw.decode("utf-8").partition("\n")
        if header.strip() != ZIP_METADATA_VERSION:
            raise CorruptFileError(
                f"{where}: version line {header.strip()!r}, expected {ZIP_METADATA_VERSION!r}", path=zip_shown
            )
        doc = json.loads(body)
        sst_files = [
            DataFile(f["localFileName"], f["dfsSstFileName"], int(f.get("sizeBytes", -1)))
            for f in doc.get("sstFiles") or []
        ]
        log_files = [
            DataFile(f["localFileName"], f["dfsLogFileName"], int(f.get("sizeBytes", -1)))
            for f in doc.get("logFiles") or []
        ]
        column_families = {}
        for name, info in (doc.get("columnFamilyMapping") or {}).items():
            # released 4.x writers store the id; some versions a {cfId, isInternal} object
            column_families[str(name)] = int(info["cfId"] if isinstance(info, dict) else info)
        num_keys = int(doc.get("numKeys", -1))
    except CorruptFileError:
        raise
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
        raise CorruptFileError(f"{where} cannot be parsed: {exc!r}", path=zip_shown) from exc
    for f in sst_files:
        if not (_plain_name(f.local_name) and _plain_name(f.dfs_name)):
            raise UnsafeArchiveError(
                f"{where}: SST entry {f.local_name!r} -> {f.dfs_name!r} is not a plain file name", path=zip_shown
            )
    for f in log_files:
        local = f.local_name
        if local.startswith(LOG_ARCHIVE_DIR + "/"):
            local = local[len(LOG_ARCHIVE_DIR) + 1 :]
        if not (_plain_name(local) and _plain_name(f.dfs_name)):
            raise UnsafeArchiveError(
                f"{where}: log entry {f.local_name!r} -> {f.dfs_name!r} is not a plain file name "
                f"(or {LOG_ARCHIVE_DIR}/<name>)",
                path=zip_shown,
            )
    return SnapshotMetadata(sst_files, log_files, num_keys, column_families)


def read_column_families(raw: bytes, zip_shown: str) -> dict[str, int]:
    """The column family name -> id mapping a snapshot zip records."""
    metadata, _ = read_metadata_entry(raw, zip_shown)
    return parse_metadata(metadata, zip_shown).column_families


def metadata_entry(
    sst_files: list[DataFile], num_keys: int, num_internal_keys: int | None = None, extra: dict[str, Any] | None = None
) -> bytes:
    """Spark's ``metadata`` entry for a snapshot of ``sst_files`` holding ``num_keys`` keys (and
    ``num_internal_keys`` in Spark's internal column families, when it keeps them apart).

    ``extra`` carries the fields a newer writer adds (column family mapping and the like),
    as the source checkpoint recorded them.
    """
    doc: dict[str, Any] = {
        "sstFiles": [
            {"localFileName": f.local_name, "dfsSstFileName": f.dfs_name, "sizeBytes": f.size} for f in sst_files
        ],
        "numKeys": num_keys,
        **(extra or {}),
    }
    if num_internal_keys is not None:
        doc["numInternalKeys"] = num_internal_keys
    return (ZIP_METADATA_VERSION + "\n" + json.dumps(doc, separators=(",", ":"))).encode("utf-8")


def build_zip(entries: dict[str, bytes]) -> bytes:
    """A snapshot zip of ``entries`` (name -> bytes, ``metadata`` among them), deflated as Spark's are."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return out.getvalue()
