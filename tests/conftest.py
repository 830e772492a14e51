"""One local SparkSession for the whole suite, and checkpoints written by real
streaming queries (each query runs once per session, on first use)."""

from __future__ import annotations

from pathlib import Path

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
def _written(spark, tmp_path_factory, request):
    """Every checkpoint of a Python query the suite writes once: ``("shared", name)`` for the session's,
    ``("own", test id)`` for a test's own run. Those the collected tests name are written ahead, two at a
    time beside the tests, each query in a session of its own (their confs differ)."""
    from tests.support.parallel import OnceEach
    from tests.support.streaming_queries import ALL_SESSION_QUERIES, run_query

    base = tmp_path_factory.mktemp("checkpoints")
    own = request.config.stash[OWN_RUNS]

    def build(key: tuple[str, str]) -> str:
        kind, name = key
        if kind == "own":
            index, name = own[name]
            return run_query(spark.newSession(), ALL_SESSION_QUERIES[name], base / "own" / str(index))
        return run_query(spark.newSession(), ALL_SESSION_QUERIES[name], base / name)

    written = OnceEach(build)
    written.prefetch(request.config.stash[PREFETCH])
    yield written
    written.close()


@pytest.fixture(scope="session")
def checkpoints(_written):
    """Checkpoints written once each for the session: ``checkpoints("agg_fmt2")`` -> path. Read them only."""
    return lambda name: _written(("shared", name))


@pytest.fixture
def own_run(_written, request) -> tuple[str, Path]:
    """A run of the query the test's ``name`` parameter names, for this test alone (it may add input and
    restart the query): its checkpoint and input directory."""
    checkpoint = _written(("own", request.node.nodeid))
    return checkpoint, Path(checkpoint).parent / "input"


@pytest.fixture(scope="session")
def agg(checkpoints) -> str:
    """The windowed aggregation's checkpoint, which many tests read. Its value struct holds count,
    sum(long), sum(double), count, max and min (avg and max over doubles, min over booleans)."""
    return checkpoints("agg_window")


@pytest.fixture(scope="session")
def scala_checkpoints(tmp_path_factory):
    """Checkpoints of the Scala queries, all written by one ``spark-submit`` in the background from the
    first use on: ``scala_checkpoints("fmgws_v1")`` -> path."""
    from tests.support.parallel import OnceEach
    from tests.support.scala_queries import QUERIES, compile_queries, run_scala_queries

    base = tmp_path_factory.mktemp("scala")

    def build(_: str) -> dict[str, str]:
        return run_scala_queries(compile_queries(base), list(QUERIES), base)

    every = OnceEach(build, workers=1)
    every.prefetch(["all"])
    yield lambda name: every("all")[name]
    every.close()


@pytest.fixture(scope="session", autouse=True)
def _ahead(request):
    """From the start, the checkpoints the selected tests need are written beside them."""
    if request.config.stash[PREFETCH]:
        request.getfixturevalue("_written")
    if request.config.stash[SCALA]:
        request.getfixturevalue("scala_checkpoints")


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory):
    """One ``local-cluster`` master for the suite, in its own process, started on first use."""
    from tests.support.cluster import LocalCluster

    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"))
    yield cluster
    cluster.close()


PREFETCH = pytest.StashKey[list]()
OWN_RUNS = pytest.StashKey[dict]()
SCALA = pytest.StashKey[bool]()


def pytest_collection_modifyitems(config, items):
    from tests.support.streaming_queries import ALL_SESSION_QUERIES

    # the checkpoints the selected tests name, in the order they run, to be written ahead
    wanted: dict[tuple[str, str], None] = {}
    own: dict[str, tuple[int, str]] = {}
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "agg" in fixtures:
            wanted["shared", "agg_window"] = None
        if "checkpoints" in fixtures:
            for value in params.values():
                if isinstance(value, str) and value in ALL_SESSION_QUERIES:
                    wanted["shared", value] = None
        if "own_run" in fixtures:
            own[item.nodeid] = (len(own), params["name"])
            wanted["own", item.nodeid] = None
    config.stash[PREFETCH] = list(wanted)
    config.stash[OWN_RUNS] = own
    config.stash[SCALA] = any("scala_checkpoints" in getattr(item, "fixturenames", ()) for item in items)
    # every test that needs a SparkSession, directly or through the checkpoints it writes, is marked
    # `spark`, so `pytest -m "not spark"` runs the Spark-free tests alone in seconds
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
