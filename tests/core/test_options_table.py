"""The one table of options (``core/options.OPTIONS``) against what the parsers read and the API takes.

The docs page of options is generated from that table, so these tests are what
keeps the page true: an option a parser reads must be in the table, and an
option in the table must be read by the parser of every reader it names.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
from typing import Any

import pytest

import state_reader
from state_reader import errors
from state_reader.core.follow import FOLLOW_OPTIONS, Follow
from state_reader.core.options import (
    OPTIONS,
    PARTITIONS_PER_TASK,
    PATH,
    STATE_METADATA,
    STATESTORE,
    STREAM,
    StateMetadataOptions,
    StateStoreOptions,
    camel_case,
    option_names,
)
from state_reader.fronts.spark_shared import partitions_per_task
from tests.support.paths import DOCS

# per option: options that set it away from its default (with whatever it needs beside it)
STATESTORE_SAMPLES: dict[str, dict[str, Any]] = {
    "batchId": {"batchId": "5"},
    "operatorId": {"operatorId": "2"},
    "storeName": {"storeName": "left-keyToNumValues"},
    "joinSide": {"joinSide": "left"},
    "snapshotStartBatchId": {"snapshotStartBatchId": "1", "snapshotPartitionId": "0"},
    "snapshotPartitionId": {"snapshotStartBatchId": "1", "snapshotPartitionId": "0"},
    "readChangeFeed": {"readChangeFeed": "true", "changeStartBatchId": "0"},
    "changeStartBatchId": {"readChangeFeed": "true", "changeStartBatchId": "2"},
    "changeEndBatchId": {"readChangeFeed": "true", "changeStartBatchId": "0", "changeEndBatchId": "3"},
    "stateVarName": {"stateVarName": "count"},
    "readRegisteredTimers": {"readRegisteredTimers": "true"},
    "flattenCollectionTypes": {"flattenCollectionTypes": "false"},
    "changeFeedFromSnapshots": {"changeFeedFromSnapshots": "true"},
    "timeoutTimestampAsLong": {"timeoutTimestampAsLong": "true"},
    "keySchema": {"keySchema": "user STRING", "valueSchema": "n BIGINT"},
    "valueSchema": {"keySchema": "user STRING", "valueSchema": "n BIGINT"},
    "storageOptions": {"storageOptions": '{"anon": true}'},
    "verifyChecksums": {"verifyChecksums": "false"},
}
METADATA_SAMPLES: dict[str, dict[str, Any]] = {
    "batchId": {"batchId": "5"},
    "inferMissingMetadata": {"inferMissingMetadata": "true"},
    "includeHiddenColumns": {"includeHiddenColumns": "true"},
    "storageOptions": {"storageOptions": '{"anon": true}'},
    "verifyChecksums": {"verifyChecksums": "false"},
}
STREAM_SAMPLES: dict[str, dict[str, Any]] = {
    "maxBatchesPerTrigger": {"maxBatchesPerTrigger": "3"},
    "failOnDataLoss": {"failOnDataLoss": "false"},
    "startWithSnapshot": {"startWithSnapshot": "true"},
}


def _by_name(name: str):
    return next(o for o in OPTIONS if o.name == name)


@pytest.mark.parametrize(
    "parser, reader, samples",
    [
        (StateStoreOptions.parse, STATESTORE, STATESTORE_SAMPLES),
        (StateMetadataOptions.parse, STATE_METADATA, METADATA_SAMPLES),
    ],
    ids=[STATESTORE, STATE_METADATA],
)
def test_every_option_in_the_table_is_read_by_its_parser(parser, reader, samples):
    names = set(option_names(reader)) - {PATH, PARTITIONS_PER_TASK}
    assert names == set(samples), "a sample per option of the table, and none that is not in it"
    default = parser({PATH: "/cp"})
    for name, sample in samples.items():
        field = _by_name(name).python
        parsed = parser({PATH: "/cp", **sample})
        assert getattr(parsed, field) != getattr(default, field), f"{name} is in the table but not read"


def test_every_field_the_parsers_fill_is_in_the_table():
    for cls, reader in ((StateStoreOptions, STATESTORE), (StateMetadataOptions, STATE_METADATA)):
        fields = {f.name for f in dataclasses.fields(cls)}
        in_table = {o.python for o in OPTIONS if reader in o.readers and o.python}
        assert fields == in_table, f"{cls.__name__}: parsed but not in the table, or in the table but not parsed"


def test_a_boolean_options_default_is_the_tables_everywhere():
    """The table's default is what the parsers fill in and what the classes default to."""
    parsed = {
        STATESTORE: StateStoreOptions.parse({PATH: "/cp"}),
        STATE_METADATA: StateMetadataOptions.parse({PATH: "/cp"}),
        STREAM: Follow.parse({PATH: "/cp", "readChangeFeed": "true"}),
    }
    classes = {STATESTORE: StateStoreOptions, STATE_METADATA: StateMetadataOptions, STREAM: Follow}
    booleans = [o for o in OPTIONS if o.default in ("true", "false")]
    assert len(booleans) >= 10
    for option in booleans:
        default = option.default == "true"
        for reader in option.readers:
            if reader == STREAM and option.name not in FOLLOW_OPTIONS:
                continue  # the change feed's, parsed by StateStoreOptions
            assert getattr(parsed[reader], option.python) is default, (option.name, reader)
            field = next(f for f in dataclasses.fields(classes[reader]) if f.name == option.python)
            assert field.default is default, f"{classes[reader].__name__}.{field.name} defaults otherwise"


def test_the_stream_options_are_the_tables():
    assert set(FOLLOW_OPTIONS) == set(STREAM_SAMPLES)
    default = Follow.parse({PATH: "/cp", "readChangeFeed": "true"})
    for name, sample in STREAM_SAMPLES.items():
        parsed = Follow.parse({PATH: "/cp", "readChangeFeed": "true", **sample})
        field = _by_name(name).python
        assert getattr(parsed, field) != getattr(default, field), f"{name} is in the table but not read"
    for name in option_names(STREAM):
        if name not in FOLLOW_OPTIONS:
            assert name in option_names(STATESTORE), f"{name}: a stream option no parser reads"


def test_partitions_per_task_is_the_data_sources_only():
    option = _by_name(PARTITIONS_PER_TASK)
    assert option.python is None and option.readers == (STATESTORE,)
    assert partitions_per_task({"partitionsPerTask": "4"}) == 4


@pytest.mark.parametrize(
    "parser, name",
    [
        (StateStoreOptions.parse, "inferMissingMetadata"),
        (StateStoreOptions.parse, "maxBatchesPerTrigger"),
        (StateMetadataOptions.parse, "operatorId"),
        (StateMetadataOptions.parse, "partitionsPerTask"),
    ],
)
def test_an_option_of_another_reader_is_refused(parser, name):
    with pytest.raises(errors.InvalidOptionError, match=f"Unknown option '{name}'"):
        parser({PATH: "/cp", name: "1"})


def test_python_names_are_the_keywords_of_the_spark_free_api():
    for func, reader in (
        (state_reader.read_state, STATESTORE),
        (state_reader.scan_state, STATESTORE),
        (state_reader.read_metadata, STATE_METADATA),
    ):
        params = set(inspect.signature(func).parameters)
        for option in OPTIONS:
            if reader in option.readers and option.python and option.name != PATH:
                assert option.python in params, f"{func.__name__} does not take {option.python}"
                # from_kwargs turns the keyword back into the option by camel_case
                assert camel_case(option.python) == option.name
    follow_params = set(inspect.signature(state_reader.follow).parameters)
    for name in FOLLOW_OPTIONS:
        assert _by_name(name).python in follow_params


def _hook():
    spec = importlib.util.spec_from_file_location("options_table", DOCS / "options_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_page_is_generated_from_the_table():
    hook = _hook()
    page = (DOCS / "options.md").read_text(encoding="utf-8")
    assert hook.with_table(page) == page, "docs/options.md is stale: run python docs/options_table.py"
    table = hook.options_table()
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [o.name for o in OPTIONS]
    assert "| `partitionsPerTask` | — (data source only) |" in table
