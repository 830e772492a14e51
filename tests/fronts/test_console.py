"""What the command line prints, apart from the commands (``fronts/console.py``)."""

from __future__ import annotations

import json


def test_why_shows_a_watermark_of_zero_as_json_gives_it(capsys):
    from state_reader.fronts.console import render_why
    from state_reader.inspect.explain import Explanation, KeyStory
    from state_reader.inspect.explain_rules import TimelineEntry, Verdict

    story = KeyStory({"k": "a"}, [TimelineEntry(0, 1_000, 0, "insert", {"n": 1})], Verdict("never", "never evicted"))
    result = Explanation("cp", 0, None, None, "dedupe", "k = 'a'", 0, 0, keys=[story], keys_matched=1)
    render_why(result, as_json=True)
    assert json.loads(capsys.readouterr().out)["keys"][0]["timeline"][0]["watermark_ms"] == 0
    render_why(result, as_json=False)
    text = capsys.readouterr().out
    assert "1970-01-01T00:00:00+00:00" in text and "null" not in text, text
