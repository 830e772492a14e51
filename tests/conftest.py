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
        out = base / name
        if kind == "own":
            index, name = own[name]
            out = base / "own" / str(index)
        try:
            return run_query(spark.newSession(), ALL_SESSION_QUERIES[name], out)
        except Exception:  # once more: under load a Python worker can miss the time Spark gives it to connect
            return run_query(spark.newSession(), ALL_SESSION_QUERIES[name], out)

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
def _lane():
    """One background thread for the work made in processes of its own (installs, the Scala queries, the
    examples): one such process at a time, beside the suite's own JVM."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1, thread_name_prefix="lane")
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="session")
def scala_checkpoints(tmp_path_factory, _lane):
    """Checkpoints of the Scala queries, all written by one ``spark-submit`` in the background from the
    start: ``scala_checkpoints("fmgws_v1")`` -> path."""
    from tests.support.parallel import OnceEach
    from tests.support.scala_queries import QUERIES, compile_queries, run_scala_queries

    base = tmp_path_factory.mktemp("scala")

    def build(_: str) -> dict[str, str]:
        return run_scala_queries(compile_queries(base), list(QUERIES), base)

    every = OnceEach(build, pool=_lane)
    every.prefetch(["all"])
    yield lambda name: every("all")[name]
    every.close()


@pytest.fixture(scope="session")
def _examples(request, _lane):
    """The example scripts the selected tests run (``@pytest.mark.example(script)``), each once in a process
    of its own, in the background from the start."""
    import subprocess
    import sys

    from tests.support.parallel import OnceEach
    from tests.support.paths import ROOT

    def run(script: str) -> subprocess.CompletedProcess:
        command = [sys.executable, f"examples/{script}"]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)

    every = OnceEach(run, pool=_lane)
    every.prefetch(request.config.stash[EXAMPLES])
    yield every
    every.close()


@pytest.fixture
def example(_examples, request) -> str:
    """The standard output of the example script the test's ``example`` mark names, which must succeed."""
    script = request.node.get_closest_marker("example").args[0]
    done = _examples(script)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="session")
def installed(tmp_path_factory, _lane):
    """Virtualenvs with this checkout pip-installed, without bytecode (the tests import a small part of what
    is installed): ``installed("")`` with no extra, ``installed("notebook")`` with that one. Made in the
    background from the start; a call waits for its own."""
    import os
    import subprocess
    import sys

    from tests.support.parallel import OnceEach
    from tests.support.paths import ROOT

    base = tmp_path_factory.mktemp("installed")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed package, not this checkout

    def build(extra: str) -> Path:
        venv = base / (extra or "bare")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        what = f"{ROOT}[{extra}]" if extra else str(ROOT)
        command = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        done = subprocess.run(
            [*command, "--no-compile", what], capture_output=True, text=True, timeout=900, env=env, cwd=base
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return venv

    every = OnceEach(build, pool=_lane)
    every.prefetch(["", "notebook"])
    yield every
    every.close()


# what is made ahead, from the start, when a selected test needs it (the processes of its own in this order)
AHEAD = ("_written", "installed", "scala_checkpoints", "_examples")


@pytest.fixture(scope="session", autouse=True)
def _ahead(request):
    """From the start, the checkpoints, example runs and installs the selected tests need are made beside
    them."""
    for name in request.config.stash[STARTED_AHEAD]:
        request.getfixturevalue(name)


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory):
    """One ``local-cluster`` master for the suite, in its own process, started on first use."""
    from tests.support.cluster import LocalCluster

    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"))
    yield cluster
    cluster.close()


PREFETCH = pytest.StashKey[list]()
OWN_RUNS = pytest.StashKey[dict]()
EXAMPLES = pytest.StashKey[list]()
STARTED_AHEAD = pytest.StashKey[list]()


def pytest_collection_finish(session):
    """What the selected tests (after ``-k`` and ``-m``) will need, in the order they run, to make ahead."""
    used = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    known: set[str] = set()
    if "checkpoints" in used:  # the query definitions import pyspark, which a run without Spark may lack
        from tests.support.streaming_queries import ALL_SESSION_QUERIES

        known = set(ALL_SESSION_QUERIES)
    wanted: dict[tuple[str, str], None] = {}
    own: dict[str, tuple[int, str]] = {}
    for item in session.items:
        fixtures = getattr(item, "fixturenames", ())
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "agg" in fixtures:
            wanted["shared", "agg_window"] = None
        if "checkpoints" in fixtures:
            for value in params.values():
                if isinstance(value, str) and value in known:
                    wanted["shared", value] = None
        if "own_run" in fixtures:
            own[item.nodeid] = (len(own), params["name"])
            wanted["own", item.nodeid] = None
    session.config.stash[PREFETCH] = list(wanted)
    session.config.stash[OWN_RUNS] = own
    session.config.stash[EXAMPLES] = [m.args[0] for item in session.items for m in item.iter_markers("example")]
    session.config.stash[STARTED_AHEAD] = [name for name in AHEAD if name in used]


def pytest_collection_modifyitems(config, items):
    # the tests that wait on the installs made in the background run last: the installs are done by then
    waiting = [item for item in items if "installed" in getattr(item, "fixturenames", ())]
    items[:] = [item for item in items if item not in waiting] + waiting
    # every test that needs Spark, directly, through the checkpoints it writes or in an example's process, is
    # marked `spark`, so `pytest -m "not spark"` runs the Spark-free tests alone in seconds
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()) or item.get_closest_marker("example"):
            item.add_marker(pytest.mark.spark)


# -- the time each suite (a folder of tests) took, printed at the end ---------------------------------------

_SUITE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Sum each test's setup, call and teardown into its folder's time."""
    parts = report.nodeid.split("::")[0].split("/")
    suite = parts[1] if len(parts) > 2 else "(top level)"
    _SUITE_SECONDS[suite] = _SUITE_SECONDS.get(suite, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _SUITE_SECONDS:
        return
    terminalreporter.write_sep("-", "time per suite (setup, call and teardown of its tests)")
    for suite, seconds in sorted(_SUITE_SECONDS.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"  {suite:<12} {seconds:8.1f} s")
