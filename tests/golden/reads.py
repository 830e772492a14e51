"""The reads each golden checkpoint is checked with, shared by the Spark test and the Spark-free one.

For every operator and store of a checkpoint: its latest state, and the state
after its first and middle committed batches. ``expected.py`` records what
Spark's built-in reader returns for each read in ``expected/``, so
``tests/oracles/test_golden_recorded.py`` checks our decoders against it without a JVM.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())
CASES = MANIFEST["checkpoints"]
EXPECTED = GOLDEN / "expected"


def committed_batches(path: Path) -> list[int]:
    return sorted(int(p.name) for p in (path / "commits").iterdir() if p.name.isdigit())


def reads(case: dict) -> list[dict[str, str]]:
    """The data source options of every read a golden checkpoint is checked with."""
    batches = committed_batches(GOLDEN / case["path"])
    earlier = sorted({batches[0], batches[len(batches) // 2]})
    out = []
    for op in case["operators"]:
        for store in op["stores"]:
            base = {"operatorId": str(op["operatorId"])}
            if store != "default":
                base["storeName"] = store
            out.append(base)
            out.extend({**base, "batchId": str(batch)} for batch in earlier)
    return out


def reference_path(case: dict, scratch: Path) -> str:
    """Where the built-in reader reads the same state correctly.

    Spark writes no operator metadata before 4.0, so the built-in reader assumes
    plain keys and fails on RocksDB session windows, whose keys are prefix
    encoded. A copy with the metadata Spark 4 would have written is its reference.
    """
    path = GOLDEN / case["path"]
    needs_metadata = [
        op for op in case["operators"] if op["kind"] == "session_window" and case["provider"] == "rocksdb"
    ]
    if not needs_metadata or (path / "state" / "0" / "_metadata").exists():
        return str(path)
    copy = scratch / case["writer_version"] / case["name"]
    shutil.copytree(path, copy)
    for op in needs_metadata:
        meta = copy / "state" / str(op["operatorId"]) / "_metadata"
        meta.mkdir()
        partitions = sorted(p.name for p in (path / "state" / "0").iterdir() if p.name.isdigit())
        info = {
            "operatorInfo": {"operatorId": op["operatorId"], "operatorName": "sessionWindowStateStoreSaveExec"},
            "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 1, "numPartitions": len(partitions)}],
        }
        (meta / "metadata").write_text("v1\n" + json.dumps(info))
    return str(copy)


def expected_file(case: dict) -> Path:
    return EXPECTED / case["path"] / "reads.json"


def read_kwargs(options: dict[str, str]) -> dict:
    """``read_state`` arguments of a read's data source options."""
    kwargs: dict = {"operator_id": int(options.get("operatorId", 0)), "store_name": options.get("storeName")}
    if "batchId" in options:
        kwargs["batch_id"] = int(options["batchId"])
    return kwargs
