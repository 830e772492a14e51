"""``doctor``'s checks on the logs and the state: batches planned but not committed, a stalled
watermark, skew, rows past the watermark, large rows, overdue timers, state that is never evicted (by
the rules of each operator, a stream-stream join's included, and the change feed's deletes), and
stores that cannot be read.
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from state_reader.core.eviction import (
    EVENT_TIME,
    EVENTS,
    EXPIRY,
    NEVER,
    NONE_MS,
    SESSION_END,
    WINDOW_END,
    Clocks,
    EvictionTimes,
    KeyVerdicts,
    due_at,
    eviction_times,
    key_verdicts,
    timeout_fires_at,
)
from state_reader.core.planner import plan_store_read
from state_reader.core.retained import first_retained
from state_reader.core.scan import read_table
from state_reader.core.skew import is_skewed, skew
from state_reader.errors import MissingSchemaFileError, StateReaderError
from state_reader.grouping import group_ids
from state_reader.inspect.doctor_findings import Finding, Store, plural
from state_reader.model import operators
from state_reader.model.checkpoint import (
    JOIN_STORES,
    JOIN_V4_STORES,
    WATERMARK_METADATA,
    CheckpointDir,
    OffsetEntry,
    numeric_names,
)
from state_reader.units import human_bytes, iso_time

# --- the log checks ----------------------------------------------------------------------------------


def uncommitted(cp: CheckpointDir, committed: list[int]) -> list[Finding]:
    planned = numeric_names(cp.storage.list_names("offsets"))
    pending = [b for b in planned if b > committed[-1]]
    if not pending:
        return []
    return [
        Finding(
            "uncommitted-batch",
            "info",
            None,
            None,
            f"batch {pending[0]} was planned (offsets/{pending[0]}) but never committed",
            # last_committed_batch: the earlier name, beside the vocabulary's for one release
            {"planned_batches": pending, "last_committed_batch": committed[-1], "latest_batch_id": committed[-1]},
            "the query stopped during that batch, or is running it now; on restart it runs the batch again "
            "from the same offsets, so nothing is lost. If it keeps failing there, its driver log says why",
        )
    ]


def watermark_stalled(
    entries: dict[int, OffsetEntry], limit: float, event_time_ms: int | None, waiting: int | None = None
) -> list[Finding]:
    """A watermark that has not moved over ``limit`` batches that took input; ``waiting``: the keys whose
    verdict waits for it to move (``state_reader.verdicts``: evicted, expired or fired by the watermark)."""
    batches = sorted(entries)
    last = entries[batches[-1]].watermark_ms
    if last <= 0:
        return []  # no watermark defined
    since, with_input = batches[-1], 0
    for prev, batch in zip(reversed(batches[:-1]), reversed(batches[1:]), strict=True):
        if entries[batch].watermark_ms != last:
            break
        since = batch
        with_input += entries[batch].sources != entries[prev].sources
        if entries[prev].watermark_ms != last:
            break
    if with_input < limit:
        return []
    evidence: dict[str, Any] = {
        "watermark": iso_time(last),
        "unchanged_since_batch": since,
        "batches_with_input": with_input,
        "latest_batch": batches[-1],  # the earlier name, beside the vocabulary's for one release
        "latest_batch_id": batches[-1],
    }
    if event_time_ms is not None:
        evidence["latest_event_time_in_state"] = iso_time(event_time_ms)
    if waiting is not None:
        evidence["keys_waiting_for_watermark"] = waiting
    return [
        Finding(
            "watermark-stalled",
            "warning",
            None,
            None,
            f"the watermark has stayed at {iso_time(last)} since batch {since}, over {with_input} batches that "
            "took input" + ("" if waiting is None else f"; {plural(waiting, 'key')} in state wait for it to move"),
            evidence,
            "the watermark is the minimum over every input's event time (minus its delay): an input, a Kafka "
            "partition or a join side whose event time stopped moving holds it back. Find that input; for idle "
            "ones consider spark.sql.streaming.multipleWatermarkPolicy=max, or a smaller withWatermark delay",
        )
    ]


# --- the state checks --------------------------------------------------------------------------------


def _eviction_times(store: Store) -> EvictionTimes | None:
    """When the watermark evicts each row of ``store``, by the rule ``why`` gives a key's verdict by
    (:func:`state_reader.core.eviction.eviction_times`), or None when it cannot."""
    return eviction_times(store.plan.key_schema, store.table, store.operator_name)


# what a row's time is, in a finding's words
_OF = {WINDOW_END: "window end", EVENT_TIME: "event time ({})", EXPIRY: "expiry", SESSION_END: "session end"}


def _stored_sizes(store: Store, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(state bytes, key bytes) of each row of one partition as the store keeps it (its key and value
    uncompressed: what ``stats`` counts), measured as the store was read (none for a join side)."""
    sizes = store.sizes.get(partition_id)
    if sizes is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return sizes.state, sizes.key


def _keys_as_read(store: Store, keys: pa.Array | pa.ChunkedArray, stored: int) -> pa.Array | pa.ChunkedArray | None:
    """``keys``, one partition's as read, when they are its ``stored`` rows one for one and in the order
    the provider loads them (a plain store's), else None (a variable's rows are its list elements or map
    entries, grouped by key)."""
    return keys if store.plan.variable is None and len(keys) == stored else None


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def skewed_partition(store: Store, limits: dict[str, float]) -> list[Finding]:
    counts = dict.fromkeys(store.plan.partitions, 0)
    for pid, n in zip(*np.unique(store.table.column("partition_id").to_numpy(), return_counts=True), strict=True):
        counts[int(pid)] = int(n)
    rows = list(counts.values())
    worst = max(counts, key=lambda p: counts[p])
    median = statistics.median(rows)
    if not is_skewed(counts[worst], median, limits["skew"], limits["skew-min-rows"]) or len(rows) < 2:
        return []
    ratio = skew(counts[worst], median)
    # more than half the partitions empty: the ratio is infinite, say how many are empty instead
    evidence: dict[str, Any] = {
        "partition": worst,
        "rows": counts[worst],
        "median_rows": median,
        "ratio": round(ratio, 1) if math.isfinite(ratio) else None,
        "partitions": len(rows),
        "empty_partitions": sum(n == 0 for n in rows),
    }
    versus = (
        f"{ratio:.1f}× the median partition ({median:g})"
        if math.isfinite(ratio)
        else f"while {evidence['empty_partitions']} of {len(rows)} partitions are empty"
    )
    in_worst = store.table.filter(pc.equal(store.table.column("partition_id"), worst))
    keys = in_worst.column("key").combine_chunks()
    ids = group_ids(keys)
    per_key = np.bincount(ids)
    if per_key.size and per_key.max() > 1:  # several rows per key (list state, join buffers): the heavy keys
        heavy = np.argsort(per_key)[::-1][:3]
        first_row = {int(g): int(np.argmax(ids == g)) for g in heavy}
        evidence["heaviest_keys"] = [
            {"key": _short(keys[first_row[int(g)]].as_py()), "rows": int(per_key[g])} for g in heavy
        ]
    else:  # a row per key: the keys whose rows are largest, in state bytes
        evidence["keys_in_partition"] = int(per_key.size)
        sizes, _ = _stored_sizes(store, worst)
        shown = _keys_as_read(store, keys, len(sizes))
        if shown is not None and len(sizes):
            evidence["largest_keys"] = [
                {"key": _short(shown[int(i)].as_py()), "bytes": int(sizes[i])} for i in np.argsort(sizes)[::-1][:3]
            ]
    return [
        Finding(
            "skew",
            "warning",
            store.operator_id,
            store.store_name,
            f"partition {worst} holds {counts[worst]} rows, {versus}",
            evidence,
            "one task does most of this operator's work in every batch. Spread the hot keys (add a salt column to "
            "the grouping key and aggregate twice), or, when keys are many but land unevenly, change the number of "
            "state partitions (a rewrite of the checkpoint)",
        )
    ]


def expired_rows(store: Store, watermark_ms: int) -> tuple[list[Finding], int | None]:
    """(findings, latest event time held in the state) for a store whose rows expire with the watermark."""
    if store.table.num_rows == 0:
        return [], None
    found = _eviction_times(store)
    if found is None:
        return [], None
    what = _OF[found.kind].format(found.column)
    leaves = found.leaves_at_ms()
    valid = leaves[leaves != NONE_MS]
    latest = int(valid.max()) if valid.size else None
    if watermark_ms <= 0:
        return [], latest
    expired = valid[valid <= watermark_ms]  # gone in the first batch whose watermark reaches it
    if not expired.size:
        return [], latest
    return [
        Finding(
            "expired-rows",
            "warning",
            store.operator_id,
            store.store_name,
            f"{expired.size} of {store.table.num_rows} rows have a {what} at or before the "
            f"watermark ({iso_time(watermark_ms)}) and should have been evicted",
            {
                "expired_rows": int(expired.size),
                "rows": store.table.num_rows,
                "oldest": iso_time(int(expired.min())),
                "of": what,
                "watermark": iso_time(watermark_ms),
            },
            "Spark evicts these rows in the batch whose watermark passes them, except in complete output mode, "
            "which keeps every key forever: use update or append mode with withWatermark on the event-time "
            "column",
        )
    ], latest


def large_rows(store: Store, limit: float) -> list[Finding]:
    """Rows whose state bytes (key and value as the store keeps them, uncompressed: what ``stats``
    counts) reach ``limit``."""
    if store.table.num_rows == 0 or store.plan.join is not None:
        return []
    found: list[tuple[int, int, int, int, int]] = []  # (state bytes, key bytes, partition, row, rows stored)
    for pid in store.plan.partitions:
        sizes, key_sizes = _stored_sizes(store, pid)
        found += [(int(sizes[i]), int(key_sizes[i]), pid, int(i), len(sizes)) for i in np.flatnonzero(sizes >= limit)]
    if not found:
        return []
    found.sort(key=lambda row: row[0], reverse=True)
    largest = []
    for size, key_size, pid, i, stored in found[:3]:
        row: dict[str, Any] = {"bytes": size, "key_bytes": key_size, "value_bytes": size - key_size, "partition": pid}
        in_partition = pc.equal(store.table.column("partition_id"), pid)
        shown = _keys_as_read(store, store.table.column("key").filter(in_partition), stored)
        if shown is not None:
            row["key"] = _short(shown[i].as_py())
        largest.append(row)
    biggest = largest[0]
    return [
        Finding(
            "large-rows",
            "warning",
            store.operator_id,
            store.store_name,
            f"{plural(len(found), 'row')} of at least {human_bytes(limit)} (key and value as stored); the largest "
            f"is {human_bytes(biggest['bytes'])}",
            {
                # where the largest row's bytes are: most of them in its key or in its value
                "column": "key" if biggest["key_bytes"] > biggest["value_bytes"] else "value",
                "largest": largest,
                "at_least_limit": len(found),
            },
            "every update of such a row rewrites it whole, in memory, in the changelog or delta file and in "
            "the next snapshot; keep large payloads out of state (store a reference), or split them",
        )
    ]


def overdue_timers(store: Store, entry: OffsetEntry | None) -> list[Finding]:
    """Timers (transformWithState) and timeouts (flatMapGroupsWithState) the last batch should have fired."""
    if entry is None or store.table.num_rows == 0:
        return []
    table = store.table
    if "expiration_timestamp_ms" in table.column_names:  # a transformWithState timer family
        event_time = "event" in store.store_name.lower()
        due = table.column("expiration_timestamp_ms")
    else:
        if "value" not in table.column_names:
            return []
        value_type = table.schema.field("value").type
        if not (pa.types.is_struct(value_type) and "timeoutTimestamp" in [f.name for f in value_type]):
            return []
        due = pc.struct_field(table.column("value"), "timeoutTimestamp")
        due = due.filter(pc.not_equal(due, -1))  # -1: no timeout set
        event_time = False  # processing-time or event-time timeouts: both are late once behind both clocks
    now = entry.watermark_ms if event_time else entry.timestamp_ms
    if not event_time and entry.watermark_ms > 0 and "expiration_timestamp_ms" not in table.column_names:
        now = min(now, entry.watermark_ms)
    values = np.asarray(due.to_numpy(zero_copy_only=False), dtype=np.int64) if len(due) else np.zeros(0, np.int64)
    # the clock at which each fires, by the rule why predicts with: a timer once the clock reaches it, a
    # (flat)mapGroupsWithState timeout once the clock is past it
    fires_at = due_at if "expiration_timestamp_ms" in table.column_names else timeout_fires_at
    firing = np.fromiter((fires_at(int(v)) for v in values), dtype=np.int64, count=len(values))
    late = values[firing <= now] if now > 0 else values[:0]
    if not late.size:
        return []
    clock = "watermark" if event_time else "processing time"
    return [
        Finding(
            "overdue-timers",
            "warning",
            store.operator_id,
            store.store_name,
            f"{plural(int(late.size), 'timer')} due before the last batch's {clock} ({iso_time(now)}) have not "
            f"fired; the oldest was due at {iso_time(int(late.min()))}",
            {
                "overdue": int(late.size),
                "timers": len(values),
                "oldest_due": iso_time(int(late.min())),
                clock.replace(" ", "_"): iso_time(now),
            },
            "a timer fires in the first batch at or after its time; one set in the past fires only in the next "
            "batch, and never if no batch runs. Set processing-time timers from the current processing time "
            "(not from event time), and check that batches keep running "
            "(spark.sql.streaming.noDataMicroBatches.enabled)",
        )
    ]


def store_verdicts(store: Store, entries: dict[int, OffsetEntry]) -> KeyVerdicts | None:
    """Every key's verdict of ``store`` (``state_reader.verdicts``' rules, over the rows already read), or
    None for a store whose keys the read alone does not give (a join's own stores, whose keys are a
    side's rows in pieces; transformWithState, whose timers are in another family)."""
    if store.operator_name == operators.JOIN or operators.is_transform_with_state(store.operator_name):
        return None
    if _join_stores(store) is not None or "key" not in store.table.column_names:
        return None
    return key_verdicts(
        store.table, operator_name=store.operator_name, key_schema=store.plan.key_schema, clocks=Clocks.of(entries)
    )


def waiting_for_the_watermark(found: KeyVerdicts | None) -> int:
    """The keys whose verdict waits for the watermark to move (evicted, expired or fired by it, not yet)."""
    if found is None:
        return 0
    return int((found.has_when & found.on_watermark & ~found.overdue).sum())


def never_evicted(
    cp: CheckpointDir,
    store: Store,
    entries: dict[int, OffsetEntry],
    limit: float,
    feeds: dict[tuple[int, str, int, int], int | None] | None = None,
) -> list[Finding]:
    """A store that grew over ``limit`` batches with nothing removed, whose operator has no way to evict.

    ``feeds``: the deletes each store's change feed holds, kept across the stores of one diagnosis.
    """
    latest = store.plan.batch_id
    if not cp.committed_batches or latest - cp.committed_batches[0] < limit:
        return []
    reason = no_eviction_reason(cp, store, entries)
    if reason is None:
        return []
    first_batch = first_retained(cp, store.plan)  # the oldest state still on disk, read only when it matters
    if first_batch is None or latest - first_batch < limit:
        return []
    try:
        earlier = read_table(
            plan_store_read(cp, store.operator_id, store.store_name, first_batch, store.operator_name),
            show_progress=False,
        )
    except StateReaderError:
        return []
    if store.table.num_rows <= earlier.num_rows:
        return []
    keys = pa.concat_arrays([earlier.column("key").combine_chunks(), store.table.column("key").combine_chunks()])
    ids = group_ids(keys)
    removed = len(set(ids[: earlier.num_rows].tolist()) - set(ids[earlier.num_rows :].tolist()))
    if removed:
        return []
    # a key removed and written again is in both reads, and a join reuses its row indexes: the change
    # feed shows the removal itself
    deletes = _deletes(cp, store, first_batch, {} if feeds is None else feeds)
    if deletes:
        return []
    join = _join_stores(store) is not None
    found = store_verdicts(store, entries)
    # the verdicts' count, as `why CP` (no key filter) and state_reader.verdicts give it
    never = None if found is None else int((found.event_code == EVENTS.index(NEVER)).sum())
    cited = "" if never is None else f"; {plural(never, 'key')} of {len(found or [])} will never leave"
    return [
        Finding(
            "never-evicted",
            "warning",
            store.operator_id,
            store.store_name,
            f"state grew from {earlier.num_rows} to {store.table.num_rows} rows over batches {first_batch}..{latest} "
            f"and no key was removed: {reason}{cited}",
            {
                "first_batch": first_batch,  # first_batch, latest_batch: the earlier names, for one release
                "first_batch_id": first_batch,
                "latest_batch": latest,
                "latest_batch_id": latest,
                "rows_first": earlier.num_rows,
                "rows_latest": store.table.num_rows,
                "keys_removed": 0,
                "deletes_in_change_feed": deletes,  # None: no change feed (RocksDB without changelogs)
                "keys_never_evicted": never,  # verdicts' "never" (None: a join's or transformWithState's store)
                "why": reason,
            },
            "this state only grows until the query runs out of memory or slows down. "
            + (
                "Give the join a way to evict: withWatermark on both inputs and a join condition that bounds "
                "each side's event time by the other's (a time range), or a watermarked event-time column "
                "(a window) in the join key"
                if join
                else "Give the operator a way to evict: withWatermark on an event-time column that is part of the "
                "key (dropDuplicates, aggregation), timeouts (flatMapGroupsWithState), or TTL (transformWithState)"
            ),
        )
    ]


def _deletes(
    cp: CheckpointDir, store: Store, first_batch: int, feeds: dict[tuple[int, str, int, int], int | None]
) -> int | None:
    """Deletes in the change feed of the batches after ``first_batch``, of this store or of a store Spark
    evicts with it (a join side's row store); None when no change feed can be read."""
    latest = store.plan.batch_id
    names = [store.store_name]
    stores = _join_stores(store)
    if stores is not None:  # a side's rows leave its row store whenever they leave its count store
        side = store.store_name.split("-", 1)[0]
        names += [n for n in stores if n.startswith(f"{side}-") and n != store.store_name]
    total: int | None = None
    for name in names:
        seen = (store.operator_id, name, first_batch, latest)
        if seen not in feeds:
            try:
                feed = read_table(
                    plan_store_read(
                        cp,
                        store.operator_id,
                        name,
                        None,
                        store.operator_name,
                        read_change_feed=True,
                        change_start_batch_id=first_batch + 1,
                        change_end_batch_id=latest,
                    ),
                    show_progress=False,
                )
                feeds[seen] = int(pc.sum(pc.equal(feed.column("change_type"), "delete")).as_py() or 0)
            except StateReaderError:  # no change feed: RocksDB without changelogs, a timer family
                feeds[seen] = None
        found = feeds[seen]
        if found is not None:
            total = (total or 0) + found
        if total:
            return total
    return total


def _join_stores(store: Store) -> tuple[str, ...] | None:
    """The four stores of the stream-stream join ``store`` belongs to (its state format's), else None."""
    for stores in (JOIN_STORES, JOIN_V4_STORES):
        if store.store_name in stores:
            return stores
    return None


def no_eviction_reason(cp: CheckpointDir, store: Store, entries: dict[int, OffsetEntry]) -> str | None:
    """Why this store cannot shrink, or None when it has a way to.

    Each operator evicts its own way: aggregations, deduplication and session windows
    drop a key once the watermark reaches its event time (:func:`_eviction_times`); a
    stream-stream join drops rows by the event time in its rows (:func:`_join_no_eviction`);
    flatMapGroupsWithState by timeouts, transformWithState by TTL, and both by removal.
    """
    if operators.is_transform_with_state(store.operator_name):
        # a variable with TTL expires; one without may still be cleared by the processor, which the
        # "no key removed" evidence rules out
        value = store.table.schema.field("value").type if "value" in store.table.column_names else None
        has_ttl = value is not None and pa.types.is_struct(value) and "ttlExpirationMs" in [f.name for f in value]
        return None if has_ttl or store.store_name.startswith("$") else "the state variable has no TTL"
    value_type = store.plan.arrow_schema.field("value").type
    has_timeouts = pa.types.is_struct(value_type) and "timeoutTimestamp" in [f.name for f in value_type]
    if has_timeouts or store.operator_name in operators.FLAT_MAP_GROUPS_WITH_STATE:
        # flatMapGroupsWithState: a group leaves the state when its timeout fires (or the function removes it)
        if not has_timeouts:
            return "the operator runs without timeouts (GroupStateTimeout.NoTimeout)"
        timeouts = pc.struct_field(store.table.column("value"), "timeoutTimestamp")
        return "no group has a timeout set" if pc.max(timeouts).as_py() in (None, -1) else None
    if all(e.watermark_ms <= 0 for e in entries.values()):
        return "the query defines no watermark, so no key can expire"
    if _join_stores(store) is not None:
        return _join_no_eviction(cp, store)
    if store.operator_name == operators.JOIN:
        return None  # a join's store of a layout not known here: nothing tells how it evicts
    if _eviction_times(store) is None:
        return "the key holds no event-time column, so the watermark cannot expire any key"
    return None


def _join_no_eviction(cp: CheckpointDir, store: Store) -> str | None:
    """Why a side of a stream-stream join cannot shrink, or None when it may.

    Spark evicts a side's rows by the join key when the key holds a watermarked column
    of either input (both sides then), else by the event time in the side's rows when
    that input has a watermark and the condition bounds it by the other input's
    watermarked column. Each input's watermarked column carries the watermark delay in
    the schema of the side's rows; the join key's schema keeps no such mark, only its
    types. The condition is not in the checkpoint: a side that may evict by it is taken
    to, and the change feed says whether it did.
    """
    stores = _join_stores(store) or ()
    side = store.store_name.split("-", 1)[0]
    other = "right" if side == "left" else "left"
    marked = {"left": False, "right": False}
    for name in stores:
        try:
            plan = (
                store.plan
                if name == store.store_name
                else plan_store_read(cp, store.operator_id, name, store.plan.batch_id, store.operator_name)
            )
        except StateReaderError:
            return None  # a side's schema unknown: nothing to decide by
        watermarked = any(WATERMARK_METADATA in (f.metadata or {}) for f in plan.value_schema.fields)
        marked[name.split("-", 1)[0]] |= watermarked
    if (marked[side] or marked[other]) and any(_holds_time(f.data_type) for f in store.plan.key_schema.fields):
        return None  # a watermarked join key evicts both sides
    if marked[side] and marked[other]:
        return None
    if not marked[side]:
        return (
            f"the {side} input has no watermark and the join key holds no event-time column, so no watermark "
            f"can evict the {side} side's rows"
        )
    return (
        f"the {other} input has no watermark, so the join condition cannot bound the {side} side's event time by "
        f"it, and the join key holds no event-time column: no watermark can evict the {side} side's rows"
    )


def _holds_time(data_type: Any) -> bool:
    """Whether a join key's field can be an event-time column: a timestamp, or a window of them."""
    if data_type.kind == "timestamp":
        return True
    return data_type.kind == "struct" and any(_holds_time(f.data_type) for f in data_type.fields)


def unreadable(op: int, store_name: str, batch_id: int | None, exc: StateReaderError) -> Finding:
    """A store whose latest batch cannot be read: no other check can look at it. A missing or damaged
    state file keeps Spark from restarting the query too; a missing schema file does not, as Spark
    writes one when the query starts and finds none."""
    if isinstance(exc, MissingSchemaFileError):
        action = (
            "reading this store (with state_reader, or with Spark's reader) needs its key and value schemas: "
            "give them as DDL with the read options keySchema and valueSchema (key_schema and value_schema in "
            "Python, --key-schema and --value-schema on the command line). Restarting the query does not need "
            "the file: when a query starts and finds no schema file for a store, Spark writes one from the "
            "query's own schemas (its schema compatibility check, on by default)"
        )
    else:
        action = (
            "Spark cannot restart the query from this checkpoint until the file is back. `state-reader verify` "
            "lists every missing or damaged file; restore them from a copy of the checkpoint, or, if the newest "
            "commits are what is wrong (a commit past the state files), remove those commits and offsets with "
            "the query stopped so that it runs those batches again"
        )
    return Finding(
        "unreadable-store",
        "error",
        op,
        store_name,
        f"the state of batch {batch_id} cannot be read: {exc.message}",
        {"error": type(exc).__name__, "file": getattr(exc, "path", None)},
        action,
    )
