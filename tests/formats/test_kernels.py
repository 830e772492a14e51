"""The fast internals of the HDFS read path against plain reference implementations.

The record walk has three implementations (numba kernel, Python word loop,
byte-exact loop) that must agree on every stream, well-formed or not; the
columnar merge of a delta chain must equal applying the records to a dict in
order; lz4 decoding into a buffer must equal decoding to bytes.
"""

from __future__ import annotations

import decimal
import random
import struct

import numpy as np
import pyarrow as pa
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from state_reader import errors
from state_reader.formats import codecs, kernels
from state_reader.formats.spark_types import parse_struct
from state_reader.formats.unsaferow import RowBuffer, decode_rows
from state_reader.io.storage import Storage
from state_reader.providers.hdfs import HDFSStore, parse_records
from tests.support.environment import environment

END = struct.pack(">i", -1)
HAVE_NUMBA = kernels._compile() is not None


def _record(key: bytes, value: bytes | None) -> bytes:
    head = struct.pack(">i", len(key)) + key
    return head + (END if value is None else struct.pack(">i", len(value)) + value)


def _walks(data: bytes, allow_removes: bool = True, value_skip: int = 0) -> list[tuple]:
    buf = np.frombuffer(data, dtype=np.uint8)
    writable = np.frombuffer(bytearray(data), dtype=np.uint8)  # walked in place, swapped back
    results = [
        kernels._walk_exact(buf, 0, len(buf), allow_removes, value_skip),
        kernels._walk_python(buf, 0, len(buf), allow_removes, value_skip),
        kernels._walk_python(writable, 0, len(buf), allow_removes, value_skip),
    ]
    assert writable.tobytes() == data
    if HAVE_NUMBA:
        results.append(kernels.walk_records(buf, 0, len(buf), allow_removes, value_skip, use_numba=True))
    return [(r[0].tolist(), r[1], r[2], r[3]) for r in results]


# record lengths: mostly multiples of 4 (as Spark writes them), sometimes not
_lengths = st.one_of(st.sampled_from([0, 8, 16, 24, 32, 36, 40]), st.integers(0, 41))


@st.composite
def _streams(draw) -> bytes:
    records = []
    for _ in range(draw(st.integers(0, 40))):
        key = bytes(draw(_lengths))
        value = None if draw(st.integers(0, 9)) == 0 else bytes([7]) * draw(_lengths)
        records.append(_record(key, value))
    # long runs of one record size exercise the Python walk's bulk checks
    if draw(st.booleans()):
        records += [_record(bytes(24), bytes(32))] * draw(st.integers(0, 300))
    data = b"".join(records) + END
    damage = draw(st.integers(0, 4))
    if damage == 1 and data:  # cut short
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif damage == 2:  # trailing junk
        data += b"\x00" * draw(st.integers(1, 9))
    elif damage == 3 and len(data) > 4:  # one length overwritten
        at = draw(st.integers(0, len(data) - 4))
        data = data[:at] + struct.pack(">i", draw(st.integers(-9, 1 << 20))) + data[at + 4 :]
    return data


@settings(max_examples=300, deadline=None)
@given(_streams(), st.booleans(), st.sampled_from([0, 4]))
def test_record_walks_agree(data, allow_removes, value_skip):
    first, *others = _walks(data, allow_removes, value_skip)
    for other in others:
        assert other == first


def test_python_walk_bulk_checks_stop_at_the_first_different_record():
    same = _record(bytes(24), bytes(32))
    data = same * 100 + _record(bytes(24), bytes(40)) + same * 50 + _record(bytes(8), None) + same * 3 + END
    (positions, status, _, _), *others = _walks(data)
    assert status == kernels.OK and len(positions) == 155
    assert all(o[0] == positions and o[1] == status for o in others)


def test_walk_status_becomes_our_errors():
    with pytest.raises(errors.CorruptFileError, match=r"negative value size -5 at byte 12"):
        parse_records(struct.pack(">i", 8) + bytes(8) + struct.pack(">i", -5) + END, "d")
    with pytest.raises(errors.TruncatedFileError, match=r"value of 40 bytes at byte 16 runs past the end"):
        parse_records(struct.pack(">i", 8) + bytes(8) + struct.pack(">i", 40) + bytes(8) + END, "d")
    with pytest.raises(errors.TruncatedFileError, match="value of 2 bytes"):
        parse_records(struct.pack(">i", 8) + bytes(8) + struct.pack(">i", 2) + bytes(2) + END, "d", value_skip=4)


def test_parse_records_truncates_values_to_whole_words():
    data = _record(bytes(8), bytes(20)) + _record(b"k" * 8, None) + END
    assert parse_records(data, "d") == [(bytes(8), bytes(16)), (b"k" * 8, None)]
    assert parse_records(data, "d", value_skip=4) == [(bytes(8), bytes(16)), (b"k" * 8, None)]


# -- lz4-java streams ---------------------------------------------------------------


def _lz4_java(data: bytes, block: int = 64, raw_every: int = 3) -> bytes:
    """lz4-java LZ4BlockOutputStream framing: compressed blocks, some stored raw, and the end block."""
    import lz4.block

    out = []
    for i, at in enumerate(range(0, len(data), block)):
        chunk = data[at : at + block]
        check = xxhash.xxh32_intdigest(chunk, seed=0x9747B28C) & 0x0FFFFFFF
        if i % raw_every == raw_every - 1:
            method, payload = 0x10, chunk
        else:
            method, payload = 0x20, lz4.block.compress(chunk, store_size=False)
        out.append(struct.pack("<8sBiii", b"LZ4Block", method | 4, len(payload), len(chunk), check) + payload)
    out.append(struct.pack("<8sBiii", b"LZ4Block", 0x10 | 4, 0, 0, 0))
    return b"".join(out)


@pytest.mark.parametrize("cramjam_into", [True, False])
def test_lz4_into_equals_lz4_to_bytes(monkeypatch, cramjam_into):
    if not cramjam_into:
        monkeypatch.setattr(codecs, "_lz4_block_into", lambda: None)
    data = bytes(random.Random(3).getrandbits(8) for _ in range(5000)) + b"abc" * 3000
    raw = _lz4_java(data, block=1000)
    blocks = codecs.lz4_blocks(raw, "f")
    out = np.zeros(sum(b[4] for b in blocks), dtype=np.uint8)
    assert codecs.decompress_lz4_into(raw, "f", out, blocks) == len(data)
    assert out.tobytes() == data == codecs.decompress(raw, "lz4", "f")
    bad = bytearray(raw)
    bad[30] ^= 0x55
    with pytest.raises((errors.ChecksumMismatchError, errors.CorruptFileError), match="f"):
        codecs.decompress_lz4_into(bytes(bad), "f", np.zeros(len(data) + 64, dtype=np.uint8))


@pytest.mark.parametrize("setting", ["0", "1"] if HAVE_NUMBA else ["0"])
def test_lz4_checksums_name_the_first_bad_block(setting):
    # the compiled path checks the blocks' checksums after decoding them all; the first bad
    # block in stream order must still be the one named, also when a later block fails
    data = bytes(random.Random(5).getrandbits(8) for _ in range(4000))
    raw = _lz4_java(data, block=1000, raw_every=2)  # blocks: lz4, raw, lz4, raw, end
    blocks = codecs.lz4_blocks(raw, "f")
    second = blocks[1][0]  # a raw block: flipping a payload byte only breaks its checksum
    bad = bytearray(raw)
    bad[blocks[1][2] + 10] ^= 0x01
    out = np.zeros(len(data) + 64, dtype=np.uint8)
    with environment({"STATE_READER_NUMBA": setting}):
        with pytest.raises(errors.ChecksumMismatchError, match=f"f: lz4 block at byte {second} fails"):
            codecs.decompress_lz4_into(bytes(bad), "f", out)
        # and a later block cut short: the checksum of the second block is still the first error
        with pytest.raises(errors.ChecksumMismatchError, match=f"at byte {second} fails"):
            codecs.decompress_lz4_into(bytes(bad[: blocks[3][2] + 5]), "f", out)
        with pytest.raises(errors.TruncatedFileError, match="f: lz4 block at byte"):
            codecs.decompress_lz4_into(raw[: blocks[3][2] + 5], "f", out)


# -- the merge of a delta chain ------------------------------------------------------


def _write_chain(root, files: list[tuple[str, list[tuple[bytes, bytes | None]]]], checksum: bool) -> None:
    store = root / "state"
    store.mkdir()
    for name, records in files:
        body = b"".join(
            _record(
                (b"\x01\x02\x03\x04" + k) if (checksum and v is None) else k,
                None if v is None else ((b"\x09" * 4 if checksum else b"") + v),
            )
            for k, v in records
        )
        (store / name).write_bytes(_lz4_java(body + END, block=256))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_chain_merge_equals_dict_replay(tmp_path_factory, data):
    checksum = data.draw(st.booleans())
    keys = [bytes([i]) * data.draw(st.sampled_from([8, 16, 24])) for i in range(12)]
    n_files = data.draw(st.integers(1, 4))
    snapshot = data.draw(st.booleans())
    files, expected = [], {}
    for f in range(n_files):
        records = []
        for _ in range(data.draw(st.integers(0, 25))):
            key = data.draw(st.sampled_from(keys))
            removal = not (snapshot and f == 0) and data.draw(st.integers(0, 3)) == 0
            value = None if removal else bytes([data.draw(st.integers(0, 255))]) * 16
            records.append((key, value))
        if snapshot and f == 0:
            records = list(dict(records).items())  # a snapshot holds each key once
        for key, value in records:
            if value is None:
                expected.pop(key, None)
            else:
                expected[key] = value
        name = f"{f + 1}.snapshot" if snapshot and f == 0 else f"{f + 1}.delta"
        files.append((name, records))
    root = tmp_path_factory.mktemp("chain")
    _write_chain(root, files, checksum)
    store = HDFSStore(Storage(str(root)), "state", "lz4", row_checksum=checksum)
    for setting in ("0", "1") if HAVE_NUMBA else ("0",):  # the Python merge and the compiled one
        with environment({"STATE_READER_NUMBA": setting}):
            assert store.load(n_files) == expected
            _, _, live = store.load_records(n_files)
            # rows come in the order of their last write
            assert (np.diff(live.value_start) > 0).all()


def test_rows_decode_in_place_and_from_copies_alike():
    schema = parse_struct(
        '{"type":"struct","fields":[{"name":"s","type":"string","nullable":true},'
        '{"name":"n","type":"long","nullable":true}]}',
        "s",
    )

    def row(text: bytes | None, n: int) -> bytes:
        null_bits = 1 if text is None else 0
        padded = (text or b"") + bytes(-len(text or b"") % 8)
        slot = 0 if text is None else (24 << 32) | len(text)
        return struct.pack("<qQq", null_bits, slot, n) + padded

    long = "a value longer than the compiled gather copies byte by byte: " * 3
    rows = [row(b"alpha", 1), row(None, 2), row(b"", 3), row(long.encode(), 4)]
    expected = [("alpha", 1), (None, 2), ("", 3), (long, 4)]
    copied = decode_rows(RowBuffer.from_rows(rows, "r"), schema)
    # the same rows scattered in one buffer, in order and then out of order
    gap = b"\xee" * 12
    blob = b"".join(gap + r for r in rows) + bytes(64)
    starts, at = [], 0
    for r in rows:
        starts.append(at + len(gap))
        at += len(gap) + len(r)
    buf = np.frombuffer(blob, dtype=np.uint8)
    lengths = [len(r) for r in rows]
    for order in ([0, 1, 2, 3], [3, 1, 0, 2]):
        wrapped = RowBuffer.wrap(buf, len(blob) - 64, np.array(starts)[order], np.array(lengths)[order], "w")
        for setting in ("0", "1") if HAVE_NUMBA else ("0",):  # numpy/Arrow gathers, compiled ones
            with environment({"STATE_READER_NUMBA": setting}):
                got = decode_rows(wrapped, schema)
            assert [tuple(d.values()) for d in got.to_pylist()] == [expected[i] for i in order]
    assert [tuple(d.values()) for d in copied.to_pylist()] == expected
    with pytest.raises(ValueError):
        RowBuffer.wrap(buf[:10], 10, np.array([0]), np.array([8]), "w")
    assert isinstance(copied, pa.StructArray)


@pytest.mark.parametrize("setting", ["0", "1"] if HAVE_NUMBA else ["0"])
def test_strings_ascii_utf8_and_invalid_bytes(setting):
    # the compiled gather skips UTF-8 validation only when every byte is ASCII
    schema = parse_struct('{"type":"struct","fields":[{"name":"s","type":"string","nullable":true}]}', "s")

    def row(text: bytes) -> bytes:
        return struct.pack("<qQ", 0, (16 << 32) | len(text)) + text + bytes(-len(text) % 8)

    texts = [b"plain", "caf\u00e9 \u2713".encode(), b"bad \xff byte", b""]
    with environment({"STATE_READER_NUMBA": setting}):
        got = decode_rows(RowBuffer.from_rows([row(t) for t in texts], "r"), schema).field(0)
    got.validate(full=True)
    assert got.to_pylist() == ["plain", "caf\u00e9 \u2713", "bad \ufffd byte", ""]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.sampled_from([0, 3, 8, 16, 24])), max_size=60))
def test_last_writes_agree(picks):
    from state_reader.providers.hdfs import _last_writes

    keys = [bytes([i]) * size for i, size in picks]
    blob = b"".join(b"\xff" * 4 + k for k in keys) + bytes(64)
    starts = np.cumsum([4] + [len(k) + 4 for k in keys[:-1]]) if keys else np.zeros(0, dtype=np.int64)
    buf = np.frombuffer(blob, dtype=np.uint8)
    lengths = np.array([len(k) for k in keys], dtype=np.int64)
    expected = [i for i, k in enumerate(keys) if k not in keys[i + 1 :]]
    assert _last_writes(buf, np.asarray(starts, dtype=np.int64), lengths).tolist() == expected


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba is not installed")
@settings(max_examples=50, deadline=None)
@given(st.integers(8, 300), st.integers(1, 4), st.data())
def test_compiled_row_words_equal_numpy_gather(size, n_words, data):
    from state_reader.formats.unsaferow import _gather_words

    buf = np.frombuffer(random.Random(size).randbytes(size), dtype=np.uint8)
    if len(buf) < 8 * n_words:
        return
    base = np.array(data.draw(st.lists(st.integers(0, len(buf)), max_size=40)), dtype=np.int64)
    assert kernels.row_words(buf, base, n_words).tolist() == _gather_words(buf, base, n_words).tolist()


@pytest.mark.skipif(not kernels.numba_available(), reason="numba is not installed")
def test_row_checksums_are_the_same_compiled_and_in_python():
    """Row checksums (CRC-32C of a row's key bytes then its value bytes) of spans of every length, empty ones
    too: the compiled kernel gives what the byte-exact CRC-32C gives, row by row."""
    from state_reader.formats.rocksdb_encode import with_row_checksums
    from state_reader.io.integrity import crc32c

    rng = np.random.default_rng(7)
    n = 3000
    klen, vlen = rng.integers(0, 40, n), rng.integers(0, 300, n)
    kbuf = rng.integers(0, 256, int(klen.sum()) + 5, dtype=np.uint8)
    vbuf = rng.integers(0, 256, int(vlen.sum()) + 5, dtype=np.uint8)
    kstart = np.concatenate([[3], 3 + np.cumsum(klen)[:-1]]).astype(np.int64)
    vstart = np.concatenate([[1], 1 + np.cumsum(vlen)[:-1]]).astype(np.int64)
    keys = RowBuffer(kbuf, kstart, klen.astype(np.int64), "keys")
    values = RowBuffer(vbuf, vstart, vlen.astype(np.int64), "values")
    with environment({"STATE_READER_NUMBA": "1"}):
        sums = kernels.crc32c_pairs(kbuf, kstart, klen, vbuf, vstart, vlen)
        compiled = with_row_checksums(keys, values, with_length=True)
    expected = [
        crc32c(bytes(kbuf[k : k + kn]) + bytes(vbuf[v : v + vn]))
        for k, kn, v, vn in zip(kstart, klen, vstart, vlen, strict=True)
    ]
    assert sums.tolist() == expected
    with environment({"STATE_READER_NUMBA": "0"}):
        plain = with_row_checksums(keys, values, with_length=True)
    assert np.array_equal(compiled.buf, plain.buf) and np.array_equal(compiled.starts, plain.starts)


@pytest.mark.skipif(not kernels.numba_available(), reason="numba is not installed")
def test_spans_are_copied_alike_compiled_and_vectorised():
    """Spans of every length (empty, short, longer than a copy chunk), from a read-only buffer too: the
    compiled copy writes what the vectorised one writes."""
    from state_reader.formats.unsaferow_encode import copy_spans

    rng = np.random.default_rng(11)
    n = 2000
    lengths = rng.choice([0, 1, 7, 63, 64, 200, 40_000], n, p=[0.1, 0.2, 0.3, 0.2, 0.1, 0.095, 0.005])
    src = np.frombuffer(rng.integers(0, 256, int(lengths.sum()) + 9, dtype=np.uint8).tobytes(), dtype=np.uint8)
    src_starts = (np.cumsum(lengths) - lengths + 9).astype(np.int64)
    dst_starts = (np.cumsum(lengths + 3) - lengths).astype(np.int64)
    out = {}
    for setting in ("1", "0"):
        with environment({"STATE_READER_NUMBA": setting}):
            dst = np.zeros(int((lengths + 3).sum()) + 1, dtype=np.uint8)
            copy_spans(dst, dst_starts, src, src_starts, lengths)
            out[setting] = dst
    assert np.array_equal(out["1"], out["0"]) and out["1"].any()


@pytest.mark.skipif(not kernels.numba_available(), reason="numba is not installed")
def test_rows_are_spliced_alike_compiled_and_vectorised():
    """Fields of rows lying anywhere in their buffer (unaligned, out of order), across more than one bitset
    word, with nulls, empty and long values and nested rows: the compiled splice writes the bytes the
    vectorised one writes."""
    from state_reader.formats.spark_types import StructField, StructType, from_json_value
    from state_reader.formats.unsaferow_encode import encode_rows, splice_rows

    rng = np.random.default_rng(5)
    n = 300
    kinds = ["long", "string", "integer", "binary", "double", "decimal(38,2)"]
    nested = StructType([StructField("a", from_json_value("string")), StructField("b", from_json_value("long"))])
    fields = [StructField(f"f{i}", from_json_value(kinds[i % len(kinds)])) for i in range(69)]
    schema = StructType([*fields, StructField("nested", nested)])
    texts = ["", "x", "eight by", "a value longer than a word or two, and longer than sixty-four bytes too"]

    def column(kind: str) -> pa.Array:
        nulls = rng.random(n) < 0.2
        if kind in ("string", "binary"):
            picked = [texts[i] if kind == "string" else texts[i].encode() for i in rng.integers(0, 4, n)]
        elif kind.startswith("decimal"):
            picked = [decimal.Decimal(int(v)) / 100 for v in rng.integers(-(10**12), 10**12, n)]
        else:
            picked = rng.integers(-(2**31), 2**31, n).tolist()
        return pa.array([None if null else v for v, null in zip(picked, nulls, strict=True)], schema_type(kind))

    def schema_type(kind: str) -> pa.DataType:
        return from_json_value(kind).to_arrow()

    children = [column(kinds[i % len(kinds)]) for i in range(69)]
    children.append(pa.StructArray.from_arrays([column("string"), column("long")], names=["a", "b"]))
    encoded = encode_rows(pa.StructArray.from_arrays(children, fields=list(schema.to_arrow())), schema, "rows")
    # the same rows scattered, 3 bytes off a word and in another order
    order = rng.permutation(n)
    gaps = rng.integers(1, 12, n) * 8 + 3
    starts = np.cumsum(gaps + encoded.lengths[order]) - encoded.lengths[order]
    copy = np.zeros(int(starts[-1] + encoded.lengths[order][-1]) + 64, dtype=np.uint8)
    for to, i in zip(starts, order, strict=True):
        copy[to : to + encoded.lengths[i]] = encoded.buf[encoded.starts[i] : encoded.starts[i] + encoded.lengths[i]]
    scattered = RowBuffer.wrap(copy, len(copy) - 64, starts, encoded.lengths[order], "scattered")
    splits = [
        [(scattered, schema, 0, 70)],
        [(scattered, schema, 3, 7)],
        [(scattered, schema, 60, 70), (encoded.take(order), schema, 0, 66)],
        [(scattered, schema, 1, 2), (scattered.take(slice(0, n)), schema, 64, 65)],
    ]
    for parts in splits:
        out = {}
        for setting in ("1", "0"):
            with environment({"STATE_READER_NUMBA": setting}):
                rows = splice_rows(parts, "spliced")
            out[setting] = (rows.buf[: rows.size + 64].tobytes(), rows.starts.tolist(), rows.lengths.tolist())
        assert out["1"] == out["0"]
