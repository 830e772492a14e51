"""UnsafeRow bytes -> Arrow arrays, column by column.

Layout (Spark catalyst ``UnsafeRow``, stable since 2.x; little-endian):
a null bitset of ceil(n/64) 64-bit words, n 8-byte slots, then a variable-length
region. Fixed-width values sit left-aligned in their slot; variable-length values
(string, binary, decimal with precision > 18, calendar interval, struct, array,
map, variant) store ``offset << 32 | size`` with the offset relative to the start
of the row that holds them. ``UnsafeArrayData`` is an int64 element count, a null
bitset, packed elements (width by type; 8 for variable-length elements, whose
offsets are relative to the array start) and a variable region. ``UnsafeMapData``
is an int64 key-array size followed by a key array and a value array.

Every row of a column is decoded at once: numpy gathers the bytes of one field
from all rows, so the cost per row is a few vectorised operations, not Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from state_reader.errors import RowDecodeError
from state_reader.formats import kernels
from state_reader.formats.spark_types import ArrayType, DataType, MapType, StructType

# Zero bytes appended to every buffer, so that the slots of null values (whose
# addresses are forced to 0) and short reads near the end never leave it.
PAD = 64
_MAX_ELEMENTS = 1 << 31
# Rows whose fixed region (null bitset and slots) has at most this many words are read in one gather.
_ROW_WORDS = 16

# the numpy dtype of each fixed-width kind's value in its 8-byte slot (little-endian, low bytes first)
SLOT_DTYPES = {
    "byte": "<i1",
    "short": "<i2",
    "integer": "<i4",
    "long": "<i8",
    "float": "<f4",
    "double": "<f8",
    "date": "<i4",
    "timestamp": "<i8",
    "timestamp_ntz": "<i8",
    "day_time_interval": "<i8",
    "time": "<i8",
    "year_month_interval": "<i4",
}
MONTH_DAY_NANO = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])


class RowBuffer:
    """Bytes of many rows plus where each row starts and ends.

    ``buf`` always has at least ``PAD`` readable bytes after ``size``, so the
    decoders can read whole words near the end without checking.
    """

    def __init__(
        self, data: bytes | bytearray | memoryview, starts: np.ndarray, lengths: np.ndarray, source: str
    ) -> None:
        raw = np.frombuffer(data, dtype=np.uint8)
        self.buf = np.zeros(len(raw) + PAD, dtype=np.uint8)
        self.buf[: len(raw)] = raw
        self.size = len(raw)
        self.starts = np.asarray(starts, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.source = source

    @classmethod
    def wrap(cls, buf: np.ndarray, size: int, starts: np.ndarray, lengths: np.ndarray, source: str) -> RowBuffer:
        """Rows inside ``buf[:size]``, which already has ``PAD`` spare bytes after ``size`` (no copy)."""
        if buf.dtype != np.uint8 or buf.ndim != 1 or len(buf) < size + PAD:
            raise ValueError(f"RowBuffer.wrap needs a flat uint8 buffer with {PAD} spare bytes")
        out = cls.__new__(cls)
        out.buf = buf
        out.size = size
        out.starts = np.asarray(starts, dtype=np.int64)
        out.lengths = np.asarray(lengths, dtype=np.int64)
        out.source = source
        return out

    def take(self, index: np.ndarray | slice) -> RowBuffer:
        """The rows at ``index``, in that order (no bytes copied; a slice copies no positions either)."""
        return RowBuffer.wrap(self.buf, self.size, self.starts[index], self.lengths[index], self.source)

    @classmethod
    def from_rows(cls, rows: list[bytes], source: str) -> RowBuffer:
        """Concatenate separate row byte strings into one buffer (one copy)."""
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        starts = np.zeros(len(rows), dtype=np.int64)
        if len(rows) > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        size = int(lengths.sum())
        buf = np.frombuffer(b"".join([*rows, bytes(PAD)]), dtype=np.uint8)
        return cls.wrap(buf, size, starts, lengths, source)


def unaligned_view(buf: np.ndarray, dtype: str) -> np.ndarray:
    """``buf`` as overlapping values of ``dtype``: element i is the value whose bytes start at i.

    Indexing it with byte addresses reads unaligned values in one gather,
    instead of gathering their bytes one by one.
    """
    dt = np.dtype(dtype)
    return np.ndarray(shape=(len(buf) - dt.itemsize + 1,), dtype=dt, buffer=buf, strides=(1,))


def _read(buf: np.ndarray, addr: np.ndarray, dtype: str) -> np.ndarray:
    if np.dtype(dtype).itemsize == 1:
        return buf[addr].view(dtype)
    return unaligned_view(buf, dtype)[addr]


def _from_word(word: np.ndarray, dtype: str) -> np.ndarray:
    """The value of ``dtype`` in the low bytes of each little-endian slot word."""
    width = np.dtype(dtype).itemsize
    if width == 8:
        return word.view(dtype)
    return word.astype({4: np.uint32, 2: np.uint16, 1: np.uint8}[width]).view(dtype)


def int_array(values: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    # pa.array() on a numpy array imports pandas when it is installed (0.5 s or more)
    data = np.ascontiguousarray(values)
    return pa.Array.from_buffers(arrow_type, len(data), [None, pa.py_buffer(data)])


def _validity(valid: np.ndarray) -> tuple[pa.Buffer | None, int]:
    nulls = int(len(valid) - np.count_nonzero(valid))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def _null_bits(buf: np.ndarray, bitset_addr: np.ndarray, index: np.ndarray | int) -> np.ndarray:
    """True where bit ``index`` of the bitset at ``bitset_addr`` is set."""
    words = _read(buf, bitset_addr + (np.asarray(index) // 64) * 8, "<u8")
    return ((words >> (np.asarray(index, dtype=np.uint64) % np.uint64(64))) & np.uint64(1)).astype(bool)


def _valid_utf8(strings: pa.StringArray) -> pa.StringArray:
    """Spark strings may hold invalid UTF-8 (e.g. cast from binary); replace bad bytes with
    U+FFFD as Spark's own collect() does, rather than hand back an invalid Arrow array."""
    try:
        strings.validate(full=True)
        return strings
    except pa.ArrowInvalid:
        raw = strings.view(pa.binary()).to_pylist()
        return pa.array([None if b is None else b.decode("utf-8", "replace") for b in raw], pa.string())


def _gather_words(buf: np.ndarray, base: np.ndarray, n_words: int) -> np.ndarray:
    """(len(base), n_words) little-endian words at each of ``base``; a base past the last
    full row reads the last ``n_words`` words of ``buf``."""
    rows = np.ndarray(shape=(len(buf) - 8 * n_words + 1, n_words), dtype="<u8", buffer=buf, strides=(1, 8))
    return rows[np.minimum(base, len(buf) - 8 * n_words)]


class _Decoder:
    def __init__(self, rows: RowBuffer) -> None:
        self.buf = rows.buf
        self.source = rows.source

    def fail(self, what: str, path: str) -> RowDecodeError:
        return RowDecodeError(f"{self.source}: {what} (field {path or '<row>'})", path=self.source)

    def check_span(
        self, start: np.ndarray, size: np.ndarray, limit: np.ndarray, valid: np.ndarray, path: str, what: str
    ) -> None:
        bad = valid & ((size < 0) | (start + size > limit))
        if bad.any():
            i = int(np.argmax(bad))
            raise self.fail(
                f"{what} of {int(size[i])} bytes at byte {int(start[i])} runs past its "
                f"enclosing data, which ends at byte {int(limit[i])}",
                path,
            )

    # -- structs ------------------------------------------------------------

    def struct(
        self, st: StructType, base: np.ndarray, limit: np.ndarray, valid: np.ndarray, path: str
    ) -> pa.StructArray:
        """Decode rows of ``st`` whose UnsafeRows start at ``base`` (valid rows only)."""
        n_fields = len(st.fields)
        fixed = (n_fields + 63) // 64 * 8 + 8 * n_fields
        self.check_span(
            base,
            np.full(len(base), fixed, dtype=np.int64),
            limit,
            valid,
            path,
            f"a row of {n_fields} fields needs {fixed} fixed bytes; the row",
        )
        children = []
        n_bits = (n_fields + 63) // 64
        # Narrow rows: every word of the fixed region (null bitset, then one slot per
        # field) in one gather, since a row's words share cache lines; wide rows: the
        # bitset words here and each slot when its field is decoded.
        n_words = n_bits + n_fields
        words = self._row_words(base, n_words) if n_words <= _ROW_WORDS and len(self.buf) >= 8 * n_words else None
        bitset = (
            [words[:, w] for w in range(n_bits)]
            if words is not None
            else [_read(self.buf, base + 8 * w, "<u8") for w in range(n_bits)]
        )
        # no null field in any row (the common case): every field is valid where the row is
        no_nulls = not any(bits.any() for bits in bitset)
        for i, f in enumerate(st.fields):
            child_path = f"{path}.{f.name}" if path else f.name
            if no_nulls:
                child_valid = valid
            else:
                child_valid = valid & ~((bitset[i // 64] >> np.uint64(i % 64)) & np.uint64(1)).astype(bool)
            if words is not None:  # the slot's word is at hand: its address is never read
                word, slot = words[:, n_bits + i], base
            else:
                word, slot = None, np.where(child_valid, base + n_bits * 8 + 8 * i, 0)
            children.append(self.value(f.data_type, slot, base, limit, child_valid, child_path, word, base + fixed))
        arrow_type = st.to_arrow()
        validity, nulls = _validity(valid)
        return pa.StructArray.from_buffers(arrow_type, len(base), [validity], null_count=nulls, children=children)

    def _row_words(self, base: np.ndarray, n_words: int) -> np.ndarray:
        """(len(base), n_words) little-endian words from each address (null rows read at 0)."""
        compiled = kernels.row_words(self.buf, base, n_words)
        return compiled if compiled is not None else _gather_words(self.buf, base, n_words)

    # -- one value per slot -------------------------------------------------

    def value(
        self,
        dt: DataType,
        slot: np.ndarray,
        container: np.ndarray,
        limit: np.ndarray,
        valid: np.ndarray,
        path: str,
        word: np.ndarray | None = None,
        floor: np.ndarray | None = None,
    ) -> pa.Array:
        """Decode values of ``dt`` whose slot (or packed element) is at ``slot``.

        ``container`` is the start of the row or array that variable-length
        offsets are relative to, ``limit`` where that row or array ends.
        ``word`` is the 8-byte slot already read (struct fields), which lies in
        the row's checked fixed region; ``floor`` (struct fields) is where that
        region ends, before which no variable-length value can start.
        """
        n = len(slot)
        kind = dt.kind
        if kind == "void":
            return pa.nulls(n)
        width = dt.fixed_width
        if width is not None:
            if word is None:
                self.check_span(slot, np.full(n, width, dtype=np.int64), limit, valid, path, "a value")
            return self.fixed(dt, slot, valid, word)
        if word is None:
            word = _read(self.buf, slot, "<u8")
        start = np.where(valid, container + (word >> np.uint64(32)).astype(np.int64), 0)
        size = np.where(valid, (word & np.uint64(0xFFFFFFFF)).astype(np.int64), 0)
        if floor is not None:
            # Spark writes variable-length values after the null bits and slots: an offset into them is a
            # slot that holds something else (a schema with fields the rows do not have, or other types)
            inside = valid & (size > 0) & (start < floor)
            if inside.any():
                i = int(np.argmax(inside))
                raise self.fail(
                    f"a variable-length value of {int(size[i])} bytes at byte {int(start[i] - container[i])} of its "
                    f"row starts inside the row's first {int(floor[i] - container[i])} bytes, its null bits and "
                    "slots",
                    path,
                )
        self.check_span(start, size, limit, valid, path, "a variable-length value")
        end = start + size
        if kind in ("string", "binary"):
            return self.var_bytes(dt.to_arrow(), start, size, valid)
        if kind == "decimal":
            return self.big_decimal(dt, start, size, valid, path)
        if kind == "interval":
            bad = valid & (size != 16)
            if bad.any():
                raise self.fail(f"calendar interval of {int(size[np.argmax(bad)])} bytes, expected 16", path)
            return self.calendar_interval(start, valid)
        if kind == "struct":
            return self.struct(dt, start, end, valid, path)  # type: ignore[arg-type]
        if kind == "array":
            return self.array(dt, start, end, valid, path)  # type: ignore[arg-type]
        if kind == "map":
            return self.map(dt, start, end, valid, path)  # type: ignore[arg-type]
        if kind == "variant":
            return self.variant(dt, start, size, valid, path)
        raise self.fail(f"type {dt.json_name!r} cannot be decoded", path)

    def fixed(self, dt: DataType, addr: np.ndarray, valid: np.ndarray, word: np.ndarray | None = None) -> pa.Array:
        """Fixed-width values at ``addr``, or taken from their slot ``word`` (values sit left-aligned
        in the slot, so a narrow value is the word's low bytes)."""
        n = len(addr)
        kind = dt.kind
        if kind == "boolean":
            validity, nulls = _validity(valid)
            flags = (word & np.uint64(0xFF)) != 0 if word is not None else self.buf[addr] != 0
            bits = pa.py_buffer(np.packbits(flags, bitorder="little"))
            return pa.Array.from_buffers(pa.bool_(), n, [validity, bits], null_count=nulls)
        if kind == "decimal":  # precision <= 18: the unscaled value as a long
            unscaled = word.view("<i8") if word is not None else _read(self.buf, addr, "<i8")
            wide = np.empty((n, 2), dtype="<i8")
            wide[:, 0] = unscaled
            wide[:, 1] = unscaled >> 63
            return self._from_buffers(dt.to_arrow(), n, valid, wide)
        raw = _from_word(word, SLOT_DTYPES[kind]) if word is not None else _read(self.buf, addr, SLOT_DTYPES[kind])
        if kind == "year_month_interval":
            out = np.zeros(n, dtype=MONTH_DAY_NANO)
            out["months"] = raw
            return self._from_buffers(dt.to_arrow(), n, valid, out)
        return self._from_buffers(dt.to_arrow(), n, valid, raw)

    @staticmethod
    def _from_buffers(arrow_type: pa.DataType, n: int, valid: np.ndarray, data: np.ndarray) -> pa.Array:
        validity, nulls = _validity(valid)
        return pa.Array.from_buffers(
            arrow_type, n, [validity, pa.py_buffer(np.ascontiguousarray(data))], null_count=nulls
        )

    def _concat(self, start: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Offsets (n+1) and the concatenated bytes of spans start[i]:start[i]+size[i]."""
        offsets = np.zeros(len(start) + 1, dtype=np.int64)
        np.cumsum(size, out=offsets[1:])
        total = int(offsets[-1])
        if total == 0:
            return offsets, np.zeros(0, dtype=np.uint8)
        idx = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1] - start, size)
        return offsets, self.buf[idx]

    def var_bytes(self, arrow_type: pa.DataType, start: np.ndarray, size: np.ndarray, valid: np.ndarray) -> pa.Array:
        validity, nulls = _validity(valid)
        n = len(start)
        compiled = kernels.gather_spans(self.buf, start, size, valid)
        spans = self._ordered_spans(start, size, valid) if compiled is None else None
        ascii_only = False  # ASCII bytes are valid UTF-8 as they are; anything else is checked
        if spans is not None:
            offsets, data = self._take_spans(*spans)
        else:
            if compiled is not None:
                offsets64, values, ascii_only = compiled
            else:
                offsets64, values = self._concat(start, size)
            if offsets64[-1] >= 2**31:
                raise self.fail("more than 2 GiB of string data in one batch", "")
            offsets, data = pa.py_buffer(offsets64.astype(np.int32)), pa.py_buffer(values)
        out = pa.Array.from_buffers(arrow_type, n, [validity, offsets, data], null_count=nulls)
        if pa.types.is_string(arrow_type) and not ascii_only:
            out = _valid_utf8(out)
        return out

    @staticmethod
    def _ordered_spans(start: np.ndarray, size: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(starts, ends) with null values as empty spans, when the spans follow each other
        through the buffer without overlapping (rows in buffer order); else None."""
        begin = np.where(valid, start, 0)
        end = begin + np.where(valid, size, 0)
        if not valid.all():
            # a null takes an empty span where the value before it ended
            reached = np.maximum.accumulate(end)
            begin = np.where(valid, begin, reached)
            end = np.where(valid, end, reached)
        if len(begin) > 1 and not bool(np.all(begin[1:] >= end[:-1])):
            return None
        return begin, end

    def _take_spans(self, begin: np.ndarray, end: np.ndarray) -> tuple[pa.Buffer, pa.Buffer]:
        """Offsets and data of the spans, copied out of the buffer by Arrow's take kernel.

        The buffer is seen as a binary array whose elements alternate between a
        span and the gap up to the next one; taking every other element copies
        the spans into one contiguous array in C++ (and without the GIL).
        """
        n = len(begin)
        total = int((end - begin).sum())
        if total >= 2**31:
            raise self.fail("more than 2 GiB of string data in one batch", "")
        if n == 0:
            return pa.py_buffer(np.zeros(1, dtype=np.int32)), pa.py_buffer(b"")
        bounds = np.empty(2 * n, dtype=np.int64)
        bounds[0::2] = begin
        bounds[1::2] = end
        large = len(self.buf) >= 2**31
        if not large:
            bounds = bounds.astype(np.int32)
        both = pa.Array.from_buffers(
            pa.large_binary() if large else pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), pa.py_buffer(self.buf)]
        )
        import pyarrow.compute as pc  # here: importing it costs ~40 ms of a command that decodes nothing

        taken = pc.take(
            both, int_array(np.arange(0, 2 * n, 2, dtype=np.int64), pa.int64()), memory_pool=pa.system_memory_pool()
        )
        _, offsets, data = taken.buffers()
        if large:
            offsets = pa.py_buffer(
                np.frombuffer(offsets, dtype=np.int64, count=n + 1, offset=taken.offset * 8).astype(np.int32)
            )
        return offsets, data

    def big_decimal(self, dt: DataType, start: np.ndarray, size: np.ndarray, valid: np.ndarray, path: str) -> pa.Array:
        """precision > 18: minimal big-endian two's-complement bytes -> 16-byte little-endian."""
        n = len(start)
        bad = valid & ((size < 1) | (size > 16))
        if bad.any():
            raise self.fail(f"decimal of {int(size[np.argmax(bad)])} bytes, expected 1..16", path)
        size = np.where(valid, size, 1)
        cols = np.arange(16, dtype=np.int64)
        lead = 16 - size  # big-endian bytes right-aligned in 16
        src = start[:, None] + cols[None, :] - lead[:, None]
        inside = cols[None, :] >= lead[:, None]
        raw = self.buf[np.where(inside, src, 0)]
        sign = np.where(self.buf[start] >= 0x80, 0xFF, 0x00).astype(np.uint8)
        big_endian = np.where(inside, raw, sign[:, None]).astype(np.uint8)
        little = np.ascontiguousarray(big_endian[:, ::-1])
        little[~valid] = 0
        return self._from_buffers(dt.to_arrow(), n, valid, little)

    def calendar_interval(self, start: np.ndarray, valid: np.ndarray) -> pa.Array:
        n = len(start)
        out = np.zeros(n, dtype=MONTH_DAY_NANO)
        out["months"] = _read(self.buf, start, "<i4")
        out["days"] = _read(self.buf, start + 4, "<i4")
        out["nanos"] = _read(self.buf, start + 8, "<i8") * 1000
        return self._from_buffers(pa.month_day_nano_interval(), n, valid, out)

    def variant(self, dt: DataType, start: np.ndarray, size: np.ndarray, valid: np.ndarray, path: str) -> pa.Array:
        value_len = np.where(valid, _read(self.buf, start, "<i4").astype(np.int64), 0)
        bad = valid & ((size < 4) | (value_len < 0) | (value_len > size - 4))
        if bad.any():
            raise self.fail("variant value length does not fit its data", path)
        value = self.var_bytes(pa.binary(), start + 4, value_len, valid)
        meta = self.var_bytes(pa.binary(), start + 4 + value_len, np.where(valid, size - 4 - value_len, 0), valid)
        # the struct's children are declared non-null; null variants get empty bytes
        value = pa.array(value.fill_null(b""), pa.binary())
        meta = pa.array(meta.fill_null(b""), pa.binary())
        validity, nulls = _validity(valid)
        return pa.StructArray.from_buffers(
            dt.to_arrow(), len(start), [validity], null_count=nulls, children=[value, meta]
        )

    # -- arrays and maps ----------------------------------------------------

    def _elements(
        self, element: DataType, base: np.ndarray, limit: np.ndarray, valid: np.ndarray, path: str
    ) -> tuple[np.ndarray, pa.Array]:
        """List offsets and the flattened elements of the UnsafeArrayData at ``base``."""
        size = limit - base
        self.check_span(
            base, np.full(len(base), 8, dtype=np.int64), limit, valid, path, "an array header of 8 bytes; the array"
        )
        count = np.where(valid, _read(self.buf, base, "<i8"), 0)
        width = element.fixed_width or 8
        bitset = (count + 63) // 64 * 8
        bad = valid & ((count < 0) | (count >= _MAX_ELEMENTS) | (8 + bitset + count * width > size))
        if bad.any():
            i = int(np.argmax(bad))
            raise self.fail(f"array claims {int(count[i])} elements but has {int(size[i])} bytes", path)
        offsets = np.zeros(len(base) + 1, dtype=np.int64)
        np.cumsum(count, out=offsets[1:])
        total = int(offsets[-1])
        if total >= _MAX_ELEMENTS:
            raise self.fail("more than 2^31 array elements in one batch", path)
        owner = np.repeat(np.arange(len(base), dtype=np.int64), count)
        index = np.arange(total, dtype=np.int64) - offsets[:-1][owner]
        elem_null = _null_bits(self.buf, base[owner] + 8, index) if total else np.zeros(0, bool)
        elem_valid = ~elem_null
        addr = np.where(elem_valid, base[owner] + 8 + bitset[owner] + index * width, 0)
        values = self.value(element, addr, base[owner], limit[owner], elem_valid, path + "[]")
        return offsets, values

    def array(self, at: ArrayType, base: np.ndarray, limit: np.ndarray, valid: np.ndarray, path: str) -> pa.Array:
        offsets, values = self._elements(at.element, base, limit, valid, path)
        validity, nulls = _validity(valid)
        return pa.Array.from_buffers(
            at.to_arrow(),
            len(base),
            [validity, pa.py_buffer(offsets.astype(np.int32))],
            null_count=nulls,
            children=[values],
        )

    def map(self, mt: MapType, base: np.ndarray, limit: np.ndarray, valid: np.ndarray, path: str) -> pa.Array:
        self.check_span(
            base, np.full(len(base), 8, dtype=np.int64), limit, valid, path, "a map header of 8 bytes; the map"
        )
        key_bytes = np.where(valid, _read(self.buf, base, "<i8"), 0)
        bad = valid & ((key_bytes < 0) | (base + 8 + key_bytes > limit))
        if bad.any():
            raise self.fail("map key array size runs past the map", path)
        key_base = np.where(valid, base + 8, 0)
        value_base = np.where(valid, base + 8 + key_bytes, 0)
        key_offsets, keys = self._elements(mt.key, key_base, np.where(valid, value_base, 0), valid, path + ".key")
        value_offsets, values = self._elements(mt.value, value_base, limit, valid, path + ".value")
        if not np.array_equal(key_offsets, value_offsets):
            raise self.fail("map has different numbers of keys and values", path)
        if keys.null_count:
            raise self.fail("map has a null key", path)
        validity, nulls = _validity(valid)
        offsets = pa.py_buffer(key_offsets.astype(np.int32))
        entries = pa.StructArray.from_arrays([keys, values], fields=[mt.to_arrow().key_field, mt.to_arrow().item_field])
        return pa.Array.from_buffers(
            mt.to_arrow(), len(base), [validity, offsets], null_count=nulls, children=[entries]
        )


def decode_rows(rows: RowBuffer, schema: StructType, what: str = "", valid: np.ndarray | None = None) -> pa.StructArray:
    """Decode every row of ``rows`` as an UnsafeRow of ``schema`` into one StructArray.

    Rows where ``valid`` is False come back null without being read (e.g. the
    value of a removal in a change feed).
    """
    n = len(rows.starts)
    decoder = _Decoder(rows)
    valid = np.ones(n, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    starts = np.where(valid, rows.starts, 0)
    limit = np.where(valid, rows.starts + rows.lengths, 0)
    bad = valid & ((rows.starts < 0) | (limit > rows.size))
    if bad.any():
        raise decoder.fail("row lies outside its buffer", what)
    n_fields = len(schema.fields)
    fixed = (n_fields + 63) // 64 * 8 + 8 * n_fields
    short = valid & (rows.lengths < fixed)
    if short.any():
        i = int(np.argmax(short))
        raise decoder.fail(
            f"a row of {n_fields} field{'s' if n_fields != 1 else ''} needs at least {fixed} fixed bytes (null "
            f"bits, then 8 bytes a field); row {i} has {int(rows.lengths[i])}"
            + (f", and {int(short.sum()) - 1} more rows are short too" if short.sum() > 1 else ""),
            what,
        )
    return decoder.struct(schema, starts, limit, valid, what)


def narrow_long_slots(
    values: pa.StructArray, declared: StructType, names: tuple[str, ...], source: str
) -> pa.StructArray:
    """``values`` decoded with the fields ``names`` read as the longs their slots hold, typed as
    ``declared`` says (``int``): the low four bytes Spark's reader shows, which is the whole
    value whenever it fits. A value beyond the int range raises instead of wrapping silently."""
    if not names:
        return values
    children = []
    for i, field in enumerate(declared.fields):
        child = values.field(i)
        if field.name in names and field.data_type.kind == "integer" and pa.types.is_int64(child.type):
            wide = child.fill_null(0).to_numpy(zero_copy_only=False)
            bad = (wide < -(2**31)) | (wide >= 2**31)
            if values.null_count:
                bad &= values.is_valid().to_numpy(zero_copy_only=False)
            if bad.any():
                example = int(wide[bad][0])
                raise RowDecodeError(
                    f"{source}: {int(bad.sum())} rows hold a {field.name} beyond the int range its schema "
                    f"declares (e.g. {example}); the long written into that int slot cannot be shown as the "
                    f"int Spark's reader types it, and Spark itself cannot reload such state. The option "
                    f"timeoutTimestampAsLong=true reads the whole value as bigint",
                    path=source,
                )
            nulls = child.is_null().to_numpy(zero_copy_only=False) if child.null_count else None
            child = pa.array(wide.astype(np.int32), pa.int32(), mask=nulls)
        children.append(child)
    return pa.StructArray.from_arrays(
        children, fields=list(declared.to_arrow()), mask=values.is_null() if values.null_count else None
    )
