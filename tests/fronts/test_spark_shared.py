"""What the Spark fronts share, in the parts that need no Spark (``fronts/spark_shared``): partitions
shared out among tasks, the ``partitionsPerTask`` option, what Arrow can carry, and Python values."""

from __future__ import annotations

import pyarrow as pa
import pytest

from state_reader.errors import InvalidOptionError, UnsupportedTypeError
from state_reader.formats.spark_types import parse_ddl
from state_reader.fronts.spark_shared import (
    check_arrow_transport,
    group_partitions,
    option_text,
    partitions_per_task,
    python_rows,
    python_values,
    repeated_names_error,
    spark_parallelism,
)


@pytest.mark.parametrize(
    ("ids", "per_task", "cores", "groups"),
    [
        ([], None, 4, []),
        ([0, 1, 2, 3, 4], None, 2, [(0, 1, 2), (3, 4)]),
        ([0, 1, 2], None, 8, [(0,), (1,), (2,)]),
        ([0, 1, 2, 3, 4, 5, 6], 3, 1, [(0, 1, 2), (3, 4), (5, 6)]),
        ([3, 5, 8], 1, 2, [(3,), (5,), (8,)]),
        ([0, 1, 2, 3], None, None, [(0,), (1,), (2,), (3,)]),
        ([7, 8, 9, 10, 11, 12, 13, 14, 15, 16], None, 3, [(7, 8, 9, 10), (11, 12, 13), (14, 15, 16)]),
    ],
)
def test_partitions_are_shared_out_contiguous_and_even(ids, per_task, cores, groups):
    assert group_partitions(ids, per_task, cores) == groups


@pytest.mark.parametrize("count", [1, 2, 7, 64, 200])
def test_every_partition_goes_to_exactly_one_task(count):
    ids = list(range(0, 2 * count, 2))
    for per_task, cores in [(None, 3), (5, None), (1, 8), (None, 1000)]:
        groups = group_partitions(ids, per_task, cores)
        assert [p for g in groups for p in g] == ids
        sizes = [len(g) for g in groups]
        assert max(sizes) - min(sizes) <= 1
        if per_task is not None:
            assert max(sizes) <= per_task


@pytest.mark.parametrize(
    ("options", "value"),
    [
        ({}, None),
        ({"partitionsPerTask": "auto"}, None),
        ({"PARTITIONSPERTASK": " 4 "}, 4),
        ({"partitionspertask": ""}, None),
    ],
)
def test_partitions_per_task_is_read_by_any_case_of_its_name(options, value):
    assert partitions_per_task(options) == value


@pytest.mark.parametrize("text", ["0", "-2", "many", "1.5"])
def test_partitions_per_task_must_be_a_positive_integer(text):
    with pytest.raises(InvalidOptionError, match=r"partitionsPerTask.*a positive integer or 'auto'"):
        partitions_per_task({"partitionsPerTask": text})


def test_intervals_arrow_cannot_carry_are_refused_by_name():
    check_arrow_transport(parse_ddl("a INT, b STRUCT<c: INTERVAL DAY TO SECOND>"), "operator 0")
    with pytest.raises(UnsupportedTypeError, match="holds year-month interval fields") as info:
        check_arrow_transport(parse_ddl("a INT, b STRUCT<c: INTERVAL YEAR TO MONTH>"), "operator 0")
    assert "operator 0" in str(info.value) and "read_state" in str(info.value)


def test_options_are_text_as_spark_passes_them():
    assert [option_text(v) for v in (True, False, 3, "x", 1.5)] == ["true", "false", "3", "x", "1.5"]


def test_python_values_keep_repeated_struct_names_by_position():
    struct = pa.StructArray.from_arrays(
        [pa.array([1, 2, None]), pa.array([10.0, None, 30.0])],
        fields=[pa.field("sum", pa.int64()), pa.field("sum", pa.float64())],
    )
    values = pa.StructArray.from_arrays(struct.flatten(), fields=list(struct.type), mask=pa.array([False, False, True]))
    assert python_values(values) == [(1, 10.0), (2, None), None]


def test_python_values_turn_maps_into_dicts_and_lists_into_lists_in_chunks():
    maps = pa.array([[("a", 1), ("b", 2)], None, []], type=pa.map_(pa.string(), pa.int32()))
    lists = pa.array([[{"x": 1}], [], None], type=pa.list_(pa.struct([("x", pa.int8())])))
    assert python_values(maps) == [{"a": 1, "b": 2}, None, {}]
    assert python_values(lists) == [[(1,)], [], None]
    chunked = pa.chunked_array([pa.array([1, 2]), pa.array([3])])
    table = pa.table({"m": maps, "l": lists, "n": pa.chunked_array([pa.array([1, 2]), pa.array([None], pa.int64())])})
    assert python_values(chunked) == [1, 2, 3]
    assert python_rows(table) == [({"a": 1, "b": 2}, [(1,)], 1), (None, [], 2), ({}, None, None)]


class _Conf:
    """A session's confs, as ``spark.conf`` answers ``get`` (a Spark Connect session has no SparkContext)."""

    def __init__(self, confs: dict[str, str]) -> None:
        self.confs = confs

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.confs.get(name, default)


class _ConnectSession:
    def __init__(self, confs: dict[str, str]) -> None:
        self.conf = _Conf(confs)


@pytest.mark.parametrize(
    ("confs", "parallelism"),
    [
        ({"spark.master": "local[3]"}, 3),
        ({"spark.master": "local[2,4]"}, 2),
        ({"spark.master": "local"}, 1),
        ({"spark.master": "spark://host:7077"}, None),
        ({"spark.master": "local[3]", "spark.default.parallelism": "12"}, 12),
    ],
)
def test_parallelism_without_a_spark_context_comes_from_the_confs(confs, parallelism):
    assert spark_parallelism(_ConnectSession(confs)) == parallelism


@pytest.mark.parametrize(("remote", "fix"), [(False, "state_reader.register(spark)"), (True, "start the server")])
def test_the_repeated_names_error_says_the_fix_for_its_kind_of_session(remote, fix):
    error = repeated_names_error("operator 0 of /cp", remote)
    assert fix in str(error) and "-Darrow.struct.conflict.policy=CONFLICT_APPEND" in str(error)
    assert error.path == "operator 0 of /cp"
