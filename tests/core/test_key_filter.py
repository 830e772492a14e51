"""Key filters: the expression syntax, SQL null semantics, read_state(key_filter=...),
and filter pushdown into the Spark data source."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import state_reader
from state_reader.core.key_filter import (
    And,
    Comparison,
    InList,
    KeyFilter,
    Not,
    NullCheck,
    Or,
    parse_key_filter,
)
from tests.support.oracle import arrow_rows
from tests.support.paths import GOLDEN

KEY_TYPE = pa.struct(
    [("user", pa.string()), ("n", pa.int32()), ("w", pa.struct([("start", pa.timestamp("us", tz="UTC"))]))]
)
KEYS = pa.array(
    [
        {"user": "ann", "n": 1, "w": {"start": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)}},
        {"user": "bob", "n": 5, "w": None},
        {"user": None, "n": 3, "w": {"start": dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc)}},
        {"user": "ann", "n": None, "w": {"start": None}},
    ],
    type=KEY_TYPE,
)


def keep(expr: str) -> list[int]:
    mask = KeyFilter(expr, KEY_TYPE).mask(KEYS).to_pylist()
    return [i for i, m in enumerate(mask) if m]


def test_parse():
    assert parse_key_filter("user = 'ann'") == Comparison(("user",), "=", "ann")
    assert parse_key_filter('key.user == "a\'b" AND n <> 3') == And(
        (Comparison(("key", "user"), "=", "a'b"), Comparison(("n",), "!=", 3))
    )
    assert parse_key_filter("not (n in (1, 2.5) or user is not null)") == Not(
        Or((InList(("n",), (1, Decimal("2.5"))), NullCheck(("user",), negated=True)))
    )
    assert parse_key_filter("`count(1)` >= -1e3") == Comparison(("count(1)",), ">=", Decimal("-1E+3"))
    assert parse_key_filter("ok = true and x not in ('a')") == And(
        (Comparison(("ok",), "=", True), InList(("x",), ("a",), negated=True))
    )


@pytest.mark.parametrize(
    "bad, message",
    [
        ("", "empty"),
        ("user =", "expected a literal"),
        ("user = null", "is null"),
        ("(n = 1", "expected ')'"),
        ("n = 1 n", "'and', 'or'"),
        ("user ~ 'a'", "unexpected"),
        ("nope = 1", "does not exist"),
        ("value.count = 1", "not a key field"),
        ("n = 'x'", "cannot compare"),
        ("user = true", "cannot compare"),
        ("w.start = 'yesterday'", "not a timestamp"),
        ("user.x = 1", "not a struct"),
        ("w = 1", "name a field inside"),
    ],
)
def test_errors_name_the_problem(bad, message):
    with pytest.raises(state_reader.InvalidOptionError, match=re.escape(message)):
        KeyFilter(bad, KEY_TYPE)


def test_sql_semantics():
    assert keep("user = 'ann'") == [0, 3]
    assert keep("key.user = 'ann' and n > 0") == [0]  # n null: unknown, dropped
    assert keep("not user = 'ann'") == [1]  # null user stays unknown under not
    assert keep("n not in (1, 5)") == [2]  # null n is neither in nor not in
    assert keep("user is null or n >= 5") == [1, 2]
    assert keep("n > 2.5") == [1, 2]
    assert keep("w.start >= '2024-01-01 12:00:00'") == [2]  # parent struct null -> field null
    assert keep("w.start = '2024-01-01T00:00:00+00:00'") == [0]
    assert keep("w.start is null") == [1, 3]
    assert keep("USER = 'bob' OR N = 3") == [1, 2]


def test_callable_filters():
    flt = KeyFilter(lambda k: pc.greater(k.field("n"), 2))
    assert flt.mask(KEYS).to_pylist() == [False, True, True, False]
    assert KeyFilter(lambda k: [True, False, True, False]).mask(KEYS).to_pylist() == [True, False, True, False]
    with pytest.raises(state_reader.InvalidOptionError, match="returned 1 values for 4 keys"):
        KeyFilter(lambda k: [True]).mask(KEYS)
    with pytest.raises(state_reader.InvalidOptionError, match="booleans"):
        KeyFilter(lambda k: k.field("n")).mask(KEYS)


def test_read_state_key_filter_equals_filtering_afterwards(checkpoints):
    cp = checkpoints("agg_window")
    full = state_reader.read_state(cp, batch_id=3)
    users = pc.struct_field(full.column("key"), [1])
    starts = pc.struct_field(full.column("key"), [0, 0])
    cutoff = pc.min(starts).as_py() + dt.timedelta(seconds=10)
    expected = full.filter(pc.and_kleene(pc.equal(users, "ann"), pc.greater_equal(starts, pa.scalar(cutoff))))
    expr = f"user = 'ann' and window.start >= '{cutoff:%Y-%m-%d %H:%M:%S}'"
    got = state_reader.read_state(cp, batch_id=3, key_filter=expr)
    assert got.schema == full.schema
    assert arrow_rows(got) == arrow_rows(expected)
    by_callable = state_reader.read_state(cp, batch_id=3, key_filter=lambda k: pc.equal(k.field("user"), "ann"))
    assert arrow_rows(by_callable) == arrow_rows(full.filter(pc.equal(users, "ann")))
    with pytest.raises(state_reader.InvalidOptionError, match=re.escape("key fields: window.start, window.end, user")):
        state_reader.read_state(cp, key_filter="region = 1")


def test_changes_api(checkpoints):
    cp = checkpoints("agg_window")
    feed = state_reader.changes(cp, 1, 2)
    assert feed.column_names[:2] == ["batch_id", "change_type"]
    assert set(feed.column("batch_id").to_pylist()) <= {1, 2}
    assert feed.column("batch_id").to_pylist() == sorted(feed.column("batch_id").to_pylist())
    ann = state_reader.changes(cp, 1, 2, key_filter="user = 'ann'")
    assert ann.num_rows == pc.sum(pc.equal(pc.struct_field(feed.column("key"), [1]), "ann")).as_py()


# -- Spark filter pushdown -------------------------------------------------------------


def test_spark_filters_taken_only_when_exact():
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        GreaterThan,
        In,
        IsNotNull,
        LessThanOrEqual,
        StringStartsWith,
    )
    from pyspark.sql.datasource import Not as SparkNot

    from state_reader.fronts.datasource import spark_filter_to_predicate

    key = pa.struct(
        [
            ("user", pa.string()),
            ("n", pa.int32()),
            ("price", pa.float64()),
            ("d", pa.date32()),
            ("w", pa.struct([("start", pa.timestamp("us", tz="UTC"))])),
        ]
    )
    assert spark_filter_to_predicate(EqualTo(("key", "user"), "ann"), key) == ("key", Comparison(("user",), "=", "ann"))
    assert spark_filter_to_predicate(SparkNot(GreaterThan(("key", "n"), 3)), key) == (
        "key",
        Not(Comparison(("n",), ">", 3)),
    )
    assert spark_filter_to_predicate(In(("key", "n"), (1, 2)), key) == ("key", InList(("n",), (1, 2)))
    assert spark_filter_to_predicate(IsNotNull(("key", "w", "start")), key) == (
        "key",
        NullCheck(("w", "start"), negated=True),
    )
    assert spark_filter_to_predicate(LessThanOrEqual(("key", "d"), dt.date(2024, 1, 1)), key)[0] == "key"
    assert spark_filter_to_predicate(EqualTo(("partition_id",), 1), key) == (
        "partition",
        Comparison(("partition_id",), "=", 1),
    )
    for refused in (
        EqualTo(("key", "price"), 1.5),  # floating point: NaN/-0.0 compare differently
        EqualTo(("key", "n"), 1 << 40),  # out of the field's range
        EqualTo(("key", "n"), "1"),  # Spark would cast; we do not guess
        GreaterThan(("key", "w", "start"), dt.datetime(2024, 1, 1)),  # timestamps: time zones
        EqualTo(("value", "count"), 1),
        EqualTo(("key", "nope"), 1),
        EqualNullSafe(("key", "user"), "ann"),
        StringStartsWith(("key", "user"), "a"),
        In(("key", "n"), (1, None)),
    ):
        assert spark_filter_to_predicate(refused, key) is None, refused


def test_pushdown_into_spark(spark, checkpoints):
    from pyspark.sql import functions as F

    cp = checkpoints("agg_window")
    state = state_reader.read_state(cp)
    in_p1 = state.filter(pc.equal(state.column("partition_id"), 1)).column("key").combine_chunks()
    user = next(u for u in in_p1.field("user").to_pylist() if u)
    first = pc.min(in_p1.field("window").field("start")).as_py()
    # a timestamp comparison is not taken (time zones), so Spark keeps applying that one
    condition = (F.col("key.user") == user) & (F.col("partition_id") == 1) & (F.col("key.window.start") >= F.lit(first))
    plain = spark.read.format("state_reader.statestore").load(cp).where(condition)
    expected = sorted(map(str, plain.collect()))
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        state_reader.register(spark)
        pushed = spark.read.format("state_reader.statestore").load(cp).where(condition)
        plan = pushed._jdf.queryExecution().executedPlan().toString()
        filters = [line for line in plan.splitlines() if "Filter (" in line]
        # the user and partition filters went into the reader; Spark still applies the timestamp one
        assert filters and all("user" not in f and "partition_id" not in f for f in filters), plan
        assert any("window" in f for f in filters), plan
        assert sorted(map(str, pushed.collect())) == expected
        assert expected  # the filter matched something
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
        state_reader.register(spark)
    # with pushdown off again, plain reads work (PySpark refuses readers with pushFilters then)
    assert spark.read.format("state_reader.statestore").load(cp).count() > 0


def test_key_filter_on_golden_types():
    cp = str(GOLDEN / "spark-4.0.5" / "agg_types_hdfs")
    full = state_reader.read_state(cp)
    got = state_reader.read_state(cp, key_filter="k_int > 0 and k_date >= '2000-01-01' and k_dec10 < 100000000")
    k = full.column("key")
    mask = pc.and_kleene(
        pc.and_kleene(
            pc.greater(pc.struct_field(k, [1]), 0),
            pc.greater_equal(pc.struct_field(k, [10]), pa.scalar(dt.date(2000, 1, 1))),
        ),
        pc.less(pc.struct_field(k, [8]), pa.scalar(Decimal("100000000"))),
    )
    assert arrow_rows(got) == arrow_rows(full.filter(mask))
