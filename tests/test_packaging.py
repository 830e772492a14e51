"""The Spark-free API must work where pyspark is not installed."""

from __future__ import annotations

import subprocess
import sys

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

    from oracle import arrow_rows

    import state_reader

    path = checkpoints("agg_window")
    expected = arrow_rows(state_reader.read_state(path))
    assert arrow_rows(state_reader.read_state("file://" + path)) == expected
    assert arrow_rows(state_reader.read_state("file:" + path)) == expected
    monkeypatch.chdir(os.path.dirname(path))
    assert arrow_rows(state_reader.read_state(os.path.basename(path))) == expected
