"""A RocksDB store's entries at one version, and the changelog records that change them.

:class:`StoreState` keeps the entries as a snapshot gives them, two RowBuffers of unique keys and their
values, until a changelog is applied to them, and as a dict of ``bytes`` from then on.
:meth:`StoreState.apply` applies one changelog as Spark's replay does: puts, deletes, Spark 4.3's delete
ranges (RocksDB's ``deleteRange``, keys compared as bytes) and merges. Which files hold a version, and
reading them, is :mod:`state_reader.providers.rocksdb`'s.
"""

from __future__ import annotations

from state_reader.errors import CorruptFileError
from state_reader.formats import changelog as changelog_format
from state_reader.formats.rocksdb_encoding import delete_range_end, delete_record_key, merge
from state_reader.formats.unsaferow import RowBuffer


class StoreState:
    """Encoded RocksDB keys -> values of a store at one version.

    Kept as a snapshot gives them, two RowBuffers of unique keys and their values
    (``rows``), until something needs a dict (``entries``, which changelogs are
    applied to); from then on as that dict.
    """

    def __init__(
        self,
        entries: dict[bytes, bytes] | None = None,
        column_families: dict[str, int] | None = None,
        uses_column_families: bool = False,
        rows: tuple[RowBuffer, RowBuffer] | None = None,
    ) -> None:
        self._entries = entries if entries is not None or rows is not None else {}
        self.rows = rows
        # virtual column family name -> id, from the snapshot the state was built on
        self.column_families = column_families or {}
        # True when the store keeps virtual column families (ids prefix every key)
        self.uses_column_families = uses_column_families

    @property
    def entries(self) -> dict[bytes, bytes]:
        """Keys -> values as a dict of ``bytes``."""
        if self._entries is None:
            assert self.rows is not None
            keys, values = self.rows
            self._entries = dict(zip(row_byte_strings(keys), row_byte_strings(values), strict=True))
            self.rows = None
        return self._entries

    @entries.setter
    def entries(self, value: dict[bytes, bytes]) -> None:
        self._entries = value
        self.rows = None

    def row_buffers(self, source: str) -> tuple[RowBuffer, RowBuffer]:
        """Keys and values as RowBuffers (no copy when they are kept that way)."""
        if self.rows is not None:
            keys, values = self.rows
            keys.source, values.source = source + " key", source + " value"
            return keys, values
        entries = self.entries
        return (
            RowBuffer.from_rows(list(entries), source + " key"),
            RowBuffer.from_rows(list(entries.values()), source + " value"),
        )

    def apply(self, log: changelog_format.Changelog, row_checksum: bool, delimiter: bytes) -> None:
        """One changelog's records applied in order, as Spark's replay applies them: puts, deletes (whose
        keys carry a row checksum with ``row_checksum``), delete ranges, and merges that append the operand
        after ``delimiter``."""
        entries = self.entries
        if changelog_format.has_column_families(log.format_version):
            self.uses_column_families = True
        for kind, key, value in log.records:
            if kind == changelog_format.PUT:
                entries[key] = value  # type: ignore[assignment]
            elif kind == changelog_format.DELETE:
                entries.pop(delete_record_key(key, row_checksum), None)
            elif kind == changelog_format.DELETE_RANGE:
                assert value is not None
                _delete_range(entries, key, delete_range_end(value, row_checksum, log.path), log.path)
            else:
                entries[key] = merge(entries.get(key), value, delimiter)  # type: ignore[arg-type]


def row_byte_strings(rows: RowBuffer, lo: int = 0, hi: int | None = None) -> list[bytes]:
    """Rows ``lo:hi`` of a RowBuffer, each as a ``bytes`` object (what rocksdict and a dict of entries take)."""
    starts, lengths = rows.starts[lo:hi], rows.lengths[lo:hi]
    if not len(starts):
        return []
    first = int(starts.min())
    data = rows.buf[first : int((starts + lengths).max())].tobytes()
    return [data[s : s + n] for s, n in zip((starts - first).tolist(), lengths.tolist(), strict=True)]


def _delete_range(entries: dict[bytes, bytes], begin: bytes, end: bytes, source: str) -> None:
    """A changelog's delete range applied as Spark's replay applies it (RocksDB's ``deleteRange`` with its
    default bytewise comparator): every key from ``begin`` (included) to ``end`` (excluded), the keys
    compared as unsigned bytes as stored, column family id first. An empty range removes nothing; RocksDB
    refuses a reversed one, so Spark cannot load the version either."""
    if begin > end:
        raise CorruptFileError(
            f"{source}: a delete range record ends ({end.hex()}) before it begins ({begin.hex()}); RocksDB "
            "refuses such a range, so Spark cannot rebuild this version either",
            path=source,
        )
    for key in [k for k in entries if begin <= k < end]:
        del entries[key]
