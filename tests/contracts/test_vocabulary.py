"""The vocabulary (docs/vocabulary.md) against the code: every name a user types, in every front.

The table is the one place a concept's names are written down; these tests keep it and the fronts
in step. A public Python signature or a command's flag that spells a concept differently, a flag
that means two things, or an earlier spelling that stopped working (or stopped warning) fails here.
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
import pytest

import state_reader
import state_reader.errors
import state_reader.spark
from state_reader.core.options import OPTIONS, snake_case
from state_reader.deprecation import DeprecatedNameWarning
from state_reader.errors import RENAMED_ERRORS, StateReaderError
from state_reader.fronts.cli import cli
from state_reader.fronts.cli_flags import in_flags
from state_reader.fronts.notebook import Checkpoint
from tests.support.cli import run as cli_run
from tests.support.paths import DOCS

START, END = "<!-- vocabulary table", "<!-- end of vocabulary table -->"


@dataclass(frozen=True)
class Row:
    concept: str
    spark: tuple[str, ...]
    python: tuple[str, ...]
    cli: tuple[str, ...]
    notebook: tuple[str, ...]
    earlier: tuple[str, ...]


def _names(cell: str) -> tuple[str, ...]:
    return tuple(re.findall(r"`([^`]+)`", cell))


def _rows() -> list[Row]:
    text = (DOCS / "vocabulary.md").read_text()
    table = text[text.index(START) : text.index(END)]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or cells[0] in ("concept", "---"):
            continue
        rows.append(Row(cells[0], *(_names(c) for c in cells[1:])))
    return rows


ROWS = _rows()

# the public functions a user calls with keywords, and the notebook's
PYTHON: list[Callable[..., Any]] = [
    state_reader.read_state,
    state_reader.scan_state,
    state_reader.read_metadata,
    state_reader.changes,
    state_reader.follow,
    state_reader.stats,
    state_reader.plot_state_size,
    state_reader.diagnose,
    state_reader.explain,
    state_reader.rewrite,
    state_reader.repartition,
]
NOTEBOOK: list[Callable[..., Any]] = [
    state_reader.open,
    Checkpoint.state,
    Checkpoint.changes,
    Checkpoint.stats,
    Checkpoint.doctor,
    Checkpoint.plot,
    Checkpoint.explain,
]
# what the notebook's methods hand their other keywords to
NOTEBOOK_PASSES_TO = {
    "state": state_reader.read_state,
    "changes": state_reader.changes,
    "stats": state_reader.stats,
    "explain": state_reader.explain,
}


def _params(func: Callable[..., Any]) -> set[str]:
    return {
        p.name
        for p in inspect.signature(func).parameters.values()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"
    }


def _set(param: click.Option) -> str:
    """The keyword a flag sets: its parameter's, or the one a flag such as --skip-lost sets to false."""
    return getattr(param, "negates", None) or param.name or ""


def _flags() -> dict[str, set[str]]:
    """Each visible flag of every command -> the parameters (keywords) it sets."""
    out: dict[str, set[str]] = {}
    for command in cli.commands.values():
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                for flag in (*param.opts, *param.secondary_opts):
                    out.setdefault(flag, set()).add(_set(param))
    return out


def test_the_table_has_every_concept_the_issue_names():
    concepts = {row.concept for row in ROWS}
    for concept in (
        "batch",
        "batch range",
        "operator",
        "store",
        "state variable",
        "storage options",
        "key filter",
        "partition count",
    ):
        assert concept in concepts


def test_spark_options_exist_and_python_keywords_are_their_snake_case():
    known = {o.name: o for o in OPTIONS}
    for row in ROWS:
        if row.spark == ("load(path)",):  # the checkpoint: an argument everywhere, not an option
            continue
        for name in row.spark:
            assert name in known, f"{row.concept}: {name} is no option of the readers"
        if row.spark and row.python:
            assert row.python == tuple(snake_case(n) for n in row.spark), row.concept
            for name in row.spark:
                assert known[name].python == snake_case(name), f"the options table gives {name} another keyword"


def test_python_keywords_are_the_public_signatures():
    taken = set().union(*(_params(f) for f in PYTHON))
    for row in ROWS:
        for name in row.python:
            assert name in taken, f"{row.concept}: no public function takes {name}"


def test_no_public_signature_keeps_an_earlier_spelling():
    earlier = {
        word.rstrip("=") for row in ROWS for spelled in row.earlier for word in re.findall(r"(\w+)=", spelled)
    } - {"key", "name"}  # open(cp, key=value) and doctor(name=value) stand for any name
    for func in PYTHON + NOTEBOOK:
        stale = _params(func) & earlier
        assert not stale, f"{func.__qualname__} still names {stale}"


def test_the_notebook_takes_the_python_keywords():
    taken = set().union(*(_params(f) for f in NOTEBOOK), *(_params(f) for f in NOTEBOOK_PASSES_TO.values()))
    for row in ROWS:
        for name in row.notebook:
            assert name in taken, f"{row.concept}: the notebook does not take {name}"
        assert not row.notebook or row.notebook == row.python, f"{row.concept}: the notebook spells it differently"


def test_every_flag_exists_and_none_means_two_things():
    flags = _flags()
    for row in ROWS:
        for flag in row.cli:
            if not flag.startswith("-"):  # an argument
                assert any(
                    isinstance(p, click.Argument) and p.name == flag.lower()
                    for c in cli.commands.values()
                    for p in c.params
                ), flag
                continue
            assert flag in flags, f"{row.concept}: no command has {flag}"
    two = {flag: params for flag, params in flags.items() if len(params) > 1}
    assert not two, f"flags that set different things in different commands: {two}"


def test_a_concept_with_a_python_keyword_sets_it_from_its_flag():
    """A command's flag for a concept fills the parameter of the Python keyword (no third name inside)."""
    flags = _flags()
    for row in ROWS:
        if not row.python or not row.cli or not row.cli[0].startswith("-"):
            continue
        for flag in row.cli:
            assert flags[flag] <= set(row.python) | {"storage_option"}, (row.concept, flag)


def test_a_command_that_takes_a_concept_takes_every_flag_of_it():
    """``rewrite --batch`` takes ``-b`` as ``show --batch`` does: a row's flags work wherever the concept does."""
    for row in ROWS:
        wanted = {flag for flag in row.cli if flag.startswith("-")}
        if not row.python or not wanted:
            continue
        for name, command in cli.commands.items():
            params = [
                p for p in command.params if isinstance(p, click.Option) and not p.hidden and _set(p) in row.python
            ]
            taken = {flag for p in params for flag in (*p.opts, *p.secondary_opts)}
            assert not params or wanted <= taken, f"{name} takes {row.concept} without {sorted(wanted - taken)}"


def test_errors_through_the_command_line_name_no_python_keyword_that_has_a_flag(tmp_path):
    """What a Spark-free function raises reaches the command line with each Python keyword (or Spark option) a
    command has a flag for written as that flag: every such keyword, and a real error of each kind."""
    keywords = {k for func in PYTHON for k in _params(func) if "_" in k}
    flagged = {
        _set(p)
        for command in cli.commands.values()
        for p in command.params
        if isinstance(p, click.Option) and _set(p) in keywords
    }
    assert {"fail_on_data_loss", "allow_uncommitted", "key_schema", "batch_id"} <= flagged
    negated = {getattr(p, "negates", None) for command in cli.commands.values() for p in command.params}
    for keyword in sorted(flagged):
        spark = next((o.name for o in OPTIONS if o.python == keyword), keyword)
        said = [f"with {keyword}=False", f"with {spark}=false"]  # all a flag that sets it to false can say
        if keyword not in negated:
            said += [f"pass {keyword}=True", f"'{keyword}' is wrong", f"option '{spark}'"]
        for named in said:
            shown = in_flags(named, cli)
            assert keyword not in shown and spark not in shown, (named, shown)
    # a query stopped in the middle of a batch, which a rewrite refuses: the error names --allow-uncommitted
    cp = tmp_path / "cp"
    (cp / "commits").mkdir(parents=True)
    (cp / "offsets").mkdir()
    (cp / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    for batch in (0, 1):
        (cp / "offsets" / str(batch)).write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{}')
    failures = {
        ("rewrite", str(cp), "--dry-run"): "--allow-uncommitted",
        ("stats", str(cp), "--key-schema", "k STRING"): "--value-schema",
        ("doctor", str(cp), "--key-schema", "k INT", "--value-schema", "no no no"): "--value-schema",
        ("verify", str(cp), "--value-schema", "v INT"): "--key-schema",
    }
    for args, flag in failures.items():
        proc = cli_run(*args)
        assert proc.returncode == 1 and flag in proc.stderr, proc.stderr
        said = proc.stderr.replace(str(cp), "CP")
        for keyword in flagged:
            spark = next((o.name for o in OPTIONS if o.python == keyword), keyword)
            assert keyword not in said and spark not in said, (keyword, said)


# -- earlier spellings still work, with a warning naming the new one ---------------------------


def _warns_then_reads(call: Callable[[], Any], new: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(StateReaderError):  # the warning comes before the read, of nothing here
            call()
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecatedNameWarning)]
    assert messages and new in messages[0], messages


@pytest.mark.parametrize(
    ("call", "new"),
    [
        (lambda cp: state_reader.changes(cp, start=1, end=2), "change_start_batch_id"),
        (lambda cp: state_reader.follow(cp, start=1), "change_start_batch_id"),
        (lambda cp: state_reader.follow(cp, max_batches=1), "max_batches_per_trigger"),
        (lambda cp: state_reader.stats(cp, start_batch=1), "change_start_batch_id"),
        (lambda cp: state_reader.stats(cp, end_batch=1), "change_end_batch_id"),
        (lambda cp: state_reader.open(cp, anon=True).state(batch=1), "storage_options"),
        (lambda cp: state_reader.open(cp).state(operator=0), "operator_id"),
        (lambda cp: state_reader.open(cp).changes(start=0), "change_start_batch_id"),
        (lambda cp: state_reader.open(cp).doctor(skew=2.0), "thresholds"),
    ],
)
def test_earlier_python_spellings_warn_and_still_work(tmp_path, call, new):
    _warns_then_reads(lambda: call(str(tmp_path / "missing")), new)


def test_an_earlier_and_a_new_spelling_together_are_refused(tmp_path):
    with pytest.raises(StateReaderError, match="not both start and change_start_batch_id"):
        state_reader.changes(str(tmp_path), start=1, change_start_batch_id=1)


def test_the_spark_fronts_earlier_names_warn(tmp_path):
    # an option no reader knows stops either before Spark is asked for anything
    with pytest.warns(DeprecatedNameWarning, match="read_statestore"):
        with pytest.raises(StateReaderError, match="batchIdd"):
            state_reader.spark.read_state(None, str(tmp_path), batchIdd=1)
    with pytest.warns(DeprecatedNameWarning, match="read_state_metadata"):
        with pytest.raises(StateReaderError, match="batchIdd"):
            state_reader.spark.read_metadata(None, str(tmp_path), batchIdd=1)


@pytest.mark.parametrize(
    ("args", "new"),
    [
        (["stats", "{cp}", "--batches", "0..1"], "--from/--to"),
        (["plot", "{cp}", "--out", "{cp}.png", "--batches", "0..1"], "--from/--to"),
        (["export", "{cp}", "--to", "{cp}.csv"], "--out"),
        (["rewrite", "{cp}", "-n", "2", "--dry-run"], "--partitions"),
        (["show", "{cp}", "--state-var", "count"], "--state-var-name"),
        (["changes", "{cp}", "--from", "0", "--state-var", "count"], "--state-var-name"),
    ],
)
def test_earlier_flags_warn_on_stderr_and_still_parse(tmp_path, args, new):
    cp = str(tmp_path / "missing")
    proc = cli_run(*(a.format(cp=cp) for a in args))
    # parsed: the command ran and failed on the checkpoint, not on its flags
    assert proc.returncode == 1 and "does not exist" in proc.stderr, proc.stderr
    assert f"is deprecated and will be removed in the release after next: use {new}" in proc.stderr


def test_a_deprecated_flag_with_its_replacement_is_refused(tmp_path):
    proc = cli_run("stats", str(tmp_path), "--batches", "0..1", "--from", "0")
    assert proc.returncode == 1 and "not both --batches and --from/--to" in proc.stderr


@pytest.mark.parametrize("old", sorted(RENAMED_ERRORS))
def test_earlier_error_names_warn_and_are_the_new_errors(old):
    """An edit's errors were a seed's: ``except state_reader.InvalidSeedError`` still catches, with a warning."""
    new = RENAMED_ERRORS[old]
    for module in (state_reader, state_reader.errors):
        with pytest.warns(DeprecatedNameWarning, match=f"{old} is deprecated .* use {new}"):
            error = getattr(module, old)
        assert error is getattr(state_reader.errors, new)
    edit = next(row for row in ROWS if row.concept.startswith("edit"))
    assert old in edit.earlier and new in dir(state_reader)


def test_the_edit_errors_condition_names_say_edit():
    """An edit's error conditions (what scripts match on) use the vocabulary's word, never the earlier one."""
    conditions = [getattr(state_reader.errors, new).error_class for new in RENAMED_ERRORS.values()]
    assert all("_EDIT" in condition and "SEED" not in condition for condition in conditions), conditions
    assert len(set(conditions)) == len(conditions), conditions


# -- names in JSON output: one spelling per concept across every command's --json ------------------

JSON_START, JSON_END = "<!-- json fields table", "<!-- end of json fields table -->"
GOLDEN_CP = "spark-4.0.5/agg_window_hdfs"


def _json_rows() -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(concept, its JSON fields, their earlier names) of the table in docs/vocabulary.md."""
    text = (DOCS / "vocabulary.md").read_text()
    table = text[text.index(JSON_START) : text.index(JSON_END)]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("concept", "---"):
            continue
        # an earlier name is written `name` (`command`): the commands in brackets are not names
        earlier = tuple(re.findall(r"`([^`]+)` \(", cells[3]))
        rows.append((cells[0], _names(cells[1]), earlier))
    return rows


def _objects(doc: Any) -> list[dict[str, Any]]:
    """Every JSON object in ``doc``: not the rows of state (user data), the confs (Spark's names) or doctor's
    thresholds (named as ``--threshold`` takes them)."""
    found: list[dict[str, Any]] = []
    if isinstance(doc, dict):
        found.append(doc)
        for name, value in doc.items():
            if name not in ("rows", "key", "value", "conf", "thresholds"):
                found += _objects(value)
    elif isinstance(doc, list):
        for value in doc:
            found += _objects(value)
    return found


def _every_commands_json(tmp_path: Any, capsys: Any) -> list[Any]:
    """What every command prints with --json over a checkpoint in the repository (Spark-free)."""
    import json

    from state_reader.fronts.cli import main
    from state_reader.fronts.console import output
    from tests.support.paths import GOLDEN

    cp = str(GOLDEN / GOLDEN_CP)
    docs = []
    for args in (
        ["overview", cp],
        ["show", cp, "--limit", "1"],
        ["stats", cp],
        ["changes", cp, "--from", "1", "--limit", "1"],
        ["export", cp, "--out", str(tmp_path / "state.parquet")],
        ["verify", cp],
        ["doctor", cp],
        ["why", cp, "-k", "region_id = 1"],
        ["why", cp],
        ["schema", cp],
        ["schema-diff", cp, cp],
        ["rewrite", cp, "--dry-run", "--partitions", "3"],
    ):
        assert main([*args, "--json"]) in (0, 3), (args, capsys.readouterr().err)
        docs.append(json.loads(capsys.readouterr().out))
    output(True).skipped(2, 4)  # the line `changes --follow --skip-lost --json` prints for batches skipped
    docs.append(json.loads(capsys.readouterr().out))
    return docs


def _doctor_evidence_names() -> set[str]:
    """The names of the evidence doctor's findings give (most checkpoints show none of them)."""
    from tests.support.paths import PACKAGE

    names: set[str] = set()
    for module in (PACKAGE / "inspect").glob("doctor*.py"):
        names |= set(re.findall(r'"(\w*batch\w*)":', module.read_text()))
    return names


def test_every_commands_json_spells_each_concept_one_way(tmp_path, capsys):
    rows = _json_rows()
    assert {"a batch", "the first batch of a span", "the last batch of a span"} <= {c for c, _, _ in rows}
    current = {name for _, names, _ in rows for name in names}
    renamed = {old: names for _, names, earlier in rows for old in earlier}
    objects = [o for doc in _every_commands_json(tmp_path, capsys) for o in _objects(doc)]
    seen: set[str] = set()
    for obj in objects:
        for name, value in obj.items():
            seen.add(name)
            # a field about batches is the table's name of its concept, or an earlier one kept beside it
            assert "batch" not in name or name in current or name in renamed, f"{name} is in no row of the table"
            if name in renamed:
                (new,) = renamed[name]
                assert obj.get(new, object()) == value, f"{name} printed without {new} beside it: {obj}"
    for name in _doctor_evidence_names():
        assert name in current or name in renamed, f"doctor's evidence names {name}, in no row of the table"
    assert {"first_batch_id", "last_batch_id", "latest_batch_id", "batch_id"} <= seen


def test_the_renamed_json_fields_are_the_tables():
    from state_reader.fronts.console import RENAMED_FIELDS

    table = {names[0]: set(earlier) for _, names, earlier in _json_rows() if earlier}
    assert table == {new: set(old) for new, old in RENAMED_FIELDS.items()}
