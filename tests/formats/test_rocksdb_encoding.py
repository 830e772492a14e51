"""RocksDB key encoders with virtual column families, on a real transformWithState
checkpoint: every column family is decoded straight from the store's files and
compared with what Spark's reader returns for the same state.

Event-time timers are kept twice by Spark: ``$eventTimers_keyToTimestamp`` (prefix-scan
key: grouping key, then expiry) and ``$eventTimers_timestampToKey`` (range-scan key:
expiry first, big-endian with a sign marker). Both must decode to Spark's timers.
"""

from __future__ import annotations

from collections import Counter

import pytest

from state_reader.formats.codecs import codec_name
from state_reader.formats.rocksdb_encoding import (
    RANGE_SCAN,
    KeyEncoderSpec,
    changed_rows,
    column_family_ids,
    decode_keys,
    decode_values,
    select,
    strip_column_family,
)
from state_reader.formats.schema_files import read_schema_v3
from state_reader.formats.unsaferow import RowBuffer
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from state_reader.providers.rocksdb import RocksDBStore
from tests.support.streaming_queries import ROCKSDB_CHANGELOG, Query, run_query


def _timers(df):
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class Timers(StatefulProcessor):
        def init(self, handle):
            self.handle = handle
            self.count = handle.getValueState("count", "c long")

        def handleInputRows(self, key, rows, timerValues):  # noqa: N802, N803 - PySpark API names
            n, latest = 0, 0
            for pdf in rows:
                n += len(pdf)
                latest = max(latest, int(pdf["ts"].max().timestamp() * 1000))
            previous = self.count.get()[0] if self.count.exists() else 0
            self.count.update((previous + n,))
            # far beyond the input's event time, so the timers stay registered
            self.handle.registerTimer(latest + 100_000)
            yield pd.DataFrame({"grp": [key[0]], "cnt": [previous + n]})

        def close(self):
            pass

    return (
        df.withWatermark("ts", "5 seconds")
        .groupBy("grp")
        .transformWithStateInPandas(Timers(), "grp string, cnt long", "Update", "EventTime")
    )


@pytest.fixture(scope="module")
def timers_checkpoint(spark, tmp_path_factory):
    return run_query(spark, Query(_timers, confs=ROCKSDB_CHANGELOG), tmp_path_factory.mktemp("tws") / "timers")


def _families(path: str) -> dict:
    storage = Storage(path)
    names = sorted(storage.list_names("state/0/_stateSchema/default") or [])
    latest = [n for n in names if not n.startswith(".")][-1]
    rel = f"state/0/_stateSchema/default/{latest}"
    return {f.name: f for f in read_schema_v3(storage.read_bytes(rel), rel)}


def _decode_family(path: str, family, codec: str | None) -> list[tuple]:
    """(partition, key struct, value struct) of every entry of one column family, from the files."""
    cp = CheckpointDir(Storage(path))
    version = cp.committed_batches[-1] + 1
    out = []
    for pid in cp.partition_ids(0):
        state = RocksDBStore(cp.storage, f"state/0/{pid}", codec).load(version)
        assert state.uses_column_families
        keys = RowBuffer.from_rows(list(state.entries), "key")
        values = RowBuffer.from_rows(list(state.entries.values()), "value")
        mask = column_family_ids(keys) == state.column_families[family.name]
        spec = KeyEncoderSpec.from_plan(family.key_encoder, 0)
        decoded_keys = decode_keys(strip_column_family(select(keys, mask)), family.key_schema, spec)
        decoded_values = decode_values(select(values, mask), family.value_schema, row_checksum=False)
        out += [(pid, k, v) for k, v in zip(decoded_keys.to_pylist(), decoded_values.to_pylist(), strict=True)]
    return out


def test_column_families_decode_like_spark(spark, timers_checkpoint):
    path = timers_checkpoint
    codec = codec_name(
        CheckpointDir(Storage(path)).latest_conf().get("spark.sql.streaming.stateStore.compression.codec")
    )
    families = _families(path)
    builtin_timers = Counter(
        (r.partition_id, r.key.grp, r.expiration_timestamp_ms)
        for r in spark.read.format("statestore").option("readRegisteredTimers", "true").load(path).collect()
    )
    assert len(builtin_timers) >= 3

    by_key = families["$eventTimers_keyToTimestamp"]
    assert by_key.key_encoder["keyStateEncoderType"] == "PrefixKeyScanStateEncoderSpec"
    ours = Counter((p, k["key"]["grp"], k["expiryTimestampMs"]) for p, k, _ in _decode_family(path, by_key, codec))
    assert ours == builtin_timers

    by_time = families["$eventTimers_timestampToKey"]
    assert KeyEncoderSpec.from_plan(by_time.key_encoder, 0).kind == RANGE_SCAN
    ours = Counter((p, k["key"]["grp"], k["expiryTimestampMs"]) for p, k, _ in _decode_family(path, by_time, codec))
    assert ours == builtin_timers

    builtin_counts = Counter(
        (r.partition_id, r.key.grp, r.value.c)
        for r in spark.read.format("statestore").option("stateVarName", "count").load(path).collect()
    )
    ours = Counter((p, k["grp"], v["c"]) for p, k, v in _decode_family(path, families["count"], codec))
    assert ours == builtin_counts and ours


def test_changed_rows_are_the_new_and_rewritten_keys_and_the_dropped_ones():
    """Two versions of a store, their rows in key order or in none: updates are the new rows whose key is
    new or holds other bytes, deletes the old rows whose key is gone, each in row order."""
    old = {b"a": b"1", b"b": b"2", b"c": b"3", b"d": b"4", b"ab": b"5"}
    new = {b"a": b"1", b"c": b"30", b"d": b"4", b"e": b"6", b"ab": b"5", b"": b"7"}
    for old_order, new_order in (
        ([b"a", b"c", b"d", b"ab", b"b"], [b"ab", b"c", b"d", b"", b"a", b"e"]),
        ([b"d", b"a", b"c", b"b", b"ab"], [b"e", b"a", b"d", b"", b"c", b"ab"]),
    ):

        def rows(entries: dict[bytes, bytes], order: list[bytes]) -> tuple[RowBuffer, RowBuffer]:
            return RowBuffer.from_rows(order, "k"), RowBuffer.from_rows([entries[k] for k in order], "v")

        updated, deleted = changed_rows(rows(old, old_order), rows(new, new_order))
        assert [new_order[i] for i in updated] == [k for k in new_order if old.get(k) != new[k]]
        assert [old_order[i] for i in deleted] == [b"b"]
    empty = (RowBuffer.from_rows([], "k"), RowBuffer.from_rows([], "v"))
    assert changed_rows(empty, rows(new, new_order))[0].tolist() == list(range(len(new)))
    assert changed_rows(rows(old, old_order), empty)[1].tolist() == list(range(len(old)))
