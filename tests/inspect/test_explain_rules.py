"""The verdict's rules on synthetic keys, no Spark: each operator's rule at its exact boundary (a
watermark, or a batch time, equal to the time the key leaves state and 1 ms before), and the doctor
and ``why`` holding a key to one eviction time. ``tests/inspect/test_explain.py`` checks the same rules
against real queries."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from state_reader.core import eviction
from state_reader.formats.spark_types import StructField, StructType, parse_ddl
from state_reader.inspect import doctor_state
from state_reader.inspect.doctor_findings import Store
from state_reader.inspect.explain_rules import DELETE, INSERT, KeyFacts, TimelineEntry, Verdict, verdict
from state_reader.model import operators
from state_reader.model.checkpoint import WATERMARK_METADATA, OffsetEntry

T = 1_700_000_010_000  # the time a key leaves state (ms), whole seconds
BATCH_TIME = 1_700_000_500_000  # a batch time far from every watermark below


def _at(ms: int, micros: int = 0) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc) + dt.timedelta(microseconds=micros)


def _schema(ddl: str, marked: str | None = None) -> StructType:
    """``ddl``'s fields, ``marked`` carrying the watermark delay as Spark marks an event-time column."""
    fields = parse_ddl(ddl).fields
    return StructType(
        [
            StructField(f.name, f.data_type, f.nullable, {WATERMARK_METADATA: 5000} if f.name == marked else {})
            for f in fields
        ]
    )


def _facts(
    operator_name: str | None,
    key: dict[str, Any],
    value: dict[str, Any],
    key_schema: StructType,
    *,
    watermark: int = 0,
    batch_time: int = BATCH_TIME,
    row_value_schema: StructType | None = None,
    rows: list[dict[str, Any]] | None = None,
    **more: Any,
) -> KeyFacts:
    """One key still in state after batch 1, whose offset log entry says ``watermark`` and ``batch_time``."""
    join = None if row_value_schema is None else SimpleNamespace(row_value_schema=row_value_schema)
    plan = SimpleNamespace(key_schema=key_schema, value_schema=row_value_schema, join=join)
    entries = {
        0: OffsetEntry(0, batch_time - 1000, {}, ()),
        1: OffsetEntry(watermark, batch_time, {}, ()),
    }
    return KeyFacts(
        operator_name=operator_name,
        plan=plan,  # type: ignore[arg-type]
        timeline=[TimelineEntry(1, batch_time, watermark, INSERT, None)],
        row=pa.Table.from_pylist(rows or [{"key": key, "value": value}]),
        entries=entries,
        latest_batch_id=1,
        **more,
    )


def _window(end_ms: int, micros: int = 0) -> dict[str, dt.datetime]:
    return {"start": _at(end_ms - 10_000), "end": _at(end_ms, micros)}


# each operator evicted by the watermark: (operator, key, value, key schema, event)
EVICTED_BY_THE_WATERMARK = {
    "windowed aggregation": (
        operators.AGGREGATION,
        {"window": _window(T), "k": "a"},
        {"count": 1},
        _schema("window STRUCT<start: TIMESTAMP, end: TIMESTAMP>, k STRING", "window"),
        "evict",
    ),
    "dropDuplicates": (
        operators.DEDUP,
        {"k": "a", "ts": _at(T)},
        {"__dummy__": None},
        _schema("k STRING, ts TIMESTAMP", "ts"),
        "expire",
    ),
    "dropDuplicatesWithinWatermark": (
        operators.DEDUP_WITHIN_WATERMARK,
        {"k": "a"},
        {"expiresAtMicros": T * 1000},
        _schema("k STRING"),
        "expire",
    ),
    "session window": (
        operators.SESSION_WINDOW,
        {"k": "a"},
        {"k": "a", "session_window": _window(T), "count": 2},
        _schema("k STRING"),
        "evict",
    ),
}


@pytest.mark.parametrize("kind", list(EVICTED_BY_THE_WATERMARK))
def test_a_key_leaves_at_the_watermark_equal_to_its_time(kind):
    name, key, value, schema, event = EVICTED_BY_THE_WATERMARK[kind]
    before = verdict(_facts(name, key, value, schema, watermark=T - 1))
    assert (before.event, before.when_watermark_ms, before.overdue, before.to_go_ms) == (event, T, False, 1)
    at = verdict(_facts(name, key, value, schema, watermark=T))
    assert (at.event, at.when_watermark_ms, at.overdue, at.to_go_ms) == (event, T, True, 0)


def test_a_time_between_milliseconds_leaves_at_the_next_one():
    name, _, value, schema, _ = EVICTED_BY_THE_WATERMARK["windowed aggregation"]
    key = {"window": _window(T, micros=1), "k": "a"}
    assert verdict(_facts(name, key, value, schema, watermark=T)).when_watermark_ms == T + 1


def test_the_expiry_in_the_value_comes_before_a_watermarked_key():
    # dropDuplicatesWithinWatermark on the event-time column too: Spark evicts by the stored expiry
    schema = _schema("k STRING, ts TIMESTAMP", "ts")
    facts = _facts(
        operators.DEDUP_WITHIN_WATERMARK,
        {"k": "a", "ts": _at(T - 5000)},
        {"expiresAtMicros": T * 1000},
        schema,
        watermark=1,
    )
    assert verdict(facts).when_watermark_ms == T


def test_never_without_a_watermarked_column_or_a_watermark():
    schema = _schema("k STRING")
    assert verdict(_facts(operators.AGGREGATION, {"k": "a"}, {"count": 1}, schema, watermark=T)).event == "never"
    name, key, value, marked, _ = EVICTED_BY_THE_WATERMARK["windowed aggregation"]
    no_watermark = verdict(_facts(name, key, value, marked, watermark=0))
    assert (no_watermark.event, no_watermark.details["event_time_ms"]) == ("never", T)


def test_a_key_deleted_in_the_last_batch_is_gone():
    facts = _facts(operators.AGGREGATION, {"k": "a"}, {"count": 1}, _schema("k STRING"), watermark=T)
    facts.timeline.append(TimelineEntry(2, BATCH_TIME + 1000, T, DELETE, None))
    found = verdict(facts)
    assert (found.event, found.batch_id, found.when_watermark_ms) == ("gone", 2, T)


# --- stream-stream joins, per side ---------------------------------------------------------------------


def _join(watermark: int, event_ms: int, *, keyed: bool = False) -> Verdict:
    """A join side's buffered row of event time ``event_ms`` (in the join key too when ``keyed``)."""
    rows = _schema("ts TIMESTAMP, v BIGINT", "ts")
    key = {"field0": _at(event_ms)} if keyed else {"field0": "a"}
    key_schema = _schema("field0 TIMESTAMP") if keyed else _schema("field0 STRING")
    return verdict(
        _facts(
            operators.JOIN, key, {"ts": _at(event_ms), "v": 1}, key_schema, watermark=watermark, row_value_schema=rows
        )
    )


def test_a_join_row_goes_a_millisecond_past_its_event_time_for_no_range_and_an_inclusive_bound():
    assert eviction.join_row_leaves_at(T * 1000) == T + 1
    stays, goes = _join(T, T), _join(T + 1, T)
    assert (stays.event, stays.when_watermark_ms, stays.to_go_ms) == ("evict", T + 1, 1)
    assert (goes.when_watermark_ms, goes.to_go_ms) == (T + 1, 0)
    assert stays.details["first_row_ms"] == T + 1


@pytest.mark.parametrize(
    ("range_ms", "inclusive", "leaves"),
    [
        (0, True, T + 1),  # the right side of BETWEEN: rts >= lts
        (5000, True, T + 5001),  # the left side of BETWEEN lts AND lts + 5 s
        (0, False, T),  # rts > lts
        (5000, False, T + 5000),  # rts < lts + 5 s
    ],
)
def test_a_join_rows_state_value_watermark_per_bound(range_ms, inclusive, leaves):
    assert eviction.join_row_leaves_at(T * 1000, range_ms, inclusive=inclusive) == leaves
    # Spark drops the row once its event time <= the state value watermark: W - range (- 1 ms inclusive)
    state_watermark = [w - range_ms - (1 if inclusive else 0) for w in (leaves - 1, leaves)]
    assert [T <= s for s in state_watermark] == [False, True]


def test_a_join_row_whose_event_time_is_a_join_key_goes_at_it():
    stays, goes = _join(T - 1, T, keyed=True), _join(T, T, keyed=True)
    assert (stays.event, stays.when_watermark_ms, stays.overdue) == ("evict", T, False)
    assert (goes.when_watermark_ms, goes.overdue) == (T, True)
    assert "state key watermark" in goes.details["rule"]


def test_a_join_side_without_a_watermark_is_never_dropped():
    rows = _schema("ts TIMESTAMP, v BIGINT")
    facts = _facts(
        operators.JOIN,
        {"field0": "a"},
        {"ts": _at(T), "v": 1},
        _schema("field0 STRING"),
        watermark=T,
        row_value_schema=rows,
    )
    assert verdict(facts).event == "never"


# --- (flat)mapGroupsWithState timeouts ---------------------------------------------------------------------


def _group(timeout: int, *, watermark: int = 0, batch_time: int = BATCH_TIME) -> Verdict:
    return verdict(
        _facts(
            operators.FLAT_MAP_GROUPS_WITH_STATE[0],
            {"k": "a"},
            {"count": 1, "timeoutTimestamp": timeout},
            _schema("k STRING"),
            watermark=watermark,
            batch_time=batch_time,
        )
    )


def test_a_processing_time_timeout_fires_once_the_batch_time_is_past_it():
    stays, fires = _group(T, batch_time=T), _group(T, batch_time=T + 1)
    assert (stays.event, stays.when_time_ms, stays.overdue, stays.to_go_ms) == ("fire", T + 1, False, 1)
    assert (fires.when_time_ms, fires.overdue) == (T + 1, True)
    assert stays.details["timeout"] == "processing time"


def test_an_event_time_timeout_fires_once_the_watermark_is_past_it():
    stays, fires = _group(T, watermark=T), _group(T, watermark=T + 1)
    assert (stays.event, stays.when_watermark_ms, stays.overdue) == ("fire", T + 1, False)
    assert (fires.when_watermark_ms, fires.overdue) == (T + 1, True)
    assert stays.details["timeout"] == "event time"
    assert eviction.timeout_fires_at(T) == T + 1


def test_a_group_without_a_timeout_never_times_out():
    assert _group(-1, watermark=T).event == "never"


# --- transformWithState: TTL and timers -------------------------------------------------------------


def _tws(value: dict[str, Any], *, watermark: int = 0, batch_time: int = BATCH_TIME, **more: Any) -> Verdict:
    name = operators.TRANSFORM_WITH_STATE[0]
    return verdict(
        _facts(name, {"k": "a"}, value, _schema("k STRING"), watermark=watermark, batch_time=batch_time, **more)
    )


def test_a_ttl_lapses_in_the_first_batch_whose_time_reaches_it():
    value = {"value": 1, "ttlExpirationMs": T}
    stays, goes = _tws(value, batch_time=T - 1), _tws(value, batch_time=T)
    assert (stays.event, stays.when_time_ms, stays.overdue, stays.to_go_ms) == ("expire", T, False, 1)
    assert (goes.when_time_ms, goes.overdue) == (T, True)


@pytest.mark.parametrize(("clock", "when"), [("processing time", "when_time_ms"), ("event time", "when_watermark_ms")])
def test_a_timer_fires_in_the_first_batch_whose_clock_reaches_it(clock, when):
    def at(now: int) -> Verdict:
        times = {"watermark": now} if clock == "event time" else {"batch_time": now}
        return _tws({"value": 1}, timers=[T, T + 60_000], timer_clock=clock, **times)

    stays, fires = at(T - 1), at(T)
    assert (stays.event, getattr(stays, when), stays.overdue) == ("fire", T, False)
    assert (getattr(fires, when), fires.overdue, fires.details["overdue_timers"]) == (T, True, 1)


def test_a_value_without_ttl_or_timer_never_expires():
    assert _tws({"value": 1}, watermark=T).event == "never"


# --- the doctor and why: one eviction time ------------------------------------------------------------


def _doctor_leaves_at(name: str, key: dict[str, Any], value: dict[str, Any], schema: StructType) -> int | None:
    """The first watermark at which the doctor finds the key's row past it (expired-rows), or None."""
    table = pa.Table.from_pylist([{"key": key, "value": value, "partition_id": 0}])
    store = Store(0, "default", name, SimpleNamespace(key_schema=schema), table)  # type: ignore[arg-type]
    for watermark in (T - 1, T, T + 1):
        findings, _ = doctor_state.expired_rows(store, watermark)
        if findings:
            return watermark
    return None


@pytest.mark.parametrize("kind", list(EVICTED_BY_THE_WATERMARK))
def test_the_doctor_and_why_hold_a_key_to_one_eviction_time(kind):
    name, key, value, schema, _ = EVICTED_BY_THE_WATERMARK[kind]
    shared = eviction.eviction_times(schema, pa.Table.from_pylist([{"key": key, "value": value}]), name)
    assert shared is not None
    assert int(shared.leaves_at_ms()[0]) == T
    assert verdict(_facts(name, key, value, schema, watermark=1)).when_watermark_ms == T
    assert _doctor_leaves_at(name, key, value, schema) == T


def test_the_doctor_and_why_both_call_the_shared_rule(monkeypatch):
    from state_reader.inspect import explain_rules

    assert doctor_state.eviction_times is eviction.eviction_times
    assert explain_rules.key_verdicts is eviction.key_verdicts  # why's verdict is every key's verdict
    calls: list[str] = []
    shared = eviction.eviction_times

    def counted(*args: Any) -> Any:
        calls.append("called")
        return shared(*args)

    monkeypatch.setattr(doctor_state, "eviction_times", counted)
    monkeypatch.setattr(eviction, "eviction_times", counted)
    name, key, value, schema, _ = EVICTED_BY_THE_WATERMARK["dropDuplicates"]
    assert _doctor_leaves_at(name, key, value, schema) == T
    assert verdict(_facts(name, key, value, schema, watermark=1)).when_watermark_ms == T
    assert len(calls) >= 2


# --- every key at once: the store's verdicts, key by key, are why's ----------------------------------------


def _store_and_keys(
    operator_name: str | None,
    rows: list[dict[str, Any]],
    key_schema: StructType,
    *,
    row_value_schema: StructType | None = None,
    timers: dict[str, list[int]] | None = None,
    **clocks: Any,
) -> None:
    """``key_verdicts`` over every row of a store at once gives each key the verdict ``why`` gives it alone
    (its rows alone, its own timers)."""
    table = pa.Table.from_pylist(rows)
    names = [repr(r["key"]) for r in rows]
    timers = timers or {}
    soonest = pa.array([min(timers[n]) if timers.get(n) else None for n in names], pa.int64())
    facts = _facts(operator_name, {}, {}, key_schema, row_value_schema=row_value_schema, rows=rows, **clocks)
    clock = eviction.Clocks.of(facts.entries)
    found = eviction.key_verdicts(
        table,
        operator_name=operator_name,
        key_schema=key_schema,
        clocks=clock,
        join_row_schema=row_value_schema,
        timers_ms=soonest,
        timer_clock=clocks.get("timer_clock"),
    )
    assert len(found) == len(dict.fromkeys(names))
    for i, row in enumerate(found.row.tolist()):
        mine = [r for r in rows if repr(r["key"]) == names[row]]
        one = verdict(
            _facts(
                operator_name,
                {},
                {},
                key_schema,
                row_value_schema=row_value_schema,
                rows=mine if operator_name == operators.JOIN else mine[-1:],
                timers=timers.get(names[row], []),
                **clocks,
            )
        )
        whole = (
            found.event[i],
            found.when_watermark_ms[i].as_py(),
            found.when_time_ms[i].as_py(),
            bool(found.overdue[i]),
        )
        assert whole == (one.event, one.when_watermark_ms, one.when_time_ms, one.overdue), names[row]


@pytest.mark.parametrize("kind", list(EVICTED_BY_THE_WATERMARK))
@pytest.mark.parametrize("watermark", [0, T - 1, T])
def test_every_key_at_once_is_each_key_alone_by_the_watermark(kind, watermark):
    name, key, value, schema, _ = EVICTED_BY_THE_WATERMARK[kind]
    rows = []
    for i, shift in enumerate((-2000, 0, 1, 5000)):
        k = {**key, "k": f"k{i}"}
        v = dict(value)
        if "window" in k:
            k["window"] = _window(T + shift)
        if "ts" in k:
            k["ts"] = _at(T + shift)
        if "expiresAtMicros" in v:
            v["expiresAtMicros"] = (T + shift) * 1000
        if "session_window" in v:
            v["session_window"] = _window(T + shift)
        rows.append({"key": k, "value": v})
    _store_and_keys(name, rows, schema, watermark=watermark)
    _store_and_keys(operators.AGGREGATION, rows, _schema("k STRING"), watermark=watermark)  # no watermarked column


@pytest.mark.parametrize(("watermark", "batch_time"), [(0, BATCH_TIME), (T, BATCH_TIME), (T, T + 2)])
def test_every_group_at_once_is_each_group_alone(watermark, batch_time):
    stamps = [-1, None, T - 1, T, T + 1, BATCH_TIME - 1, BATCH_TIME, BATCH_TIME + 5]
    rows = [{"key": {"k": f"g{i}"}, "value": {"count": 1, "timeoutTimestamp": stamp}} for i, stamp in enumerate(stamps)]
    name = operators.FLAT_MAP_GROUPS_WITH_STATE[0]
    _store_and_keys(name, rows, _schema("k STRING"), watermark=watermark, batch_time=batch_time)


@pytest.mark.parametrize("clock", ["processing time", "event time"])
@pytest.mark.parametrize(("watermark", "batch_time"), [(T, T), (T - 1, T + 10), (0, T - 10)])
def test_every_transform_with_state_key_at_once_is_each_key_alone(clock, watermark, batch_time):
    ttls = [None, T - 5, T, T + 5, None, T + 20]
    rows = [{"key": {"k": f"t{i}"}, "value": {"value": i, "ttlExpirationMs": ttl}} for i, ttl in enumerate(ttls)]
    timers = {repr({"k": "t0"}): [T + 3, T], repr({"k": "t3"}): [T + 1], repr({"k": "t5"}): [T + 40]}
    name = operators.TRANSFORM_WITH_STATE[0]
    _store_and_keys(
        name, rows, _schema("k STRING"), watermark=watermark, batch_time=batch_time, timers=timers, timer_clock=clock
    )
    lists = [{"key": {"k": f"t{i % 3}"}, "list_element": {"n": i}} for i in range(7)]
    _store_and_keys(name, lists, _schema("k STRING"), watermark=watermark, batch_time=batch_time, timers=timers)


@pytest.mark.parametrize("watermark", [0, T - 1, T, T + 1])
def test_every_join_key_at_once_is_each_key_alone(watermark):
    marked = _schema("ts TIMESTAMP, v BIGINT", "ts")
    ranged = [
        {"key": {"field0": k}, "value": {"ts": None if t is None else _at(t), "v": 1}}
        for k, t in [("a", T), ("b", T - 3), ("a", T - 7), ("c", None), ("b", T + 2), ("d", T - 1)]
    ]
    _store_and_keys(operators.JOIN, ranged, _schema("field0 STRING"), row_value_schema=marked, watermark=watermark)
    _store_and_keys(
        operators.JOIN, ranged, _schema("field0 STRING"), row_value_schema=_schema("ts TIMESTAMP, v BIGINT")
    )
    keyed = [
        {"key": {"field0": _at(t)}, "value": {"ts": _at(t), "v": v}}
        for t, v in [(T, 1), (T - 1, 2), (T, 3), (T + 4, 4)]
    ]
    _store_and_keys(operators.JOIN, keyed, _schema("field0 TIMESTAMP"), row_value_schema=marked, watermark=watermark)
