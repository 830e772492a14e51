"""``state_reader.open(cp)``: the object a notebook keeps, its display, and what it reads."""

from __future__ import annotations

import itertools
import os
import re
import shutil
from pathlib import Path

import pytest

import state_reader
from tests.support.cli import run as cli_run
from tests.support.markup import shown_text
from tests.support.paths import EXAMPLES

QUERIES = [
    "agg_window",
    "rocksdb_cl_agg_window",
    "dedup",
    "session_window",
    "join_inner",
    "rocksdb_cl_multi",
    "apply_in_pandas",
    "limit",
    "tws",
]


@pytest.mark.parametrize("name", QUERIES)
def test_display_of_every_operator_and_provider(checkpoints, name):
    path = checkpoints(name)
    cp = state_reader.open(path)
    page = cp._repr_html_()
    assert "<script" not in page
    shown = shown_text(page)
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
    assert "call .doctor()" in shown_text(cp._repr_html_())
    monkeypatch.undo()
    diagnosis = cp.doctor(thresholds={"skew-min-rows": 1, "skew": 1.01})
    assert diagnosis is cp.diagnosis
    shown = shown_text(cp._repr_html_())
    assert "doctor:" in shown
    for finding in diagnosis.findings:
        assert finding.kind in shown


def test_reads_are_the_public_functions(checkpoints):
    path = checkpoints("agg_window")
    cp = state_reader.open(path)
    assert cp.batches == sorted(cp.batches) and len(cp.batches) >= 5

    def same(a, b) -> bool:  # NaN in the state: compare what the rows print as
        return a.schema == b.schema and repr(a.to_pylist()) == repr(b.to_pylist())

    assert same(cp.state(batch_id=2).table, state_reader.read_state(path, batch_id=2))
    table = cp.state(batch_id=2)
    assert len(table) == table.num_rows and "at batch 2" in repr(table)
    shown = shown_text(table._repr_html_())
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
    assert "<script>alert(1)</script>" in shown_text(page)
    keys = state_reader.read_state(str(hostile)).column("key").to_pylist()
    table_page = cp.state()._repr_html_()
    assert "<script" not in table_page
    assert any(str(k["user"]) in shown_text(table_page) for k in keys if k.get("user"))


def test_a_damaged_checkpoint_shows_its_error(checkpoints, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(checkpoints("agg_window"), broken)
    for entry in (broken / "offsets").iterdir():
        if not entry.name.startswith("."):  # a hand edit: the checksum files stay as they were
            entry.write_text("v1\nnot json\n")
    cp = state_reader.open(str(broken))
    page = cp._repr_html_()
    assert '<div class="sr-error">' in page and "Traceback" not in page
    assert "offsets" in shown_text(page)
    assert "state_reader.Checkpoint" in repr(cp)


def test_missing_checkpoint_says_so(tmp_path):
    cp = state_reader.open(str(tmp_path / "nothing-here"))
    assert "does not exist" in repr(cp)
    assert "does not exist" in shown_text(cp._repr_html_())


def test_sparkline_over_retained_batches(checkpoints):
    cp = state_reader.open(checkpoints("rocksdb_cl_agg_window"))
    (store,) = cp.sizes
    assert [b for b, _ in store.over_batches] == cp.batches
    # changelogs between snapshots: the files alone say nothing of the size over batches
    assert "<polyline" not in cp._repr_html_()
    cp.stats()
    assert "<polyline" in cp._repr_html_()


_BAR = re.compile(
    r'<td class="sr-p">(\d+)</td><td class="sr-b"><div class="sr-track"><div class="sr-bar" '
    r'style="width:(\d+)px"></div></div></td><td class="sr-n">([^<]*)</td>'
)


def _bars(page: str) -> list[tuple[int, int, str]]:
    """(partition, bar width in px, the number beside it) of every partition bar of a display."""
    return [(int(p), int(w), v) for p, w, v in _BAR.findall(page)]


def _lines(page: str) -> list[list[float]]:
    """The y of each point of each sparkline (SVG: y grows downwards)."""
    return [
        [float(xy.split(",")[1]) for xy in points.split()]
        for points in re.findall(r'<polyline[^>]* points="([^"]*)"', page)
    ]


def test_display_shows_transform_with_state_variables(checkpoints):
    from state_reader.inspect.overview import describe_checkpoint

    path = checkpoints("tws")
    declared = {
        "counters": "MapState, TTL",
        "profile": "ValueState, TTL",
        "plain": "ValueState, no TTL",
        "events": "ListState, no TTL",
    }
    (op,) = describe_checkpoint(path)["operators"]
    assert {v["name"]: v["described"] for v in op["state_variables"]} == {
        **declared,
        "$procTimers_keyToTimestamp": "timers (ProcessingTime)",
    }
    cp = state_reader.open(path)
    shown = shown_text(cp._repr_html_())
    assert "4 state variables and timers in 1 store" in shown
    for name, kind in declared.items():
        assert f"variable {name} · {kind}" in shown and f"variable {name} · {kind}" in repr(cp)
    assert "timers (ProcessingTime)" in shown and "not measured yet" in shown
    # once stats() measured them: rows and state bytes per variable and partition, as stats says
    measured = cp.stats().to_pylist()
    latest = max(r["batch_id"] for r in measured)
    page, text = cp._repr_html_(), repr(cp)
    for name in [*declared, "$procTimers_keyToTimestamp"]:
        at = [r for r in measured if r["store_name"] == name and r["batch_id"] == latest]
        rows = sum(r["rows"] for r in at)
        title = f"variable {name} · {declared[name]}" if name in declared else "timers (ProcessingTime)"
        sizes = f"{len(at)} partitions · {rows:,} rows · "
        assert f"{title} · {sizes}" in shown_text(page) and f"{title}: {sizes}" in text, (title, sizes, text)
    bars = _bars(page)
    assert len(bars) == 2 + 2 * 5  # the store's partitions, then each variable's and the timers'
    assert "not measured yet" not in shown_text(page)


def test_metadata_command_lists_state_variables(checkpoints):

    out = cli_run("metadata", checkpoints("tws"), env={"COLUMNS": "400"})
    assert out.returncode == 0, out.stderr
    assert (
        "operator 0 state variables: counters: MapState, TTL; profile: ValueState, TTL; plain: ValueState, "
        "no TTL; events: ListState, no TTL; $procTimers_keyToTimestamp: timers (ProcessingTime)"
    ) in out.stdout


def test_size_over_batches_is_the_state_not_its_files(checkpoints):
    from state_reader.inspect.stats import batch_summary

    cp = state_reader.open(checkpoints("agg_window"))  # HDFS files record no size
    page = cp._repr_html_()
    # deltas pile up until the next snapshot whatever the state does: file bytes are never drawn over batches
    assert "<polyline" not in page
    assert "bytes on disk" in shown_text(page) and "not the state's size" in shown_text(page)
    rows = [r["rows"] for r in batch_summary(cp.stats()).to_pylist()]
    assert any(b < a for a, b in itertools.pairwise(rows)), rows  # the state shrinks in some batch
    page = cp._repr_html_()
    (line,) = _lines(page)
    assert len(line) == len(rows)
    for (a, b), (ya, yb) in zip(itertools.pairwise(rows), itertools.pairwise(line), strict=True):
        assert (b > a) == (yb < ya) and (b < a) == (yb > ya), (rows, line)
    # a scale from 0 to the largest, labelled
    assert f">{max(rows)}</text>" in page and ">0</text>" in page
    assert f"{rows[-1]:,} rows" in shown_text(page)


def test_partition_bars_share_one_scale_and_an_empty_partition_has_none(checkpoints):
    cp = state_reader.open(checkpoints("rocksdb_lookup_types"))  # RocksDB snapshots record their keys
    (store,) = cp.sizes
    assert store.keys is not None and 0 in store.keys.values()
    page = cp._repr_html_()
    bars = _bars(page)
    assert sorted((p, int(v)) for p, _, v in bars) == sorted(store.keys.items())
    top = max(store.keys.values())
    assert all(w == round(160 * int(v) / top) for _, w, v in bars), bars
    assert [w for _, w, v in bars if v == "0"] == [0]  # an empty partition gets no bar
    assert "keys over batches" in shown_text(page) and len(_lines(page)) == 1
    # four stores of a join, measured: every bar on the same scale
    cp = state_reader.open(checkpoints("join_inner"))
    cp.stats()
    bars = _bars(cp._repr_html_())
    assert len(bars) == 4 * 2
    top = max(int(v) for _, _, v in bars)
    assert all(w == round(160 * int(v) / top) for _, w, v in bars), bars


def test_open_takes_storage_options(checkpoints):
    path = Path(checkpoints("agg_window"))
    cp = state_reader.open(f"file://{path}", storage_options={"auto_mkdir": False})
    assert cp.storage_options == {"auto_mkdir": False}
    assert "stateStoreSave" in shown_text(cp._repr_html_())


# -- the example notebook, run through a real kernel, and its HTML in a real browser -------------------


@pytest.fixture(scope="module")
def exported_notebook(tmp_path_factory) -> Path:
    """examples/debugging.ipynb executed by a Jupyter kernel (nbclient) and exported to HTML (nbconvert)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nbconvert = pytest.importorskip("nbconvert")
    notebook = nbformat.read(EXAMPLES / "debugging.ipynb", as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}
    ).execute()
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    page, _ = nbconvert.HTMLExporter().from_notebook_node(notebook)
    out = tmp_path_factory.mktemp("notebook") / "debugging.html"
    out.write_text(page, encoding="utf-8")
    return out


def test_example_notebook_runs_and_shows_every_checkpoint(exported_notebook):
    shown = shown_text(exported_notebook.read_text(encoding="utf-8"))
    for expected in (
        "state_reader.Checkpoint",
        "stateStoreSave",
        "symmetricHashJoin",
        "transformWithStateInPandasExec",
        "doctor:",
        "rows ×",
        "never-evicted",
        "explain  user = 'u1'",  # the key filter explained, and a window's verdict
        "left state in batch",
    ):
        assert expected in shown, expected


def _browser():
    """A headless Chromium driven by selenium, or a skip saying what is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (make test-browser)")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        missing = "no Chromium and chromedriver on the PATH (make chromium installs them)"
        if os.environ.get("STATE_READER_REQUIRE_BROWSER"):  # CI installs them: a skip there would hide the tests
            pytest.fail(missing)
        pytest.skip(missing)
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--window-size=1200,1600",
    ):
        options.add_argument(flag)
    from selenium.webdriver.chrome.service import Service

    return webdriver.Chrome(service=Service(driver_path), options=options)


@pytest.mark.browser
def test_browser_shows_operators_partitions_and_findings(exported_notebook, tmp_path):
    from selenium.webdriver.common.by import By

    driver = _browser()
    try:
        driver.get(exported_notebook.as_uri())
        displays = driver.find_elements(By.CSS_SELECTOR, "div.sr-cp")
        assert len(displays) >= 5
        page = driver.find_element(By.TAG_NAME, "body").text
        for name in ("stateStoreSave", "symmetricHashJoin", "transformWithStateInPandasExec"):
            assert name in page
        # the join's four stores and the aggregation's partitions, as the browser lays them out
        summaries = [e.get_attribute("textContent") for e in driver.find_elements(By.CSS_SELECTOR, "details summary")]
        assert any("4 stores" in s for s in summaries), summaries
        assert any("2 partitions" in s for s in summaries), summaries
        # the transformWithState query keeps new users in a variable without TTL: its finding, by kind
        kinds = [e.text.split()[-1] for e in driver.find_elements(By.CSS_SELECTOR, "span.sr-warning")]
        assert "never-evicted" in kinds, kinds
        # its state variables, measured by stats() in the notebook
        assert any("variable visits · ValueState, no TTL · 2 partitions" in s for s in summaries), summaries
        # the README's picture: the transformWithState display after doctor(), every section opened
        driver.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
        shown = next(
            d
            for d in driver.find_elements(By.CSS_SELECTOR, "div.sr-cp")
            if "transformWithStateInPandasExec" in d.text and "never-evicted" in d.text
        )
        driver.execute_script("arguments[0].scrollIntoView()", shown)
        shot = Path(os.environ.get("STATE_READER_SCREENSHOT") or tmp_path / "notebook.png")
        shown.screenshot(str(shot))
        assert shot.stat().st_size > 5_000
    finally:
        driver.quit()


@pytest.mark.browser
def test_browser_keeps_a_script_key_as_text(checkpoints, tmp_path):
    from selenium.webdriver.common.by import By

    hostile = tmp_path / "<script>document.title='pwned'</script>"
    shutil.copytree(checkpoints("dedup"), hostile)
    cp = state_reader.open(str(hostile))
    page = tmp_path / "page.html"
    page.write_text(
        f"<html><head><title>safe</title></head><body>{cp._repr_html_()}{cp.state()._repr_html_()}</body></html>",
        encoding="utf-8",
    )
    driver = _browser()
    try:
        driver.get(page.as_uri())
        assert driver.title == "safe"
        assert "<script>document.title='pwned'</script>" in driver.find_element(By.TAG_NAME, "body").text
    finally:
        driver.quit()
