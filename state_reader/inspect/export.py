"""Write a planned state read to Parquet, CSV, JSON or JSON Lines, partition by partition.

* Parquet keeps the Arrow schema as it is (nested key/value structs).
* CSV flattens structs to dotted columns (``key.window.start``) and writes
  lists, maps, binary and intervals as compact JSON text.
* JSON Lines (``.jsonl``) writes one object per row with nested objects (conventions in
  :mod:`state_reader.formats.flatten`); JSON (``.json``) writes the same objects as one
  array, ``[]`` when no row matched, which ``json.load`` and every JSON tool read whole.

The output appears only when complete: it is written next to the target under
a temporary name and renamed at the end.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from state_reader.core.key_filter import KeyFilter, KeyFilterSpec
from state_reader.core.scan import bind_key_filter, iter_batches, partitions_to_read
from state_reader.errors import InvalidOptionError, UnsupportedTypeError
from state_reader.formats.flatten import flatten_table, json_rows, unique_names, unique_schema, with_unique_field_names
from state_reader.model.plan import StateReadPlan
from state_reader.progress import progress

FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}


@dataclass
class ExportResult:
    """What :func:`export_state` wrote."""

    path: str
    format: str
    rows: int
    partitions: int


def format_of(path: str, fmt: str | None = None) -> str:
    """``parquet``, ``csv``, ``json`` or ``jsonl``, from ``fmt`` or the file extension."""
    if fmt:
        if fmt.lower() not in set(FORMATS.values()):
            raise InvalidOptionError(f"unknown export format {fmt!r} (formats: parquet, csv, json, jsonl)")
        return fmt.lower()
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise InvalidOptionError(
            f"cannot tell the export format from {path!r}: use a name ending in .parquet, .csv, .json or .jsonl"
        )
    return FORMATS[ext]


class _Writer:
    def write(self, batch: pa.RecordBatch) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _ParquetWriter(_Writer):
    def __init__(self, path: str, schema: pa.Schema) -> None:
        import pyarrow.parquet as pq

        try:
            # unique struct field names: readers of the file turn it into pandas and Python rows
            self._w = pq.ParquetWriter(path, unique_schema(schema))
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as exc:
            raise UnsupportedTypeError(
                f"Parquet cannot hold this state ({exc}); export to .jsonl or .csv instead"
            ) from None

    def write(self, batch: pa.RecordBatch) -> None:
        self._w.write_table(with_unique_field_names(pa.Table.from_batches([batch])))

    def close(self) -> None:
        self._w.close()


class _CsvWriter(_Writer):
    def __init__(self, path: str) -> None:
        self._path = path
        self._w: Any = None
        self._schema: pa.Schema | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        import pyarrow.csv as pcsv

        flat = flatten_table(batch, render_nested=True)
        flat = flat.rename_columns(unique_names(flat.schema.names))
        if self._w is None:
            self._schema = flat.schema
            self._w = pcsv.CSVWriter(self._path, flat.schema)
        self._w.write_table(flat if flat.schema == self._schema else flat.cast(self._schema))

    def header_only(self, schema: pa.Schema) -> None:
        """Write just the header (an export that matched no rows)."""
        import pyarrow.csv as pcsv

        empty = flatten_table(pa.Table.from_batches([], schema=schema), render_nested=True)
        empty = empty.rename_columns(unique_names(empty.schema.names))
        self._w = pcsv.CSVWriter(self._path, empty.schema)

    def close(self) -> None:
        if self._w is not None:
            self._w.close()


class _JsonlWriter(_Writer):
    def __init__(self, path: str) -> None:
        self._fh = open(path, "w", encoding="utf-8")  # closed in close()

    def write(self, batch: pa.RecordBatch) -> None:
        for row in json_rows(batch):
            self._fh.write(json.dumps(row, ensure_ascii=False, allow_nan=False))
            self._fh.write("\n")

    def close(self) -> None:
        self._fh.close()


class _JsonArrayWriter(_JsonlWriter):
    """One JSON array of the rows, written row by row (the state is never held whole)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._fh.write("[")
        self._first = True

    def write(self, batch: pa.RecordBatch) -> None:
        for row in json_rows(batch):
            self._fh.write("\n" if self._first else ",\n")
            self._fh.write(json.dumps(row, ensure_ascii=False, allow_nan=False))
            self._first = False

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.write("]\n" if self._first else "\n]\n")
        super().close()


def _batches_with_progress(
    plan: StateReadPlan, flt: KeyFilter | None, partitions: list[int], show_progress: bool | None, path: str
) -> Iterator[pa.RecordBatch]:
    # a read per partition, and one warning for them all about checksum files that are not checksums
    with (
        plan.storage.malformed.held(),
        progress(f"exporting to {os.path.basename(path)}", len(partitions), enabled=show_progress) as bar,
    ):
        for pid in partitions:
            yield from iter_batches(plan, key_filter=flt, partitions=[pid], show_progress=False)
            bar.advance()


def export_state(
    plan: StateReadPlan,
    path: str,
    *,
    fmt: str | None = None,
    key_filter: KeyFilterSpec | KeyFilter | None = None,
    partitions: Sequence[int] | None = None,
    show_progress: bool | None = None,
) -> ExportResult:
    """Write the state ``plan`` reads to ``path`` (format from ``fmt`` or the extension)."""
    kind = format_of(path, fmt)
    flt = bind_key_filter(plan, key_filter)
    chosen = partitions_to_read(plan, flt, partitions)
    target = os.path.abspath(path)
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise InvalidOptionError(f"cannot export to {path}: the directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; the export is an ordinary file
    rows = 0
    writer: _Writer
    try:
        if kind == "parquet":
            writer = _ParquetWriter(tmp, plan.arrow_schema)
        elif kind == "csv":
            writer = _CsvWriter(tmp)
        elif kind == "json":
            writer = _JsonArrayWriter(tmp)
        else:
            writer = _JsonlWriter(tmp)
        try:
            for batch in _batches_with_progress(plan, flt, chosen, show_progress, path):
                writer.write(batch)
                rows += batch.num_rows
            if isinstance(writer, _CsvWriter) and rows == 0:
                writer.header_only(plan.arrow_schema)
        finally:
            writer.close()
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return ExportResult(path=path, format=kind, rows=rows, partitions=len(chosen))
