"""Tests of ``state_reader/io``: storage, round trips, checksums and destinations."""
