"""Record what Spark's built-in reader returns for every golden read, for the Spark-free test.

Run with the project's pyspark (the built-in reader is the oracle; the checkpoints
themselves come from generate.py under older Spark versions)::

    .venv/bin/python tests/golden/expected.py

Writes ``expected/<writer>/<name>/reads.json``: per read, its options, the
built-in reader's rows as canonical JSON (tests/support/oracle.py) and its schema as the
Arrow schema PySpark derives. Reads whose state PySpark cannot collect
(year-month intervals) keep the keys only.
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
from pathlib import Path

# run as a script: the repository's root on the path, for the tests package
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.golden.reads import CASES, expected_file, reads, reference_path
from tests.support.oracle import expected_arrow_schema, spark_rows
from tests.support.spark_session import build_session


def main() -> None:
    spark = build_session()
    with tempfile.TemporaryDirectory() as scratch:
        for case in CASES:
            reference = reference_path(case, Path(scratch))
            out = []
            for options in reads(case):
                df = spark.read.format("statestore").options(**options).load(reference)
                json_schema = df.schema.json()
                keys_only = "interval year" in json_schema or "interval month" in json_schema
                if keys_only:
                    df = df.select("key", "partition_id")
                schema = expected_arrow_schema(df.schema)
                out.append(
                    {
                        "options": options,
                        "keys_only": keys_only,
                        "rows": spark_rows(df),
                        "arrow_schema": base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"),
                    }
                )
            target = expected_file(case)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps({"checkpoint": case["path"], "reads": out}, indent=1) + "\n")
            print(f"{case['path']}: {len(out)} reads, {sum(len(r['rows']) for r in out)} rows")
    spark.stop()


if __name__ == "__main__":
    main()
