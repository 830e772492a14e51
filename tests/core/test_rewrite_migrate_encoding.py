"""The store conf migrations (the encoding, UnsafeRow <-> Avro; row checksums; the merge operator's list
delimiter) on the rows of real checkpoints, without Spark's reader: every row of every column family (Spark's
TTL indexes, list counts and both timer indexes too) turned into the other value and back is the source's bytes
again, and the reader sees the same state under both values (the resume oracle in
tests/oracles/test_rewrite_store_formats.py judges the new bytes by Spark)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import state_reader
from state_reader.core.rewrite import RewriteOptions, plan_rewrite
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from state_reader.model.conf import (
    CONF_ENCODING,
    CONF_MERGE_OPERATOR,
    CONF_PROVIDER,
    CONF_ROW_CHECKSUM,
    FROZEN,
    recorded_conf,
)
from state_reader.model.operators import TRANSFORM_WITH_STATE
from tests.support.paths import GOLDEN
from tests.support.resume import stores
from tests.support.streaming_queries import QUERIES

# value, list and map variables with TTL and processing-time timers (both encodings, and with row checksums),
# every type Avro state keeps, lists with TTL (their count families), event-time timers (range-scan in Avro)
ENCODED = ["tws", "tws_avro", "tws_checksum", "tws_avro_types", "tws_lists_rocksdb", "tws_avro_event_time"]


def _encoding(checkpoint: str) -> str:
    cp = CheckpointDir(Storage(checkpoint))
    return str(recorded_conf(cp.offset_conf(cp.latest_committed_batch()), CONF_ENCODING)[0])


def _variables(checkpoint: str) -> list[dict]:
    """The read_state options that show every variable and the timers."""
    cp = CheckpointDir(Storage(checkpoint))
    meta = cp.operator_metadata(0, cp.latest_committed_batch())
    assert meta is not None
    names = [v["stateName"] for v in meta.properties["stateVariables"] if not v["stateName"].startswith("$")]
    timers = any(v["stateName"].startswith("$") for v in meta.properties["stateVariables"])
    return [{"state_var_name": n} for n in names] + ([{"read_registered_timers": True}] if timers else [])


def stored_rows(checkpoint: str) -> set[tuple[bytes, bytes]]:
    """Every (key, value) of the checkpoint's stores as stored (column family ids included), at its last
    committed batch (a query on a processing-time trigger stops while planning the next)."""
    out = set()
    for rows in plan_rewrite(Storage(checkpoint), RewriteOptions(allow_uncommitted=True)).stores:
        for pid in rows.plan.partitions:
            keys, values = rows.load(pid)
            for k0, kn, v0, vn in zip(keys.starts, keys.lengths, values.starts, values.lengths, strict=True):
                out.add((bytes(keys.buf[k0 : k0 + kn]), bytes(values.buf[v0 : v0 + vn])))
    return out


def _shown(checkpoint: str, options: dict) -> list[str]:
    return sorted(map(repr, state_reader.read_state(checkpoint, **options).to_pylist()))


def test_the_encoding_shapes_transform_with_state_alone():
    assert FROZEN[CONF_ENCODING].operators == TRANSFORM_WITH_STATE
    assert FROZEN[CONF_ENCODING].supported


@pytest.mark.parametrize("name", ENCODED)
def test_every_row_in_the_other_encoding_and_back_is_the_source(checkpoints, tmp_path, name):
    source = checkpoints(name)
    old = _encoding(source)
    new = "unsaferow" if old == "avro" else "avro"
    there, back = str(tmp_path / "there"), str(tmp_path / "back")
    report = state_reader.rewrite(source, there, confs={CONF_ENCODING: new}, allow_uncommitted=True)
    assert [(c["old"], c["new"], c["migration"]) for c in report.confs] == [(old, new, "transcode")]
    state_reader.rewrite(there, back, confs={CONF_ENCODING: old})
    assert _encoding(there) == new and _encoding(back) == old
    original, moved = stored_rows(source), stored_rows(there)
    assert stored_rows(back) == original
    # every key and value is other bytes in the other encoding (Spark's own families included)
    assert len(moved) == len(original) and not {k for k, _ in moved} & {k for k, _ in original}
    for options in _variables(source):
        assert _shown(there, options) == _shown(source, options), options


def test_dry_run_says_what_changes_and_writes_nothing(checkpoints, tmp_path):
    report = state_reader.rewrite(
        checkpoints("tws"), str(tmp_path / "dst"), confs={CONF_ENCODING: "avro"}, dry_run=True, allow_uncommitted=True
    )
    assert [(c["conf"], c["old"], c["new"], c["changed"]) for c in report.confs] == [
        (CONF_ENCODING, "unsaferow", "avro", True)
    ]
    assert not (tmp_path / "dst").exists()


def test_avro_for_other_operators_is_not_applicable(checkpoints, tmp_path):
    with pytest.raises(state_reader.UnsupportedConfChangeError, match=r"not applicable.*transformWithState"):
        state_reader.rewrite(checkpoints("rocksdb_agg_window"), str(tmp_path / "dst"), confs={CONF_ENCODING: "avro"})
    assert not (tmp_path / "dst").exists()


def test_avro_needs_rocksdb(checkpoints, tmp_path):
    # a transformWithState checkpoint is on RocksDB; asking for HDFS with Avro is refused by the provider first
    with pytest.raises(state_reader.StateReaderError, match="RocksDB"):
        state_reader.rewrite(
            checkpoints("tws"),
            str(tmp_path / "dst"),
            confs={CONF_ENCODING: "avro", CONF_PROVIDER: "hdfs"},
            allow_uncommitted=True,
        )
    assert not (tmp_path / "dst").exists()


def test_the_queries_cover_both_encodings():
    confs = {name: QUERIES[name].confs.get(CONF_ENCODING, "unsaferow") for name in ENCODED}
    assert set(confs.values()) == {"unsaferow", "avro"}


# row checksums and the merge operator: (conf, checkpoint, the other value); the source's rows come back byte for
# byte from the other value, which changes every value (checksums) or every list of several elements (merged)
REFRAMED = [
    (CONF_ROW_CHECKSUM, "tws_checksum", "false"),
    (CONF_ROW_CHECKSUM, "rocksdb_cl_checksum_agg_window", "false"),
    (CONF_ROW_CHECKSUM, "agg_window_hdfs", "true"),
    (CONF_MERGE_OPERATOR, "tws_lists_rocksdb", "1"),
    (CONF_MERGE_OPERATOR, "join_v4", "1"),
]


def _source(checkpoints, name: str) -> str:
    return str(GOLDEN / "spark-4.0.5" / name) if name.endswith("_hdfs") else checkpoints(name)


def _read_all(checkpoint: str) -> list[list[str]]:
    cp = CheckpointDir(Storage(checkpoint))
    meta = cp.operator_metadata(0, cp.latest_committed_batch())
    if meta is not None and meta.operator_name in TRANSFORM_WITH_STATE:
        return [_shown(checkpoint, options) for options in _variables(checkpoint)]
    if meta is not None and meta.operator_name == "symmetricHashJoin":
        return [_shown(checkpoint, {"join_side": side}) for side in ("left", "right")]
    return [_shown(checkpoint, {"store_name": store}) for _, store in stores(checkpoint)]


@pytest.mark.parametrize(("key", "name", "other"), REFRAMED, ids=[f"{k.split('.')[-2]}-{n}" for k, n, _ in REFRAMED])
def test_checksums_and_delimiters_there_and_back_are_the_source(checkpoints, tmp_path, key, name, other):
    source = _source(checkpoints, name)
    cp = CheckpointDir(Storage(source))
    old = recorded_conf(cp.offset_conf(cp.latest_committed_batch()), key)[0]
    assert old != other
    there, back = str(tmp_path / "there"), str(tmp_path / "back")
    report = state_reader.rewrite(source, there, confs={key: other}, allow_uncommitted=True)
    assert [(c["old"], c["new"], c["migration"]) for c in report.confs] == [(old, other, "transcode")]
    state_reader.rewrite(there, back, confs={key: str(old)})
    original, moved = stored_rows(source), stored_rows(there)
    assert stored_rows(back) == original
    changed = original - moved
    if key == CONF_ROW_CHECKSUM:
        assert len(changed) == len(original) and {k for k, _ in moved} == {k for k, _ in original}
    else:
        assert changed and len(moved) == len(original)
    assert _read_all(there) == _read_all(source)


def test_a_format_change_with_a_checksum_change_of_its_store_is_refused(checkpoints, tmp_path):
    with pytest.raises(state_reader.UnsupportedConfChangeError, match="row checksums"):
        state_reader.rewrite(
            str(GOLDEN / "spark-4.0.5" / "agg_fmt1_hdfs"),
            str(tmp_path / "dst"),
            confs={CONF_ROW_CHECKSUM: "true", "spark.sql.streaming.aggregation.stateFormatVersion": "2"},
        )
    assert not (tmp_path / "dst").exists()


def test_an_upsert_in_the_new_encoding_is_the_upsert_in_the_old_one(checkpoints, tmp_path):
    """Rows written into variables in the same rewrite are matched and written in the new encoding, with their
    TTL index entries: back in the old encoding they are the bytes of the same upsert without the change."""
    source = checkpoints("tws")
    profile = state_reader.read_state(source, state_var_name="profile").drop_columns(["partition_id"])
    value = profile.column("value").combine_chunks()
    inner = value.field("value")
    visits = pc.add(inner.field("visits"), 100)
    changed = pa.StructArray.from_arrays([visits, inner.field("total"), inner.field("last")], fields=list(inner.type))
    new_value = pa.StructArray.from_arrays([changed, value.field(1)], fields=list(value.type))
    upsert = pa.table({"key": profile.column("key"), "value": new_value})
    plain, avro, back = (str(tmp_path / name) for name in ("plain", "avro", "back"))
    options = {"upsert": upsert, "state_var_name": "profile", "allow_uncommitted": True}
    state_reader.rewrite(source, plain, **options)
    state_reader.rewrite(source, avro, confs={CONF_ENCODING: "avro"}, **options)
    state_reader.rewrite(avro, back, confs={CONF_ENCODING: "unsaferow"})
    assert stored_rows(back) == stored_rows(plain) != stored_rows(source)
    shown = state_reader.read_state(avro, state_var_name="profile").drop_columns(["partition_id"])
    assert sorted(map(repr, shown.to_pylist())) == sorted(map(repr, upsert.to_pylist()))


def test_framing_changes_combine_with_each_other_and_the_partitions(checkpoints, tmp_path):
    source = checkpoints("tws")
    there, back = str(tmp_path / "there"), str(tmp_path / "back")
    confs = {CONF_ENCODING: "avro", CONF_ROW_CHECKSUM: "true", CONF_MERGE_OPERATOR: "1"}
    state_reader.rewrite(source, there, confs=confs, num_partitions=3, allow_uncommitted=True)
    assert CheckpointDir(Storage(there)).num_partitions(CheckpointDir(Storage(there)).offset_conf(0)) == 3
    for options in _variables(source):
        shown = state_reader.read_state(there, **options).drop_columns(["partition_id"]).to_pylist()
        expected = state_reader.read_state(source, **options).drop_columns(["partition_id"]).to_pylist()
        assert sorted(map(repr, shown)) == sorted(map(repr, expected)), options
    state_reader.rewrite(
        there,
        back,
        confs={CONF_ENCODING: "unsaferow", CONF_ROW_CHECKSUM: "false", CONF_MERGE_OPERATOR: "2"},
        num_partitions=2,
    )
    assert stored_rows(back) == stored_rows(source)
