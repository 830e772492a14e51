"""The Spark-free API must work where pyspark is not installed."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.paths import ROOT

BLOCK_PYSPARK = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ImportError("pyspark is not installed here")
        return None
sys.meta_path.insert(0, _Block())
import state_reader
table = state_reader.read_state(sys.argv[1])
meta = state_reader.read_metadata(sys.argv[1])
assert "pyspark" not in sys.modules
print(table.num_rows, meta.num_rows)
try:
    state_reader.register(object())
except ImportError:
    print("register needs pyspark")
"""


def test_spark_free_api_without_pyspark(checkpoints):
    path = checkpoints("agg_window")
    proc = subprocess.run([sys.executable, "-c", BLOCK_PYSPARK, path], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows, meta_rows = map(int, proc.stdout.split("\n")[0].split())
    assert rows > 0 and meta_rows == 1
    assert "register needs pyspark" in proc.stdout


def test_file_urls_and_relative_paths(checkpoints, monkeypatch):
    import os

    import state_reader
    from tests.support.oracle import arrow_rows

    path = checkpoints("agg_window")
    expected = arrow_rows(state_reader.read_state(path))
    assert arrow_rows(state_reader.read_state("file://" + path)) == expected
    assert arrow_rows(state_reader.read_state("file:" + path)) == expected
    monkeypatch.chdir(os.path.dirname(path))
    assert arrow_rows(state_reader.read_state(os.path.basename(path))) == expected


def test_bare_install_gives_a_working_command_line(checkpoints, installed, tmp_path):
    """``pip install state-reader`` with no extras: every command that does not draw works; plot says in one
    line which extra it needs. Then the extras: ``notebook`` gives plots and pandas, ``spark`` brings pyspark."""
    import os

    env = {**os.environ, "COLUMNS": "200"}
    env.pop("PYTHONPATH", None)  # the installed package, not this checkout

    def run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path)

    venv = installed("")
    py, exe = str(venv / "bin" / "python"), str(venv / "bin" / "state-reader")
    for absent in ("pyspark", "matplotlib", "pandas"):
        assert run(py, "-c", f"import {absent}").returncode != 0, f"{absent} came with a bare install"
    # the compiled kernels are part of the base install: large reads are fast without an extra
    fast = run(py, "-c", "from state_reader.formats.kernels import numba_available; print(numba_available())")
    assert fast.returncode == 0 and fast.stdout.strip() == "True", fast.stderr
    path = checkpoints("agg_window")
    for args in (
        ["--version"],
        ["metadata", path],
        ["show", path, "--limit", "3"],
        ["stats", path],
        ["changes", path, "--from", "0"],
        ["verify", path],
        ["export", path, "--out", str(tmp_path / "s.csv")],
    ):
        proc = run(exe, *args)
        assert proc.returncode == 0, (args, proc.stderr)
    proc = run(exe, "plot", path, "--out", str(tmp_path / "p.png"))
    assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "state-reader[plot]" in proc.stderr

    # each extra adds what its user needs: a notebook user pandas and plots, a Spark user the Spark fronts
    venv = installed("notebook")
    py, exe = str(venv / "bin" / "python"), str(venv / "bin" / "state-reader")
    proc = run(exe, "plot", path, "--out", str(tmp_path / "p.png"))
    assert proc.returncode == 0 and (tmp_path / "p.png").stat().st_size > 0, proc.stderr
    frame = run(py, "-c", f"import state_reader; print(len(state_reader.read_state({path!r}).to_pandas()))")
    assert frame.returncode == 0 and int(frame.stdout) > 0, frame.stderr
    # the Spark extra brings pyspark, resolved here rather than installed (a third of a gigabyte to copy for
    # what the main virtualenv, installed with it, already shows: the Spark fronts import and run)
    report = tmp_path / "spark-extra.json"
    done = run(
        py,
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        "--dry-run",
        "--report",
        str(report),
        f"{ROOT}[spark]",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    brought = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert {"pyspark", "py4j"} <= brought, brought


def test_the_package_exports_its_api_and_nothing_else():
    import inspect

    import state_reader

    public = {n for n in dir(state_reader) if not n.startswith("_") and not inspect.ismodule(getattr(state_reader, n))}
    assert public == set(state_reader.__all__)
