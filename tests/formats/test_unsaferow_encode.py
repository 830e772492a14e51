"""Arrow -> UnsafeRow encoder: round trips through the decoder, and the bytes Spark itself wrote."""

from __future__ import annotations

import decimal
import random
import struct

import numpy as np
import pyarrow as pa
import pytest

from state_reader import errors
from state_reader.core.options import from_kwargs
from state_reader.core.planner import plan_state_read, store_names_on_disk
from state_reader.formats.spark_types import ArrayType, DataType, MapType, StructField, StructType, from_json_value
from state_reader.formats.unsaferow import RowBuffer, decode_rows
from state_reader.formats.unsaferow_encode import encode_rows
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from state_reader.providers.hdfs import HDFSStore
from tests.support.paths import GOLDEN
from tests.support.rows import row_bytes

ATOMIC = [
    "boolean",
    "byte",
    "short",
    "integer",
    "long",
    "float",
    "double",
    "decimal(10,2)",
    "decimal(18,0)",
    "decimal(19,0)",
    "decimal(38,10)",
    "string",
    "binary",
    "date",
    "timestamp",
    "timestamp_ntz",
    "interval day to second",
    "interval year to month",
    "interval",
    "time(6)",
    "void",
    "variant",
]


def _t(spec) -> DataType:
    return from_json_value(spec)


def _struct(*fields: tuple[str, object]) -> StructType:
    return StructType(
        [StructField(name, _t(spec) if not isinstance(spec, DataType) else spec) for name, spec in fields]
    )


def _arr(element, contains_null: bool = True) -> ArrayType:
    return ArrayType(_t(element) if not isinstance(element, DataType) else element, contains_null)


def _map(key, value) -> MapType:
    return MapType(_t(key), _t(value) if not isinstance(value, DataType) else value)


# --- generated data -------------------------------------------------------------------

_STRINGS = ["", "a", "héllo", "日本語", "🚀✨", "x" * 17, "nul\x00byte", "ü€😀-" * 5]
_EDGE_UNSCALED = [0, 1, -1, 127, -128, 128, -129, 255, 256, -256, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1]


def _decimal(rng: random.Random, precision: int, scale: int) -> decimal.Decimal:
    limit = 10**precision - 1
    unscaled = rng.choice(
        [
            *(u for u in _EDGE_UNSCALED if abs(u) <= limit),
            limit,
            -limit,
            rng.randint(-limit, limit),
            rng.randint(-(10 ** rng.randint(0, precision)), 10**6),
        ]
    )
    unscaled = max(-limit, min(limit, unscaled))
    return decimal.Decimal(f"{unscaled}E-{scale}")


def _leaf(kind: DataType, rng: random.Random):
    k = kind.kind
    if k == "boolean":
        return rng.random() < 0.5
    if k in ("byte", "short", "integer", "long"):
        bits = {"byte": 8, "short": 16, "integer": 32, "long": 64}[k]
        return rng.choice(
            [-(2 ** (bits - 1)), 2 ** (bits - 1) - 1, 0, -1, rng.randint(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)]
        )
    if k in ("float", "double"):
        return rng.choice([0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), rng.uniform(-1e6, 1e6)])
    if k == "decimal":
        return _decimal(rng, kind.precision, kind.scale)
    if k == "string":
        return rng.choice(_STRINGS)
    if k == "binary":
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 20)))
    if k == "date":
        return rng.randint(-800_000, 2_900_000)
    if k in ("timestamp", "timestamp_ntz", "day_time_interval"):
        return rng.randint(-(2**62), 2**62)
    if k == "time":
        return rng.randint(0, 86_400 * 10**9 - 1)
    if k == "year_month_interval":
        return (rng.randint(-(2**31), 2**31 - 1), 0, 0)
    if k == "interval":
        return (rng.randint(-(2**31), 2**31 - 1), rng.randint(-(2**31), 2**31 - 1), rng.randint(-(2**53), 2**53) * 1000)
    if k == "variant":
        return {"value": bytes(rng.randrange(256) for _ in range(rng.randint(1, 9))), "metadata": bytes([1, 0, 0])}
    raise AssertionError(k)


def _column(dt: DataType, n: int, rng: random.Random, null_rate: float = 0.2) -> pa.Array:
    """``n`` random values of ``dt`` as the Arrow type the decoder gives it."""
    target = dt.to_arrow()
    nulls = np.array([rng.random() < null_rate for _ in range(n)], dtype=bool)
    if dt.kind == "void":
        return pa.nulls(n)
    if isinstance(dt, StructType):
        children = [_column(f.data_type, n, rng) for f in dt.fields]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=pa.array(nulls))
    if isinstance(dt, (ArrayType, MapType)):
        lengths = [0 if null else rng.choice([0, 1, 2, 3, 5]) for null in nulls]
        offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        total = int(sum(lengths))
        if isinstance(dt, ArrayType):
            values = _column(dt.element, total, rng, 0.2 if dt.contains_null else 0.0)
            return pa.ListArray.from_arrays(offsets, values, type=target, mask=pa.array(nulls))
        keys = _column(dt.key, total, rng, 0.0)
        items = _column(dt.value, total, rng, 0.2 if dt.value_contains_null else 0.0)
        return pa.MapArray.from_arrays(offsets, keys, items, type=target, mask=pa.array(nulls))
    return pa.array([None if null else _leaf(dt, rng) for null in nulls], target)


def _rows(schema: StructType, n: int, seed: int) -> pa.StructArray:
    rng = random.Random(seed)
    return pa.StructArray.from_arrays(
        [_column(f.data_type, n, rng) for f in schema.fields], fields=list(schema.to_arrow())
    )


def _round_trip(values: pa.StructArray, schema: StructType) -> RowBuffer:
    rows = encode_rows(values, schema, "generated")
    assert (rows.lengths % 8 == 0).all()
    back = decode_rows(rows, schema)
    back.validate(full=True)
    assert back.equals(values), _first_difference(back, values)
    # decoding and encoding again gives the same bytes
    again = encode_rows(back, schema, "generated")
    assert row_bytes(again) == row_bytes(rows)
    return rows


def _first_difference(a: pa.Array, b: pa.Array) -> str:
    for i, (x, y) in enumerate(zip(a.to_pylist(), b.to_pylist(), strict=True)):
        if x != y:
            return f"row {i}: decoded {x!r} != original {y!r}"
    return "arrays differ"


NESTED = _struct(
    (
        "deep",
        _struct(
            (
                "items",
                _arr(
                    _struct(
                        ("x", "integer"),
                        ("tags", _arr("string")),
                        ("m", _map("string", "decimal(38,10)")),
                        ("inner", _struct(("when", "interval"), ("b", "binary"))),
                    )
                ),
            ),
            ("c", _struct(("d", _struct(("e", "double"), ("f", _arr("decimal(20,0)")))))),
        ),
    ),
    ("grid", _arr(_arr("decimal(38,2)"))),
    ("by_id", _map("integer", _arr(_struct(("p", "string"), ("q", "long"))))),
    ("flags", _arr("boolean")),
    ("tiny", _arr("byte")),
    ("small", _arr("short")),
    ("ints", _arr("integer")),
    ("floats", _arr("float")),
    ("months", _arr("interval year to month")),
    ("days", _arr("date")),
    ("nothing", _arr("void")),
    ("spans", _arr("interval")),
    ("dec", _arr("decimal(9,3)")),
    ("maps", _arr(_map("string", _map("long", "string")))),
    ("variants", _arr("variant")),
    ("strict", _arr("long", contains_null=False)),
)


@pytest.mark.parametrize("kind", ATOMIC)
def test_round_trip_every_type(kind):
    schema = _struct(("before", "long"), ("value", kind), ("after", "string"))
    _round_trip(_rows(schema, 300, seed=hash(kind) % 1000), schema)


def test_round_trip_all_types_in_one_row():
    schema = _struct(*((f"f{i}", kind) for i, kind in enumerate(ATOMIC)))
    _round_trip(_rows(schema, 500, seed=1), schema)


def test_round_trip_nested_structs_arrays_and_maps():
    _round_trip(_rows(NESTED, 400, seed=2), NESTED)


@pytest.mark.parametrize("width", [64, 65, 130])
def test_round_trip_wide_rows(width):
    # more than 64 fields: a second null-bitset word; more than 16 words: past the decoder's one-gather path
    schema = _struct(*((f"c{i}", ATOMIC[i % len(ATOMIC)]) for i in range(width)))
    rows = _round_trip(_rows(schema, 120, seed=width), schema)
    nulls = _rows(schema, 120, seed=width).field(width - 1).is_null().to_numpy(zero_copy_only=False)
    bits = rows.buf[rows.starts + 8 + (width - 1 - 64) // 8] >> ((width - 1) % 8) & 1 if width > 64 else None
    if bits is not None and ATOMIC[(width - 1) % len(ATOMIC)] != "void":
        assert (bits.astype(bool) == nulls).all()


def test_round_trip_edge_shapes():
    schema = _struct(("s", "string"), ("a", _arr("string")), ("m", _map("string", "string")))
    values = pa.StructArray.from_arrays(
        [
            pa.array(["", None, "é", "12345678"]),
            pa.array([[], None, [None, ""], [""] * 70], _arr("string").to_arrow()),
            pa.array([[], None, [("", None)], [("k", "")]], _map("string", "string").to_arrow()),
        ],
        fields=list(schema.to_arrow()),
    )
    _round_trip(values, schema)
    _round_trip(values.slice(1, 2), schema)  # an array with an offset
    _round_trip(values.slice(0, 0), schema)
    assert row_bytes(encode_rows(pa.RecordBatch.from_struct_array(values), schema)) == row_bytes(
        encode_rows(values, schema)
    )
    empty = StructType([])
    assert row_bytes(encode_rows(pa.array([{}, {}], pa.struct([])), empty)) == [b"", b""]


def test_round_trip_preserves_float_bits_and_normalizes_on_request():
    schema = _struct(("f", "float"), ("d", "double"))
    f_bits = [0x80000000, 0x7FC00000, 0x7FC00001, 0xFFC00000, 0x3F800000]
    d_bits = [0x8000000000000000, 0x7FF8000000000000, 0x7FF8000000000001, 0xFFF8000000000000, 0x3FF0000000000000]
    values = pa.StructArray.from_arrays(
        [
            pa.Array.from_buffers(pa.float32(), 5, [None, pa.py_buffer(np.array(f_bits, "<u4"))]),
            pa.Array.from_buffers(pa.float64(), 5, [None, pa.py_buffer(np.array(d_bits, "<u8"))]),
        ],
        fields=list(schema.to_arrow()),
    )
    rows = encode_rows(values, schema)
    slots = np.array([struct.unpack_from("<QQ", r, 8) for r in row_bytes(rows)], dtype=np.uint64)
    assert slots[:, 0].tolist() == f_bits and slots[:, 1].tolist() == d_bits
    normal = np.array(
        [struct.unpack_from("<QQ", r, 8) for r in row_bytes(encode_rows(values, schema, normalize_floats=True))],
        dtype=np.uint64,
    )
    assert normal[:, 0].tolist() == [0, 0x7FC00000, 0x7FC00000, 0x7FC00000, 0x3F800000]
    assert normal[:, 1].tolist() == [0, *[0x7FF8000000000000] * 3, 0x3FF0000000000000]


# --- the layout, as documented ------------------------------------------------------------


def test_bytes_of_documented_examples():
    # a key of one string "a" (state-formats §2.2), an int array with a null (§4.3)
    key = encode_rows(pa.array([{"grp": "a"}], pa.struct([("grp", pa.string())])), _struct(("grp", "string")))
    assert row_bytes(key) == [bytes(8) + bytes.fromhex("0100000010000000") + b"a" + bytes(7)]
    schema = _struct(("a", _arr("integer")))
    row = row_bytes(encode_rows(pa.array([{"a": [0, 1, None]}], schema.to_arrow()), schema))[0]
    assert row[16:] == bytes.fromhex("0300000000000000040000000000000000000000010000000000000000000000")
    assert row[8:16] == struct.pack("<Q", 16 << 32 | 32)


def test_offsets_of_empty_and_null_values():
    schema = _struct(("a", "string"), ("b", "string"), ("big", "decimal(38,10)"), ("cal", "interval"), ("c", "binary"))
    values = pa.array([{"a": "", "b": None, "big": None, "cal": None, "c": b"xyz"}], schema.to_arrow())
    row = row_bytes(encode_rows(values, schema))[0]
    slots = struct.unpack_from("<QQQQQQ", row, 0)
    assert slots[0] == 0b01110  # b, big and cal are null
    assert slots[1] == 48 << 32  # an empty string records where it starts
    assert slots[2] == 0  # a null string has a zero slot
    assert slots[3] == 48 << 32  # a null wide decimal keeps its offset and 16 reserved bytes
    assert slots[4] == 64 << 32 | 16  # a null calendar interval keeps offset, size 16 and its bytes
    assert slots[5] == 80 << 32 | 3
    assert len(row) == 88 and row[48:80] == bytes(32)


def test_wide_decimals_as_java_biginteger_bytes():
    schema = _struct(("d", "decimal(38,0)"))
    cases = {
        0: "00",
        -1: "ff",
        127: "7f",
        128: "0080",
        -128: "80",
        -129: "ff7f",
        255: "00ff",
        10**38 - 1: "4b3b4ca85a86c47a098a223fffffffff",
        -(10**38 - 1): "b4c4b357a5793b85f675ddc000000001",
    }
    values = pa.array([{"d": decimal.Decimal(v)} for v in cases], schema.to_arrow())
    for row, expected in zip(row_bytes(encode_rows(values, schema)), cases.values(), strict=True):
        (slot,) = struct.unpack_from("<Q", row, 8)
        size = slot & 0xFFFFFFFF
        assert row[16 : 16 + size].hex() == expected
        assert len(row) == 32  # 16 bytes reserved whatever the size


# --- values that cannot be encoded -------------------------------------------------------


def test_refuses_values_that_do_not_fit_naming_the_field():
    schema = _struct(("outer", _struct(("d", "decimal(5,2)"))))
    wide = pa.array([decimal.Decimal("1234.56")], pa.decimal128(6, 2))
    inner = pa.Array.from_buffers(pa.decimal128(5, 2), 1, [None, wide.buffers()[1]])  # bypasses Arrow's checks
    values = pa.StructArray.from_arrays([pa.StructArray.from_arrays([inner], names=["d"])], names=["outer"])
    with pytest.raises(errors.RowEncodeError, match=r"new keys: .*decimal\(5,2\).*field outer\.d"):
        encode_rows(values, schema, "new keys")
    big = _struct(("b", "decimal(20,0)"))
    too_big = pa.array([decimal.Decimal(10**20)], pa.decimal128(21, 0))
    with pytest.raises(errors.RowEncodeError, match="field b"):
        encode_rows(pa.StructArray.from_arrays([too_big], names=["b"]), big, "x")
    with pytest.raises(errors.RowEncodeError, match="field n"):
        encode_rows(pa.array([{"n": "seven"}]), _struct(("n", "integer")), "x")
    with pytest.raises(errors.RowEncodeError, match=r"year-month interval .*field ym"):
        encode_rows(
            pa.array([{"ym": pa.MonthDayNano([1, 2, 0])}], pa.struct([("ym", pa.month_day_nano_interval())])),
            _struct(("ym", "interval year to month")),
            "x",
        )
    with pytest.raises(errors.RowEncodeError, match="null; a state row"):
        encode_rows(pa.array([{"n": 1}, None], pa.struct([("n", pa.int32())])), _struct(("n", "integer")), "x")


def test_null_in_a_non_nullable_field_is_written_as_null():
    schema = StructType([StructField("n", _t("long"), nullable=False)])
    rows = encode_rows(pa.array([{"n": None}], pa.struct([("n", pa.int64())])), schema)
    assert row_bytes(rows) == [struct.pack("<QQ", 1, 0)]


def test_other_arrow_types_are_cast():
    schema = _struct(("s", "string"), ("i", "integer"), ("t", "timestamp"))
    values = pa.StructArray.from_arrays(
        [
            pa.array(["a", "bc"], pa.large_string()),
            pa.array([1, 2], pa.int64()),
            pa.array([1_000_000_000, 2_000_000_000], pa.timestamp("ns")),
        ],
        names=["s", "i", "t"],
    )
    back = decode_rows(encode_rows(values, schema), schema)
    assert back.to_pylist() == values.cast(schema.to_arrow()).to_pylist()


# --- the bytes Spark wrote ---------------------------------------------------------------


def _assert_hdfs_checkpoint_bytes(path: str) -> int:
    """Decode and re-encode every key and value of every HDFS store at the last batch: Spark's bytes again."""
    cp = CheckpointDir(Storage(path))
    compared = 0
    for op in cp.operator_ids:
        for store in store_names_on_disk(cp, op):
            plan = plan_state_read(from_kwargs(path, {"operator_id": op, "store_name": store}), cp)
            for pid in plan.partitions:
                directory = plan.checkpoint.store_dir(op, pid, store)
                keys, values = HDFSStore(plan.storage, directory, plan.codec, plan.store_conf.row_checksum).load_rows(
                    plan.version
                )
                for rows, schema, what in ((keys, plan.key_schema, "key"), (values, plan.value_schema, "value")):
                    spark = row_bytes(rows)
                    ours = row_bytes(encode_rows(decode_rows(rows, schema), schema, rows.source))
                    for i, (theirs, mine) in enumerate(zip(spark, ours, strict=True)):
                        assert theirs == mine, f"{directory} {what} {i}:\n spark {theirs.hex()}\n ours  {mine.hex()}"
                    compared += len(spark)
    return compared


_GOLDEN_HDFS = sorted(
    str(p.relative_to(GOLDEN)) for p in GOLDEN.glob("spark-*/*_hdfs") if "fmgws_timeout" not in p.name
)


@pytest.mark.parametrize("name", _GOLDEN_HDFS)
def test_golden_rows_encode_to_sparks_bytes(name):
    assert _assert_hdfs_checkpoint_bytes(str(GOLDEN / name)) > 0


@pytest.mark.parametrize("name", ["types", "lookup_types", "exotic_types", "session_window", "join_inner"])
def test_spark_rows_encode_to_sparks_bytes(checkpoints, name):
    # types: keys of every key-able type, maps and nested arrays in values; lookup_types: -0.0, NaN, wide
    # decimals and nulls in keys; exotic_types: year-month and calendar intervals, variant
    assert _assert_hdfs_checkpoint_bytes(checkpoints(name)) > 0


def test_normalized_keys_match_sparks(checkpoints):
    """Keys with -0.0 and a NaN of another payload, normalized, are the keys Spark wrote for 0.0 and NaN."""
    path = checkpoints("lookup_types")
    plan = plan_state_read(from_kwargs(path, {}))
    schema = plan.key_schema
    d = schema.names.index("d")
    found = set()
    for pid in plan.partitions:
        directory = plan.checkpoint.store_dir(0, pid, "default")
        keys, _ = HDFSStore(plan.storage, directory, plan.codec).load_rows(plan.version)
        decoded = decode_rows(keys, schema)
        column = decoded.field(d).to_numpy(zero_copy_only=False)
        other_nan = np.frombuffer(struct.pack("<Q", 0xFFF8000000000123), "<f8")[0]
        odd = np.where(np.isnan(column), other_nan, np.where(column == 0, -0.0, column))
        null = decoded.field(d).is_null().to_numpy(zero_copy_only=False)
        special = {"nan" for x in column[~null] if x != x} | {"zero" for x in column[~null] if x == 0}
        found |= special
        changed = pa.StructArray.from_arrays(
            [decoded.field(i) if i != d else pa.array(odd, pa.float64(), mask=null) for i in range(len(schema.fields))],
            fields=list(schema.to_arrow()),
        )
        # written as they are, -0.0 and the other NaN differ from Spark's keys; normalized, they are Spark's
        assert (row_bytes(encode_rows(changed, schema)) != row_bytes(keys)) == bool(special)
        assert row_bytes(encode_rows(changed, schema, normalize_floats=True)) == row_bytes(keys)
    assert found == {"nan", "zero"}


def test_spark_rows_encode_in_a_batch_of_all_partitions(checkpoints):
    """All partitions' keys at once (rows from several buffers, as a rewrite gathers them)."""
    path = checkpoints("types")
    plan = plan_state_read(from_kwargs(path, {}))
    spark, decoded = [], []
    for pid in plan.partitions:
        keys, _ = HDFSStore(plan.storage, plan.checkpoint.store_dir(0, pid, "default"), plan.codec).load_rows(
            plan.version
        )
        spark += row_bytes(keys)
        decoded.append(decode_rows(keys, plan.key_schema))
    combined = pa.concat_arrays(decoded)
    assert row_bytes(encode_rows(combined, plan.key_schema)) == spark
