"""How stores are framed and named (the encoding, the RocksDB checkpoint format), changed by a rewrite and judged
by Spark as tests/oracles/test_rewrite_confs.py judges the other confs: the same query over inputs X then Y,
(a) run under the new value from the start, (b) run under the old one over X, rewritten with the new value and
resumed over Y. The batches over Y emit the same rows, Spark's reader sees the same state at the end, and the
resumed query's offset log (the commit log, for the checkpoint format) records the new value.

Each case runs one query under both values over X and rewrites each run into the other's value: both
directions from two runs. The encoding's query is a transformWithState with value, list and map variables, TTL
on the value and the map, and a processing-time timer per key; the checkpoint format's a deduplication."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import state_reader
from state_reader.model.conf import CONF_CHECKPOINT_FORMAT, CONF_ENCODING, CONF_MERGE_OPERATOR, CONF_ROW_CHECKSUM
from tests.oracles.test_rewrite_confs import _over_x, _recorded
from tests.support.parallel import side_by_side
from tests.support.resume import (
    add_input,
    forget_unfinished_batch,
    new_batches,
    restart_each,
    resume,
    resume_with_timers,
    state_rows,
    stored_rows,
)
from tests.support.streaming_queries import (
    QUERIES,
    ROCKSDB_CHANGELOG,
    VERIFY_ROW_CHECKSUMS,
    _with,
    run_query,
    session_confs,
)

# what the processing-time clock of each run sets: the expirations of TTL and the timers' times
CLOCK_FIELDS = {"ttlExpirationMs", "expiration_timestamp_ms"}
VARIABLES = ({"stateVarName": "profile"}, {"stateVarName": "events"}, {"stateVarName": "counters"},
             {"stateVarName": "plain"}, {"readRegisteredTimers": "true"})  # fmt: skip


def _without_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_clock(v) for k, v in value.items() if k not in CLOCK_FIELDS}
    return value


def _state(spark, checkpoint: str, options: dict[str, str]) -> list[str]:
    """Spark's reader's rows of one variable (or the timers), in their partitions, without the clock's fields."""
    reader = spark.read.format("statestore")
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(repr(_without_clock(r.asDict(recursive=True))) for r in reader.load(checkpoint).collect())


# each case: two confs changed in one rewrite (each direction of each), the first value of each in run a
ENCODING_AND_LISTS = {CONF_ENCODING: ("unsaferow", "avro"), CONF_MERGE_OPERATOR: ("1", "2")}
NAMES_AND_CHECKSUMS = {CONF_CHECKPOINT_FORMAT: ("1", "2"), CONF_ROW_CHECKSUM: ("false", "true")}


def _values(confs: dict[str, tuple[str, str]], which: int) -> dict[str, str]:
    return {key: values[which] for key, values in confs.items()}


def _resumed_each(spark, resumer, tmp_path: Path, *runs: tuple) -> dict[str, list]:
    """New input for each query's run (``(query, its run's checkpoint, that run rewritten into the other's
    values)``, input in ``tmp_path / "a"`` and ``"b"`` in turn), then every checkpoint resumed side by side with
    ``resumer``: what each restart produced, by checkpoint."""
    how = {}
    for (query, *checkpoints), folder in zip(runs, ("a", "b"), strict=True):
        add_input(tmp_path / folder / "input", new_batches(query))
        how.update({cp: (query, tmp_path / folder / "input") for cp in checkpoints})
    order = [cp for _, *checkpoints in runs for cp in checkpoints]
    resumed = restart_each(lambda cp: resumer(spark.newSession(), how[cp][0], cp, how[cp][1]), order)
    return dict(zip(order, resumed, strict=True))


def test_encoding_and_merge_operator_change_resume_as_if_run_so_from_the_start(spark, tmp_path):
    # query a says nothing of the encoding (unsaferow, Spark's default); a list's elements are merged values
    query_a = _over_x(_with(QUERIES["tws"], {CONF_MERGE_OPERATOR: "1"}))
    query_b = _over_x(_with(QUERIES["tws_avro"], {CONF_MERGE_OPERATOR: "2"}))
    run_a, run_b = side_by_side(
        lambda: run_query(spark.newSession(), query_a, tmp_path / "a"),
        lambda: run_query(spark.newSession(), query_b, tmp_path / "b"),
    )
    for run in (run_a, run_b):
        forget_unfinished_batch(run)  # stopped on a processing-time trigger while planning its next batch
    a_to_b, b_to_a = str(tmp_path / "a-to-b"), str(tmp_path / "b-to-a")
    # through Spark (spark=): the same rows as the rewrite on the driver
    state_reader.rewrite(run_a, a_to_b, confs=_values(ENCODING_AND_LISTS, 1), spark=spark)
    local = str(tmp_path / "a-to-b-local")
    state_reader.rewrite(run_a, local, confs=_values(ENCODING_AND_LISTS, 1))
    assert stored_rows(a_to_b) == stored_rows(local)
    state_reader.rewrite(run_b, b_to_a, confs=_values(ENCODING_AND_LISTS, 0))
    # resumed in a session that says the old values: the offset log decides
    got = _resumed_each(spark, resume_with_timers, tmp_path, (query_a, run_a, a_to_b), (query_b, run_b, b_to_a))
    assert got[run_b] and got[run_a], "the restarted query ran no batch"
    for ran_so, rewritten, which in ((run_b, a_to_b, 1), (run_a, b_to_a, 0)):
        assert got[rewritten] == got[ran_so]
        for key, value in _values(ENCODING_AND_LISTS, which).items():
            assert _recorded(rewritten, key) == _recorded(ran_so, key) == value, key
        for options in VARIABLES:
            expected = _state(spark, ran_so, options)
            assert expected, options
            assert _state(spark, rewritten, options) == expected, options


def _commit_format(checkpoint: str) -> str:
    """The checkpoint format the latest commit entry says: 2 with unique ids (``v2``), else 1."""
    commits = Path(checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    header, entry = (commits / str(last)).read_text().splitlines()[:2]
    return "2" if header == "v2" and json.loads(entry).get("stateUniqueIds") else "1"


def _state_files(checkpoint: str) -> list[str]:
    return sorted(p.name for p in (Path(checkpoint) / "state" / "0" / "0").glob("*.zip"))


def test_checkpoint_format_and_row_checksums_change_resume_as_if_run_so_from_the_start(spark, tmp_path):
    dedup = _with(QUERIES["dedup"], ROCKSDB_CHANGELOG)
    query_a = _over_x(_with(dedup, _values(NAMES_AND_CHECKSUMS, 0)))
    query_b = _over_x(_with(dedup, _values(NAMES_AND_CHECKSUMS, 1)))
    run_a, run_b = side_by_side(
        lambda: run_query(spark.newSession(), query_a, tmp_path / "a"),
        lambda: run_query(spark.newSession(), query_b, tmp_path / "b"),
    )
    a_to_b, b_to_a = str(tmp_path / "a-to-b"), str(tmp_path / "b-to-a")
    report = state_reader.rewrite(run_a, a_to_b, confs=_values(NAMES_AND_CHECKSUMS, 1))
    assert [(c["old"], c["new"], c["changed"]) for c in report.confs] == [("1", "2", True), ("false", "true", True)]
    state_reader.rewrite(run_b, b_to_a, confs=_values(NAMES_AND_CHECKSUMS, 0), spark=spark)
    local = str(tmp_path / "b-to-a-local")
    state_reader.rewrite(run_b, local, confs=_values(NAMES_AND_CHECKSUMS, 0))
    assert stored_rows(b_to_a) == stored_rows(local)
    assert all("_" in name for name in _state_files(a_to_b)) and not any("_" in n for n in _state_files(b_to_a))
    # resumed in a session that says the old values: Spark keeps the format the commit log says, and the
    # checksums the offset log says
    got = _resumed_each(spark, resume, tmp_path, (query_a, run_a, a_to_b), (query_b, run_b, b_to_a))
    assert got[run_b] and got[run_a], "the restarted query ran no batch"
    for ran_so, rewritten, which in ((run_b, a_to_b, 1), (run_a, b_to_a, 0)):
        values = _values(NAMES_AND_CHECKSUMS, which)
        assert got[rewritten] == got[ran_so]
        assert _commit_format(rewritten) == _commit_format(ran_so) == values[CONF_CHECKPOINT_FORMAT]
        assert _recorded(rewritten, CONF_ROW_CHECKSUM) == _recorded(ran_so, CONF_ROW_CHECKSUM)
        assert _recorded(rewritten, CONF_ROW_CHECKSUM) == values[CONF_ROW_CHECKSUM]
        # Spark's reader reads format 2 only when its session says so; it checks every row's checksum
        with session_confs(spark, {CONF_CHECKPOINT_FORMAT: values[CONF_CHECKPOINT_FORMAT], **VERIFY_ROW_CHECKSUMS}):
            expected = state_rows(spark, ran_so)
            assert expected
            assert state_rows(spark, rewritten) == expected
