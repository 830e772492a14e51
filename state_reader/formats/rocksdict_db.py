"""A RocksDB database directory read with rocksdict: every key and value, in key order.

Used for the snapshots the direct SST reader (:mod:`state_reader.formats.sst`)
leaves aside: the provider rebuilds the snapshot in a private temporary
directory, and this opens it read-only, walks it and closes it.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterable, Iterator

from state_reader.errors import CodecUnavailableError, CorruptFileError


def read_db(directory: str, zip_shown: str) -> tuple[list[bytes], list[bytes]]:
    """Every key and value of the RocksDB in ``directory``, opened read-only, in key order."""
    try:
        from rocksdict import AccessType, Options, Rdict
    except ImportError as exc:
        raise CodecUnavailableError(
            f"{zip_shown} is a RocksDB snapshot; install the 'rocksdict' package to read it", path=zip_shown
        ) from exc

    try:
        db = Rdict(directory, options=Options(raw_mode=True), access_type=AccessType.read_only())
    except Exception as exc:  # rocksdict raises plain Exceptions
        raise CorruptFileError(f"RocksDB cannot open the snapshot {zip_shown}: {exc}", path=zip_shown) from exc
    try:
        # iterate by hand: a plain items() walk stops silently at a corrupt block
        keys: list[bytes] = []
        values: list[bytes] = []
        add_key, add_value = keys.append, values.append
        it = db.iter()
        key, value, step, valid = it.key, it.value, it.next, it.valid
        it.seek_to_first()
        with _gc_paused():
            while valid():
                add_key(key())
                add_value(value())
                step()
        it.status()  # raises when the walk ended on an error rather than at the end
        del it, key, value, step, valid
        return keys, values
    except Exception as exc:
        raise CorruptFileError(f"RocksDB cannot read the snapshot {zip_shown}: {exc}", path=zip_shown) from exc
    finally:
        db.close()


_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = True


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC (a process-wide switch) while any thread is inside; restore it after the last.

    A million ``bytes`` objects appended to lists would otherwise make the GC walk them again and again.
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


# What Spark zips beside its metadata: RocksDB's own small files (the SSTs go to SSTs/).
DB_FILES_IN_ZIP = ("CURRENT", "MANIFEST-", "OPTIONS-")
# format 5: what Spark's RocksDB writes, and what every RocksDB Spark bundles (8.x and 9.x) reads
TABLE_FORMAT_VERSION = 5
# memtable size while building a snapshot: what the build holds of the rows at once (each
# full memtable becomes one SST file)
_WRITE_BUFFER = 8 << 20


def write_db(directory: str, batches: Iterable[tuple[list[bytes], list[bytes]]]) -> None:
    """Create the RocksDB database ``directory`` holding each batch's keys -> values, flushed to SST files.

    Raw byte keys in RocksDB's default bytewise order, lz4 blocks, no write-ahead log
    left to replay: a directory Spark's RocksDB state store opens as a snapshot. The
    rows stream through memtables of a few MiB, so memory does not grow with them.
    """
    try:
        from rocksdict import BlockBasedOptions, DBCompressionType, Options, Rdict, WriteBatch, WriteOptions
    except ImportError as exc:
        raise CodecUnavailableError("writing a RocksDB snapshot needs the 'rocksdict' package") from exc
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    table = BlockBasedOptions()
    table.set_format_version(TABLE_FORMAT_VERSION)
    options.set_block_based_table_factory(table)
    options.set_compression_type(DBCompressionType.lz4())
    options.set_write_buffer_size(_WRITE_BUFFER)
    db = Rdict(directory, options=options)
    try:
        write = WriteOptions()
        # a property at run time; rocksdict's stubs declare it as a method
        write.disable_wal = True  # type: ignore[method-assign,assignment]
        for keys, values in batches:
            batch = WriteBatch(raw_mode=True)
            for key, value in zip(keys, values, strict=True):
                batch.put(key, value)
            db.write(batch, write_opt=write)
        db.flush(True)
    finally:
        db.close()
