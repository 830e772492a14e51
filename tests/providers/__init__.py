"""Tests of ``state_reader/providers``: the HDFS-backed and RocksDB state stores' files."""
