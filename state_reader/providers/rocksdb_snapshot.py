"""A RocksDB store's snapshot written as Spark writes one: the database built with rocksdict, its SST
files under names of their own for the store's shared ``SSTs/``, the rest and Spark's ``metadata``
in ``<version>.zip``. The writer of what :mod:`state_reader.providers.rocksdb` reads."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from state_reader.formats import rocksdict_db, snapshot_zip
from state_reader.formats.rocksdb_encoding import column_family_ids
from state_reader.formats.unsaferow import RowBuffer
from state_reader.providers.rocksdb_state import row_byte_strings

# rows handed to RocksDB at a time when building a snapshot
_WRITE_BATCH = 8192


def _key_counts(keys: RowBuffer, extra: dict[str, Any] | None) -> tuple[int, int]:
    """(numKeys, numInternalKeys) among ``keys``: with column families, keys of Spark's internal
    families (``columnFamilyTypeMap`` true, or named ``$...``) count apart."""
    mapping = (extra or {}).get("columnFamilyMapping") or {}
    if not mapping or not len(keys.starts):
        return len(keys.starts), 0
    internal_flags = (extra or {}).get("columnFamilyTypeMap") or {}
    internal = [cf_id for name, cf_id in mapping.items() if internal_flags.get(name, name.startswith("$"))]
    n_internal = int(np.isin(column_family_ids(keys), internal).sum())
    return len(keys.starts) - n_internal, n_internal


def snapshot_files(
    rows: Iterable[tuple[RowBuffer, RowBuffer]], extra_metadata: dict[str, Any] | None = None
) -> Iterator[tuple[str | None, Iterable[bytes] | bytes]]:
    """One store's snapshot of ``rows`` (keys and values, batch after batch): each SST file as
    (its name in ``SSTs/``, its bytes piece by piece), then (None, the ``<version>.zip`` bytes).
    Each SST's pieces must be consumed before the next item is asked for.

    The database is built in a private temporary directory with rocksdict and packed as
    Spark packs its own: RocksDB's small files and ``metadata`` in the zip, every SST
    under a name of its own (``<file number>-<uuid>.sst``) in the store's shared ``SSTs/``.
    """
    counts = [0, 0]

    def batches() -> Iterator[tuple[list[bytes], list[bytes]]]:
        for keys, values in rows:
            for i, n in enumerate(_key_counts(keys, extra_metadata)):
                counts[i] += n
            for lo in range(0, len(keys.starts), _WRITE_BATCH):
                yield row_byte_strings(keys, lo, lo + _WRITE_BATCH), row_byte_strings(values, lo, lo + _WRITE_BATCH)

    with tempfile.TemporaryDirectory(prefix="state_reader-rocksdb-") as workdir:
        db_dir = os.path.join(workdir, "db")
        rocksdict_db.write_db(db_dir, batches())
        entries: dict[str, bytes] = {}
        described: list[snapshot_zip.DataFile] = []
        for name in sorted(os.listdir(db_dir)):
            path = os.path.join(db_dir, name)
            if name.endswith(".sst"):
                dfs_name = f"{name[:-4]}-{uuid.uuid4()}.sst"
                described.append(snapshot_zip.DataFile(name, dfs_name, os.path.getsize(path)))
                yield dfs_name, _file_pieces(path)
            elif name.startswith(rocksdict_db.DB_FILES_IN_ZIP) or name.endswith(".log"):
                with open(path, "rb") as fh:
                    entries[name] = fh.read()
    internal = counts[1] if (extra_metadata or {}).get("columnFamilyMapping") else None
    entries[snapshot_zip.ZIP_METADATA] = snapshot_zip.metadata_entry(described, counts[0], internal, extra_metadata)
    yield None, snapshot_zip.build_zip(entries)


def _file_pieces(path: str, size: int = 1 << 20) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while piece := fh.read(size):
            yield piece
