"""Promises that span the whole package: the layer rule and test layout, the Spark-free install,
reads that never change a checkpoint, and hostile bytes that end in our errors."""
