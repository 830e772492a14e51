"""Spark DataFrames of state on any Spark from 3.4 on, classic or Spark Connect::

    import state_reader.spark
    df = state_reader.spark.read_state(spark, "/cp", operatorId=0, batchId=3)
    meta = state_reader.spark.read_metadata(spark, "/cp")

The options are the data source's (``spark.read.format("state_reader.statestore")``),
by the same names; rows and schema are the data source's too. See
:mod:`state_reader.fronts.frame` for how the read is shared out among tasks.
"""

from state_reader.fronts.frame import read_metadata, read_state

__all__ = ["read_metadata", "read_state"]
