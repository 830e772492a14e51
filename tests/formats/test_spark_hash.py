"""Spark's hash(), bit for bit: murmur3 of every key type, nested and several columns, and maps, against Spark's own."""

from __future__ import annotations

import datetime as dt
import math
import random
from decimal import Context, Decimal

from state_reader.formats.spark_hash import murmur3_hash, partition_ids


def _random_values(rnd: random.Random) -> dict[str, tuple[str, list]]:
    """Spark SQL type -> values of it, edge cases first, then random ones, with nulls."""

    def ints(bits: int) -> list:
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        return [lo, hi, 0, -1, 1, None] + [rnd.randint(lo, hi) for _ in range(40)]

    def floats() -> list:
        return [0.0, -0.0, math.nan, math.inf, -math.inf, 1e-310, None] + [rnd.uniform(-1e6, 1e6) for _ in range(40)]

    def text() -> str:
        return "".join(rnd.choice("aZ0 é€😀\u0000ß") for _ in range(rnd.randrange(0, 14)))

    def decimal(precision: int, scale: int) -> list:
        top = 10**precision - 1
        exact = Context(prec=60)
        unscaled = [0, top, -top, -1, -128, 255, 1 << 63, -(1 << 63)] + [rnd.randint(-top, top) for _ in range(40)]
        return [Decimal(u).scaleb(-scale, exact) for u in unscaled if abs(u) <= top] + [None]

    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return {
        "boolean": ("boolean", [True, False, None]),
        "tinyint": ("tinyint", ints(8)),
        "smallint": ("smallint", ints(16)),
        "int": ("int", ints(32)),
        "bigint": ("bigint", ints(64)),
        "float": ("float", floats()),
        "double": ("double", floats()),
        "decimal(9,2)": ("decimal(9,2)", decimal(9, 2)),
        "decimal(18,0)": ("decimal(18,0)", decimal(18, 0)),
        "decimal(19,4)": ("decimal(19,4)", decimal(19, 4)),
        "decimal(38,10)": ("decimal(38,10)", decimal(38, 10)),
        "string": ("string", ["", "a", "ab", "abc", "abcd", "abcde", None] + [text() for _ in range(60)]),
        "binary": (
            "binary",
            [b"", b"\x80", b"\xff\xfe\xfd", b"\x00\x01\x02\x03\x04", None]
            + [rnd.randbytes(rnd.randrange(0, 12)) for _ in range(40)],
        ),
        "date": (
            "date",
            [dt.date(1970, 1, 1), dt.date(1, 1, 1), dt.date(9999, 12, 31), None]
            + [dt.date(1970, 1, 1) + dt.timedelta(days=rnd.randint(-700000, 700000)) for _ in range(30)],
        ),
        "timestamp": (
            "timestamp",
            [epoch, epoch - dt.timedelta(microseconds=1), None]
            + [epoch + dt.timedelta(microseconds=rnd.randint(-(10**16), 10**16)) for _ in range(30)],
        ),
        "timestamp_ntz": (
            "timestamp_ntz",
            [dt.datetime(1970, 1, 1), None]
            + [dt.datetime(1970, 1, 1) + dt.timedelta(seconds=rnd.randint(-(10**10), 10**10)) for _ in range(30)],
        ),
    }


def test_murmur3_equals_spark_hash_for_every_key_type(spark):
    from pyspark.sql import functions as F

    rnd = random.Random(7)
    values = _random_values(rnd)
    for name, (sql_type, column) in values.items():
        df = spark.createDataFrame([(v,) for v in column], f"c {sql_type}")
        theirs = [r[0] for r in df.select(F.hash("c")).collect()]
        ours = murmur3_hash([df.toArrow().column("c").combine_chunks()]).tolist()
        assert ours == theirs, name


def test_murmur3_equals_spark_hash_for_nested_and_several_columns(spark):
    from pyspark.sql import functions as F

    rnd = random.Random(11)
    rows = []
    for i in range(120):
        inner = (
            None
            if i % 9 == 0
            else {
                "a": None if i % 4 == 0 else rnd.randint(-5, 5),
                "b": {"c": rnd.choice(["x", "é€", None]), "d": rnd.random() - 0.5},
            }
        )
        arr = None if i % 7 == 0 else [rnd.choice([None, rnd.randint(-9, 9)]) for _ in range(rnd.randrange(0, 5))]
        sarr = None if i % 5 == 0 else [{"k": rnd.choice(["p", "q", None])} for _ in range(rnd.randrange(0, 3))]
        rows.append((rnd.randint(-100, 100), inner, arr, sarr, rnd.choice(["u", "vvvvv", None])))
    schema = (
        "n int, st struct<a: int, b: struct<c: string, d: double>>, arr array<int>, "
        "sarr array<struct<k: string>>, s string"
    )
    df = spark.createDataFrame(rows, schema)
    table = df.toArrow()
    columns = [table.column(c).combine_chunks() for c in table.column_names]
    for chosen in (["st"], ["arr"], ["sarr"], ["n", "st", "arr", "sarr", "s"], ["s", "n"]):
        theirs = [r[0] for r in df.select(F.hash(*chosen)).collect()]
        ours = murmur3_hash([columns[table.column_names.index(c)] for c in chosen]).tolist()
        assert ours == theirs, chosen
    for n in (1, 3, 64, 200):
        theirs = [r[0] for r in df.select(F.expr(f"pmod(hash(n, s), {n})")).collect()]
        assert partition_ids([columns[0], columns[4]], n).tolist() == theirs


def test_murmur3_of_maps_as_spark_hashes_them(spark):
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.legacy.allowHashOnMapType", "true")
    try:
        df = spark.createDataFrame([({"a": 1, "bb": None},), ({},), (None,), ({"é": -7},)], "m map<string,int>")
        theirs = [r[0] for r in df.select(F.hash("m")).collect()]
    finally:
        spark.conf.unset("spark.sql.legacy.allowHashOnMapType")
    assert murmur3_hash([df.toArrow().column("m").combine_chunks()]).tolist() == theirs
