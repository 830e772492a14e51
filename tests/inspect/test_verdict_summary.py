"""``state-reader why CP`` without a key filter, the notebook's ``verdicts()`` and ``plot --verdicts``: the
summary of every key's verdict, against the verdicts table, and predicted, then checked by running the query
on until Spark's own reader no longer shows the keys predicted gone."""

from __future__ import annotations

import json
import shlex

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

import state_reader
from state_reader.formats.flatten import json_values
from state_reader.fronts.cli import main
from state_reader.inspect.verdict_summary import histogram, key_filter_of
from tests.inspect.test_explain import Running, _at
from tests.support.streaming_queries import ROCKSDB, T0


def test_a_histogram_counts_every_time_once_from_the_first_to_the_last():
    times = pa.array([10, 10, 11, None, 40, 33, 21], pa.int64())
    bins = histogram(times, bins=3)
    assert [b["keys"] for b in bins] == [3, 1, 2]
    assert (bins[0]["from_ms"], bins[-1]["to_ms"]) == (10, 40)
    assert histogram(pa.array([5, 5], pa.int64())) == [{"from_ms": 5, "to_ms": 5, "keys": 2}]
    assert histogram(pa.nulls(3, pa.int64())) == []


def test_a_keys_filter_selects_exactly_it():
    import datetime as dt

    key = {"window": {"start": dt.datetime(2023, 11, 14, 22, 13, 20, 5, tzinfo=dt.timezone.utc)}, "u": "it's"}
    assert key_filter_of(key) == "window.start = '2023-11-14 22:13:20.000005' and u = 'it''s'"
    assert key_filter_of({"count(1)": 3, "x": None}) == "`count(1)` = 3 and x is null"


def test_the_summary_is_the_tables_and_each_sample_command_explains_its_key(checkpoints, capsys):
    cp = checkpoints("session_window")
    table = state_reader.verdicts(cp)
    assert main(["why", cp, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    events = table.column("event").to_pylist()
    assert doc["counts"] == {e: events.count(e) for e in set(events)}
    assert doc["keys"] == table.num_rows == sum(a["keys"] for a in doc["ages"])
    assert sum(b["keys"] for b in doc["leaves_by_watermark"]) == pc.count(table.column("when_watermark_ms")).as_py()
    assert doc["overdue"] == table.column("overdue").to_pylist().count(True)
    assert doc["oldest"], doc
    sample = doc["oldest"][0]
    args = shlex.split(sample["command"])[1:]
    assert main([*args, "--json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert [k["key"] for k in explained["keys"]] == [sample["key"]]
    assert explained["keys"][0]["verdict"]["when_watermark_ms"] == sample["when_watermark_ms"]

    assert main(["why", cp]) == 0
    text = capsys.readouterr().out
    assert f"{table.num_rows} keys in state" in text and sample["command"] in text.replace("\n", "")


def test_the_notebook_and_the_plot_draw_keys_over_the_watermark_with_it_now(checkpoints, tmp_path, capsys):
    cp = checkpoints("agg_window")
    view = state_reader.open(cp).verdicts()
    assert view.table.equals(state_reader.verdicts(cp))
    page = view._repr_html_()
    assert "<svg" in page and "the watermark now" in page and 'stroke="#c62828"' in page
    assert "evict" in repr(view)
    out = tmp_path / "verdicts.png"
    assert main(["plot", cp, "--verdicts", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["path"] == str(out)
    assert out.read_bytes()[:4] == b"\x89PNG"


def _windowed(df):
    return df.withWatermark("ts", "30 seconds").groupBy(F.window("ts", "10 seconds"), "k").agg(F.count("*").alias("n"))


def _spark_keys(spark, cp: str) -> set[str]:
    table = spark.read.format("statestore").load(cp).select("key").toArrow()
    return {json.dumps(k, sort_keys=True, default=str) for k in json_values(table.column("key"))}


def test_the_keys_predicted_gone_by_a_watermark_are_those_sparks_reader_no_longer_shows(spark, tmp_path):
    # windows ending at T0+10 (a), T0+20 (b, d), T0+40 (c): a watermark of T0+20 closes the first two only
    running = Running(spark, tmp_path / "fates", _windowed, ROCKSDB)
    cp = running.first(
        [
            {"ts": _at(T0 + 1), "k": "a", "v": 1},
            {"ts": _at(T0 + 12), "k": "b", "v": 2},
            {"ts": _at(T0 + 33), "k": "c", "v": 3},
            {"ts": _at(T0 + 14), "k": "d", "v": 4},
        ]
    )
    table = state_reader.verdicts(cp)
    watermark = (T0 + 20) * 1000
    leaving = pc.less_equal(table.column("when_watermark_ms"), watermark)
    predicted = {json.dumps(k, sort_keys=True, default=str) for k in json_values(table.filter(leaving).column("key"))}
    assert len(predicted) == 3 and set(table.column("event").to_pylist()) == {"evict"}
    before = _spark_keys(spark, cp)
    assert predicted < before

    running.feed([{"ts": _at(T0 + 50), "k": "e", "v": 5}])  # the watermark moves to T0+20 exactly
    after = _spark_keys(spark, cp)
    assert before - after == predicted
    summary = json.loads(json.dumps(state_reader.verdicts(cp).column("event").to_pylist()))
    assert summary.count("evict") == len(after)


@pytest.mark.parametrize("bins", [1, 5])
def test_a_histogram_of_one_time_is_one_bar(bins):
    assert histogram(pa.array([7], pa.int64()), bins=bins) == [{"from_ms": 7, "to_ms": 7, "keys": 1}]
