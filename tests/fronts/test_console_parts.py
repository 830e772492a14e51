"""The parts a command's text is made of (``fronts/console_parts.py``)."""

from __future__ import annotations

import json

from state_reader.fronts.console_parts import emit_json, relative, sparkline


def test_sparkline_scales_between_the_lowest_and_highest_value():
    assert sparkline([]) == ""
    assert sparkline([5, 5, 5]) == "▄▄▄"  # flat: the middle block, not the floor
    assert sparkline([0, 7, 14]) == "▁▅█"  # 3.5 of 7 steps rounds to the fifth block


def test_relative_names_a_file_inside_the_checkpoint():
    assert relative("s3://b/cp/state/0/1/1.delta", "s3://b/cp/") == "state/0/1/1.delta"
    assert relative("/elsewhere/1.delta", "/cp") == "/elsewhere/1.delta"
    assert relative(None, "/cp") == "-"


def test_emit_json_keeps_text_as_written(capsys):
    emit_json({"store": "größe", "n": 1})
    out = capsys.readouterr().out
    assert "größe" in out and json.loads(out) == {"store": "größe", "n": 1}
