"""Golden checkpoints read without Spark, against the rows Spark's built-in reader returned for them.

``tests/golden/expected.py`` recorded the built-in reader's rows and schema for
every read of ``tests/golden/reads.py``; here the Spark-free decoders must give
the same, with no JVM (``make unit`` runs this).
"""

from __future__ import annotations

import base64
import json

import pyarrow as pa
import pytest

import state_reader
from tests.golden.reads import CASES, expected_file, read_kwargs, reads
from tests.support.oracle import arrow_rows, assert_arrow_schema, diff
from tests.support.paths import GOLDEN


@pytest.mark.parametrize("case", CASES, ids=[f"{c['writer_version']}-{c['name']}" for c in CASES])
def test_golden_checkpoint_matches_recorded_builtin_rows(case):
    recorded = json.loads(expected_file(case).read_text())["reads"]
    # the record covers exactly the reads the Spark test makes
    assert [r["options"] for r in recorded] == reads(case)
    for read in recorded:
        table = state_reader.read_state(str(GOLDEN / case["path"]), **read_kwargs(read["options"]), exact_schema=True)
        if read["keys_only"]:
            table = table.select(["key", "partition_id"])
        expected_schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(read["arrow_schema"])))
        assert_arrow_schema(table.schema, expected_schema)
        actual = arrow_rows(table)
        assert actual == read["rows"], f"{case['path']} {read['options']}:\n{diff(read['rows'], actual)}"
