"""The command line's shared flags and the words its errors use (``fronts/cli_flags``): every read option an
error may name is a flag some command declares, and an error names the flag as the user typed it, whether the
message came from the planner (Spark's option names) or from a Spark-free function (Python keywords)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import state_reader
from state_reader.core.options import OPTIONS
from state_reader.fronts.cli import cli
from state_reader.fronts.cli_flags import _API_KEYWORDS, flags, in_flags
from tests.support.cli import assert_one_line_error, run
from tests.support.damage import logs_cleaned_below


def test_cli_flags_are_the_declared_ones():
    # the options an error may name as flags: read options and the Spark-free functions' keywords that commands
    # declare flags for, with the spellings the commands declare
    assert set(flags(cli)) <= {o.name for o in OPTIONS} | set(_API_KEYWORDS)
    named = {"batchId", "operatorId", "storeName", "keySchema", "valueSchema", "changeFeedFromSnapshots"}
    assert named | {"key_filter", "drop_keys", "allow_uncommitted"} <= set(flags(cli))
    assert flags(cli)["stateVarName"] == ("--state-var-name", "--state-var")
    assert flags(cli)["changeStartBatchId"] == ("--from",)


def test_errors_name_the_flags_that_were_typed(agg):
    assert_one_line_error(run("show", agg, "--batch", "-1"), "--batch cannot be negative")
    proc = run("changes", agg, "--from", "4", "--to", "2")
    assert_one_line_error(proc, "--to", "--from")
    assert "changeEndBatchId" not in proc.stderr
    proc = run("show", agg, "--key-filter", "nope=")
    assert_one_line_error(proc, "--key-filter")
    assert "key_filter" not in proc.stderr


def test_one_name_for_a_state_variable_and_errors_name_the_flag_typed(agg):
    """--state-var-name is the state variable's flag, as state_var_name and stateVarName are its names in Python
    and Spark; --state-var, its earlier spelling, still works, and an error names the flag the user typed.
    The keys a rewrite drops come as --drop-keys (drop_keys in Python), and that is what their errors name."""
    for command in ("show", "changes", "export"):
        shown = run(command, "--help").stdout
        assert "--state-var-name" in shown and "--state-var " not in shown and "--state-var," not in shown, shown
    proc = run("show", agg, "--state-var-name", "count")
    assert_one_line_error(proc, "Invalid value for --state-var-name: Providing state variable names")
    # the earlier spelling still works, with a warning, and the error names it as typed
    for args in (["show", agg, "--state-var", "count"], ["changes", agg, "--from", "1", "--state-var=count"]):
        proc = run(*args)
        warning, error = proc.stderr.strip().splitlines()
        assert warning == (
            "warning: --state-var is deprecated and will be removed in the release after next: use --state-var-name"
        )
        assert error.startswith("error: Invalid value for --state-var: Providing state variable names"), error
        assert "stateVarName" not in proc.stderr
    # timers of an operator that has none: the error names --timers, the flag typed
    proc = run("show", agg, "--timers")
    assert_one_line_error(proc, "Invalid value for --timers: Reading registered timers")
    assert "--state-var" not in proc.stderr
    proc = run("rewrite", agg, "--dry-run", "--drop-keys", "nope = 1")
    assert_one_line_error(proc, "Invalid value for --drop-keys: key field nope does not exist")
    assert "--key-filter" not in proc.stderr and "key_filter" not in proc.stderr
    with pytest.raises(state_reader.InvalidOptionError, match="option 'drop_keys': key field nope") as caught:
        state_reader.rewrite(agg, None, dry_run=True, drop_keys="nope = 1")
    assert "key_filter" not in str(caught.value)


def test_either_spelling_of_an_option_becomes_the_flag_typed():
    message = "'changeStartBatchId' must be set; change_end_batch_id too; set readRegisteredTimers=true"
    assert in_flags(message, cli) == "--from must be set; --to too; set --timers"
    assert in_flags("option 'stateVarName' is wrong", cli, ["--state-var", "x"]) == "--state-var is wrong"
    assert in_flags("state_var_name is wrong", cli) == "--state-var-name is wrong"


def test_a_flag_that_sets_an_option_to_false_and_advice_for_other_fronts():
    message = (
        "read more often (or more batches at a time, max_batches_per_trigger), or skip ahead with "
        "fail_on_data_loss=False; pass allow_uncommitted=True, or (or dry_run=True)"
    )
    assert (
        in_flags(message, cli)
        == "read more often, or skip ahead with --skip-lost; pass --allow-uncommitted, or (or --dry-run)"
    )
    # Spark's spelling alike; a name that is also a word is left alone
    assert in_flags("with failOnDataLoss=false (see maxBatchesPerTrigger) at path", cli) == "with --skip-lost at path"


def _copy(src: str, tmp_path: Path) -> Path:
    cp = tmp_path / "cp"
    shutil.copytree(src, cp)
    return cp


def test_following_past_the_cleanup_names_skip_lost_and_reports_a_skip_once(agg, tmp_path):
    cp = _copy(agg, tmp_path)
    assert logs_cleaned_below(cp, 3)  # as a query's cleanup leaves it: batches 0..2 are gone from the logs
    latest = str(max(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit()))
    proc = run("changes", cp, "--follow", "--from", "0", "--to", latest)
    assert proc.returncode == 1
    error = proc.stderr.strip().splitlines()[-1]  # after the line saying what is followed
    assert error.startswith("error: the changes of batches 0..2") and error.endswith("with --skip-lost"), error
    for python in ("fail_on_data_loss", "max_batches_per_trigger", "failOnDataLoss", "maxBatchesPerTrigger"):
        assert python not in proc.stderr, proc.stderr
    proc = run("changes", cp, "--follow", "--from", "0", "--to", latest, "--skip-lost")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("batches 0..2") == 1, proc.stderr  # the command's own warning, not the log's too
    assert "warning: skipped batches 0..2" in proc.stderr


def test_a_rewrite_of_a_query_stopped_mid_batch_names_allow_uncommitted(agg, tmp_path):
    cp = _copy(agg, tmp_path)
    latest = max(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit())
    shutil.copy(cp / "offsets" / str(latest), cp / "offsets" / str(latest + 1))  # planned, never committed
    proc = run("rewrite", cp, "--dry-run")
    assert_one_line_error(proc, f"batch {latest + 1}", "pass --allow-uncommitted to rewrite")
    assert "allow_uncommitted" not in proc.stderr
    with pytest.raises(state_reader.UncommittedBatchError, match="allow_uncommitted=True"):
        state_reader.rewrite(str(cp), None, dry_run=True)
    assert run("rewrite", cp, "--dry-run", "--allow-uncommitted").returncode == 0
