"""The data source on a cluster: executors in their own JVMs and Python workers,
so nothing may depend on driver memory or driver-only files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import ROOT


@pytest.mark.cluster
def test_local_cluster_matches_builtin(checkpoints, tmp_path):
    path = checkpoints("agg_window")
    env = dict(os.environ, SPARK_WORKER_DIR=str(tmp_path / "work"), SPARK_LOCAL_DIRS=str(tmp_path / "local"))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.cluster_read", path, "batchId=3"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["partitions"] == 2  # one Spark partition per state partition
    assert result["schema_equal"]
    assert result["ours"] == result["builtin"]
    assert len(result["ours"]) > 0
