"""``state_reader.open(cp)``: the object a notebook keeps, its display, and what it reads."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest

import state_reader

QUERIES = ["agg_window", "rocksdb_cl_agg_window", "dedup", "session_window", "join_inner", "rocksdb_cl_multi",
           "apply_in_pandas", "limit", "tws"]


def _text(markup: str) -> str:
    """What a browser shows of ``markup``: tags and the style block dropped, entities decoded."""
    markup = re.sub(r"<style>.*?</style>", "", markup, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", markup))


@pytest.mark.parametrize("name", QUERIES)
def test_display_of_every_operator_and_provider(checkpoints, name):
    path = checkpoints(name)
    cp = state_reader.open(path)
    page = cp._repr_html_()
    assert "<script" not in page
    shown = _text(page)
    meta = state_reader.read_metadata(path, infer_missing_metadata=True).to_pylist()
    for row in meta:
        assert f"operator {row['operatorId']}" in shown and row["operatorName"] in shown
    provider = cp.description["provider"]
    assert provider in shown and provider in repr(cp)
    # a bar per partition of each store, sized by the bytes on disk at the latest batch
    on_disk = {op["operator_id"]: op["partitions_on_disk"] for op in cp.description["operators"]}
    for sizes in cp.sizes:
        assert len(sizes.partitions) == on_disk[sizes.operator_id]
        assert sum(sizes.partitions.values()) > 0
    assert page.count('class="sr-bar"') == sum(len(s.partitions) for s in cp.sizes)


def test_display_reads_no_state_and_shows_doctor_once_run(checkpoints, monkeypatch):
    from state_reader.core import scan

    def no_decoding(*args, **kwargs):
        raise AssertionError("the display decoded state")

    monkeypatch.setattr(scan, "iter_batches", no_decoding)
    cp = state_reader.open(checkpoints("agg_window"))
    assert "call .doctor()" in _text(cp._repr_html_())
    monkeypatch.undo()
    diagnosis = cp.doctor(**{"skew-min-rows": 1, "skew": 1.01})
    assert diagnosis is cp.diagnosis
    shown = _text(cp._repr_html_())
    assert "doctor:" in shown
    for finding in diagnosis.findings:
        assert finding.kind in shown


def test_reads_are_the_public_functions(checkpoints):
    path = checkpoints("agg_window")
    cp = state_reader.open(path)
    assert cp.batches == sorted(cp.batches) and len(cp.batches) >= 5
    def same(a, b) -> bool:  # NaN in the state: compare what the rows print as
        return a.schema == b.schema and repr(a.to_pylist()) == repr(b.to_pylist())

    assert same(cp.state(batch=2).table, state_reader.read_state(path, batch_id=2))
    table = cp.state(batch=2)
    assert len(table) == table.num_rows and "at batch 2" in repr(table)
    shown = _text(table._repr_html_())
    assert f"{table.num_rows} rows" in shown and "key.window.start" in shown
    assert same(cp.changes(1, 3).table, state_reader.changes(path, 1, 3))
    assert same(cp.stats(), state_reader.stats(path))
    assert same(cp.operators, state_reader.read_metadata(path, infer_missing_metadata=True))


def test_names_from_the_checkpoint_are_escaped(checkpoints, tmp_path):
    hostile = tmp_path / "<script>alert(1)</script>"
    shutil.copytree(checkpoints("dedup"), hostile)
    cp = state_reader.open(str(hostile))
    page = cp._repr_html_()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
    assert "<script>alert(1)</script>" in _text(page)
    keys = state_reader.read_state(str(hostile)).column("key").to_pylist()
    table_page = cp.state()._repr_html_()
    assert "<script" not in table_page
    assert any(str(k["user"]) in _text(table_page) for k in keys if k.get("user"))


def test_a_damaged_checkpoint_shows_its_error(checkpoints, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(checkpoints("agg_window"), broken)
    for entry in (broken / "offsets").iterdir():
        entry.write_text("v1\nnot json\n")
    cp = state_reader.open(str(broken))
    page = cp._repr_html_()
    assert "sr-error" in page and "Traceback" not in page
    assert "offsets" in _text(page)
    assert "state_reader.Checkpoint" in repr(cp)


def test_missing_checkpoint_says_so(tmp_path):
    cp = state_reader.open(str(tmp_path / "nothing-here"))
    assert "does not exist" in repr(cp)
    assert "does not exist" in _text(cp._repr_html_())


def test_sparkline_over_retained_batches(checkpoints):
    cp = state_reader.open(checkpoints("rocksdb_cl_agg_window"))
    (store,) = cp.sizes
    assert [b for b, _ in store.over_batches] == cp.batches
    assert "<polyline" in cp._repr_html_()


def test_open_takes_storage_options(checkpoints):
    path = Path(checkpoints("agg_window"))
    cp = state_reader.open(f"file://{path}", auto_mkdir=False)
    assert cp.storage_options == {"auto_mkdir": False}
    assert "stateStoreSave" in _text(cp._repr_html_())
