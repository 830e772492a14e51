"""One-key lookups: key filters that read only the partitions their keys hash to (Spark's hash is
``tests/formats/test_spark_hash.py``), with the same rows as a full read filtered afterwards."""

from __future__ import annotations

import datetime as dt
import math
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import state_reader
from state_reader.core.key_filter import And, Comparison, InList, KeyFilter, NullCheck, Or, Predicate
from state_reader.core.options import from_kwargs
from state_reader.core.planner import plan_state_read
from state_reader.core.scan import partitions_to_read
from state_reader.formats.spark_hash import partition_ids
from tests.support.cli import run as cli_run
from tests.support.damage import damage_partitions_but
from tests.support.oracle import arrow_rows
from tests.support.paths import GOLDEN

# --- the hash, against Spark's hash() ---------------------------------------------------------


# --- lookups on real checkpoints --------------------------------------------------------------

JOIN_STORES = [{"join_side": "left"}, {"join_side": "right"}] + [
    {"store_name": f"{side}-{store}"}
    for side in ("left", "right")
    for store in ("keyToNumValues", "keyWithIndexToValue")
]
TWS_READS = [{"state_var_name": v} for v in ("profile", "events", "counters", "plain")] + [
    {"state_var_name": "counters", "flatten_collection_types": False},
    {"read_registered_timers": True},
]
READS = {
    "agg_window": [{}],
    "agg_fmt1": [{}],
    "rocksdb_cl_agg_window": [{}],
    "session_window": [{}],
    "rocksdb_session_window": [{}],
    "dedup": [{}],
    "dedup_within": [{}],
    "multi": [{"operator_id": 0, "batch_id": 4}, {"operator_id": 1, "batch_id": 4}],
    "apply_in_pandas": [{}],
    "rocksdb_apply_in_pandas_fmt1": [{}],
    "join_inner": JOIN_STORES,
    "join_v3": JOIN_STORES,
    "join_v4": [
        {"join_side": "left"},
        {"join_side": "right"},
        {"store_name": "left-keyWithTsToValues"},
        {"store_name": "right-tsWithKey"},
    ],
    "tws": TWS_READS,
    "lookup_types": [{}],
    "rocksdb_lookup_types": [{}],
}
GOLDEN_READS = {
    "agg_window_hdfs": [{}],
    "agg_window_rocksdb": [{}],
    "dedup_hdfs": [{}],
    "session_window_hdfs": [{}],
    "join_inner_hdfs": JOIN_STORES,
}


def _leaf_predicates(value: object, typ: pa.DataType, path: tuple[str, ...]) -> list[Predicate]:
    """``path = value`` for every scalar field under ``path`` (IS NULL for nulls)."""
    if pa.types.is_struct(typ):
        out: list[Predicate] = []
        for field in typ:
            sub = None if value is None else value[field.name]
            out += _leaf_predicates(sub, field.type, (*path, field.name))
        return out
    return [NullCheck(path) if value is None else Comparison(path, "=", value)]


def _key_predicate(key: dict, key_type: pa.StructType, fields: int) -> Predicate:
    parts: list[Predicate] = []
    for field in list(key_type)[:fields]:
        parts += _leaf_predicates(key[field.name], field.type, (field.name,))
    return And(tuple(parts))


def _check_lookups(cp: str, options: dict) -> int:
    """Lookups of sampled keys (one, two with OR, two with IN) equal the full read filtered.

    Returns how many lookups read fewer partitions than the full read.
    """
    full = state_reader.read_state(cp, **options)
    plan = plan_state_read(from_kwargs(cp, options))
    fields = plan.partition_key_fields
    key_type = full.schema.field("key").type
    keys = full.column("key").combine_chunks()
    assert fields is not None, options
    if plan.num_partitions and plan.partitions == list(range(plan.num_partitions)):
        # every stored row is in the partition its partition key hashes to
        placed = partition_ids([keys.field(i) for i in range(fields)], plan.num_partitions)
        assert placed.tolist() == full.column("partition_id").to_pylist(), (cp, options)
    distinct = list({repr(k): k for k in keys.to_pylist()}.values())
    samples = distinct[:: max(1, len(distinct) // 4)][:5]
    predicates: list[Predicate] = [_key_predicate(k, key_type, fields) for k in samples]
    if len(samples) >= 2:
        predicates.append(Or(tuple(predicates[:2])))
    first_field = key_type.field(0)
    if not pa.types.is_struct(first_field.type) and fields == 1 and len(samples) >= 2:
        predicates.append(
            InList(
                (first_field.name,), tuple(s[first_field.name] for s in samples[:2] if s[first_field.name] is not None)
            )
        )
    pruned = 0
    for predicate in predicates:
        if isinstance(predicate, InList) and not predicate.values:
            continue
        got = state_reader.read_state(cp, key_filter=predicate, **options)
        expected = full.filter(KeyFilter(predicate, key_type).mask(keys))
        assert arrow_rows(got) == arrow_rows(expected), (cp, options, predicate)
        chosen = partitions_to_read(plan, KeyFilter(predicate, key_type))
        assert set(expected.column("partition_id").to_pylist()) <= set(chosen)
        pruned += len(chosen) < len(plan.partitions)
    return pruned


@pytest.mark.parametrize("name", sorted(READS))
def test_lookups_equal_filtered_full_reads(checkpoints, name):
    cp = checkpoints(name)
    pruned = sum(_check_lookups(cp, options) for options in READS[name])
    assert pruned > 0  # some lookup read fewer partitions than the whole store


@pytest.mark.parametrize("name", sorted(GOLDEN_READS))
@pytest.mark.parametrize("writer", ["spark-3.3.4", "spark-3.4.4", "spark-3.5.8", "spark-4.0.5"])
def test_lookups_on_checkpoints_of_older_writers(writer, name):
    cp = GOLDEN / writer / name
    if not cp.is_dir():
        pytest.skip(f"{writer} wrote no {name}")
    assert sum(_check_lookups(str(cp), options) for options in GOLDEN_READS[name]) > 0


def test_lookup_of_minus_zero_and_nan_doubles(checkpoints):
    cp = checkpoints("lookup_types")
    full = state_reader.read_state(cp)
    key_type = full.schema.field("key").type
    rows = full.column("key").to_pylist()
    zero = next(k for k in rows if k["d"] == 0.0)
    minus = _key_predicate({**zero, "d": -0.0}, key_type, key_type.num_fields)
    got = state_reader.read_state(cp, key_filter=minus)
    assert got.num_rows == 1 and got.column("key").to_pylist() == [zero]
    nan = next(k for k in rows if k["d"] is not None and math.isnan(k["d"]))
    # NaN equals nothing in key filters (Arrow's rule), with or without pruning
    assert state_reader.read_state(cp, key_filter=_key_predicate(nan, key_type, key_type.num_fields)).num_rows == 0


def test_filters_that_do_not_pin_the_key_read_every_partition(checkpoints):
    cp = checkpoints("lookup_types")
    plan = plan_state_read(from_kwargs(cp, {}))
    key_type = plan.arrow_schema.field("key").type
    for spec in (
        "s = 'ü€😀-1'",
        "s = 'ü€😀-1' or l > 0",
        "not (s = 'ü€😀-1')",
        "s in ('a', 'b') and l >= 3",
        lambda k: pc.equal(k.field("s"), "ü€😀-1"),
    ):
        assert partitions_to_read(plan, KeyFilter(spec, key_type)) == plan.partitions


def _literal(value: object) -> str:
    if isinstance(value, bytes):
        return repr(value.decode())
    if isinstance(value, dt.datetime):
        return f"'{value:%Y-%m-%d %H:%M:%S.%f}'"
    if isinstance(value, (str, dt.date)):
        return f"'{value}'"
    return str(value)


def _expression(predicate: And) -> str:
    """The key filter expression of :func:`_key_predicate`'s predicate."""
    return " and ".join(
        f"{'.'.join(p.path)} is null" if isinstance(p, NullCheck) else f"{'.'.join(p.path)} = {_literal(p.value)}"
        for p in predicate.parts
    )


def one_partition_left(cp: str, table: pa.Table, tmp_path: Path) -> tuple[dict, str, Path]:
    """For a table of ``lookup_types``' keys read from ``cp`` (one row per key, ``partition_id``): a row
    of it, the key filter that selects its key, and a copy of ``cp`` whose other partitions are damaged."""
    key_type = table.schema.field("key").type
    row = next(r for r in table.to_pylist() if r["key"]["st"] and r["key"]["s"] and r["key"]["d"] == 0)
    expr = _expression(_key_predicate(row["key"], key_type, key_type.num_fields))
    copy = tmp_path / "damaged"
    shutil.copytree(cp, copy)
    plan = plan_state_read(from_kwargs(str(copy), {}))
    keep = partitions_to_read(plan, KeyFilter(expr, key_type))
    assert keep == [row["partition_id"]] and len(plan.partitions) == 8
    damage_partitions_but(copy, keep, plan.partitions)
    return row, expr, copy


def test_a_lookup_reads_only_its_partition(checkpoints, tmp_path):
    cp = checkpoints("lookup_types")
    row, expr, copy = one_partition_left(cp, state_reader.read_state(cp), tmp_path)
    keep = [row["partition_id"]]
    with pytest.raises(state_reader.StateReaderError):
        state_reader.read_state(str(copy))
    assert state_reader.read_state(str(copy), key_filter=expr).to_pylist() == [row]
    # the command line takes the same path, and says what it read
    out = cli_run("show", str(copy), "--key-filter", expr)
    assert out.returncode == 0, out.stderr
    assert f"partitions {keep[0]} of 8" in " ".join(out.stdout.split()), out.stdout


def test_changes_lookup_equals_filtered_feed(checkpoints):
    for name in ("agg_window", "rocksdb_cl_agg_window"):
        cp = checkpoints(name)
        feed = state_reader.changes(cp, 1, 3)
        users = [u for u in pc.unique(pc.struct_field(feed.column("key"), [1])).to_pylist() if u]
        window = feed.column("key").to_pylist()[0]["window"]
        expr = (
            f"user = '{users[0]}' and window.start = '{window['start']:%Y-%m-%d %H:%M:%S}' "
            f"and window.end = '{window['end']:%Y-%m-%d %H:%M:%S}'"
        )
        got = state_reader.changes(cp, 1, 3, key_filter=expr)
        flt = KeyFilter(expr, feed.schema.field("key").type)
        assert arrow_rows(got) == arrow_rows(feed.filter(flt.mask(feed.column("key"))))


def test_spark_pushdown_reads_only_the_keys_partitions(spark, checkpoints):
    pytest.importorskip("pyspark.sql.datasource", reason="Python data sources need pyspark 4")
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import Filter  # noqa: F401  (pyspark 4.1+: filter pushdown)

    cp = checkpoints("apply_in_pandas")
    users = sorted({k["grp"] for k in state_reader.read_state(cp).column("key").to_pylist()})
    reads = {}
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        state_reader.register(spark)
        for label, cond in (
            ("one", F.col("key.grp") == users[0]),
            ("in", F.col("key.grp").isin(users[:2])),
            ("all", F.col("key.grp") >= users[0]),
        ):
            df = spark.read.format("state_reader.statestore").option("partitionsPerTask", 1).load(cp).where(cond)
            reads[label] = (df.rdd.getNumPartitions(), sorted(map(str, df.collect())))
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
        state_reader.register(spark)
    plain = spark.read.format("statestore").load(cp)
    assert reads["one"][1] == sorted(map(str, plain.where(F.col("key.grp") == users[0]).collect()))
    assert reads["in"][1] == sorted(map(str, plain.where(F.col("key.grp").isin(users[:2])).collect()))
    assert reads["one"][0] == 1 and reads["all"][0] == 2
