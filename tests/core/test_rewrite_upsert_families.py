"""Rows written into stores with RocksDB column families (transformWithState variables and timers,
join state formats 3 and 4), judged by Spark: its built-in reader sees each variable as written, in
the partition Spark's hash gives its key, Spark's own entries beside them (TTL indexes, list counts,
the second timer index) are those Spark wrote, and a seeded query resumes as if it had seen the
seed's input."""

from __future__ import annotations

from functools import partial

import pyarrow as pa
import pytest

import state_reader
from state_reader.core.planner import join_column_families
from state_reader.core.rewrite import FamilyStoreRows, RewriteOptions, plan_rewrite
from state_reader.formats.rocksdb_encoding import column_family_ids, decode_keys, strip_column_family
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from state_reader.model.state_variables import timer_family
from tests.support.parallel import side_by_side
from tests.support.resume import add_input, digest, forget_unfinished_batch, resume_with_timers
from tests.support.streaming_queries import (
    ROCKSDB_CHANGELOG,
    ROW_CHECKSUM,
    T0,
    VERIFY_ROW_CHECKSUMS,
    Query,
    _events,
    _transform_with_state,
    run_query,
    session_confs,
)

# transformWithState (UnsafeRow and Avro: value, list and map variables, TTL, timers; tws_avro_types: every
# type Spark keeps in Avro state, a list with TTL, a map keyed by a struct; tws_checksum: every value of every
# column family framed with its row checksum), joins of formats 3 and 4
FAMILY_CASES = ["tws", "tws_avro", "tws_avro_types", "tws_checksum", "join_v3", "join_v4"]
# Spark's reader reads these back too (a second or two a read), verifying every row checksum; the others'
# entries are compared byte for byte, partition by partition, which is what Spark would read
BUILTIN_READS = {"tws", "tws_checksum", "join_v4"}


def _targets(checkpoint: str) -> dict[str, dict]:
    """What a seed names in the store (each variable and the timers, or each join store), with the
    read_state options that show its rows."""
    cp = CheckpointDir(Storage(checkpoint))
    meta = cp.operator_metadata(0, cp.latest_committed_batch())
    assert meta is not None
    if "transformWithState" not in (meta.operator_name or ""):
        return {name: {"store_name": name} for name in join_column_families(cp, meta)}
    names = [v["stateName"] for v in meta.properties["stateVariables"] if not v["stateName"].startswith("$")]
    timers = timer_family(meta)  # the timers by their column family's name
    return {n: {"state_var_name": n} for n in names} | ({timers: {"read_registered_timers": True}} if timers else {})


def _builtin_reads(checkpoint: str) -> list[dict[str, str]]:
    """The built-in reader's options that together show every variable and the timers, or both join sides."""
    targets = _targets(checkpoint)
    variables = [{"stateVarName": n} for n, options in targets.items() if "state_var_name" in options]
    if not variables:
        return [{"joinSide": "left"}, {"joinSide": "right"}]
    return [*variables, {"readRegisteredTimers": "true"}]


def _builtin_rows(spark, checkpoint: str, options: dict[str, str]) -> list[str]:
    """Spark's reader's rows, partition_id included; it verifies every row checksum a store keeps (a
    checksum that does not fit fails the read)."""
    with session_confs(spark, VERIFY_ROW_CHECKSUMS):
        rows = spark.read.format("statestore").options(**options).load(checkpoint).collect()
    return sorted(repr(r.asDict(recursive=True)) for r in rows)


def _store(checkpoint: str) -> FamilyStoreRows:
    rows = plan_rewrite(Storage(checkpoint), RewriteOptions(allow_uncommitted=True)).stores[0]
    assert isinstance(rows, FamilyStoreRows)
    return rows


def _entries(checkpoint: str) -> set[tuple[int, bytes, bytes]]:
    """Every entry of every column family (Spark's own too), as bytes, with its partition."""
    rows = _store(checkpoint)
    out = set()
    for pid in rows.plan.partitions:
        keys, values = rows.load(pid)
        for k0, kn, v0, vn in zip(keys.starts, keys.lengths, values.starts, values.lengths, strict=True):
            out.add((pid, bytes(keys.buf[k0 : k0 + kn]), bytes(values.buf[v0 : v0 + vn])))
    return out


def _ttl_index(checkpoint: str, variable: str) -> list[dict]:
    """The entries of a variable's TTL index: {expirationMs, elementKey}."""
    rows = _store(checkpoint)
    name = f"$ttl_{variable}"
    out = []
    for pid in rows.plan.partitions:
        keys, _ = rows.load(pid)
        mine = keys.take(column_family_ids(keys) == rows.mapping[name]) if len(keys.starts) else keys
        family = rows.families[name]
        avro = rows.plan.store_conf.avro
        out += decode_keys(strip_column_family(mine), family.key_schema, rows.specs[name], avro).to_pylist()
    return sorted(out, key=repr)


@pytest.mark.parametrize("name", FAMILY_CASES)
def test_every_variable_deleted_then_upserted_back(spark, checkpoints, tmp_path, name):
    """Every variable (and the timers) or join store deleted in one rewrite and upserted back, from the
    rows read_state gives, in another: Spark's reader sees the source's rows in the source's partitions,
    and every entry of every column family, Spark's own indexes too, is the source's byte for byte."""
    src = checkpoints(name)
    before = digest(src)
    targets = _targets(src)
    every = {target: state_reader.read_state(src, **options) for target, options in targets.items()}
    assert len(every) >= 4 and all(t.num_rows for t in every.values())
    empty, full = str(tmp_path / "empty"), str(tmp_path / "full")
    deleted = state_reader.rewrite(src, empty, delete=every, allow_uncommitted=True).stores[0]
    assert all(state_reader.read_state(empty, **options).num_rows == 0 for options in targets.values())
    written = state_reader.rewrite(empty, full, upsert=every).stores[0]
    # keys are counted (a list, a join key's rows: one key), the user's entries only
    assert sum(written.gained_per_partition) == sum(deleted.lost_per_partition) > 0
    assert sum(written.replaced_per_partition) == sum(written.lost_per_partition) == 0
    # checked right after the rewrites, before Spark's reader loads the source's stores
    assert digest(src) == before, "the source changed"
    assert _entries(full) == _entries(src)
    for options in _builtin_reads(src) if name in BUILTIN_READS else []:
        assert _builtin_rows(spark, full, options) == _builtin_rows(spark, src, options), options


def test_a_ttl_value_replaced_and_a_map_entry_deleted_keep_the_ttl_index_whole(checkpoints, tmp_path):
    """One value of a TTL variable replaced with a later expiration, one map entry deleted: the TTL
    index holds the new expiration of the one and nothing of the other; the counts say so."""
    src = checkpoints("tws")
    profile = state_reader.read_state(src, state_var_name="profile")
    row = profile.slice(0, 1).to_pylist()[0]
    row["value"]["value"]["visits"] = 99
    row["value"]["ttlExpirationMs"] += 60_000
    counters = state_reader.read_state(src, state_var_name="counters").slice(0, 1)
    dst = str(tmp_path / "dst")
    report = state_reader.rewrite(
        src,
        dst,
        upsert={"profile": pa.Table.from_pylist([row], schema=profile.schema)},
        delete={"counters": counters},
        allow_uncommitted=True,
    ).summary()["stores"][0]
    assert (report["gained"], report["replaced"], report["lost"]) == (0, 1, 1)
    after = state_reader.read_state(dst, state_var_name="profile")
    assert row in after.to_pylist()
    assert {(r["key"]["grp"], r["value"]["ttlExpirationMs"]) for r in after.to_pylist()} == {
        (e["elementKey"]["grp"], e["expirationMs"]) for e in _ttl_index(dst, "profile")
    }
    gone = counters.to_pylist()[0]
    element = {"key": gone["key"], "userKey": gone["user_map_key"]}
    assert element in [e["elementKey"] for e in _ttl_index(src, "counters")]
    assert element not in [e["elementKey"] for e in _ttl_index(dst, "counters")]
    entries = state_reader.read_state(src, state_var_name="counters").num_rows
    assert state_reader.read_state(dst, state_var_name="counters").num_rows == entries - 1


def test_a_list_with_ttl_replaced_is_indexed_at_its_earliest_expiration(checkpoints, tmp_path):
    """A list variable with TTL (Avro): one key's list replaced by two elements; the TTL index holds
    that key once, at the earlier of their expirations."""
    src = checkpoints("tws_avro_types")
    items = state_reader.read_state(src, state_var_name="items")
    key = items.column("key")[0].as_py()
    rows = [r for r in items.to_pylist() if r["key"] == key][:2]
    rows[0]["list_element"]["ttlExpirationMs"], rows[1]["list_element"]["ttlExpirationMs"] = 2 * T0 * 1000, T0 * 1000
    dst = str(tmp_path / "dst")
    report = state_reader.rewrite(
        src, dst, upsert={"items": pa.Table.from_pylist(rows, schema=items.schema)}, allow_uncommitted=True
    )
    assert report.summary()["stores"][0]["replaced"] == 1
    after = [r for r in state_reader.read_state(dst, state_var_name="items").to_pylist() if r["key"] == key]
    assert after == [{**r, "partition_id": after[0]["partition_id"]} for r in rows]
    index = _ttl_index(dst, "items")
    assert [e["expirationMs"] for e in index if e["elementKey"] == key] == [T0 * 1000]
    assert len(index) == len(_ttl_index(src, "items"))


def test_rows_that_do_not_fit_a_variable_are_refused(checkpoints):
    """A variable the query does not have (the error names those it has), a key both upserted and
    deleted, a TTL value without its expiration, a map delete without the user key."""
    src = checkpoints("tws")
    profile = state_reader.read_state(src, state_var_name="profile")

    def refused(error: type, match: str, **seed) -> None:
        with pytest.raises(error, match=match):
            state_reader.rewrite(src, dry_run=True, allow_uncommitted=True, **seed)

    refused(
        state_reader.UnknownEditStoreError,
        r"profile \(ValueState, TTL\).*events \(ListState\)",
        upsert={"nope": profile},
    )
    refused(state_reader.InvalidOptionError, "name the state variable", upsert=profile)
    refused(
        state_reader.DuplicateEditKeyError,
        "both upserted and deleted",
        upsert={"profile": profile},
        delete={"profile": profile},
    )
    value = profile.column("value").combine_chunks()
    no_expiry = pa.StructArray.from_arrays([value.field(0), pa.nulls(len(value), pa.int64())], fields=list(value.type))
    refused(
        state_reader.EditNullError,
        "expiration",
        upsert=profile.set_column(1, "value", no_expiry),
        state_var_name="profile",
    )
    # a map's grouping key alone is a whole map deleted; a key of fields the store does not have matches nothing
    # and is refused, not taken for an empty match
    counters = state_reader.read_state(src, state_var_name="counters")
    for names in (["group"], ["grp", "extra"]):
        stray = pa.table({"key": pa.StructArray.from_arrays([pa.array(["a"])] * len(names), names=names)})
        refused(state_reader.EditSchemaError, "does not have the store's fields", delete={"counters": stray})
        refused(
            state_reader.EditSchemaError,
            "does not have the store's fields",
            delete={"counters": stray.append_column("user_map_key", counters.column("user_map_key").slice(0, 1))},
        )
    refused(
        state_reader.EditNullError,
        "null user_map_key",
        delete=counters.select(["key"]).append_column(
            "user_map_key", pa.nulls(counters.num_rows, counters.schema.field("user_map_key").type)
        ),
        state_var_name="counters",
    )


# -- a map deleted by its grouping key alone ----------------------------------------------------------------


def _grouping(table: pa.Table, keys: list) -> pa.Table:
    """Delete rows naming grouping keys alone (no user_map_key): every entry of the map under each."""
    return pa.table({"key": pa.array(keys, type=table.schema.field("key").type)})


@pytest.mark.parametrize("name", ["tws", "tws_avro"])
def test_a_map_deleted_by_its_grouping_key_loses_every_entry_and_their_ttl_index_entries(
    spark, checkpoints, tmp_path, name
):
    """A delete of a map variable with ``key`` alone takes out every entry of that grouping key and its TTL
    index entries (stale ones too), nothing else: Spark's reader sees the map less those entries, and the
    other variables as they were. Upserting entries of the same grouping key in the same rewrite makes them
    the map's whole content (the others are lost, those given replaced or gained)."""
    src = checkpoints(name)
    counters = state_reader.read_state(src, state_var_name="counters")
    rows = counters.to_pylist()
    gone = rows[0]["key"]
    theirs = [r for r in rows if r["key"] == gone]
    assert 1 < len(theirs) < len(rows)
    dst = str(tmp_path / "dst")
    report = state_reader.rewrite(
        src, dst, delete={"counters": _grouping(counters, [gone])}, allow_uncommitted=True
    ).summary()["stores"][0]
    assert (report["gained"], report["replaced"], report["lost"]) == (0, 0, len(theirs))
    after = state_reader.read_state(dst, state_var_name="counters").to_pylist()
    assert sorted(after, key=repr) == sorted((r for r in rows if r["key"] != gone), key=repr)
    index = _ttl_index(src, "counters")
    assert any(e["elementKey"]["key"] == gone for e in index)
    assert _ttl_index(dst, "counters") == [e for e in index if e["elementKey"]["key"] != gone]
    # every other column family's entries are the source's, byte for byte
    mapping = _store(src).mapping
    mine = {mapping["counters"], mapping["$ttl_counters"]}

    def others(checkpoint: str) -> set:
        return {e for e in _entries(checkpoint) if int.from_bytes(e[1][:2], "little", signed=True) not in mine}

    assert others(dst) == others(src)
    if name in BUILTIN_READS:
        builtin = _builtin_rows(spark, dst, {"stateVarName": "counters"})
        want = [r for r in _builtin_rows(spark, src, {"stateVarName": "counters"}) if repr(gone) not in r]
        assert builtin == want and len(want) == len(after)
    # a grouping key deleted and one of its entries upserted: that entry is the whole map
    kept = pa.Table.from_pylist(theirs[:1], schema=counters.schema)
    again = str(tmp_path / "again")
    report = state_reader.rewrite(
        src, again, upsert={"counters": kept}, delete={"counters": _grouping(counters, [gone])}, allow_uncommitted=True
    ).summary()["stores"][0]
    assert (report["gained"], report["replaced"], report["lost"]) == (0, 1, len(theirs) - 1)
    now = [r for r in state_reader.read_state(again, state_var_name="counters").to_pylist() if r["key"] == gone]
    assert now == theirs[:1]
    assert [e for e in _ttl_index(again, "counters") if e["elementKey"]["key"] == gone] == [
        {
            "expirationMs": theirs[0]["user_map_value"]["ttlExpirationMs"],
            "elementKey": {"key": gone, "userKey": theirs[0]["user_map_key"]},
        }
    ]


def test_maps_deleted_by_grouping_key_resume_with_those_maps_empty(spark, tmp_path):
    """Spark resumes a checkpoint whose map lost a grouping key's entries as a query that never counted
    there: its output is the original's (the map does not feed it) and the map of that key holds what the
    new input counted alone, every other key's what the original counted."""
    reference = run_query(spark.newSession(), _tws(A, {}), tmp_path / "ref")
    forget_unfinished_batch(reference)
    counters = state_reader.read_state(reference, state_var_name="counters")
    gone = counters.column("key")[0].as_py()
    deleted = str(tmp_path / "deleted")
    state_reader.rewrite(reference, deleted, delete={"counters": _grouping(counters, [gone])})
    add_input(tmp_path / "ref" / "input", B)
    # one after the other: both read the same input
    expected = resume_with_timers(spark.newSession(), _tws(B, {}), reference, tmp_path / "ref" / "input", len(B))
    got = resume_with_timers(spark.newSession(), _tws(B, {}), deleted, tmp_path / "ref" / "input", len(B))
    assert got == expected

    def counted(checkpoint: str) -> dict[tuple[str, str], int]:
        """Spark's reader's view of the map: (group, tag) -> count."""
        rows = spark.read.format("statestore").option("stateVarName", "counters").load(checkpoint).collect()
        return {(r.key.grp, r.user_map_key.tag): r.user_map_value.value.cnt for r in rows}

    resumed, fresh = counted(reference), counted(deleted)
    group = gone["grp"]
    in_b: dict[tuple[str, str], int] = {}
    for row in (r for batch in B for r in batch if r["grp"] == group):
        in_b[(group, row["tag"])] = in_b.get((group, row["tag"]), 0) + 1
    in_b.pop((group, "close"), None)  # the processor removes it in the batch that sees it
    assert in_b and {k: v for k, v in fresh.items() if k[0] == group} == in_b
    assert {k: v for k, v in fresh.items() if k[0] != group} == {k: v for k, v in resumed.items() if k[0] != group}
    assert any(k[0] == group and v > in_b.get(k, 0) for k, v in resumed.items()), "the original went on counting"


# -- a seeded transformWithState query resumes as if it had seen the seed's input ------------------------

A = _events()[:2]
B = _events()[2:4]  # the second closes a group (its tag is "close"): the processor clears its state
# a batch the processor sees nothing of (filtered out before it): the checkpoint the seed goes into
NOTHING = [[{"ts": T0, "user": "nobody", "grp": "a", "n": -1, "amount": 0, "price": 0.0, "ok": True, "tag": "x"}]]


def _tws(batches: list[list[dict]], confs: dict[str, str]) -> Query:
    return Query(
        lambda df: _transform_with_state(df.where("n >= 0")),
        confs={**ROCKSDB_CHANGELOG, **confs},
        processing_time="1 second",
        batches=lambda: [list(b) for b in batches],
    )


@pytest.mark.parametrize("confs", [{}, {**ROW_CHECKSUM, **VERIFY_ROW_CHECKSUMS}], ids=["plain", "row_checksums"])
def test_a_seeded_transform_with_state_query_resumes_as_if_it_had_seen_the_seeds_input(spark, tmp_path, confs):
    """Inputs A then B, against B alone on a checkpoint seeded with every variable and timer A left:
    the same output, batch by batch (with row checksums, Spark verifies every row it reads)."""
    reference, fresh = side_by_side(
        partial(run_query, spark.newSession(), _tws(A, confs), tmp_path / "ref"),
        partial(run_query, spark.newSession(), _tws(NOTHING, confs), tmp_path / "fresh"),
    )
    for checkpoint in (reference, fresh):
        forget_unfinished_batch(checkpoint)
    targets = _targets(reference)
    seed = {target: state_reader.read_state(reference, **options) for target, options in targets.items()}
    assert all(state_reader.read_state(fresh, **options).num_rows == 0 for options in targets.values())
    seeded = str(tmp_path / "seeded")
    report = state_reader.rewrite(fresh, seeded, upsert=seed).stores[0]
    assert sum(report.gained_per_partition) > 0
    add_input(tmp_path / "ref" / "input", B)
    add_input(tmp_path / "fresh" / "input", B)
    expected, got = side_by_side(
        partial(resume_with_timers, spark.newSession(), _tws(B, confs), reference, tmp_path / "ref" / "input", len(B)),
        partial(resume_with_timers, spark.newSession(), _tws(B, confs), seeded, tmp_path / "fresh" / "input", len(B)),
    )
    assert got == expected

    def visits(checkpoint: str) -> dict[str, int]:
        rows = state_reader.read_state(checkpoint, state_var_name="profile").to_pylist()
        return {r["key"]["grp"]: r["value"]["value"]["visits"] for r in rows}

    # the counts went on from A's (the expirations differ: each run's clock sets them)
    assert visits(seeded) == visits(reference) and max(visits(seeded).values()) > len(B[0])
