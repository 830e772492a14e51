"""SQL table functions: ``read_statestore(path, ...)`` and ``read_state_metadata(path, ...)``.

Python UDTFs (pyspark 4.0+), registered by :func:`state_reader.register`, taking the
data source's options as named arguments::

    SELECT * FROM read_statestore('/cp', operatorId => 0, batchId => 3) WHERE partition_id = 3

They give the rows and columns of ``state_reader.statestore`` and
``state_reader.state-metadata``. Spark plans the output schema in ``analyze`` (a
Python worker on the driver) and runs ``eval`` once, in one task: a table function
with only scalar arguments is not split across executors, and filters on its
output are not pushed into it, so a large state is better read with the data
source or :func:`state_reader.spark.read_statestore`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from state_reader.core import live
from state_reader.core.metadata import metadata_schema, read_metadata_table
from state_reader.core.options import StateMetadataOptions, StateStoreOptions
from state_reader.core.planner import plan_state_read
from state_reader.core.scan import read_table
from state_reader.errors import InvalidOptionError
from state_reader.fronts.spark_shared import check_arrow_transport, option_text, python_rows, spark_worker_errors

READ_STATESTORE = "read_statestore"
READ_STATE_METADATA = "read_state_metadata"


def _options(function: str, path: Any, named: dict[str, Any], constant: bool) -> dict[str, str]:
    """The data source options of one call: ``path`` and the named arguments, as text.

    In ``analyze`` the arguments are :class:`pyspark.sql.udtf.AnalyzeArgument`
    (``constant``: each must be a literal, as the schema depends on them).
    """

    def value(name: str, arg: Any) -> Any:
        if not constant:
            return arg
        if not arg.isConstantExpression:
            raise InvalidOptionError(
                f"{function}(): argument '{name}' must be a constant, not a column or an expression of one"
            )
        return arg.value

    path_value = value("path", path)
    if path_value is None or str(path_value).strip() == "":
        raise InvalidOptionError(f"{function}(): the first argument is the checkpoint path, and it is empty")
    options = {"path": str(path_value)}
    for name, arg in named.items():
        given = value(name, arg)
        if given is not None:
            options[name] = option_text(given)
    return options


def _analyze_result(schema_json: dict) -> Any:
    from pyspark.sql.types import StructType as SparkStructType
    from pyspark.sql.udtf import AnalyzeResult

    return AnalyzeResult(SparkStructType.fromJson(schema_json))


class ReadStateStore:
    """``read_statestore(path, <option> => <value>, ...)``: the rows of ``state_reader.statestore``."""

    @staticmethod
    def analyze(path: Any, **named: Any) -> Any:
        options = _options(READ_STATESTORE, path, named, constant=True)
        with spark_worker_errors(options["path"]):
            plan = plan_state_read(options)
            check_arrow_transport(plan.output_schema, plan.storage.display(plan.store_dir(0)))
            return _analyze_result(plan.output_schema.to_json())

    def eval(self, path: Any, **named: Any) -> Iterator[tuple]:
        options = _options(READ_STATESTORE, path, named, constant=False)
        with spark_worker_errors(options["path"]):
            # planned again here: a running query may have moved on since analyze, as it may between two reads
            table = live.read_consistently(
                StateStoreOptions.parse(options), lambda plan: read_table(plan, show_progress=False)
            )
            yield from python_rows(table)


class ReadStateMetadata:
    """``read_state_metadata(path, <option> => <value>, ...)``: the rows of ``state_reader.state-metadata``."""

    @staticmethod
    def analyze(path: Any, **named: Any) -> Any:
        options = _options(READ_STATE_METADATA, path, named, constant=True)
        with spark_worker_errors(options["path"]):
            return _analyze_result(metadata_schema(StateMetadataOptions.parse(options)).to_json())

    def eval(self, path: Any, **named: Any) -> Iterator[tuple]:
        options = _options(READ_STATE_METADATA, path, named, constant=False)
        with spark_worker_errors(options["path"]):
            yield from python_rows(read_metadata_table(StateMetadataOptions.parse(options)))


def register_functions(spark: Any) -> None:
    """Register :data:`READ_STATESTORE` and :data:`READ_STATE_METADATA` with ``spark`` (pyspark 4.0+)."""
    # Spark Connect's or the classic one
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        from pyspark.sql.connect.functions import udtf
    else:
        from pyspark.sql.functions import udtf

    # row-based on purpose: Arrow-optimised UDTFs go through pandas, which merges repeated field names
    spark.udtf.register(READ_STATESTORE, udtf(ReadStateStore, useArrow=False))
    spark.udtf.register(READ_STATE_METADATA, udtf(ReadStateMetadata, useArrow=False))
