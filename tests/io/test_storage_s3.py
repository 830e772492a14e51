"""Checkpoints on an S3-protocol server (moto's, started on 127.0.0.1 by the tests):
``s3://`` and ``s3a://`` URLs through both fronts, storage options as keywords and as
data source options, checksums verified remotely, and a server that goes away
mid-read ending in StorageError within the configured timeouts, not a hang."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import state_reader
from state_reader.core.planner import plan_state_read
from state_reader.core.scan import read_table
from state_reader.errors import ChecksumMismatchError, CorruptFileError, StorageError
from state_reader.io.calls import io_threads
from state_reader.io.storage import Storage
from tests.support.damage import StallingProxy, free_port
from tests.support.oracle import arrow_rows, spark_rows

boto3 = pytest.importorskip("boto3")
pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

BUCKET = "checkpoints"
CREDENTIALS = {"key": "testing", "secret": "testing", "client_kwargs": {"region_name": "us-east-1"}}
# bounded: one attempt per request at the botocore level, short timeouts
TIMEOUTS = {"config_kwargs": {"connect_timeout": 1, "read_timeout": 1, "retries": {"max_attempts": 1}}}
STALL_SECONDS_MAX = 60  # s3fs retries a timed-out request a few times; a hang would never end


@dataclass
class Server:
    """A running moto server and the fsspec options that reach it."""

    server: object
    port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def options(self, endpoint: str | None = None) -> dict:
        return {**CREDENTIALS, "endpoint_url": endpoint or self.endpoint, **TIMEOUTS}

    def upload(self, local: str | Path, prefix: str) -> None:
        import s3fs

        fs = s3fs.S3FileSystem(**self.options(), skip_instance_cache=True)
        fs.put(str(local), f"{BUCKET}/{prefix}", recursive=True)
        assert any(p.endswith(".crc") for p in fs.find(f"{BUCKET}/{prefix}")), "hidden .crc files not uploaded"


def _start() -> Server:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    return Server(server, port)


@pytest.fixture(scope="module")
def s3(checkpoints) -> Iterator[Server]:
    running = _start()
    for name in ("agg_window", "rocksdb_cl_agg_window"):
        running.upload(checkpoints(name), name)
    yield running
    running.server.stop()


READS = [{}, {"batch_id": 2}, {"read_change_feed": True, "change_start_batch_id": 1}]


@pytest.mark.parametrize("name", ["agg_window", "rocksdb_cl_agg_window"])
def test_spark_free_reads_s3_and_s3a(s3, checkpoints, name):
    local = checkpoints(name)
    for kwargs in READS:
        expected = arrow_rows(state_reader.read_state(local, **kwargs))
        assert expected
        for scheme in ("s3", "s3a"):
            table = state_reader.read_state(f"{scheme}://{BUCKET}/{name}", storage_options=s3.options(), **kwargs)
            assert arrow_rows(table) == expected, f"{scheme} {kwargs}"
    meta = state_reader.read_metadata(f"s3a://{BUCKET}/{name}", storage_options=s3.options())
    assert arrow_rows(meta) == arrow_rows(state_reader.read_metadata(local))


def test_data_source_reads_s3_with_storage_options(spark, s3, checkpoints):
    local = checkpoints("rocksdb_cl_agg_window")
    expected = arrow_rows(state_reader.read_state(local, exact_schema=True))
    url = f"s3a://{BUCKET}/rocksdb_cl_agg_window"
    as_json = spark.read.format("state_reader.statestore").option("storageOptions", json.dumps(s3.options()))
    assert spark_rows(as_json.load(url)) == expected
    # the same, one storage.<name> option per setting; nested objects as JSON text
    by_name = spark.read.format("state_reader.statestore")
    for key, value in s3.options().items():
        by_name = by_name.option(f"storage.{key}", value if isinstance(value, str) else json.dumps(value))
    assert spark_rows(by_name.option("batchId", 3).load(url)) == arrow_rows(
        state_reader.read_state(local, batch_id=3, exact_schema=True)
    )
    meta = spark.read.format("state_reader.state-metadata").option("storageOptions", json.dumps(s3.options()))
    assert spark_rows(meta.load(url)) == arrow_rows(state_reader.read_metadata(local))


def test_nested_client_kwargs_reach_the_filesystem(s3, checkpoints):
    """An endpoint given only inside ``client_kwargs`` is the one used: reads go through it, and
    fail when it names a port where nothing listens."""
    options = {**s3.options(), "endpoint_url": None}
    options["client_kwargs"] = {**CREDENTIALS["client_kwargs"], "endpoint_url": s3.endpoint}
    expected = arrow_rows(state_reader.read_state(checkpoints("agg_window")))
    assert arrow_rows(state_reader.read_state(f"s3://{BUCKET}/agg_window", storage_options=options)) == expected
    dead = f"http://127.0.0.1:{free_port()}"
    options["client_kwargs"] = {**CREDENTIALS["client_kwargs"], "endpoint_url": dead}
    with pytest.raises(StorageError, match=f"s3://{BUCKET}/agg_window"):
        state_reader.read_state(f"s3://{BUCKET}/agg_window", storage_options=options)


def test_connection_pool_as_wide_as_the_fetches_in_flight(s3):
    """The S3 client gets as many connections as a read has fetches in flight (botocore's own
    default is 10, which would hold the rest back), beside the other client settings given; a
    pool size given is kept."""
    from fsspec.asyn import sync

    def client_config(options: dict):  # botocore's Config of the client s3fs made
        fs = Storage(f"s3://{BUCKET}/agg_window", options).fs
        return sync(fs.loop, fs.set_session).meta.config

    config = client_config(s3.options())
    assert config.max_pool_connections == io_threads() == 64
    assert (config.connect_timeout, config.read_timeout) == (1, 1)  # TIMEOUTS still there
    given = {**s3.options(), "config_kwargs": {**TIMEOUTS["config_kwargs"], "max_pool_connections": 7}}
    assert client_config(given).max_pool_connections == 7


def test_checksums_verified_on_s3(s3, checkpoints, tmp_path):
    copy = tmp_path / "cp"
    shutil.copytree(checkpoints("agg_window"), copy)
    delta = copy / "state" / "0" / "1" / "1.delta"
    data = bytearray(delta.read_bytes())
    data[40] ^= 0x01
    delta.write_bytes(bytes(data))
    s3.upload(copy, "damaged")
    url = f"s3://{BUCKET}/damaged"
    with pytest.raises(ChecksumMismatchError, match=f"{url}/state/0/1/1.delta"):
        state_reader.read_state(url, storage_options=s3.options(), batch_id=0)
    with pytest.raises(CorruptFileError, match=f"{url}/state/0/1/1.delta"):
        state_reader.read_state(url, storage_options=s3.options(), batch_id=0, verify_checksums=False)


def test_server_stalling_mid_read_gives_storage_error(checkpoints):
    """Planned while the server answers; it then stops answering (connections stay open)."""
    running = _start()
    proxy = StallingProxy(running.port)
    try:
        running.upload(checkpoints("rocksdb_cl_agg_window"), "cp")
        url = f"s3://{BUCKET}/cp"
        plan = plan_state_read({"path": url, "storageOptions": running.options(f"http://127.0.0.1:{proxy.port}")})
        proxy.stalled.set()
        started = time.monotonic()
        with pytest.raises(StorageError) as caught:
            read_table(plan)
        assert time.monotonic() - started < STALL_SECONDS_MAX
        assert url in str(caught.value) and "timeout" in str(caught.value).lower()
    finally:
        proxy.close()
        running.server.stop()


def test_server_gone_gives_storage_error_through_both_fronts(spark, checkpoints):
    running = _start()
    url = f"s3a://{BUCKET}/cp"
    try:
        running.upload(checkpoints("agg_window"), "cp")
        options = running.options()
        reader = spark.read.format("state_reader.statestore").option("storageOptions", json.dumps(options))
        df = reader.load(url)  # planned on the driver while the server is up
    finally:
        running.server.stop()
    started = time.monotonic()
    with pytest.raises(Exception, match="STATE_READER_STORAGE_ERROR"):
        df.collect()
    with pytest.raises(StorageError, match=url):
        state_reader.read_state(url, storage_options=options)
    assert time.monotonic() - started < STALL_SECONDS_MAX


def test_rewrite_from_and_to_s3(s3, checkpoints):
    """A repartition whose source and destination are both on the S3 server; the destination reads back."""
    local = checkpoints("agg_window")
    src = f"s3://{BUCKET}/agg_window"
    dst = f"s3://{BUCKET}/agg_window-rewritten"
    report = state_reader.repartition(src, dst, 5, storage_options=s3.options())
    assert report.new_partitions == 5 and report.files > 5
    got = state_reader.read_state(dst, storage_options=s3.options())
    want = state_reader.read_state(local)
    assert arrow_rows(got.drop(["partition_id"])) == arrow_rows(want.drop(["partition_id"]))
    assert set(got.column("partition_id").to_pylist()) <= set(range(5))
    # an object store gets no hidden Hadoop checksum files: Spark writes none there
    import s3fs

    fs = s3fs.S3FileSystem(**s3.options(), skip_instance_cache=True)
    assert not [p for p in fs.find(f"{BUCKET}/agg_window-rewritten") if p.endswith(".crc")]
    with pytest.raises(state_reader.DestinationNotEmptyError):
        state_reader.repartition(src, dst, 3, storage_options=s3.options())


def test_rewrite_through_spark_on_s3(spark, s3, checkpoints, tmp_path):
    """The rewrite run by Spark: its tasks read the source and write the destination on the server
    themselves, with the storage options; the same report and state as the Spark-free rewrite."""
    free = str(tmp_path / "free")
    want = state_reader.repartition(checkpoints("agg_window"), free, 3)
    dst = f"s3a://{BUCKET}/agg_window-through-spark"
    got = state_reader.repartition(f"s3://{BUCKET}/agg_window", dst, 3, storage_options=s3.options(), spark=spark)
    assert got.stores == want.stores
    assert (got.files, got.bytes) == (want.files, want.bytes)
    assert arrow_rows(state_reader.read_state(dst, storage_options=s3.options())) == arrow_rows(
        state_reader.read_state(free)
    )
