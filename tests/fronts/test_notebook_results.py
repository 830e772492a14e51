"""What a notebook shows of what ``Checkpoint``'s reads and analyses return (``fronts/notebook_results.py``):
state tables and change feeds, ``explain``'s key stories, a store's verdicts."""

from __future__ import annotations

import pyarrow as pa

import state_reader
from state_reader.fronts.notebook_results import CSS, KeyStories, StateTable, StoreVerdicts, count_text, esc
from state_reader.inspect.explain import Explanation, KeyStory
from state_reader.inspect.explain_rules import TimelineEntry, Verdict
from state_reader.inspect.verdict_summary import VerdictSummary
from tests.support.markup import shown_text

SCRIPT = "<script>alert(1)</script>"


def test_the_shared_parts_escape_and_group():
    assert esc('<a href="x">') == "&lt;a href=&quot;x&quot;&gt;"
    assert esc(None) == "None"
    assert count_text(1234567) == "1,234,567"
    assert CSS.startswith("<style>") and CSS.endswith("</style>")


def test_a_state_table_shows_its_head_rows_and_reads_through_to_its_table():
    table = pa.table({"key": [{"k": f"k{i}"} for i in range(12)], "n": list(range(12))})
    table = table.replace_schema_metadata({"state_reader.batch_id": "4"})
    shown = StateTable(table, "state of operator 0")
    assert len(shown) == 12 and shown.num_columns == 2 and shown.column("n").to_pylist() == list(range(12))
    assert repr(shown).startswith("state of operator 0 at batch 4: 12 rows × 2 columns")
    assert len(repr(shown).splitlines()) == 2 + StateTable.HEAD  # the heading, the column names, the head rows
    page = shown._repr_html_()
    assert page.count("<tr>") == 1 + StateTable.HEAD and "… 2 more rows" in shown_text(page)
    assert "key.k" in shown_text(page)


def test_a_change_feed_says_the_batches_it_covers():
    table = pa.table({"batch_id": [2, 3]}).replace_schema_metadata(
        {"state_reader.batch_id": "3", "state_reader.change_start_batch_id": "2"}
    )
    assert repr(StateTable(table, "changes of operator 0")).startswith("changes of operator 0 in batches 2..3:")
    assert "in batches 2..3" in shown_text(StateTable(table, "changes")._repr_html_())
    one = table.replace_schema_metadata({"state_reader.batch_id": "3", "state_reader.change_start_batch_id": "3"})
    assert repr(StateTable(one, "changes of operator 0")).startswith("changes of operator 0 in batch 3:")


def _story(key: object, values: list[object], overdue: bool = False) -> KeyStory:
    timeline = [TimelineEntry(b, 1_000 * b, 500 * b, "update", v) for b, v in enumerate(values)]
    return KeyStory(key, timeline, Verdict("evict", "evicted once the watermark passes", overdue=overdue))


def test_key_stories_draw_each_keys_value_beside_the_watermark_and_escape_the_key():
    stories = [_story({"k": SCRIPT}, [{"n": 1}, {"n": 3}, {"n": 2}], overdue=True), _story({"k": "b"}, ["text"])]
    result = Explanation("cp", 0, "default", None, "dedupe", "k is not null", 0, 2, keys=stories, keys_matched=2)
    shown = KeyStories(result)
    assert shown.result is result and shown.keys_matched == 2  # the result's attributes read through
    page = shown._repr_html_()
    assert SCRIPT not in page and SCRIPT in shown_text(page)
    # a chart for the key whose values are numbers over batches, none for one batch of text
    assert page.count("<svg") == 1 and page.count("<polyline") == 2  # the value and the watermark
    assert 'class="sr-warning">evict' in page  # overdue
    assert repr(shown).splitlines() == [
        "explain k is not null: 2 keys",
        f'key {{"k": "{SCRIPT}"}}: evict: evicted once the watermark passes',
        'key {"k": "b"}: evict: evicted once the watermark passes',
    ]


def test_store_verdicts_chart_the_keys_over_when_they_leave_with_the_watermark_now():
    table = pa.table({"event": ["evict", "evict", "never"]})
    summary = VerdictSummary(
        "cp",
        0,
        "stateStoreSave",
        None,
        None,
        first_batch_id=1,
        latest_batch_id=5,
        watermark_ms=100_000,  # past every bin: drawn at the chart's edge, with an arrow
        batch_time_ms=200_000,
        watermark_moved_batch_id=4,
        keys=3,
        counts={"evict": 2, "never": 1},
        overdue=2,
        leaves_by_watermark=[
            {"from_ms": 0, "to_ms": 9_999, "keys": 1},
            {"from_ms": 10_000, "to_ms": 19_999, "keys": 1},
        ],
        ages=[{"last_changed_batch_id": None, "keys": 1}, {"last_changed_batch_id": 3, "keys": 2}],
        never=[{"key": {"k": SCRIPT}, "event": "never", "last_changed_batch_id": 3, "command": "state-reader why"}],
        table=table,
    )
    shown = StoreVerdicts(summary)
    assert len(shown) == 3 and shown.table is table and shown.overdue == 2
    page = shown._repr_html_()
    assert page.count("<svg") == 1 and page.count("<rect") == 2  # the watermark's chart; none for batch time
    text = shown_text(page)
    assert "the watermark now: 1970-01-01T00:01:40+00:00" in text and " ▶" in text
    assert "2 keys overdue" in text and "not since 1" in text and "never evicted (1)" in text
    assert SCRIPT not in page and SCRIPT in text
    assert repr(shown).splitlines()[0] == "verdicts of operator 0 at batch 5: 3 keys (evict 2, never 1)"
    assert repr(shown).splitlines()[-1] == "overdue: 2"
    assert len(StoreVerdicts(VerdictSummary("cp", 0, None, None, None, 0, 0, 0, 0, None))) == 0  # no table


def test_a_checkpoints_reads_are_headed_by_the_batches_they_cover(checkpoints):
    cp = state_reader.open(checkpoints("agg_window"))
    feed = cp.changes(1, 3)
    assert repr(feed).startswith("changes of operator 0 in batches 1..3:")
    assert "in batches 1..3" in shown_text(feed._repr_html_()) and "at batch" not in shown_text(feed._repr_html_())
    assert repr(cp.changes(3, 3)).startswith("changes of operator 0 in batch 3:")
    assert repr(cp.state(batch_id=3)).startswith("state of operator 0 at batch 3:")
