"""Arrow arrays -> UnsafeRow bytes, column by column: the inverse of ``unsaferow.decode_rows``.

Each row comes out exactly as Spark's ``UnsafeProjection`` (``UnsafeRowWriter``,
``UnsafeArrayWriter``) writes it, because Spark compares state keys as bytes:

* a row is a null bitset of ceil(n/64) words, one 8-byte slot per field and a
  variable region. Fixed-width values sit left-aligned in their slot with the
  rest zero; a null field sets its bit and leaves a zero slot.
* variable-length values follow one another in field order, each zero-padded
  to a multiple of 8; the slot is ``offset << 32 | size`` with the offset from
  the start of the row. An empty value still records its offset.
* two exceptions, both from ``UnsafeRowWriter``: a decimal of precision > 18
  always reserves 16 bytes in a row, and when null keeps ``offset << 32 | 0`` in
  its slot; a null calendar interval keeps ``offset << 32 | 16`` and reserves 16
  bytes (Spark leaves whatever its buffer held there; this writes zeros).
* ``UnsafeArrayData``: element count (int64), a null bitset of ceil(n/64) words,
  the elements packed at their width (8 for variable-length ones, as
  ``offset << 32 | size`` from the array start) and padded to 8, then the
  variable region. A null element is a set bit over zero bytes and takes no
  variable space; a wide decimal element takes its bytes rounded up to 8.
* ``UnsafeMapData``: the key array's size (int64), the key array, the value array.

Floating point values are written bit for bit. Spark normalizes -0.0 and NaN in
grouping and join keys before they reach a state store (``NormalizeFloatingNumbers``),
so keys decoded from a checkpoint already hold 0.0 and the canonical NaN;
``normalize_floats=True`` does the same to new keys.

Every row of a column is written at once: numpy computes the sizes and offsets of
a whole column, then scatters its bytes; Python loops over fields and nesting
levels only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from state_reader.errors import RowEncodeError
from state_reader.formats import kernels
from state_reader.formats.spark_types import ArrayType, DataType, MapType, StructType, UserDefinedType
from state_reader.formats.unsaferow import MONTH_DAY_NANO, PAD, SLOT_DTYPES, RowBuffer, _read, unaligned_view

_UNSIGNED = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<u8"}
_CANONICAL_NAN = {"float": np.uint64(0x7FC00000), "double": np.uint64(0x7FF8000000000000)}
_U32 = np.uint64(32)


@dataclass
class _Var:
    """Variable-length values: value i is ``buf[start[i]:start[i] + size[i]]`` (size 0 when absent).

    ``aligned``: every start and size is a multiple of 8 (rows, arrays and maps written here).
    """

    buf: np.ndarray
    start: np.ndarray
    size: np.ndarray
    aligned: bool = False


def _move(out: np.ndarray, at: np.ndarray, values: _Var) -> None:
    """Copy each value to ``out[at[i]:]``; nested rows, arrays and maps word by word (8 times fewer moves)."""
    if values.aligned:
        copy_spans(out.view(np.uint64), at // 8, values.buf.view(np.uint64), values.start // 8, values.size // 8)
    else:
        copy_spans(out, at, values.buf, values.start, values.size)


def _round8(size: np.ndarray) -> np.ndarray:
    return (size + 7) // 8 * 8


def _words(values: np.ndarray, width: int) -> np.ndarray:
    """Values of ``width`` bytes as little-endian words, zero-extended (a left-aligned slot)."""
    return np.ascontiguousarray(values).view(_UNSIGNED[width]).astype(np.uint64)


def _put(out: np.ndarray, addr: np.ndarray, words: np.ndarray, width: int) -> None:
    """Write the low ``width`` bytes of each word at its byte address (addresses need not be aligned)."""
    if len(addr):
        unaligned_view(out, _UNSIGNED[width])[addr] = words.astype(_UNSIGNED[width])


def arrow_validity(arr: pa.Array) -> np.ndarray:
    """True where ``arr`` holds a value (not null), one bool per element (the Avro writer's too)."""
    n = len(arr)
    if arr.null_count == 0:
        return np.ones(n, dtype=bool)
    if arr.null_count == n or arr.buffers()[0] is None:
        return np.zeros(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(arr.buffers()[0], dtype=np.uint8), bitorder="little")
    return bits[arr.offset : arr.offset + n].astype(bool)


def arrow_values(arr: pa.Array, dtype: str | np.dtype) -> np.ndarray:
    """The data buffer of a fixed-width Arrow array as ``dtype`` values (one per element)."""
    dt = np.dtype(dtype)
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros(len(arr), dtype=dt)
    return np.frombuffer(buf, dtype=dt, count=arr.offset + len(arr))[arr.offset :]


class _Encoder:
    def __init__(self, source: str, normalize_floats: bool) -> None:
        self.source = source
        self.normalize_floats = normalize_floats

    def fail(self, what: str, path: str) -> RowEncodeError:
        return RowEncodeError(f"{self.source or 'rows'}: {what} (field {path or '<row>'})", path=self.source or None)

    def leaf(self, dt: DataType, arr: pa.Array, path: str) -> pa.Array:
        """``arr`` as the Arrow type the decoder gives ``dt`` (cast when it differs)."""
        target = dt.to_arrow()
        if arr.type == target:
            return arr
        try:
            return arr.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise self.fail(
                f"cannot convert {arr.type} to {target} for a {dt.json_name or dt.kind}: {exc}", path
            ) from None

    # -- one value per element --------------------------------------------------

    def fixed(self, dt: DataType, arr: pa.Array, valid: np.ndarray, path: str) -> np.ndarray:
        """Fixed-width values as slot words (0 where not ``valid``)."""
        kind = dt.kind
        n = len(arr)
        if kind == "void":
            return np.zeros(n, dtype=np.uint64)
        arr = self.leaf(dt, arr, path)
        if kind == "boolean":
            bits = np.unpackbits(np.frombuffer(arr.buffers()[1], dtype=np.uint8), bitorder="little")
            words = bits[arr.offset : arr.offset + n].astype(np.uint64)
        elif kind == "decimal":
            words = self.small_decimal(dt, arr, valid, path)
        elif kind == "year_month_interval":
            parts = arrow_values(arr, MONTH_DAY_NANO)
            bad = valid & ((parts["days"] != 0) | (parts["nanos"] != 0))
            if bad.any():
                raise self.fail("a year-month interval holds days or nanoseconds", path)
            words = _words(parts["months"], 4)
        else:
            raw = arrow_values(arr, SLOT_DTYPES[kind])
            words = _words(raw, raw.dtype.itemsize)
            if self.normalize_floats and kind in _CANONICAL_NAN:
                words = np.where(np.isnan(raw), _CANONICAL_NAN[kind], np.where(raw == 0, np.uint64(0), words))
        return np.where(valid, words, np.uint64(0))

    def _decimal_parts(
        self, dt: DataType, arr: pa.Array, valid: np.ndarray, path: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) 64-bit halves of the unscaled values, checked against the precision."""
        pair = arrow_values(arr, np.dtype((np.uint64, 2))) if len(arr) else np.zeros((0, 2), dtype=np.uint64)
        lo, hi = pair[:, 0], pair[:, 1].view(np.int64)
        # |value| < 10^precision, compared on 128 bits: negate negatives first
        neg = hi < 0
        mag_lo = np.where(neg, ~lo + np.uint64(1), lo)
        mag_hi = np.where(neg, (~hi.view(np.uint64)) + (mag_lo == 0).astype(np.uint64), hi.view(np.uint64))
        limit = 10**dt.precision
        lim_hi, lim_lo = np.uint64(limit >> 64), np.uint64(limit & 0xFFFFFFFFFFFFFFFF)
        fits = (mag_hi < lim_hi) | ((mag_hi == lim_hi) & (mag_lo < lim_lo))
        bad = valid & ~fits
        if bad.any():
            i = int(np.argmax(bad))
            raise self.fail(f"decimal {arr[i].as_py()} does not fit decimal({dt.precision},{dt.scale})", path)
        return lo, hi

    def small_decimal(self, dt: DataType, arr: pa.Array, valid: np.ndarray, path: str) -> np.ndarray:
        lo, _ = self._decimal_parts(dt, arr, valid, path)
        return lo.copy()

    def variable(self, dt: DataType, arr: pa.Array, valid: np.ndarray, path: str) -> _Var:
        """Variable-length values (their bytes, unpadded); size 0 where not ``valid``."""
        kind = dt.kind
        if kind == "struct":
            return self.struct(dt, arr, valid, path)  # type: ignore[arg-type]
        if kind == "array":
            return self.array(dt, arr, valid, path)  # type: ignore[arg-type]
        if kind == "map":
            return self.map(dt, arr, valid, path)  # type: ignore[arg-type]
        arr = self.leaf(dt, arr, path)
        n = len(arr)
        if kind in ("string", "binary"):
            offsets = np.frombuffer(arr.buffers()[1], dtype="<i4", count=arr.offset + n + 1)[arr.offset :]
            data = arr.buffers()[2]
            buf = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
            start = offsets[:-1].astype(np.int64)
            return _Var(buf, start, np.where(valid, np.diff(offsets).astype(np.int64), 0))
        if kind == "decimal":
            return self.big_decimal(dt, arr, valid, path)
        if kind == "interval":
            parts = arrow_values(arr, MONTH_DAY_NANO)
            bad = valid & (parts["nanos"] % 1000 != 0)
            if bad.any():
                raise self.fail("a calendar interval holds a fraction of a microsecond", path)
            out = np.zeros(n, dtype=MONTH_DAY_NANO)
            out["months"] = parts["months"]
            out["days"] = parts["days"]
            out["nanos"] = parts["nanos"] // 1000  # microseconds in the row
            return _Var(out.view(np.uint8), np.arange(n, dtype=np.int64) * 16, np.where(valid, 16, 0))
        if kind == "variant":
            return self.variant(dt, arr, valid, path)
        raise self.fail(f"type {dt.json_name or kind!r} cannot be encoded", path)

    def big_decimal(self, dt: DataType, arr: pa.Array, valid: np.ndarray, path: str) -> _Var:
        """precision > 18: the unscaled value as Java's ``BigInteger.toByteArray`` (minimal big-endian
        two's complement, at least one byte)."""
        n = len(arr)
        self._decimal_parts(dt, arr, valid, path)
        big_endian = (
            np.ascontiguousarray(arrow_values(arr, np.dtype((np.uint8, 16)))[:, ::-1])
            if n
            else np.zeros((0, 16), dtype=np.uint8)
        )
        sign = np.where(big_endian[:, 0] >= 0x80, 0xFF, 0x00).astype(np.uint8)
        # a leading byte is redundant when it only repeats the sign that the next byte carries anyway
        redundant = (big_endian[:, :15] == sign[:, None]) & ((big_endian[:, 1:] & 0x80) == (sign[:, None] & 0x80))
        lead = np.cumprod(redundant, axis=1).sum(axis=1).astype(np.int64)
        size = np.where(valid, 16 - lead, 0)
        return _Var(big_endian.reshape(-1), np.arange(n, dtype=np.int64) * 16 + lead, size)

    def variant(self, dt: DataType, arr: pa.Array, valid: np.ndarray, path: str) -> _Var:
        """int32 length of the value, the value, then the metadata."""
        value = self.variable(DataType("binary"), arr.field(0), valid, path + ".value")
        meta = self.variable(DataType("binary"), arr.field(1), valid, path + ".metadata")
        size = np.where(valid, 4 + value.size + meta.size, 0)
        start = np.cumsum(size) - size
        out = np.zeros(int(size.sum()) + PAD, dtype=np.uint8)
        where = np.flatnonzero(valid)
        _put(out, start[where], value.size[where].astype(np.uint64), 4)
        copy_spans(out, start + 4, value.buf, value.start, value.size)
        copy_spans(out, start + 4 + value.size, meta.buf, meta.start, meta.size)
        return _Var(out, start, size)

    # -- containers -------------------------------------------------------------

    def struct(self, st: StructType, arr: pa.Array, valid: np.ndarray, path: str) -> _Var:
        """One UnsafeRow per element of ``arr`` (a struct array of ``st``); none where not ``valid``."""
        if not pa.types.is_struct(arr.type) or arr.type.num_fields != len(st.fields):
            raise self.fail(f"expected a struct of {len(st.fields)} fields, got {arr.type}", path)
        n = len(arr)
        n_fields = len(st.fields)
        n_bits = (n_fields + 63) // 64
        fixed = 8 * (n_bits + n_fields)
        header = np.zeros((n, n_bits + n_fields), dtype=np.uint64)
        lengths = np.where(valid, fixed, 0).astype(np.int64)
        # (relative offset of each value, the values) of every variable-length field, in field order
        moves: list[tuple[np.ndarray, _Var]] = []
        for i, f in enumerate(st.fields):
            dt = _unwrap(f.data_type)
            child_path = f"{path}.{f.name}" if path else f.name
            child = arr.field(i)
            present = valid & arrow_validity(child) if dt.kind != "void" else np.zeros(n, dtype=bool)
            header[:, i // 64] |= (valid & ~present).astype(np.uint64) << np.uint64(i % 64)
            if dt.fixed_width is not None:
                header[:, n_bits + i] = self.fixed(dt, child, present, child_path)
                continue
            values = self.variable(dt, child, present, child_path)
            if dt.kind == "decimal":  # 16 bytes reserved in a row, null or not; a null keeps its offset
                reserve, size, slotted = np.where(valid, 16, 0), values.size, valid
            elif dt.kind == "interval":  # a null keeps its offset, size 16 and reserved bytes
                reserve = np.where(valid, 16, 0)
                size, slotted = reserve, valid
            else:
                reserve, size, slotted = _round8(values.size), values.size, present
            header[:, n_bits + i] = np.where(
                slotted, (lengths.astype(np.uint64) << _U32) | size.astype(np.uint64), np.uint64(0)
            )
            moves.append((lengths.copy(), values))
            lengths += reserve
        starts = np.cumsum(lengths) - lengths
        out = np.zeros(int(lengths.sum()) + PAD, dtype=np.uint8)
        rows = np.flatnonzero(valid)
        for w in range(n_bits + n_fields):
            _put(out, starts[rows] + 8 * w, header[rows, w], 8)
        for offset, values in moves:
            _move(out, starts + offset, values)
        return _Var(out, starts, lengths, aligned=True)

    @staticmethod
    def _list_parts(arr: pa.Array, valid: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
        """(offsets from the first element, n+1; index of the first element in the child; which lists
        are written) of a list or map array."""
        raw = np.asarray(arr.offsets, dtype=np.int64) if len(arr) else np.zeros(1, dtype=np.int64)
        return raw - raw[0], int(raw[0]), valid & arrow_validity(arr)

    def array(self, at: ArrayType, arr: pa.Array, valid: np.ndarray, path: str) -> _Var:
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
            arr = self.leaf(at, arr, path)
        offsets, first, present = self._list_parts(arr, valid)
        elements = arr.values.slice(first, int(offsets[-1]))
        return self.unsafe_array(_unwrap(at.element), elements, offsets, present, path + "[]")

    def map(self, mt: MapType, arr: pa.Array, valid: np.ndarray, path: str) -> _Var:
        if not pa.types.is_map(arr.type):
            arr = self.leaf(mt, arr, path)
        offsets, first, present = self._list_parts(arr, valid)
        count = int(offsets[-1])
        keys = arr.keys.slice(first, count)
        owned = np.repeat(present, np.diff(offsets))
        if (owned & ~arrow_validity(keys)).any():
            raise self.fail("a map has a null key", path)
        key_array = self.unsafe_array(_unwrap(mt.key), keys, offsets, present, path + ".key")
        value_array = self.unsafe_array(
            _unwrap(mt.value), arr.items.slice(first, count), offsets, present, path + ".value"
        )
        size = np.where(present, 8 + key_array.size + value_array.size, 0)
        start = np.cumsum(size) - size
        out = np.zeros(int(size.sum()) + PAD, dtype=np.uint8)
        where = np.flatnonzero(present)
        _put(out, start[where], key_array.size[where].astype(np.uint64), 8)
        _move(out, start + 8, key_array)
        _move(out, start + 8 + key_array.size, value_array)
        return _Var(out, start, size, aligned=True)

    def unsafe_array(
        self, element: DataType, elements: pa.Array, offsets: np.ndarray, present: np.ndarray, path: str
    ) -> _Var:
        """One UnsafeArrayData per list: list i holds ``elements[offsets[i]:offsets[i+1]]`` when ``present``."""
        n = len(present)
        per_list = np.diff(offsets)
        count = np.where(present, per_list, 0)
        owner = np.repeat(np.arange(n, dtype=np.int64), per_list)
        owned = present[owner]  # elements of absent lists are not written
        index = np.arange(len(owner), dtype=np.int64) - offsets[:-1][owner]
        elem_valid = owned & (arrow_validity(elements) if element.kind != "void" else False)
        width = element.fixed_width or 8
        head = 8 + (count + 63) // 64 * 8
        fixed_end = head + _round8(count * width)
        lengths = fixed_end.copy()
        if element.fixed_width is not None:
            words = self.fixed(element, elements, elem_valid, path)
            values = None
        else:
            values = self.variable(element, elements, elem_valid, path)
            reserve = _round8(values.size)
            # where each element's bytes go: after the fixed part, behind the earlier elements of its list
            ahead = np.cumsum(reserve) - reserve
            ahead -= np.concatenate([[0], np.cumsum(reserve)])[offsets[:-1]][owner]
            var_at = fixed_end[owner] + ahead
            lengths += np.bincount(owner, weights=reserve, minlength=n).astype(np.int64)
            words = np.where(
                elem_valid, (var_at.astype(np.uint64) << _U32) | values.size.astype(np.uint64), np.uint64(0)
            )
        lengths = np.where(present, lengths, 0)
        starts = np.cumsum(lengths) - lengths
        out = np.zeros(int(lengths.sum()) + PAD, dtype=np.uint8)
        where = np.flatnonzero(present)
        _put(out, starts[where], count[where].astype(np.uint64), 8)
        nulls = np.flatnonzero(owned & ~elem_valid)
        if len(nulls):
            np.bitwise_or.at(
                out, starts[owner[nulls]] + 8 + index[nulls] // 8, (1 << (index[nulls] % 8)).astype(np.uint8)
            )
        live = np.flatnonzero(elem_valid)
        _put(out, starts[owner[live]] + head[owner[live]] + index[live] * width, words[live], width)
        if values is not None:
            _move(out, starts[owner] + var_at, values)
        return _Var(out, starts, lengths, aligned=True)


def _unwrap(dt: DataType) -> DataType:
    """A user-defined type is stored as its SQL type."""
    while isinstance(dt, UserDefinedType):
        dt = dt.sql_type
    return dt


def encode_rows(
    values: pa.StructArray | pa.ChunkedArray | pa.RecordBatch | pa.Table,
    schema: StructType,
    source: str = "",
    *,
    normalize_floats: bool = False,
) -> RowBuffer:
    """Encode every row of ``values`` as an UnsafeRow of ``schema``, byte for byte as Spark writes it.

    ``values`` holds one row per element, with the fields of ``schema`` in order
    (the Arrow types ``decode_rows`` produces; other types are cast to them).
    Rows must not be null; null fields are written as null whether or not the
    schema allows them, as Spark's projection does. ``normalize_floats`` turns
    -0.0 into 0.0 and every NaN into Java's canonical NaN, as Spark does to
    grouping and join keys. A value that cannot be encoded (a decimal beyond its
    precision, a null map key, an interval Spark cannot hold) raises
    :class:`~state_reader.errors.RowEncodeError` naming ``source`` and the field.
    """
    if isinstance(values, pa.Table):
        values = values.combine_chunks().to_struct_array()
    if isinstance(values, pa.RecordBatch):
        values = values.to_struct_array()
    if isinstance(values, pa.ChunkedArray):  # also what a table's to_struct_array gives
        values = values.combine_chunks()
    encoder = _Encoder(source, normalize_floats)
    if values.null_count:
        raise encoder.fail(f"row {int(np.argmin(arrow_validity(values)))} is null; a state row cannot be", "")
    rows = encoder.struct(schema, values, np.ones(len(values), dtype=bool), "")
    return RowBuffer.wrap(rows.buf, len(rows.buf) - PAD, rows.start, rows.size, source)


# --- writing: moving rows and fields ------------------------------------------------


def row_runs(sizes: np.ndarray, max_bytes: int, max_rows: int | None = None) -> Iterator[tuple[int, int]]:
    """Consecutive runs ``lo:hi`` of rows whose ``sizes`` add up to at most ``max_bytes`` (and at most
    ``max_rows`` rows); a larger row makes a run alone."""
    ends = np.cumsum(sizes)
    lo = 0
    while lo < len(sizes):
        base = int(ends[lo - 1]) if lo else 0
        hi = max(int(np.searchsorted(ends, base + max_bytes, side="right")), lo + 1)
        hi = min(hi, len(sizes) if max_rows is None else lo + max_rows, len(sizes))
        yield lo, hi
        lo = hi


_COPY_BYTES = 1 << 15  # its index arrays take ~32 bytes per byte copied: about a MiB at most


def copy_spans(
    dst: np.ndarray, dst_starts: np.ndarray, src: np.ndarray, src_starts: np.ndarray, lengths: np.ndarray
) -> None:
    """``dst[dst_starts[i]:+lengths[i]] = src[src_starts[i]:+lengths[i]]`` for every i, vectorised."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    if n == 0 or kernels.copy_spans(dst, dst_starts, src, src_starts, lengths):
        return
    ends = np.cumsum(lengths)
    lo = 0
    while lo < n:
        # the rows whose bytes end within the next _COPY_BYTES (at least one row)
        done = int(ends[lo - 1]) if lo else 0
        hi = min(max(int(np.searchsorted(ends, done + _COPY_BYTES, side="right")), lo + 1), n)
        size = lengths[lo:hi]
        total = int(ends[hi - 1]) - done
        if total:
            within = np.arange(total, dtype=np.int64) - np.repeat(ends[lo:hi] - done - size, size)
            dst[np.repeat(dst_starts[lo:hi], size) + within] = src[np.repeat(src_starts[lo:hi], size) + within]
        lo = hi


def concat_rows(parts: Sequence[RowBuffer], source: str) -> RowBuffer:
    """The rows of ``parts``, one after another, in one buffer."""
    lengths = np.concatenate([p.lengths for p in parts])
    starts = np.cumsum(lengths) - lengths
    size = int(lengths.sum())
    out = np.zeros(size + PAD, dtype=np.uint8)
    at = 0
    for p in parts:
        n = len(p.starts)
        copy_spans(out, starts[at : at + n], p.buf, p.starts, p.lengths)
        at += n
    return RowBuffer.wrap(out, size, starts, lengths, source)


def pack_rows(parts: list[tuple[int, RowBuffer | None]], source: str) -> RowBuffer:
    """Rows that are, part after part, ``zeros`` zero bytes then row i of ``rows`` (if any).

    E.g. ``[(1, rows)]`` puts a zero byte (RocksDB's encoding version) before every row.
    """
    n = len(next(p for _, p in parts if p is not None).starts)
    lengths = np.zeros(n, dtype=np.int64)
    for zeros, rows in parts:
        lengths += zeros + (rows.lengths if rows is not None else 0)
    starts = np.cumsum(lengths) - lengths
    size = int(lengths.sum())
    out = np.zeros(size + PAD, dtype=np.uint8)
    at = starts.copy()
    for zeros, rows in parts:
        at += zeros
        if rows is not None:
            copy_spans(out, at, rows.buf, rows.starts, rows.lengths)
            at += rows.lengths
    return RowBuffer.wrap(out, size, starts, lengths, source)


def _splice_part(rows: RowBuffer, schema: StructType, lo: int, hi: int) -> kernels.SplicePart:
    variable = np.array([f.data_type.fixed_width is None for f in schema.fields[lo:hi]], dtype=bool)
    return rows.buf, rows.starts, rows.lengths, (len(schema.fields) + 63) // 64, lo, variable


def splice_rows(parts: list[tuple[RowBuffer, StructType, int, int]], source: str) -> RowBuffer:
    """New UnsafeRows whose fields are fields ``lo:hi`` of each part's row, in order.

    Row i of the result holds, one part after another, the fields ``lo..hi-1``
    of row i of that part (whose rows are UnsafeRows of its schema). Fixed-width
    slots are copied, variable-length values are moved into the new row's
    variable region (in field order, zero-padded to words, as Spark's projection
    writes them) with their offsets rewritten; nested values are self-relative, so
    they move as they are. Splits a row in two (a RocksDB prefix key) and joins
    two back into one.
    """
    n = len(parts[0][0].starts)
    width = sum(hi - lo for _, _, lo, hi in parts)
    compiled = kernels.splice_rows([_splice_part(*part) for part in parts], width, PAD)
    if compiled is not None:
        out, starts, lengths = compiled
        return RowBuffer.wrap(out, len(out) - PAD, starts, lengths, source)
    n_bits = (width + 63) // 64
    header = np.zeros((n, n_bits + width), dtype="<u8")
    # (field in the new row, its rows, where each value starts, its size, null)
    moves: list[tuple[int, RowBuffer, np.ndarray, np.ndarray, np.ndarray]] = []
    out_field = 0
    for rows, schema, lo, hi in parts:
        in_bits = (len(schema.fields) + 63) // 64
        for i in range(lo, hi):
            bits = _read(rows.buf, rows.starts + 8 * (i // 64), "<u8")
            is_null = (bits >> np.uint64(i % 64)) & np.uint64(1)
            header[:, out_field // 64] |= is_null << np.uint64(out_field % 64)
            word = _read(rows.buf, rows.starts + 8 * (in_bits + i), "<u8")
            if schema.fields[i].data_type.fixed_width is not None:
                header[:, n_bits + out_field] = word
            else:
                null = is_null.astype(bool)
                size = np.where(null, 0, word & np.uint64(0xFFFFFFFF)).astype(np.int64)
                moves.append((out_field, rows, rows.starts + (word >> np.uint64(32)).astype(np.int64), size, null))
            out_field += 1
    lengths = np.full(n, 8 * (n_bits + width), dtype=np.int64)
    placed = []
    for field_at, _, _, size, null in moves:
        # a null keeps a zero slot; an empty value still records where it would start, as Spark's writer does
        header[:, n_bits + field_at] = np.where(
            null, 0, (lengths.astype(np.uint64) << np.uint64(32)) | size.astype(np.uint64)
        )
        placed.append(lengths.copy())
        lengths += (size + 7) // 8 * 8
    starts = np.cumsum(lengths) - lengths
    total = int(lengths.sum())
    out = np.zeros(total + PAD, dtype=np.uint8)
    head_bytes = 8 * (n_bits + width)
    copy_spans(
        out,
        starts,
        header.view(np.uint8).reshape(-1),
        np.arange(n, dtype=np.int64) * head_bytes,
        np.full(n, head_bytes, dtype=np.int64),
    )
    for (_, rows, src_start, size, _), at in zip(moves, placed, strict=True):
        copy_spans(out, starts + at, rows.buf, src_start, size)
    return RowBuffer.wrap(out, total, starts, lengths, source)
