"""One local SparkSession for the whole suite, and checkpoints written by real
streaming queries (each query runs once per session, on first use)."""

from __future__ import annotations

import pytest

from tests.support.spark_session import build_session


@pytest.fixture(scope="session")
def spark():
    import pyspark

    import state_reader

    session = build_session()
    if int(pyspark.__version__.split(".")[0]) >= 4:  # Python data sources; 3.x has the DataFrame front only
        state_reader.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def checkpoints(spark, tmp_path_factory):
    """Lazily written checkpoints: ``checkpoints("agg_fmt2")`` -> path."""
    from tests.support.streaming_queries import CHECKPOINT_V2_QUERIES, FMGWS_TIMEOUT_QUERIES, QUERIES, run_query

    queries = {**QUERIES, **CHECKPOINT_V2_QUERIES, **FMGWS_TIMEOUT_QUERIES}

    cache: dict[str, str] = {}
    base = tmp_path_factory.mktemp("checkpoints")

    def get(name: str) -> str:
        if name not in cache:
            cache[name] = run_query(spark, queries[name], base / name)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def agg(checkpoints) -> str:
    """The windowed aggregation's checkpoint, which many tests read. Its value struct holds count,
    sum(long), sum(double), count, max and min (avg and max over doubles, min over booleans)."""
    return checkpoints("agg_window")


@pytest.fixture(scope="session")
def scala_checkpoints(spark, tmp_path_factory):
    """Lazily written checkpoints of the Scala queries: ``scala_checkpoints("fmgws_v1")`` -> path."""
    from tests.support.scala_queries import compile_queries, run_scala_query

    base = tmp_path_factory.mktemp("scala")
    jar: list = []
    cache: dict[str, str] = {}

    def get(name: str) -> str:
        if not jar:
            jar.append(compile_queries(base))
        if name not in cache:
            cache[name] = run_scala_query(jar[0], name, base / name)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory):
    """One ``local-cluster`` master for the suite, in its own process, started on first use."""
    from tests.support.cluster import LocalCluster

    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"))
    yield cluster
    cluster.close()


def pytest_collection_modifyitems(config, items):
    # every test that needs a SparkSession, directly or through the checkpoints it writes, is marked
    # `spark`, so `pytest -m "not spark"` runs the Spark-free tests alone in seconds
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
