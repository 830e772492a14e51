"""``state_reader.verdicts(cp, spark=spark)``: the same table, computed on the executors, one task per
state partition (only those a key filter can match)."""

from __future__ import annotations

import json

import pytest

import state_reader
from state_reader.formats.flatten import json_values


def _rows(table) -> list[str]:
    keys = json_values(table.column("key"))
    rest = table.drop_columns(["key"]).to_pylist()
    return sorted(json.dumps([k, r], sort_keys=True, default=str) for k, r in zip(keys, rest, strict=True))


@pytest.mark.parametrize(("name", "key_filter"), [("agg_window", None), ("join_inner", "field0 = 'a'")])
def test_spark_gives_the_same_table_one_task_per_partition(spark, checkpoints, name, key_filter):
    cp = checkpoints(name)
    here = state_reader.verdicts(cp, key_filter=key_filter)
    frame = state_reader.verdicts(cp, key_filter=key_filter, spark=spark)
    assert frame.columns == here.column_names
    assert _rows(frame.toArrow()) == _rows(here)
    assert here.num_rows > 0
    every = state_reader.verdicts(cp, spark=spark).rdd.getNumPartitions()
    if key_filter is None:
        assert every == state_reader.read_metadata(cp).column("numPartitions")[0].as_py()
    else:  # only the partition the join key is in, on each side
        sides = set(zip(here.column("join_side").to_pylist(), here.column("partition_id").to_pylist(), strict=True))
        assert frame.rdd.getNumPartitions() == len(sides) == 2 < every
