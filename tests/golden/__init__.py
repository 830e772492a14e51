"""Checkpoints written by older Spark versions, the script that wrote them and the reads recorded from
Spark's built-in reader (see README.md)."""
