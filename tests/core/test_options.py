"""Option validation and checkpoint errors: both fronts raise our error classes,
and Spark's built-in reader refuses the same requests."""

from __future__ import annotations

import shutil

import pytest

import state_reader
from state_reader import errors
from tests.support.damage import copy_of
from tests.support.oracle import arrow_rows

BAD_OPTIONS = [
    ({"batchId": "-1"}, errors.NegativeOptionError),
    ({"operatorId": "-2"}, errors.NegativeOptionError),
    ({"batchId": "999"}, errors.CommittedBatchUnavailableError),
    ({"operatorId": "7"}, errors.SchemaReadError),
    ({"storeName": "  "}, errors.EmptyOptionError),
    ({"storeName": "nope"}, errors.SchemaReadError),
    ({"joinSide": "middle"}, errors.InvalidOptionError),
    ({"joinSide": "left", "storeName": "left-keyToNumValues"}, errors.ConflictingOptionsError),
    ({"joinSide": "left"}, errors.SchemaReadError),
    ({"readChangeFeed": "true"}, errors.RequiredOptionError),
    ({"readChangeFeed": "true", "changeStartBatchId": "1", "batchId": "2"}, errors.ConflictingOptionsError),
    ({"readChangeFeed": "true", "changeStartBatchId": "3", "changeEndBatchId": "1"}, errors.InvalidOptionError),
    ({"changeStartBatchId": "1"}, errors.InvalidOptionError),
    ({"snapshotPartitionId": "0"}, errors.RequiredOptionError),
    ({"snapshotStartBatchId": "0"}, errors.RequiredOptionError),
    ({"snapshotStartBatchId": "4", "snapshotPartitionId": "0", "batchId": "2"}, errors.InvalidOptionError),
    ({"stateVarName": "count"}, errors.InvalidOptionError),
    ({"readRegisteredTimers": "true", "stateVarName": "x"}, errors.ConflictingOptionsError),
    ({"flattenCollectionTypes": "maybe"}, errors.InvalidOptionError),
    ({"batchId": "two"}, errors.InvalidOptionError),
]


def _api(path, options):
    from state_reader.core.options import snake_case

    return state_reader.read_state(path, **{snake_case(k): v for k, v in options.items()})


@pytest.mark.parametrize(("options", "error"), BAD_OPTIONS, ids=[str(o) for o, _ in BAD_OPTIONS])
def test_bad_options_refused_like_builtin(spark, checkpoints, options, error):
    path = checkpoints("agg_window")
    with pytest.raises(error) as caught:
        _api(path, options)
    assert caught.value.error_class == error.error_class
    assert isinstance(caught.value, state_reader.StateReaderError)
    with pytest.raises(Exception) as via_spark:
        spark.read.format("state_reader.statestore").options(**options).load(path).collect()
    assert error.error_class in str(via_spark.value)
    with pytest.raises(Exception):  # noqa: B017 - the built-in raises its own JVM exceptions
        spark.read.format("statestore").options(**options).load(path).collect()


def test_missing_path(spark):
    with pytest.raises(errors.RequiredOptionError):
        state_reader.read_state("")
    with pytest.raises(Exception, match="STDS_REQUIRED_OPTION_UNSPECIFIED"):
        spark.read.format("state_reader.statestore").load().collect()


def test_checkpoint_that_does_not_exist(tmp_path):
    with pytest.raises(errors.CommittedBatchUnavailableError, match="does not exist"):
        state_reader.read_state(str(tmp_path / "nothing-here"))
    with pytest.raises(errors.CommittedBatchUnavailableError, match="does not exist"):
        state_reader.read_metadata(str(tmp_path / "nothing-here"))


def _rewrite(path, content: bytes) -> None:
    """Replace a file's bytes and drop Hadoop's checksum sidecar, as a hand edit would."""
    path.write_bytes(content)
    (path.parent / f".{path.name}.crc").unlink(missing_ok=True)


def test_offset_log_entry_missing(checkpoints, tmp_path):
    cp = copy_of(checkpoints, tmp_path)
    (cp / "offsets" / "2").unlink()
    with pytest.raises(errors.OffsetLogUnavailableError, match="offsets/2"):
        state_reader.read_state(str(cp), batch_id=2)
    # the other batches read as before
    original = state_reader.read_state(checkpoints("agg_window"), batch_id=3, exact_schema=True)
    assert arrow_rows(state_reader.read_state(str(cp), batch_id=3, exact_schema=True)) == arrow_rows(original)


def test_offset_log_without_metadata(checkpoints, tmp_path):
    cp = copy_of(checkpoints, tmp_path)
    _rewrite(cp / "offsets" / "2", b"v1\n")
    with pytest.raises(errors.OffsetMetadataUnavailableError, match="offsets/2"):
        state_reader.read_state(str(cp), batch_id=2)


def test_unparseable_operator_metadata(checkpoints, tmp_path):
    cp = copy_of(checkpoints, tmp_path)
    _rewrite(cp / "state" / "0" / "_metadata" / "metadata", b"v1\n{not json")
    with pytest.raises(errors.OperatorMetadataReadError, match="_metadata/metadata"):
        state_reader.read_state(str(cp))


def test_unreadable_schema_file(checkpoints, tmp_path):
    cp = copy_of(checkpoints, tmp_path)
    _rewrite(cp / "state" / "0" / "0" / "_metadata" / "schema", b"\x00\x02v2\x00\x00")
    with pytest.raises(errors.SchemaReadError, match="_metadata/schema"):
        state_reader.read_state(str(cp))


def test_no_committed_batch(checkpoints, tmp_path):
    cp = copy_of(checkpoints, tmp_path)
    shutil.rmtree(cp / "commits")
    with pytest.raises(errors.CommittedBatchUnavailableError, match="No committed batch"):
        state_reader.read_state(str(cp))


def test_missing_delta_names_the_file_and_what_exists(checkpoints, tmp_path):
    cp = copy_of(checkpoints, tmp_path)
    part = cp / "state" / "0" / "0"
    for snap in part.glob("*.snapshot"):
        snap.unlink()
    (part / "2.delta").unlink()
    with pytest.raises(errors.MissingStateFileError) as caught:
        state_reader.read_state(str(cp), batch_id=3)
    assert "2.delta does not exist" in str(caught.value)
    assert "deltas 1, 3.." in str(caught.value)


def test_stale_checksum_sidecar_is_reported(checkpoints, tmp_path):
    cp = copy_of(checkpoints, tmp_path)
    (cp / "state" / "0" / "_metadata" / "metadata").write_text("v1\n{not json")  # .crc left as it was
    with pytest.raises(errors.ChecksumMismatchError, match="_metadata/metadata"):
        state_reader.read_state(str(cp))
    with pytest.raises(errors.OperatorMetadataReadError):
        state_reader.read_state(str(cp), verify_checksums=False)


GIVEN = {"keySchema": "user STRING", "valueSchema": "n BIGINT"}
BAD_GIVEN_SCHEMAS = [
    ({"keySchema": "user STRING"}, errors.RequiredOptionError, "'valueSchema' must be specified with keySchema"),
    ({"valueSchema": "n BIGINT"}, errors.RequiredOptionError, "'keySchema' must be specified with valueSchema"),
    ({**GIVEN, "joinSide": "left"}, errors.ConflictingOptionsError, "read each store with storeName"),
    ({**GIVEN, "stateVarName": "count"}, errors.ConflictingOptionsError, "'stateVarName' and 'keySchema'"),
    ({**GIVEN, "readRegisteredTimers": "true"}, errors.ConflictingOptionsError, "'readRegisteredTimers'"),
    (
        {**GIVEN, "valueSchema": "n BIGNUM"},
        errors.InvalidOptionError,
        "option 'valueSchema': not a schema in DDL such as 'user STRING, n BIGINT' (unknown type 'BIGNUM'",
    ),
]


@pytest.mark.parametrize(
    ("options", "error", "message"), BAD_GIVEN_SCHEMAS, ids=[str(o) for o, _, _ in BAD_GIVEN_SCHEMAS]
)
def test_given_schemas_come_in_pairs_for_one_store(options, error, message):
    """Checked with the other options, before the checkpoint is looked at (it does not exist here)."""
    from state_reader.core.options import StateStoreOptions

    with pytest.raises(error) as caught:
        StateStoreOptions.parse({"path": "/no/checkpoint", **options})
    assert message in caught.value.message
    parsed = StateStoreOptions.parse(
        {"path": "/no/checkpoint", "KEYSCHEMA": " user STRING ", "valueschema": "n BIGINT"}
    )
    assert (parsed.key_schema, parsed.value_schema) == ("user STRING", "n BIGINT")


def test_snake_case_options_map_mechanically():
    from state_reader.core.options import camel_case, snake_case

    for camel in (
        "batchId",
        "operatorId",
        "storeName",
        "joinSide",
        "readChangeFeed",
        "changeStartBatchId",
        "snapshotStartBatchId",
        "stateVarName",
        "readRegisteredTimers",
        "flattenCollectionTypes",
    ):
        assert camel_case(snake_case(camel)) == camel


def test_misspelled_options_name_the_closest_valid_one(spark, checkpoints):
    from state_reader.core.options import StateStoreOptions

    path = checkpoints("agg_window")
    with pytest.raises(errors.InvalidOptionError, match=r"'batchIdd'.*did you mean 'batchId'"):
        StateStoreOptions.parse({"path": path, "batchIdd": "2"})
    with pytest.raises(errors.InvalidOptionError, match=r"did you mean 'batch_id'"):
        state_reader.read_state(path, batch_idd=2)
    with pytest.raises(errors.InvalidOptionError, match=r"did you mean 'join_side'"):
        state_reader.read_state(path, joinSde="left")
    with pytest.raises(Exception, match=r"(?i)Unknown option 'joinSde'; did you mean 'joinSide'"):
        spark.read.format("state_reader.statestore").option("joinSde", "left").load(path).collect()
    misspelled = r"(?i)Unknown option 'inferMissingMetadta'; did you mean 'inferMissingMetadata'"
    with pytest.raises(Exception, match=misspelled):
        spark.read.format("state_reader.state-metadata").option("inferMissingMetadta", "true").load(path).collect()
    # storage.<name> options and the data source's own partitionsPerTask stay accepted
    assert (
        spark.read.format("state_reader.statestore")
        .option("storage.anon", "false")
        .option("PartitionsPerTask", "1")
        .load(path)
        .count()
        > 0
    )


def test_python_errors_name_python_keywords(agg):
    """The Spark-free functions' errors name the keywords the caller typed, Spark's fronts Spark's options."""
    from state_reader.core.options import in_python_names

    with pytest.raises(errors.RequiredOptionError) as caught:
        state_reader.read_state(agg, read_change_feed=True)
    assert "change_start_batch_id" in str(caught.value) and "changeStartBatchId" not in str(caught.value)
    with pytest.raises(errors.CommittedBatchUnavailableError, match="batch_id 99"):
        state_reader.read_state(agg, batch_id=99)
    assert in_python_names("set failOnDataLoss=false or 'operatorId'") == "set fail_on_data_loss=False or operator_id"
