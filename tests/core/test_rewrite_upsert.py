"""Rows written into a store by a rewrite (``upsert``, ``delete``), judged by Spark: its built-in
reader sees the rows written, each in the partition Spark's hash gives its key, and the real query
resumed from a seeded or edited checkpoint produces what it would have produced had it seen the
input the seed stands for."""

from __future__ import annotations

import ast
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import state_reader
from state_reader.model.conf import CONF_ROW_CHECKSUM
from tests.support.parallel import side_by_side
from tests.support.resume import (
    add_input,
    assert_builtin_sees_same_state,
    copy_as_another_query,
    digest,
    resume,
    resume_each,
    state_rows,
    stored_rows,
    stores,
)
from tests.support.streaming_queries import (
    HDFS,
    ROCKSDB,
    T0,
    Query,
    _events,
    _with,
    run_query,
    session_confs,
)
from tests.support.streaming_queries import QUERIES as QUERIES_WRITTEN

# every single-store operator of the shared fixture checkpoints that the seeds cover, on both providers
ROUND_TRIP = [
    "agg_window",
    "agg_fmt1",
    "dedup",
    "dedup_within",
    "apply_in_pandas",
    "session_window",
    "rocksdb_agg_window",
    "rocksdb_cl_session_window",
    "rocksdb_cl_dedup",
    "rocksdb_dedup_within",
    "rocksdb_apply_in_pandas",
    "rocksdb_cl_checksum_agg_window",  # each value framed with a CRC-32C of its key and value
    "checksum_agg_window",
]
# the HDFS-backed provider with row checksums, written here: the suite's other tests need no such store
CHECKSUM_HDFS = _with(QUERIES_WRITTEN["agg_window"], {**HDFS, CONF_ROW_CHECKSUM: "true"})


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_round_trip_through_delete_and_upsert(spark, checkpoints, tmp_path, name):
    """Every key deleted, then the source's rows upserted back: Spark's reader sees the source's
    rows, each in the partition of Spark's hash; the counts say what each step did."""
    src = run_query(spark, CHECKSUM_HDFS, tmp_path / "run") if name == "checksum_agg_window" else checkpoints(name)
    before = digest(src)
    rows = state_reader.read_state(src)
    empty, full = str(tmp_path / "empty"), str(tmp_path / "full")
    report = state_reader.rewrite(src, empty, delete=rows)
    assert report.summary()["stores"][0]["lost"] == rows.num_rows
    assert state_reader.read_state(empty).num_rows == 0
    report = state_reader.rewrite(empty, full, upsert=rows)
    store = report.summary()["stores"][0]
    assert (store["gained"], store["replaced"], store["lost"]) == (rows.num_rows, 0, 0)
    assert store["rows"] == rows.num_rows
    assert_builtin_sees_same_state(spark, src, full, report.new_partitions)
    if "checksum" in name:  # the checksums written are Spark's, byte for byte
        assert stored_rows(full) == stored_rows(src)
    # the same rows upserted over themselves: every key replaced, none gained (keys match byte for byte)
    dry = state_reader.rewrite(src, upsert=rows, dry_run=True).summary()["stores"][0]
    assert (dry["gained"], dry["replaced"], dry["lost"]) == (0, rows.num_rows, 0)
    assert digest(src) == before, "the source changed"


@pytest.mark.parametrize("name", ["join_inner", "join_left_outer_rocksdb_cl"])
def test_every_store_of_a_join_in_one_rewrite(spark, checkpoints, tmp_path, name):
    """The four stores of a stream-stream join, each given by name: all deleted in one rewrite, all
    written back in another; Spark's reader sees every store as it was, each row where its key hashes."""
    src = checkpoints(name)
    before = digest(src)
    every = {(op, store): state_reader.read_state(src, operator_id=op, store_name=store) for op, store in stores(src)}
    assert len(every) == 4 and all(t.num_rows for t in every.values())
    empty, full = str(tmp_path / "empty"), str(tmp_path / "full")
    report = state_reader.rewrite(src, empty, delete=every)
    assert [s.rows for s in report.stores] == [0] * 4
    assert {s.store_name: sum(s.lost_per_partition) for s in report.stores} == {
        store: t.num_rows for (_, store), t in every.items()
    }
    report = state_reader.rewrite(empty, full, upsert={store: t for (_, store), t in every.items()})
    assert {s.store_name: s.rows for s in report.stores} == {store: t.num_rows for (_, store), t in every.items()}
    assert_builtin_sees_same_state(spark, src, full, report.new_partitions)
    assert digest(src) == before
    with pytest.raises(state_reader.InvalidOptionError, match="dicts"):
        state_reader.rewrite(src, str(tmp_path / "x"), upsert=every, store_name="left-keyToNumValues")


def _user_totals(df):
    from pyspark.sql import functions as F

    return (
        df.where("n >= 0")
        .groupBy(F.coalesce("user", F.lit("?")).alias("user"))
        .agg(F.count(F.lit(1)).alias("cnt"), F.sum("amount").alias("total"))
    )


def _seen_users(df):
    return df.where("n >= 0").select("user", "grp", "n").dropDuplicates(["user", "grp"])


def _counted_users(df):
    """applyInPandasWithState keeping each user's count and total (the state a seed writes)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    def update(key, pdfs, state):
        import pandas as pd

        cnt, total = state.get if state.exists else (0, 0)
        for pdf in pdfs:
            cnt, total = cnt + len(pdf), total + int(pdf["amount"].sum())
        state.update((cnt, total))
        yield pd.DataFrame({"user": [key[0]], "cnt": [cnt], "total": [total]})

    return (
        df.where("n >= 0")
        .withColumn("user", F.coalesce("user", F.lit("?")))
        .groupBy("user")
        .applyInPandasWithState(
            update, "user string, cnt long, total long", "cnt long, total long", "update", GroupStateTimeout.NoTimeout
        )
    )


QUERIES = {
    "agg": (_user_totals, "update"),
    "dedup": (_seen_users, "append"),
    "apply_in_pandas": (_counted_users, "update"),
}
PROVIDERS = {"hdfs": HDFS, "rocksdb": ROCKSDB}
A = _events()[:3]
B = _events()[3:]
# a batch the stateful operator sees nothing of (filtered out before it): the checkpoint a seed goes into
NOTHING = [[{"ts": T0, "user": "nobody", "grp": "a", "n": -1, "amount": 0, "price": 0.0, "ok": True, "tag": "x"}]]


def _query(kind: str, provider: str, batches) -> Query:
    build, mode = QUERIES[kind]
    return Query(build, output_mode=mode, confs=PROVIDERS[provider], batches=lambda: [list(b) for b in batches])


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.parametrize("kind", list(QUERIES))
def test_a_seeded_query_resumes_as_if_it_had_seen_the_seeds_input(spark, tmp_path, kind, provider):
    """Inputs A then B, against B alone on a checkpoint seeded with the state A left: the same output,
    batch by batch, and the same state."""
    reference, fresh = side_by_side(
        partial(run_query, spark.newSession(), _query(kind, provider, A), tmp_path / "ref"),
        partial(run_query, spark.newSession(), _query(kind, provider, NOTHING), tmp_path / "fresh"),
    )
    seed = state_reader.read_state(reference)
    assert seed.num_rows
    assert state_reader.read_state(fresh).num_rows == 0
    seeded = str(tmp_path / "seeded")
    report = state_reader.rewrite(fresh, seeded, upsert=seed)
    assert report.summary()["stores"][0]["gained"] == seed.num_rows

    query = _query(kind, provider, B)
    add_input(tmp_path / "ref" / "input", B)
    add_input(tmp_path / "fresh" / "input", B)
    expected, got = side_by_side(
        partial(resume, spark.newSession(), query, reference, tmp_path / "ref" / "input"),
        partial(resume, spark.newSession(), query, seeded, tmp_path / "fresh" / "input"),
    )
    assert len(expected) == len(B)
    assert list(got.values()) == list(expected.values())
    with session_confs(spark, query.confs):
        assert state_rows(spark, seeded) == state_rows(spark, reference)


def test_one_key_replaced_and_one_deleted_change_exactly_those_in_the_output(spark, tmp_path):
    """A running query's state edited (ann's totals raised, bob forgotten): the restarted query's
    output differs from the unedited one's in those two keys alone, and by exactly the edit."""
    query = _query("agg", "hdfs", A)
    src = run_query(spark, query, tmp_path / "run")
    state = state_reader.read_state(src)
    users = pc.struct_field(state.column("key"), [0])
    ann = state.filter(pc.equal(users, "ann"))
    old = ann.column("value")[0].as_py()
    raised = pa.table(
        {
            "key": ann.column("key"),
            "value": pa.array(
                [{"count": old["count"] + 100, "sum": old["sum"] + 1000}], ann.schema.field("value").type
            ),
        }
    )
    bob = state.filter(pc.equal(users, "bob")).select(["key"])
    bob_before = state.filter(pc.equal(users, "bob")).column("value")[0].as_py()
    edited = str(tmp_path / "edited")
    report = state_reader.rewrite(src, edited, upsert=raised, delete=bob)
    store = report.summary()["stores"][0]
    assert (store["gained"], store["replaced"], store["lost"]) == (0, 1, 1)

    copy = str(tmp_path / "copy")
    copy_as_another_query(src, copy)
    add_input(tmp_path / "run" / "input", B)
    expected, got = resume_each(spark, _query("agg", "hdfs", B), [copy, edited], tmp_path / "run" / "input")
    assert len(got) == len(expected) == len(B)
    for want_rows, got_rows in zip(expected.values(), got.values(), strict=True):
        want = {r[0]: r for r in map(ast.literal_eval, want_rows)}
        have = {r[0]: r for r in map(ast.literal_eval, got_rows)}
        assert want.keys() == have.keys()
        for user, row in want.items():
            if user == "ann":
                assert have[user] == (user, row[1] + 100, row[2] + 1000)
            elif user == "bob":
                assert have[user] == (user, row[1] - bob_before["count"], row[2] - bob_before["sum"])
            else:
                assert have[user] == row


# -- bad seeds: a clear error, nothing written, the source unchanged -------------------------------------


@pytest.fixture(scope="module")
def totals(spark, tmp_path_factory) -> str:
    """A checkpoint of per-user totals (key ``_groupingexpression``, value ``count, sum``)."""
    return run_query(spark, _query("agg", "hdfs", A), tmp_path_factory.mktemp("totals") / "run")


def _refused(src: str, tmp_path: Path, error: type, match: str, **seed) -> None:
    before = digest(src)
    dst = tmp_path / "dst"
    with pytest.raises(error, match=match):
        state_reader.rewrite(src, str(dst), **seed)
    assert not dst.exists() or not any(dst.iterdir()), "something was written"
    assert digest(src) == before, "the source changed"


def _rows(src: str) -> pa.Table:
    return state_reader.read_state(src)


def _with_value(table: pa.Table, value: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index("value"), "value", value)


def test_a_missing_or_extra_column_is_refused(totals, tmp_path):
    rows = _rows(totals)
    _refused(totals, tmp_path, state_reader.EditSchemaError, "missing column value", upsert=rows.drop(["value"]))
    extra = rows.append_column("note", pa.array(["x"] * rows.num_rows))
    _refused(totals, tmp_path, state_reader.EditSchemaError, "extra column note", upsert=extra)


def test_a_missing_or_extra_field_is_refused(totals, tmp_path):
    rows = _rows(totals)
    value = rows.column("value").combine_chunks()
    fewer = pa.StructArray.from_arrays([value.field("count")], names=["count"])
    _refused(
        totals,
        tmp_path,
        state_reader.EditSchemaError,
        r"missing field value\.sum \(bigint\)",
        upsert=_with_value(rows, fewer),
    )
    more = pa.StructArray.from_arrays(
        [value.field("count"), value.field("sum"), value.field("count")], ["count", "sum", "x"]
    )
    _refused(totals, tmp_path, state_reader.EditSchemaError, r"extra field value\.x", upsert=_with_value(rows, more))


def test_a_value_that_does_not_fit_names_the_row_the_field_and_both_types(totals, tmp_path):
    rows = _rows(totals)
    value = rows.column("value").combine_chunks()
    text = pa.StructArray.from_arrays([value.field("count"), value.field("sum").cast(pa.string())], ["count", "sum"])
    _refused(
        totals,
        tmp_path,
        state_reader.EditValueError,
        r"upsert row 0: value\.sum is '-?\d+' \(string\), which the store's bigint does not hold",
        upsert=_with_value(rows, text),
    )
    sums = value.field("sum").cast(pa.float64()).to_pylist()
    sums[1] += 0.5
    fraction = pa.StructArray.from_arrays([value.field("count"), pa.array(sums)], ["count", "sum"])
    _refused(
        totals,
        tmp_path,
        state_reader.EditValueError,
        r"upsert row 1: value\.sum is -?\d+\.5 \(double\), which the store's bigint does not hold",
        upsert=_with_value(rows, fraction),
    )


def test_a_conversion_that_keeps_every_value_is_applied_and_said(spark, totals, tmp_path):
    """A narrower integer widened, and whole doubles (as a hand-built table holds numbers) taken as the
    store's bigint: written, and listed in the report."""
    rows = _rows(totals)
    value = rows.column("value").combine_chunks()
    converted = pa.StructArray.from_arrays(
        [value.field("count").cast(pa.float64()), value.field("sum").cast(pa.int32())], ["count", "sum"]
    )
    dst = str(tmp_path / "dst")
    report = state_reader.rewrite(totals, dst, upsert=_with_value(rows, converted))
    store = report.stores[0]
    assert store.widened == [
        "upsert field value.count: double converted to bigint, every value whole and in range",
        "upsert field value.sum: int converted to bigint, every value fits",
    ]
    assert report.summary()["stores"][0]["widened"] == store.widened
    assert_builtin_sees_same_state(spark, totals, dst, report.new_partitions)


def test_a_null_where_the_schema_forbids_one_is_refused(totals, tmp_path):
    rows = _rows(totals)
    nulls = pa.nulls(rows.num_rows, rows.schema.field("key").type)
    _refused(
        totals,
        tmp_path,
        state_reader.EditNullError,
        "null key",
        upsert=rows.set_column(0, "key", nulls),
    )
    no_value = _with_value(rows, pa.nulls(rows.num_rows, rows.schema.field("value").type))
    _refused(totals, tmp_path, state_reader.EditNullError, "null value", upsert=no_value)


def test_the_same_key_twice_is_refused(totals, tmp_path):
    rows = _rows(totals)
    twice = pa.concat_tables([rows, rows.slice(0, 1)])
    _refused(totals, tmp_path, state_reader.DuplicateEditKeyError, "same key", upsert=twice)
    _refused(
        totals, tmp_path, state_reader.DuplicateEditKeyError, "both upserted and deleted", upsert=rows, delete=rows
    )


def test_an_edit_is_checked_and_written_in_runs_with_errors_naming_rows_of_the_whole_table(
    spark, totals, tmp_path, monkeypatch
):
    """An edit's rows are checked, encoded and routed a run at a time (memory follows a run and a new partition,
    not all the rows given): the rows land alike, a bad row in a later run is named by its row in the whole table,
    and a key given in two runs is still refused."""
    from state_reader.core.rewrite import edit

    monkeypatch.setattr(edit, "_EDIT_ROWS", 2)
    rows = _rows(totals)
    assert rows.num_rows > 4
    dst = str(tmp_path / "in-runs")
    report = state_reader.rewrite(totals, dst, upsert=rows, num_partitions=3)
    assert report.summary()["stores"][0]["replaced"] == rows.num_rows
    assert_builtin_sees_same_state(spark, totals, dst, 3)
    last = rows.num_rows - 1
    key = rows.column("key").combine_chunks()
    mask = pa.array([i == last for i in range(rows.num_rows)])
    nulled = pa.StructArray.from_arrays([key.field(0)], fields=list(key.type), mask=mask)
    _refused(
        totals,
        tmp_path,
        state_reader.EditNullError,
        f"upsert row {last} has a null key",
        upsert=rows.set_column(0, "key", nulled),
    )
    twice = pa.concat_tables([rows, rows.slice(0, 1)])
    _refused(
        totals,
        tmp_path,
        state_reader.DuplicateEditKeyError,
        f"upsert rows 0 and {rows.num_rows} have the same key",
        upsert=twice,
    )
    _refused(
        totals,
        tmp_path,
        state_reader.DuplicateEditKeyError,
        "both upserted and deleted",
        upsert=rows.slice(0, 3),
        delete=rows.slice(2, 3).select(["key"]),
    )


def test_rows_for_a_store_or_operator_that_does_not_exist_are_refused(totals, tmp_path):
    rows = _rows(totals)
    _refused(totals, tmp_path, state_reader.UnknownEditStoreError, "operator 3", upsert=rows, operator_id=3)
    _refused(totals, tmp_path, state_reader.UnknownEditStoreError, "store 'nope'", upsert=rows, store_name="nope")
    _refused(
        totals, tmp_path, state_reader.UnknownEditStoreError, "for timers", upsert=rows, read_registered_timers=True
    )


def test_a_partition_id_is_checked_never_trusted(spark, totals, tmp_path):
    rows = _rows(totals)
    moved = rows.set_column(
        rows.schema.get_field_index("partition_id"),
        "partition_id",
        pc.subtract(pa.scalar(1, pa.int32()), rows.column("partition_id")),
    )
    _refused(totals, tmp_path, state_reader.EditPartitionError, "partition_id", upsert=moved)
    # without the column, or as read_state gave it, the rows go where their keys hash
    dst = str(tmp_path / "ok")
    report = state_reader.rewrite(totals, dst, upsert=rows.drop(["partition_id"]))
    assert report.summary()["stores"][0]["replaced"] == rows.num_rows
    assert_builtin_sees_same_state(spark, totals, dst, report.new_partitions)


def test_pandas_rows_as_read_state_gives_them(spark, totals, tmp_path):
    """A pandas DataFrame (ints as int64, structs as dicts) is typed by the store's schema."""
    frame = _rows(totals).to_pandas()
    dst = str(tmp_path / "dst")
    report = state_reader.rewrite(totals, dst, upsert=frame)
    assert report.summary()["stores"][0]["replaced"] == len(frame)
    assert_builtin_sees_same_state(spark, totals, dst, report.new_partitions)


def test_a_spark_dataframe_from_the_builtin_reader(spark, totals, tmp_path):
    df = spark.read.format("statestore").load(totals)
    dst = str(tmp_path / "dst")
    report = state_reader.rewrite(totals, dst, upsert=df)
    assert report.summary()["stores"][0]["replaced"] == df.count()
    assert_builtin_sees_same_state(spark, totals, dst, report.new_partitions)


def test_through_spark_the_rows_stay_on_the_executors_and_land_alike(spark, totals, tmp_path):
    """``spark=`` with a Spark DataFrame of rows: routed by Spark's own hash partitioning, applied by the
    task that writes each new partition; the same state and counts as the Spark-free rewrite."""
    before = digest(totals)
    rows = _rows(totals)
    users = pc.struct_field(rows.column("key"), [0])
    edited = rows.filter(pc.not_equal(users, "ann"))
    value = edited.column("value").combine_chunks()
    raised = pa.StructArray.from_arrays([pc.add(value.field("count"), 1), value.field("sum")], fields=list(value.type))
    seed = _with_value(edited, raised).drop(["partition_id"])
    gone = rows.filter(pc.equal(users, "ann")).select(["key"])
    local = state_reader.rewrite(totals, str(tmp_path / "local"), upsert=seed, delete=gone, num_partitions=3)
    through = state_reader.rewrite(
        totals,
        str(tmp_path / "spark"),
        upsert=spark.createDataFrame(seed.to_pandas()),
        delete=spark.createDataFrame(gone.to_pandas()),
        num_partitions=3,
        spark=spark,
    )
    assert through.summary()["stores"] == local.summary()["stores"]
    assert state_rows(spark, str(tmp_path / "spark")) == state_rows(spark, str(tmp_path / "local"))
    assert_builtin_sees_same_state(spark, str(tmp_path / "local"), str(tmp_path / "spark"), 3)
    # bad rows are refused before anything is written
    dst = tmp_path / "bad"
    with pytest.raises(state_reader.EditSchemaError, match="missing column value"):
        state_reader.rewrite(totals, str(dst), upsert=spark.createDataFrame(gone.to_pandas()), spark=spark)
    twice = pa.concat_tables([seed, seed.slice(0, 1)])
    with pytest.raises(state_reader.DuplicateEditKeyError, match="2 times"):
        state_reader.rewrite(totals, str(dst), upsert=spark.createDataFrame(twice.to_pandas()), spark=spark)
    assert not dst.exists() or not any(dst.iterdir())
    assert digest(totals) == before


# -- the seeding examples -----------------------------------------------------------------------------------


@pytest.mark.example("seed_aggregation.py")
def test_the_seeded_aggregation_example_runs(example):
    """examples/seed_aggregation.py: the history's totals (5 purchases, 50 spent each) carry on in the query."""
    lines = example.splitlines()
    assert "dry run: 5 customers gained, 5 replaced" in lines
    assert [line.strip() for line in lines if line.startswith("  c")] == [
        "c0: 7 purchases, 151 spent",
        "c5: 6 purchases, 150 spent",
        "c9: 6 purchases, 150 spent",
    ]


@pytest.mark.example("seed_dedup.py")
def test_the_seeded_dedup_example_runs(example):
    """examples/seed_dedup.py: ids delivered before the query started are not delivered again."""
    lines = example.splitlines()
    assert "seeded 100 delivered ids; the state holds 102" in lines
    assert lines[-1] == "the query resumed from the seeded checkpoint emits ids [200, 201]"
