"""Tests of ``state_reader/model``: the checkpoint's logs and confs."""
