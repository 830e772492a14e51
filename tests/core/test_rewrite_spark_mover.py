"""The rewrite run by Spark (``state_reader.rewrite(..., spark=spark)``), judged as the Spark-free
rewrite is: the query restarted from it produces what it produces restarted from the original,
Spark's built-in reader sees the same state there, each row in the partition Spark's own hash()
assigns; and its report (and, for HDFS-backed state, every file) is the Spark-free rewrite's."""

from __future__ import annotations

import dataclasses
import shutil

import pyarrow as pa
import pytest

import state_reader
from state_reader.core.rewrite import RewriteReport
from state_reader.io.destination import INCOMPLETE_PREFIX
from state_reader.model.checkpoint import JOIN_STORES
from tests.support.resume import (
    add_input,
    assert_builtin_sees_same_state,
    copy_as_another_query,
    digest,
    new_batches,
    resume_each,
    state_rows,
    stores,
)
from tests.support.streaming_queries import QUERIES, run_query

DROP_ONE_JOIN_KEY = object()  # stands for a filter matching one join key the checkpoint holds

# every old partition has 2 partitions (the suite's spark.sql.shuffle.partitions)
CASES = [
    ("agg_window", {"num_partitions": 5}),
    ("session_window", {"num_partitions": 3, "provider": "rocksdb"}),
    ("rocksdb_cl_multi", {"num_partitions": 1}),
    ("join_inner", {"num_partitions": 3, "drop_keys": DROP_ONE_JOIN_KEY}),
    ("limit", {"num_partitions": 3}),
]


def _one_join_key(checkpoint: str) -> str:
    """A filter matching one join key held in the state (in every store of the join)."""
    table = state_reader.read_state(checkpoint, store_name="left-keyToNumValues")
    field = table.schema.field("key").type[0].name
    value = next(v[field] for v in table.column("key").to_pylist() if v[field] is not None)
    return f"{field} = '{value}'" if isinstance(value, str) else f"{field} = {value!r}"


def _comparable(report: RewriteReport | dict) -> dict:
    """A report as plain data without what differs between two rewrites of the same input: the
    destination, and the bytes of the files (RocksDB names its SST files afresh each time)."""
    summary = report.summary() if isinstance(report, RewriteReport) else dict(report)
    return {k: v for k, v in summary.items() if k not in ("destination", "bytes")}


def assert_same_report(got: RewriteReport, want: RewriteReport) -> None:
    """The same rows, bytes and dropped rows, store by store and partition by partition."""
    assert got.stores == want.stores
    assert _comparable(got) == _comparable(want)
    assert got.files == want.files
    if got.provider == "hdfs":  # snapshots are the same bytes (RocksDB's SST names are random)
        assert got.bytes == want.bytes


@pytest.mark.parametrize(("name", "options"), CASES, ids=[c[0] for c in CASES])
def test_resume_oracle_through_spark(spark, own_run, tmp_path, name, options):
    query = QUERIES[name]
    src, input_dir = own_run
    before = digest(src)
    options = dict(options)
    if options.get("drop_keys") is DROP_ONE_JOIN_KEY:
        options["drop_keys"] = _one_join_key(src)
    free, dst = str(tmp_path / "free"), str(tmp_path / "dst")
    want = state_reader.rewrite(src, free, **options)
    got = state_reader.rewrite(src, dst, spark=spark, **options)
    assert_same_report(got, want)
    assert digest(src) == before, "the source changed"
    if got.provider == "hdfs":
        assert digest(dst) == digest(free), "the snapshots differ from the Spark-free rewrite's"
    dropping = "drop_keys" in options
    if dropping:
        assert sum(s.dropped for s in got.stores) >= 4  # the key, from each of the join's four stores
    # with keys dropped, the state to compare with is the Spark-free rewrite's (which test_rewrite judges)
    reference = free if dropping else src
    n = got.new_partitions
    assert_builtin_sees_same_state(spark, reference, dst, n)

    add_input(input_dir, new_batches(query))
    copy = str(tmp_path / "reference")
    copy_as_another_query(reference, copy)
    expected, resumed = resume_each(spark, query, [copy, dst], input_dir)
    assert expected, "the restarted query ran no batch"
    assert resumed == expected
    for op, store in stores(copy):
        options = {"operatorId": op, "storeName": store}
        assert state_rows(spark, dst, **options) == state_rows(spark, copy, **options), (op, store)


@pytest.mark.cluster
def test_through_spark_on_local_cluster(spark, tmp_path, local_cluster):
    """Executors in their own JVMs and Python workers: each reads and writes its partitions itself, and rows
    written into a store go from a DataFrame to the partitions' tasks, never through the driver."""
    import pyarrow.parquet as pq

    query = QUERIES["agg_window"]
    src = run_query(spark, query, tmp_path / "run")
    input_dir = tmp_path / "run" / "input"
    options = {"num_partitions": 4}
    dst = str(tmp_path / "dst")
    got = local_cluster.ask({"rewrite": src, "destination": dst, "options": options})
    free = str(tmp_path / "free")
    want = state_reader.rewrite(src, free, **options)
    assert got["stores"] == [dataclasses.asdict(s) for s in want.stores]
    assert _comparable(got["summary"]) == _comparable(want) and got["files"] == want.files
    assert digest(dst) == digest(free)
    assert_builtin_sees_same_state(spark, src, dst, 4)

    # one key deleted, the others upserted (their values doubled), read there from Parquet files
    rows = state_reader.read_state(src).drop(["partition_id"])
    gone, seed = rows.slice(0, 1).select(["key"]), _doubled_counts(rows.slice(1))
    pq.write_table(seed, tmp_path / "seed.parquet")
    pq.write_table(gone, tmp_path / "gone.parquet")
    edit = {"num_partitions": 3, "upsert_parquet": str(tmp_path / "seed.parquet")}
    edit["delete_parquet"] = str(tmp_path / "gone.parquet")
    cluster = local_cluster.ask({"rewrite": src, "destination": str(tmp_path / "seeded"), "options": edit})
    local = state_reader.rewrite(src, str(tmp_path / "seeded-free"), upsert=seed, delete=gone, num_partitions=3)
    assert cluster["summary"]["stores"] == local.summary()["stores"]
    store = local.summary()["stores"][0]
    assert (store["gained"], store["replaced"], store["lost"]) == (0, seed.num_rows, 1)
    names = ("seeded", "seeded-free")
    written = [sorted(map(str, state_reader.read_state(str(tmp_path / n)).to_pylist())) for n in names]
    assert written[0] == written[1]

    add_input(input_dir, new_batches(query))
    copy = str(tmp_path / "src-copy")
    copy_as_another_query(src, copy)
    expected, resumed = resume_each(spark, query, [copy, dst], input_dir)
    assert expected and resumed == expected


def _doubled_counts(rows):
    """``rows`` with the value's first field (a count) doubled."""
    import pyarrow as pa
    import pyarrow.compute as pc

    value = rows.column("value").combine_chunks()
    fields = [value.field(i) for i in range(value.type.num_fields)]
    fields[0] = pc.multiply(fields[0], 2).cast(fields[0].type)
    doubled = pa.StructArray.from_arrays(fields, fields=list(value.type), mask=pc.is_null(value))
    return rows.set_column(rows.schema.get_field_index("value"), "value", doubled)


def test_failure_part_way_leaves_destination_incomplete(spark, checkpoints, tmp_path):
    """A damaged delta fails a task: the rewrite raises the worker's own error as the cause, as the
    Spark-free rewrite does, and the destination stays marked incomplete."""
    src = checkpoints("agg_window")
    damaged = tmp_path / "damaged"
    shutil.copytree(src, damaged)
    for f in (damaged / "state" / "0" / "1").rglob("*.delta"):
        f.write_bytes(b"not a delta")
    dst = tmp_path / "dst"
    with pytest.raises(state_reader.RewriteFailedError, match="incomplete") as caught:
        state_reader.rewrite(str(damaged), str(dst), num_partitions=3, spark=spark)
    assert (dst / "metadata").read_bytes().startswith(INCOMPLETE_PREFIX)
    assert not (dst / "commits").exists()
    with pytest.raises(state_reader.RewriteFailedError) as free:
        state_reader.rewrite(str(damaged), str(tmp_path / "free"), num_partitions=3)
    assert type(caught.value.__cause__) is type(free.value.__cause__)
    assert "state/0/1/" in str(caught.value)
    # a dry run with a session is the Spark-free dry run (nothing to write)
    dry = state_reader.rewrite(src, None, num_partitions=3, dry_run=True, spark=spark)
    assert dry.dry_run and dry.stores == state_reader.rewrite(src, None, num_partitions=3, dry_run=True).stores


def test_column_families_through_spark(spark, checkpoints, tmp_path):
    """A store with column families (join state format 3: four stores in one) is routed by its
    grouping key as one struct column: every row lands where the Spark-free rewrite puts it."""
    src = checkpoints("join_v3")
    free, dst = str(tmp_path / "free"), str(tmp_path / "dst")
    want = state_reader.rewrite(src, free, num_partitions=3)
    got = state_reader.rewrite(src, dst, num_partitions=3, spark=spark)
    assert_same_report(got, want)

    def rows(checkpoint: str, side: str) -> list[str]:
        df = spark.read.format("statestore").option("joinSide", side).load(checkpoint)
        return sorted(repr(r.asDict(recursive=True)) for r in df.collect())

    for side in ("left", "right"):
        assert rows(dst, side) == rows(free, side), side  # partition_id included
        assert rows(dst, side), side


def _flag_transform():
    """A transform adding one value field (values and schema files change). Made in a function, as
    in a notebook: Spark ships it by value, since executors cannot import this test module."""
    import pyarrow as pa

    def with_flag(batch: pa.RecordBatch) -> pa.RecordBatch:
        value = batch.column("value")
        fields = [value.type.field(i) for i in range(value.type.num_fields)]
        new_value = pa.StructArray.from_arrays(
            [*(value.field(i) for i in range(len(fields))), pa.array([True] * len(value), pa.bool_())],
            fields=[*fields, pa.field("flag", pa.bool_())],
        )
        return pa.RecordBatch.from_arrays([batch.column("key"), new_value], names=["key", "value"])

    return with_flag


def test_transform_runs_on_executors(spark, checkpoints, tmp_path):
    """``transform=`` goes to the executors with the rows: the same files as the Spark-free rewrite's."""
    src = checkpoints("agg_window")
    free, dst = str(tmp_path / "free"), str(tmp_path / "dst")
    transform = _flag_transform()
    want = state_reader.rewrite(src, free, num_partitions=3, transform=transform)
    got = state_reader.rewrite(src, dst, num_partitions=3, transform=transform, spark=spark)
    assert_same_report(got, want)
    assert digest(dst) == digest(free)
    assert state_reader.read_state(dst).column("value").type.field("flag").type == "bool"


def _frame(spark, checkpoint: str, name: str, options: dict, table):
    """Rows of one variable or join store as a Spark DataFrame: Spark's own reader's for a join store,
    read_state's table (converted by Spark) for a transformWithState variable."""
    if "store_name" in options:
        return spark.read.format("statestore").option("storeName", name).load(checkpoint)
    return spark.createDataFrame(table)


@pytest.mark.parametrize("name", ["tws", "tws_avro", "join_v3", "join_v4"])
def test_column_families_deleted_and_upserted_back_through_spark(spark, checkpoints, tmp_path, name):
    """Every variable (and the timers) or join store deleted through Spark, then upserted back from Spark
    DataFrames: the same entries, byte for byte, and the same counts as the Spark-free rewrites'; Spark's
    reader sees the source's rows. A key given twice, or upserted and deleted, is refused before any write."""
    from tests.core.test_rewrite_upsert_families import _builtin_reads, _builtin_rows, _entries, _store, _targets

    src = checkpoints(name)
    before = digest(src)
    targets = _targets(src)
    every = {target: state_reader.read_state(src, **options) for target, options in targets.items()}
    frames = {target: _frame(spark, src, target, targets[target], every[target]) for target in targets}
    empty_free, full_free = str(tmp_path / "empty-free"), str(tmp_path / "full-free")
    empty, full = str(tmp_path / "empty"), str(tmp_path / "full")
    want = state_reader.rewrite(src, empty_free, delete=every, allow_uncommitted=True)
    got = state_reader.rewrite(src, empty, delete=frames, allow_uncommitted=True, spark=spark)
    assert_same_report(got, want)
    assert sum(got.stores[0].lost_per_partition) > 0
    assert _entries(empty) == _entries(empty_free)
    want = state_reader.rewrite(empty_free, full_free, upsert=every)
    got = state_reader.rewrite(empty, full, upsert=frames, spark=spark)
    assert got.stores == want.stores and got.files == want.files  # from the sources written above
    assert sum(got.stores[0].gained_per_partition) == sum(want.stores[0].gained_per_partition) > 0
    assert _entries(full) == _entries(full_free) == _entries(src)
    for options in _builtin_reads(src):
        assert _builtin_rows(spark, full, options) == _builtin_rows(spark, src, options), options

    # a row of a variable (or join store) that keeps one value per key given twice (format 4 keeps lists
    # only), and a key upserted and deleted
    lists = _store(src).multi_value
    single = [t for t, table in every.items() if "value" in table.column_names and t not in lists]
    assert single or name == "join_v4"
    bad = tmp_path / "bad"
    for one in single[:1]:
        twice = frames[one].unionByName(frames[one].limit(1))
        with pytest.raises(state_reader.DuplicateEditKeyError):
            state_reader.rewrite(src, str(bad), upsert={one: twice}, allow_uncommitted=True, spark=spark)
    one = next(iter(every))
    with pytest.raises(state_reader.DuplicateEditKeyError):
        state_reader.rewrite(
            src, str(bad), upsert={one: frames[one]}, delete={one: frames[one]}, allow_uncommitted=True, spark=spark
        )
    assert not bad.exists() or not any(bad.iterdir())
    assert digest(src) == before, "the source changed"


@pytest.mark.parametrize("name", ["join_inner", "join_v3"])
def test_join_side_through_spark(spark, checkpoints, tmp_path, name):
    """A join side's rows from Spark DataFrames (``join_side=``): deleted and upserted back, and one join
    key's rows shrunk while another key is deleted (the source's counts read where the rows are), the
    same state and counts as the Spark-free rewrites'; a key upserted and deleted is refused before any write."""
    from tests.core.test_rewrite_upsert_join import SIDES, _spark_rows, _with_matched

    src = checkpoints(name)
    before = digest(src)
    sides = {side: _with_matched(src, side) for side in SIDES}

    def both(source: str, out: str, **options) -> str:
        free = state_reader.rewrite(source, str(tmp_path / f"{out}-free"), **options)
        frames = {what: spark.createDataFrame(options[what]) for what in ("upsert", "delete") if what in options}
        got = state_reader.rewrite(source, str(tmp_path / out), **{**options, **frames}, spark=spark)
        assert got.stores == free.stores and got.files == free.files, out
        for side in SIDES:
            want = _spark_rows(spark, str(tmp_path / f"{out}-free"), joinSide=side)
            assert _spark_rows(spark, str(tmp_path / out), joinSide=side) == want, (out, side)
        return str(tmp_path / out)

    emptied = both(src, "emptied", delete=sides["left"].select(["key"]), join_side="left")
    assert state_reader.read_state(emptied, join_side="left").num_rows == 0
    back = both(emptied, "back", upsert=sides["left"], join_side="left")
    for store in JOIN_STORES:
        assert _spark_rows(spark, back, storeName=store) == _spark_rows(spark, src, storeName=store), store

    rows = sides["right"]
    keys = [repr(k) for k in rows.column("key").to_pylist()]
    twice = next(k for k in keys if keys.count(k) >= 2)
    other = next(k for k in keys if k != twice)
    shrunk = rows.filter(pa.array([k == twice for k in keys])).slice(1)
    gone = rows.filter(pa.array([k == other for k in keys])).select(["key"])
    edited = both(src, "shrunk", upsert=shrunk, delete=gone, join_side="right")
    assert state_reader.read_state(edited, join_side="right").num_rows == rows.num_rows - 1 - gone.num_rows

    bad = tmp_path / "bad"
    with pytest.raises(state_reader.DuplicateEditKeyError):
        up, down = spark.createDataFrame(shrunk), spark.createDataFrame(shrunk.select(["key"]))
        state_reader.rewrite(src, str(bad), upsert=up, delete=down, join_side="right", spark=spark)
    assert not bad.exists() or not any(bad.iterdir())
    assert digest(src) == before, "the source changed"


def test_maps_deleted_by_grouping_key_through_spark(spark, checkpoints, tmp_path):
    """A map variable's grouping keys deleted alone (no user_map_key), from a Spark DataFrame: the entries and
    the counts of the Spark-free rewrite, the TTL index entries of those keys gone with them."""
    from tests.core.test_rewrite_upsert_families import _entries, _grouping

    src = checkpoints("tws")
    counters = state_reader.read_state(src, state_var_name="counters")
    groups = list({repr(k): k for k in counters.column("key").to_pylist()}.values())[:2]
    keys = _grouping(counters, groups)
    free, dst = str(tmp_path / "free"), str(tmp_path / "dst")
    want = state_reader.rewrite(src, free, delete={"counters": keys}, allow_uncommitted=True)
    got = state_reader.rewrite(
        src, dst, delete={"counters": spark.createDataFrame(keys)}, allow_uncommitted=True, spark=spark
    )
    assert_same_report(got, want)
    assert sum(got.stores[0].lost_per_partition) == sum(1 for k in counters.column("key").to_pylist() if k in groups)
    assert _entries(dst) == _entries(free) != _entries(src)
