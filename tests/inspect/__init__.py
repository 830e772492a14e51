"""Tests of ``state_reader/inspect``: the analyses (doctor, stats, schema checks)."""
