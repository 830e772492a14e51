"""Avro records of state written and read column by column: every record of a batch at once, with a few numpy
passes per field, where :mod:`~state_reader.formats.avro_encoding` hands fastavro one record at a time.

The records are those of :func:`~state_reader.formats.avro_encoding.avro_schema`: a record whose fields are
unions ``[null, T]`` (a void field is plain ``null`` and takes no bytes). Avro's binary encoding of them:

* a union: the branch index as a zig-zag varint (one byte here: ``0x00`` null, ``0x02`` the value), then the
  value;
* int and long (integer, date, long, timestamps; byte and short): a zig-zag varint of 1 to 10 bytes;
* float and double: 4 and 8 bytes little-endian; boolean: one byte 0 or 1;
* string and bytes: the length as a zig-zag varint, then the bytes;
* fixed (a decimal): the unscaled value, big-endian two's complement, in the schema's size;
* a nested record: its fields one after another.

Records of those types, nested records included, are written and read here; a schema with an array or a map
(whose items come in counted blocks) is not (:func:`columnar` says which), and its records go through fastavro
as before. Writing gives fastavro's bytes; reading gives what decoding through fastavro gives, and hands back
None for a batch it would not read the same way (a record cut short or followed by more bytes, a union index
out of its two, a string that is not UTF-8, a number out of its type's range), so that the caller decodes
that batch through fastavro and reports the bad record as it always has.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from state_reader.errors import RowEncodeError
from state_reader.formats import kernels
from state_reader.formats.spark_types import DataType, StructType, UserDefinedType
from state_reader.formats.unsaferow import PAD, RowBuffer
from state_reader.formats.unsaferow_encode import arrow_validity, arrow_values, copy_spans

# the bytes of a union's branch index (zig-zag varints of 0 and 1)
NULL_BRANCH, VALUE_BRANCH = 0, 2
# kinds written as zig-zag varints, with the numpy type of their Arrow values
_VARINT_KINDS = {
    "byte": "<i1",
    "short": "<i2",
    "integer": "<i4",
    "date": "<i4",
    "long": "<i8",
    "timestamp": "<i8",
    "timestamp_ntz": "<i8",
}
_FIXED_KINDS = {"float": "<f4", "double": "<f8"}
_ATOMIC_KINDS = {*_VARINT_KINDS, *_FIXED_KINDS, "boolean", "string", "binary", "decimal", "void"}
_VARINT_BYTES = 10  # a long's zig-zag varint takes at most 10 bytes
_SEVEN = np.uint64(7)


def _unwrap(dt: DataType) -> DataType:
    while isinstance(dt, UserDefinedType):
        dt = dt.sql_type
    return dt


def columnar(schema: StructType) -> bool:
    """Whether records of ``schema`` are written and read here: atomic fields and records of them."""

    def ok(dt: DataType) -> bool:
        dt = _unwrap(dt)
        if isinstance(dt, StructType):
            return all(ok(f.data_type) for f in dt.fields)
        return dt.kind in _ATOMIC_KINDS

    return ok(schema)


def decimal_bytes(precision: int) -> int:
    """Bytes of the smallest two's-complement integer that holds 10**precision - 1 (a decimal's Avro fixed)."""
    n = 1
    while 2 ** (8 * n - 1) < 10**precision:
        n += 1
    return n


class _NotColumnarError(Exception):
    """A batch these passes do not write or read as fastavro does: the caller takes fastavro's way."""


# --- writing -------------------------------------------------------------------------------------------------


def _varints(zigzag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's varint: (n, w) bytes (w: the longest) and each one's size."""
    size = np.ones(len(zigzag), dtype=np.int64)
    for k in range(1, _VARINT_BYTES):
        size += zigzag >= (np.uint64(1) << np.uint64(7 * k))
    width = int(size.max()) if len(size) else 1
    shifts = (np.arange(width, dtype=np.uint64) * _SEVEN)[None, :]
    groups = ((zigzag[:, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
    more = np.arange(width)[None, :] < (size - 1)[:, None]
    return groups | (more.astype(np.uint8) << np.uint8(7)), size


def _zigzag(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64)
    return ((v << np.int64(1)) ^ (v >> np.int64(63))).view(np.uint64)


class _Writer:
    """The pieces of every record, in order: each a buffer and, per record, where its bytes start and how many
    there are (0 where the record has none of it)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def matrix(self, rows: np.ndarray, size: np.ndarray) -> None:
        """Row i's first ``size[i]`` bytes of ``rows[i]``."""
        rows = np.ascontiguousarray(rows, dtype=np.uint8)
        width = rows.shape[1]
        self.pieces.append((rows.reshape(-1), np.arange(self.n, dtype=np.int64) * width, size.astype(np.int64)))

    def branch(self, valid: np.ndarray, present: np.ndarray, value: np.ndarray | None, value_size: np.ndarray) -> None:
        """A union where ``valid``: its branch byte, then (where ``present``) the value's bytes (rows of ``value``)."""
        tag = np.where(present, VALUE_BRANCH, NULL_BRANCH).astype(np.uint8)[:, None]
        rows = tag if value is None else np.concatenate([tag, value], axis=1)
        self.matrix(rows, np.where(valid, 1 + np.where(present, value_size, 0), 0))

    def record(self, st: StructType, arr: pa.StructArray, valid: np.ndarray) -> None:
        if not pa.types.is_struct(arr.type) or arr.type.num_fields != len(st.fields):
            raise _NotColumnarError
        for i, f in enumerate(st.fields):
            dt = _unwrap(f.data_type)
            if dt.kind == "void":
                continue
            child = arr.field(i)
            present = valid & arrow_validity(child)
            if isinstance(dt, StructType):
                self.branch(valid, present, None, np.zeros(self.n, dtype=np.int64))
                self.record(dt, child, present)
            else:
                self.atomic(dt, child, valid, present)

    def atomic(self, dt: DataType, arr: pa.Array, valid: np.ndarray, present: np.ndarray) -> None:
        kind, n = dt.kind, self.n
        target = dt.to_arrow()
        if arr.type != target:
            try:
                arr = arr.cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                raise _NotColumnarError from None
        if kind in _VARINT_KINDS:
            raw = np.where(present, arrow_values(arr, _VARINT_KINDS[kind]), 0)
            value, size = _varints(_zigzag(raw))
            self.branch(valid, present, value, size)
        elif kind in _FIXED_KINDS:
            width = np.dtype(_FIXED_KINDS[kind]).itemsize
            raw = np.ascontiguousarray(arrow_values(arr, _FIXED_KINDS[kind])).view(np.uint8).reshape(n, width)
            self.branch(valid, present, raw, np.full(n, width, dtype=np.int64))
        elif kind == "boolean":
            bits = np.unpackbits(np.frombuffer(arr.buffers()[1], dtype=np.uint8), bitorder="little")
            flags = bits[arr.offset : arr.offset + n].astype(np.uint8)[:, None] if n else np.zeros((0, 1), np.uint8)
            self.branch(valid, present, flags, np.ones(n, dtype=np.int64))
        elif kind == "decimal":
            width = decimal_bytes(dt.precision)
            little = arrow_values(arr, np.dtype((np.uint8, 16))) if n else np.zeros((0, 16), dtype=np.uint8)
            # the value fits ``width`` bytes when every byte above them repeats the sign of the top one
            sign = np.where(little[:, width - 1] >= 0x80, 0xFF, 0x00).astype(np.uint8)
            if (present & (little[:, width:] != sign[:, None]).any(axis=1)).any():
                raise _NotColumnarError  # fastavro's error names the record
            self.branch(valid, present, little[:, width - 1 :: -1], np.full(n, width, dtype=np.int64))
        elif kind in ("string", "binary"):
            offsets = np.frombuffer(arr.buffers()[1], dtype="<i4", count=arr.offset + n + 1)[arr.offset :]
            length = np.where(present, np.diff(offsets).astype(np.int64), 0)
            value, size = _varints(_zigzag(length))
            self.branch(valid, present, value, size)
            data = arr.buffers()[2]
            buf = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
            self.pieces.append((buf, offsets[:-1].astype(np.int64), length))
        else:
            raise _NotColumnarError

    def rows(self, head: bytes, source: str) -> RowBuffer:
        """The records, each after ``head``, one after another."""
        n = len(head)
        lengths = np.full(self.n, n, dtype=np.int64)
        for _, _, size in self.pieces:
            lengths += size
        starts = np.cumsum(lengths) - lengths
        total = int(lengths.sum())
        out = np.zeros(total + PAD, dtype=np.uint8)
        if n:
            out[starts[:, None] + np.arange(n, dtype=np.int64)] = np.frombuffer(head, dtype=np.uint8)
        at = starts + n
        for buf, start, size in self.pieces:
            copy_spans(out, at, buf, start, size)
            at += size
        return RowBuffer.wrap(out, total, starts, lengths, source)


def encode_records(values: pa.StructArray, schema: StructType, head: bytes, source: str) -> RowBuffer | None:
    """Each row of ``values`` (not null) as ``head`` then the Avro record of ``schema`` fastavro writes for it;
    None where :func:`columnar` says no, or a value is one fastavro refuses (its error names the row)."""
    if not columnar(schema):
        return None
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        i = int(np.argmin(arrow_validity(values)))
        raise RowEncodeError(f"{source}: row {i} is null; an Avro state record cannot be", path=source or None)
    writer = _Writer(len(values))
    try:
        writer.record(schema, values, np.ones(len(values), dtype=bool))
    except _NotColumnarError:
        return None
    return writer.rows(head, source)


# --- reading -------------------------------------------------------------------------------------------------


class _Reader:
    """Records at ``pos`` (one cursor per record, moved past each field read) that end at ``end``."""

    def __init__(self, buf: np.ndarray, pos: np.ndarray, end: np.ndarray) -> None:
        self.buf = buf
        self.last = len(buf) - 1
        self.pos = pos.astype(np.int64)
        self.end = end.astype(np.int64)

    def _bytes(self, at: np.ndarray, width: int) -> np.ndarray:
        """(len(at), width) bytes from each of ``at`` (clipped into the buffer; bounds are checked apart)."""
        return self.buf[np.minimum(at[:, None] + np.arange(width, dtype=np.int64)[None, :], self.last)]

    def _advance(self, rows: np.ndarray, size: np.ndarray) -> None:
        self.pos[rows] += size
        if (self.pos[rows] > self.end[rows]).any():
            raise _NotColumnarError  # a record cut short

    def varint(self, rows: np.ndarray) -> np.ndarray:
        """The zig-zag varint at each of ``rows``' cursors, as a signed long: a byte at a time, each pass over
        the varints not ended yet (most end within a byte or two)."""
        at = self.pos[rows]
        byte = self.buf[np.minimum(at, self.last)]
        zigzag = (byte & 0x7F).astype(np.uint64)
        size = np.ones(len(rows), dtype=np.int64)
        going = np.flatnonzero(byte >= 0x80)
        for k in range(1, _VARINT_BYTES):
            if not len(going):
                break
            byte = self.buf[np.minimum(at[going] + k, self.last)]
            if k == _VARINT_BYTES - 1 and (byte > 1).any():
                raise _NotColumnarError  # more than 64 bits, or no end within 10 bytes
            zigzag[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            size[going] += 1
            going = going[byte >= 0x80]
        self._advance(rows, size)
        return ((zigzag >> np.uint64(1)) ^ (np.uint64(0) - (zigzag & np.uint64(1)))).view(np.int64)

    def branch(self, rows: np.ndarray) -> np.ndarray:
        """The union branch at each of ``rows``' cursors: whether it holds a value."""
        tag = self.buf[np.minimum(self.pos[rows], self.last)]
        if ((tag != NULL_BRANCH) & (tag != VALUE_BRANCH)).any():
            raise _NotColumnarError
        self._advance(rows, np.ones(len(rows), dtype=np.int64))
        return tag == VALUE_BRANCH

    def record(self, st: StructType, rows: np.ndarray, n: int) -> list[pa.Array]:
        """The fields of the records at ``rows`` (of ``n``), each a full-length array. As pyarrow converts
        fastavro's records, a field is null only in a record that holds it as null; where the record itself is
        null, the field holds an empty value (0, "", a record of such)."""
        out = []
        for f in st.fields:
            dt = _unwrap(f.data_type)
            if dt.kind == "void":
                out.append(pa.nulls(n))
                continue
            branch = self.branch(rows)
            held = rows[branch]
            valid = np.ones(n, dtype=bool)
            valid[rows[~branch]] = False
            if isinstance(dt, StructType):
                out.append(_struct(dt, self.record(dt, held, n), valid))
            else:
                out.append(self.atomic(dt, held, valid))
        return out

    def atomic(self, dt: DataType, rows: np.ndarray, valid: np.ndarray) -> pa.Array:
        """The values of ``rows`` (the others are 0 or empty; null where not ``valid``)."""
        kind, n = dt.kind, len(valid)
        target = dt.to_arrow()
        if kind in _VARINT_KINDS:
            numbers = self.varint(rows)
            dtype = np.dtype(_VARINT_KINDS[kind])
            info = np.iinfo(dtype)
            if len(numbers) and (numbers.min() < info.min or numbers.max() > info.max):
                raise _NotColumnarError  # pyarrow refuses what does not fit the type
            data = np.zeros(n, dtype=dtype)
            data[rows] = numbers
            return _array(target, valid, data)
        if kind in _FIXED_KINDS or kind in ("boolean", "decimal"):
            if kind in _FIXED_KINDS:
                width = np.dtype(_FIXED_KINDS[kind]).itemsize
            else:
                width = 1 if kind == "boolean" else decimal_bytes(dt.precision)
            raw = self._bytes(self.pos[rows], width)
            self._advance(rows, np.full(len(rows), width, dtype=np.int64))
            if kind == "boolean":
                flags = np.zeros(n, dtype=bool)
                flags[rows] = raw[:, 0] != 0
                return pa.Array.from_buffers(
                    pa.bool_(), n, [_bitmap(valid), pa.py_buffer(np.packbits(flags, bitorder="little"))]
                )
            if kind in _FIXED_KINDS:
                data = np.zeros((n, width), dtype=np.uint8)
                data[rows] = raw
                return _array(target, valid, data.view(_FIXED_KINDS[kind]).reshape(-1))
            return self.decimal(dt, raw, rows, valid)
        if kind in ("string", "binary"):
            size = self.varint(rows)
            if (size < 0).any():
                raise _NotColumnarError
            start = self.pos[rows].copy()
            self._advance(rows, size)
            return _spans(target, self.buf, start, size, rows, valid)
        raise _NotColumnarError

    @staticmethod
    def decimal(dt: DataType, raw: np.ndarray, rows: np.ndarray, valid: np.ndarray) -> pa.Array:
        """Big-endian two's-complement fixed bytes -> decimal128 (16 bytes little-endian, sign-extended)."""
        n, width = len(valid), raw.shape[1]
        little = np.zeros((n, 16), dtype=np.uint8)
        if len(rows):
            sign = np.where(raw[:, 0] >= 0x80, 0xFF, 0x00).astype(np.uint8)
            little[rows, :width] = raw[:, ::-1]
            little[rows, width:] = sign[:, None]
        lo, hi = little[:, :8].copy().view("<u8").reshape(-1), little[:, 8:].copy().view("<i8").reshape(-1)
        # |value| < 10**precision, as pyarrow requires of a decimal's digits: compared on 128 bits
        neg = hi < 0
        mag_lo = np.where(neg, ~lo + np.uint64(1), lo)
        mag_hi = np.where(neg, (~hi.view(np.uint64)) + (mag_lo == 0).astype(np.uint64), hi.view(np.uint64))
        limit = 10**dt.precision
        lim_hi, lim_lo = np.uint64(limit >> 64), np.uint64(limit & 0xFFFFFFFFFFFFFFFF)
        if (valid & ~((mag_hi < lim_hi) | ((mag_hi == lim_hi) & (mag_lo < lim_lo)))).any():
            raise _NotColumnarError
        return _array(dt.to_arrow(), valid, little.reshape(-1))


def _bitmap(valid: np.ndarray) -> pa.Buffer | None:
    return None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


def _array(arrow_type: pa.DataType, valid: np.ndarray, data: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(arrow_type, len(valid), [_bitmap(valid), pa.py_buffer(np.ascontiguousarray(data))])


def _struct(st: StructType, children: list[pa.Array], valid: np.ndarray) -> pa.StructArray:
    mask = None if valid.all() else pa.array(~valid)
    return pa.StructArray.from_arrays(children, fields=list(st.to_arrow()), mask=mask)


def _spans(
    arrow_type: pa.DataType, buf: np.ndarray, start: np.ndarray, size: np.ndarray, rows: np.ndarray, valid: np.ndarray
) -> pa.Array:
    """A string or binary array of the spans ``buf[start:start+size]`` of ``rows``, empty elsewhere (null where
    not ``valid``)."""
    n = len(valid)
    full_start = np.zeros(n, dtype=np.int64)
    full_size = np.zeros(n, dtype=np.int64)
    full_start[rows] = start
    full_size[rows] = size
    compiled = kernels.gather_spans(buf, full_start, full_size, np.ones(n, dtype=bool))
    if compiled is not None:
        offsets, data, ascii_only = compiled
    else:
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(full_size, out=offsets[1:])
        total = int(offsets[-1])
        index = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1] - full_start, full_size)
        data, ascii_only = buf[index], False
    if offsets[-1] >= 2**31:
        raise _NotColumnarError
    out = pa.Array.from_buffers(
        arrow_type, n, [_bitmap(valid), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )
    if pa.types.is_string(arrow_type) and not ascii_only:
        try:
            out.validate(full=True)
        except pa.ArrowInvalid:
            raise _NotColumnarError from None  # not UTF-8: fastavro's error names the record
    return out


def decode_records(rows: RowBuffer, schema: StructType, valid: np.ndarray | None = None) -> pa.StructArray | None:
    """The Avro records of ``schema`` that are ``rows`` (each span a whole record; a row not ``valid`` is a null
    row) as a StructArray, as fastavro's records converted by ``avro_encoding.decode_avro`` are; None where
    :func:`columnar` says no, or where a record is not one fastavro reads (the caller decodes through it)."""
    if not columnar(schema):
        return None
    n = len(rows.starts)
    present = np.ones(n, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    held = np.flatnonzero(present)
    reader = _Reader(rows.buf[: rows.size + PAD], rows.starts, rows.starts + rows.lengths)
    try:
        children = reader.record(schema, held, n)
        if (reader.pos[held] != reader.end[held]).any():
            return None  # bytes after a record
    except _NotColumnarError:
        return None
    return _struct(schema, children, present)


__all__ = ["columnar", "decimal_bytes", "decode_records", "encode_records"]
