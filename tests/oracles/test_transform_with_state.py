"""transformWithState (transformWithStateInPandas) state variables against Spark's
built-in reader: value, list and map state with and without TTL, timers, both
collection shapes, change feeds and snapshot replay."""

from __future__ import annotations

import pytest

import state_reader
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from tests.support.cli import run as cli_run
from tests.support.oracle import assert_same_as_builtin

VARIABLES = ["profile", "events", "counters", "plain"]


@pytest.fixture(scope="module")
def tws(checkpoints):
    return checkpoints("tws")


def test_every_variable_matches_builtin(spark, tws):
    batches = CheckpointDir(Storage(tws)).committed_batches
    assert len(batches) >= 6
    total = 0
    for var in VARIABLES:
        for at in ({}, {"batchId": str(batches[2])}):
            for flatten in ("true", "false"):
                total += assert_same_as_builtin(
                    spark, tws, {"stateVarName": var, "flattenCollectionTypes": flatten, **at}
                )
    assert total > 0


def test_timers_and_metadata_match_builtin(spark, tws):
    assert assert_same_as_builtin(spark, tws, {"readRegisteredTimers": "true"}) > 0
    assert assert_same_as_builtin(spark, tws, {}, fmt="state-metadata") == 1


@pytest.mark.parametrize("var", VARIABLES)
def test_change_feed_matches_builtin(spark, tws, var):
    assert (
        assert_same_as_builtin(spark, tws, {"stateVarName": var, "readChangeFeed": "true", "changeStartBatchId": "0"})
        > 0
    )


def test_snapshot_replay_matches_builtin(spark, tws):
    names = Storage(tws).list_names("state/0/0") or []
    starts = sorted(int(n.split(".")[0].split("_")[0]) - 1 for n in names if n.endswith(".zip"))
    assert starts
    for var in ("events", "counters"):
        assert_same_as_builtin(
            spark, tws, {"stateVarName": var, "snapshotStartBatchId": str(starts[0]), "snapshotPartitionId": "0"}
        )


def test_variable_errors(tws):
    with pytest.raises(state_reader.RequiredOptionError, match="state_var_name"):
        state_reader.read_state(tws)
    with pytest.raises(state_reader.InvalidOptionError, match="not defined"):
        state_reader.read_state(tws, state_var_name="nope")
    with pytest.raises(state_reader.InvalidOptionError, match="reserved"):
        state_reader.read_state(tws, state_var_name="$ttl_profile")
    with pytest.raises(state_reader.ConflictingOptionsError):
        state_reader.read_state(tws, state_var_name="events", read_registered_timers=True)


def test_moved_checkpoint_resolves_schema_paths(tws, tmp_path):
    """Operator metadata v2 names schema files by absolute path; a moved checkpoint must still read."""
    import shutil

    from tests.support.oracle import arrow_rows

    expected = {var: arrow_rows(state_reader.read_state(tws, state_var_name=var)) for var in VARIABLES}
    moved = tmp_path / "moved"
    shutil.move(tws, moved)  # the stored absolute paths now point nowhere
    try:
        for var in VARIABLES:
            assert arrow_rows(state_reader.read_state(str(moved), state_var_name=var)) == expected[var]
    finally:
        shutil.move(moved, tws)


def test_avro_encoded_state_matches_builtin(spark, checkpoints):
    path = checkpoints("tws_avro")
    for var in VARIABLES:
        assert assert_same_as_builtin(spark, path, {"stateVarName": var}) > 0
    assert_same_as_builtin(spark, path, {"readRegisteredTimers": "true"})


def test_verify_checks_every_column_family(tws, tmp_path):
    """verify decodes every variable, TTL index, counter and timer family; damage in one is found."""
    import json
    import shutil

    from state_reader.inspect.verify import verify_checkpoint

    report = verify_checkpoint(tws)
    assert report.ok and not report.skipped, report.as_dict()
    checked = {s["store_name"] for s in report.stores}
    assert set(VARIABLES) <= checked
    assert "$procTimers_keyToTimestamp" in checked and "$ttl_profile" in checked
    proc = cli_run("verify", tws, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["versions_checked"] > len(VARIABLES), proc.stderr

    damaged = tmp_path / "tws"
    shutil.copytree(tws, damaged)
    changelog = max((p for p in (damaged / "state" / "0" / "0").glob("*.changelog")), key=lambda p: int(p.stem))
    changelog.write_bytes(changelog.read_bytes()[:-7])
    for crc in changelog.parent.glob(f".{changelog.name}.crc"):
        crc.unlink()
    proc = cli_run("verify", str(damaged))
    assert proc.returncode != 0 and "DAMAGED" in proc.stdout, proc.stdout + proc.stderr


def test_every_command_line_command_handles_every_variable(tws, tmp_path):
    """show lists the variables when one must be chosen; show/export --timers, changes --state-var, stats and
    plot take every variable and the timers."""
    import json

    def run(*args):
        return cli_run(*map(str, args), env={"COLUMNS": "300"})

    proc = run("show", tws)
    assert proc.returncode == 1 and "--state-var" in proc.stderr
    assert all(var in proc.stderr for var in VARIABLES) and "--timers" in proc.stderr
    timers = json.loads(run("show", tws, "--timers", "--limit", "0", "--json").stdout)
    assert timers["row_count"] == state_reader.read_state(tws, read_registered_timers=True).num_rows > 0
    exported = run("export", tws, "--timers", "--out", tmp_path / "timers.jsonl", "--json")
    assert exported.returncode == 0 and json.loads(exported.stdout)["rows"] == timers["row_count"]
    for var in VARIABLES:
        feed = json.loads(run("changes", tws, "--from", "0", "--state-var", var, "--limit", "0", "--json").stdout)
        assert feed["row_count"] == state_reader.changes(tws, 0, state_var_name=var).num_rows > 0
    stats = json.loads(run("stats", tws, "--json").stdout)
    stores = {row["store_name"] for row in stats["partitions"]}
    assert set(VARIABLES) <= stores and "$procTimers_keyToTimestamp" in stores and not stats["skipped"]
    plotted = run("plot", tws, "--out", tmp_path / "tws.png", "--json")
    assert plotted.returncode == 0 and json.loads(plotted.stdout)["stores"] == len(VARIABLES) + 1
