"""The store conf migrations (the encoding, UnsafeRow <-> Avro) on the rows of real transformWithState
checkpoints, without Spark's reader: every row of every column family (Spark's TTL indexes, list counts and
both timer indexes too) turned into the other encoding and back is the source's bytes again, and the reader
sees the same variables in both encodings (the resume oracle in tests/oracles/test_rewrite_encoding.py judges
the new bytes by Spark)."""

from __future__ import annotations

import pytest

import state_reader
from state_reader.core.rewrite import RewriteOptions, plan_rewrite
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from state_reader.model.conf import CONF_ENCODING, CONF_PROVIDER, FROZEN, recorded_conf
from state_reader.model.operators import TRANSFORM_WITH_STATE
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
