"""Tests of ``state_reader/core``: planning, scanning, filtering, live reads and rewrites."""
