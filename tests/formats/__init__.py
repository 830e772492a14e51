"""Tests of ``state_reader/formats``: the byte formats, read and written."""
