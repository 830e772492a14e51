"""``verify``: every state file of a checkpoint read and checked, clean or naming what is damaged."""

from __future__ import annotations

import json
import os
import shutil

from tests.support.cli import run, run_json


def test_verify_ok_and_damaged(agg, tmp_path):
    ok = run("verify", agg)
    assert ok.returncode == 0, ok.stderr
    assert "OK:" in ok.stdout
    doc = run_json("verify", agg)
    committed = sorted(int(n) for n in os.listdir(os.path.join(agg, "commits")) if n.isdigit())
    assert doc["ok"] and doc["versions_checked"] == 2 * len(committed)

    damaged = tmp_path / "cp"
    shutil.copytree(agg, damaged)
    delta = damaged / "state" / "0" / "1" / "1.delta"
    data = bytearray(delta.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 8):
        data[i] ^= 0xA5
    delta.write_bytes(bytes(data))
    proc = run("verify", damaged)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "DAMAGED" in proc.stdout and "state/0/1/1.delta" in proc.stdout
    report = json.loads(run("verify", damaged, "--json").stdout)
    assert not report["ok"]
    assert {p["partition_id"] for p in report["problems"]} == {1}
    assert report["problems"][0]["version"] == 1 and report["problems"][0]["batch_id"] == 0
    assert all(p["path"].endswith("1.delta") for p in report["problems"])
    # the other partition and the versions after the next snapshot still decode
    assert report["versions_ok"] == report["versions_checked"] - len(report["problems"])


def test_verify_says_which_checksum_files_are_not_checksums(agg, tmp_path):
    """.crc files held as Git LFS pointers: every version still decodes, and verify says the files beside
    those were checked by their formats alone, not that they are damaged."""
    from tests.support.damage import checksums_as_lfs_pointers

    copy = tmp_path / "cp"
    shutil.copytree(agg, copy)
    replaced = {str(p) for p in checksums_as_lfs_pointers(copy)}
    proc = run("verify", copy)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "NOT VERIFIED" in proc.stdout and "Git LFS pointer" in proc.stdout and "OK:" in proc.stdout
    assert "DAMAGED" not in proc.stdout and not proc.stderr, proc.stderr
    report = run_json("verify", copy)
    assert report["ok"] and not report["problems"] and report["versions_ok"] == report["versions_checked"]
    found = report["malformed_checksums"]
    assert found and {m["sidecar"] for m in found} <= replaced, found
    assert all(m["kind"] == "hadoop" and "Git LFS pointer" in m["reason"] for m in found)
    # the state files verify decodes are among the files read unverified, snapshots and deltas alike
    assert {os.path.splitext(m["file"])[1] for m in found} >= {".delta", ".snapshot"}, found
    assert all(os.path.isfile(m["file"]) for m in found)
