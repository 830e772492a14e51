"""The command line's shared flags and the words its errors use (``fronts/cli_flags``): every read option an
error may name is a flag some command declares, and an error names the flag as the user typed it, whether the
message came from the planner (Spark's option names) or from a Spark-free function (Python keywords)."""

from __future__ import annotations

import pytest

import state_reader
from state_reader.fronts.cli import cli
from state_reader.fronts.cli_flags import _FLAG_PARAMS, flags, in_flags
from tests.support.cli import assert_one_line_error, run


def test_cli_flags_are_the_declared_ones():
    # every read option an error may name is still a flag some command declares
    assert set(flags(cli)) == set(_FLAG_PARAMS.values())
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
    for flag in ("--state-var-name", "--state-var"):
        proc = run("show", agg, flag, "count")
        assert_one_line_error(proc, f"Invalid value for {flag}: Providing state variable names")
        assert "stateVarName" not in proc.stderr
    assert_one_line_error(run("changes", agg, "--from", "1", "--state-var=count"), "Invalid value for --state-var:")
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
