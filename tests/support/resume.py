"""The resume oracle of rewrites: a query restarted from a checkpoint with new input, the rows each new
batch produces, and Spark's built-in reader's view of a rewritten checkpoint's state and partitioning."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

from state_reader.core.options import from_kwargs
from state_reader.core.planner import plan_state_read, store_names_on_disk
from state_reader.io.storage import Storage
from state_reader.model.checkpoint import CheckpointDir
from tests.support.parallel import side_by_side
from tests.support.streaming_queries import (
    Query,
    session_confs,
    write_input,
)

T = TypeVar("T")
SHIFT = 200  # seconds: the new input comes after the old, so watermarks move on


def new_batches(query: Query) -> list[list[dict]]:
    """Two more batches: the last batch of the query's input again (the keys and windows the state
    holds now), then the first one later in event time (watermarks move on, state is evicted)."""
    old = query.batches()
    return [
        [dict(r) for r in old[-1]],
        [{**r, "ts": r["ts"] + SHIFT} if isinstance(r.get("ts"), (int, float)) else dict(r) for r in old[0]],
    ]


def add_input(directory: Path, batches: list[list[dict]]) -> None:
    staging = directory.parent / "more-input"
    write_input(batches, staging)
    now = time.time() + 5
    existing = len(list(directory.glob("part-*.json")))
    for i, path in enumerate(sorted(staging.glob("part-*.json"))):
        target = directory / f"part-{existing + i:04d}.json"
        shutil.move(str(path), target)
        os.utime(target, (now + i, now + i))  # after every file the query has read
    staging.rmdir()


def resume(spark, query: Query, checkpoint: str, input_dir: Path) -> dict[int, list[str]]:
    """Restart ``query`` from ``checkpoint`` over ``input_dir`` to the end; the rows of each new batch."""
    collected: dict[int, list[str]] = {}

    def sink(df, batch_id: int) -> None:
        collected[batch_id] = sorted(repr(tuple(r)) for r in df.collect())

    with session_confs(spark, query.confs):
        sources = [
            spark.readStream.schema(query.schema)
            .option("maxFilesPerTrigger", 1)
            .option("allowNonNumericNumbers", "true")
            .json(str(input_dir))
            for _ in range(query.sources)
        ]
        handle = (
            query.build(*sources)
            .writeStream.foreachBatch(sink)
            .outputMode(query.output_mode)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        handle.awaitTermination()
    return collected


def copy_as_another_query(src: str, dst: str) -> str:
    """A copy of checkpoint ``src`` under a query id of its own, to restart beside the rewrites of ``src``
    (which keep its id): Spark runs one instance of a query id at a time."""
    shutil.copytree(src, dst)
    (Path(dst) / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}, separators=(",", ":")))
    return dst


def restart_each(restart: Callable[[str], T], checkpoints: list[str]) -> list[T]:
    """``restart(checkpoint)`` for each of ``checkpoints``, side by side where their query ids differ (Spark
    runs one instance of a query id at a time): the results, in order."""
    ids = [json.loads((Path(cp) / "metadata").read_text())["id"] for cp in checkpoints]
    locks = {query_id: threading.Lock() for query_id in ids}

    def one(checkpoint: str, query_id: str) -> T:
        with locks[query_id]:
            return restart(checkpoint)

    return side_by_side(*[partial(one, cp, query_id) for cp, query_id in zip(checkpoints, ids, strict=True)])


def resume_each(spark, query: Query, checkpoints: list[str], input_dir: Path, timers: bool = False) -> list:
    """``resume`` (``resume_with_timers`` with ``timers``) from each of ``checkpoints`` over the same input,
    each in a session of its own, side by side where they can be: what each restart produced."""
    run = resume_with_timers if timers else resume
    return restart_each(lambda checkpoint: run(spark.newSession(), query, checkpoint, input_dir), checkpoints)


def resume_with_timers(spark, query: Query, checkpoint: str, input_dir: Path, batches: int = 2) -> list[list[str]]:
    """``resume`` for queries whose processing-time timers keep an availableNow trigger planning
    batches without data forever: run on a processing-time trigger until ``batches`` batches with
    output, then stop; their rows, in order (batches without data carry no rows and are skipped)."""
    collected: dict[int, list[str]] = {}

    def sink(df, batch_id: int) -> None:
        rows = sorted(repr(tuple(r)) for r in df.collect())
        if rows:
            collected[batch_id] = rows

    with session_confs(spark, query.confs):
        source = (
            spark.readStream.schema(query.schema)
            .option("maxFilesPerTrigger", 1)
            .option("allowNonNumericNumbers", "true")
            .json(str(input_dir))
        )
        handle = (
            query.build(source)
            .writeStream.foreachBatch(sink)
            .outputMode(query.output_mode)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="1 second")
            .start()
        )
        try:
            deadline = time.monotonic() + 180
            while len(collected) < batches and time.monotonic() < deadline:
                if handle.exception() is not None:
                    raise handle.exception()
                time.sleep(0.2)
            # the sink runs before the batch is committed: stop once it is, so the final state is that batch's
            last = Path(checkpoint) / "commits" / str(max(collected, default=0))
            while collected and not last.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            handle.stop()
    assert len(collected) >= batches, f"the restarted query produced {len(collected)} batches with output"
    return [collected[b] for b in sorted(collected)]


def digest(directory: str) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(directory).rglob("*"))
        if p.is_file()
    }


def stored_rows(checkpoint: str) -> set[tuple[bytes, bytes]]:
    """Every (key, value) of the checkpoint's stores, as the bytes the stores keep (column families
    included): what two writes of the same rows must agree on, whatever files hold them."""
    from state_reader.core.rewrite import plan_rewrite

    out = set()
    for rows in plan_rewrite(Storage(checkpoint)).stores:
        for pid in rows.plan.partitions:
            keys, values = rows.load(pid)
            for k0, kn, v0, vn in zip(keys.starts, keys.lengths, values.starts, values.lengths, strict=True):
                out.add((bytes(keys.buf[k0 : k0 + kn]), bytes(values.buf[v0 : v0 + vn])))
    return out


def state_rows(spark, checkpoint: str, **options) -> list[str]:
    reader = spark.read.format("statestore")
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(repr(tuple(r)) for r in reader.load(checkpoint).drop("partition_id").collect())


def stores(checkpoint: str) -> list[tuple[int, str]]:
    cp = CheckpointDir(Storage(checkpoint))
    return [(op, store) for op in cp.operator_ids for store in store_names_on_disk(cp, op)]


def assert_builtin_sees_same_state(spark, src: str, dst: str, num_partitions: int) -> None:
    """Spark's reader: the same rows in ``dst`` as in ``src``, each in pmod(hash(partition key), N). One read of
    each of ``dst``'s stores gives its rows, their partitions and the partitions Spark's ``hash()`` gives them;
    the source's rows are read once for all its rewrites (a test checks that it does not change)."""
    from pyspark.sql import functions as F

    for op, store in stores(src):
        options = {"operatorId": op, "storeName": store}
        plan = plan_state_read(from_kwargs(dst, {"operator_id": op, "store_name": store}))
        df = spark.read.format("statestore").options(**{k: str(v) for k, v in options.items()}).load(dst)
        names = df.schema["key"].dataType.names[: plan.partition_key_fields]
        hashed = F.pmod(F.hash(*[F.col("key")[n] for n in names]), F.lit(num_partitions))
        rows = df.withColumn("_hashed", hashed).collect()
        kept = [i for i, c in enumerate(df.columns) if c != "partition_id"]
        got = sorted(repr(tuple(r[i] for i in kept)) for r in rows)  # as state_rows() shows them
        assert got == _source_rows(spark, src, options), (op, store)
        if plan.partitions == [0] and num_partitions != 1:
            continue  # a single-partition operator (global limit)
        wrong = [r for r in rows if r["partition_id"] != r["_hashed"]]
        assert not wrong, (op, store, wrong[:3])
        assert {r["partition_id"] for r in rows} <= set(range(num_partitions))


_SOURCE_ROWS: dict[tuple, list[str]] = {}


def _source_rows(spark, src: str, options: dict) -> list[str]:
    """:func:`state_rows` of a source checkpoint, read once while none of its files changes (the rewrites of
    one source compare with the same rows)."""
    files = sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in Path(src).rglob("*") if p.is_file())
    key = (src, tuple(sorted(options.items())), tuple(files))
    if key not in _SOURCE_ROWS:
        _SOURCE_ROWS[key] = state_rows(spark, src, **options)
    return _SOURCE_ROWS[key]


def forget_unfinished_batch(checkpoint: str) -> None:
    """A query on a processing-time trigger is stopped while planning its next batch; drop that plan,
    as if it had stopped a moment earlier, so that a restart plans its next batch from the new input."""
    cp = Path(checkpoint)
    committed = max(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit())
    # the plan of that batch: its offsets, and what its sources logged for it
    for p in [*(cp / "offsets").iterdir(), *(cp / "sources").glob("*/*")]:
        number = p.name.removeprefix(".").removesuffix(".crc")
        if p.is_file() and number.isdigit() and int(number) > committed:
            p.unlink()
