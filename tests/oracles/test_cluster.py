"""The data source on a cluster: executors in their own JVMs and Python workers,
so nothing may depend on driver memory or driver-only files."""

from __future__ import annotations

import pytest


@pytest.mark.cluster
def test_local_cluster_matches_builtin(checkpoints, local_cluster):
    result = local_cluster.ask({"read": checkpoints("agg_window"), "options": {"batchId": "3"}})
    assert result["partitions"] == 2  # one Spark partition per state partition
    assert result["schema_equal"]
    assert result["ours"] == result["builtin"]
    assert len(result["ours"]) > 0
