"""Tests of ``state_reader/fronts``: the ways in (API, command line, data source, notebook)."""
