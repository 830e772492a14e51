"""Spark DataFrames of state on any Spark from 3.4 on, classic or Spark Connect::

    import state_reader.spark
    df = state_reader.spark.read_statestore(spark, "/cp", operatorId=0, batchId=3)
    meta = state_reader.spark.read_state_metadata(spark, "/cp")

The options are the data source's (``spark.read.format("state_reader.statestore")``),
by the same names; rows and schema are the data source's too, and the functions are
named as the SQL functions (``read_statestore``, ``read_state_metadata``). See
:mod:`state_reader.fronts.frame` for how the read is shared out among tasks.
"""

from typing import Any

from state_reader.deprecation import warn_renamed
from state_reader.fronts.frame import read_state_metadata, read_statestore

__all__ = ["read_state_metadata", "read_statestore"]


def read_state(spark: Any, path: str, **options: Any) -> Any:
    """Deprecated: :func:`read_statestore` (``state_reader.read_state`` is the Spark-free reader)."""
    warn_renamed("state_reader.spark.read_state", "state_reader.spark.read_statestore")
    return read_statestore(spark, path, **options)


def read_metadata(spark: Any, path: str, **options: Any) -> Any:
    """Deprecated: :func:`read_state_metadata`."""
    warn_renamed("state_reader.spark.read_metadata", "state_reader.spark.read_state_metadata")
    return read_state_metadata(spark, path, **options)
