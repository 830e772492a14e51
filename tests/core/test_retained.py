"""The retained batches and their offset entries, on stand-ins for a checkpoint's files and logs (no Spark)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from state_reader.core import retained
from state_reader.core.retained import first_retained, offset_entries, retained_batches
from state_reader.errors import StateReaderError


class _Files:
    """One partition's files: the versions they rebuild, and what they were asked."""

    def __init__(self, versions: list[int]) -> None:
        self.versions = versions
        self.asked: list[tuple[int, set[int] | None]] = []

    def retained_versions(self, last_version: int, committed_versions: set[int] | None = None) -> list[int]:
        self.asked.append((last_version, committed_versions))
        return [v for v in self.versions if v <= last_version]


def _cp(committed: list[int]) -> SimpleNamespace:
    return SimpleNamespace(committed_batches=committed)


def test_the_batches_from_the_oldest_every_partition_holds():
    # partition 0 still rebuilds versions 3.., partition 1 versions 5..: batch 4 (version 5) is the oldest
    files = [_Files([3, 4, 5, 6, 7]), _Files([5, 6, 7])]
    assert retained_batches(_cp([0, 1, 2, 3, 4, 5, 6]), files) == [4, 5, 6]
    # up to the latest committed batch's version, limited to committed versions
    assert files[0].asked == [(7, {1, 2, 3, 4, 5, 6, 7})]


def test_none_when_a_partition_rebuilds_nothing_or_nothing_is_committed():
    assert retained_batches(_cp([0, 1, 2]), [_Files([1, 2, 3]), _Files([])]) == []
    assert retained_batches(_cp([]), [_Files([1])]) == []


def test_every_committed_batch_of_a_store_without_partitions():
    assert retained_batches(_cp([0, 1, 2]), []) == [0, 1, 2]


def test_first_retained_looks_up_to_the_plans_version(monkeypatch):
    made: list[_Files] = []

    def files(storage, store_dir, provider, codec):
        made.append(_Files([2, 3, 4, 5]))
        return made[-1]

    monkeypatch.setattr(retained, "StoreFiles", files)
    plan = SimpleNamespace(partitions=[0, 1], version=4, store_dir=str, provider_class="p", codec=None)
    cp = SimpleNamespace(committed_batches=[0, 1, 2, 3, 4], storage=None)
    assert first_retained(cp, plan) == 1
    assert [f.asked[0][0] for f in made] == [4, 4]


def test_first_retained_is_none_when_a_partition_rebuilds_nothing(monkeypatch):
    monkeypatch.setattr(retained, "StoreFiles", lambda *args: _Files([]))
    plan = SimpleNamespace(partitions=[0], version=3, store_dir=str, provider_class="p", codec=None)
    assert first_retained(SimpleNamespace(committed_batches=[0, 1, 2], storage=None), plan) is None


def test_offset_entries_leave_out_the_batches_without_one():
    fetched: list[str] = []

    def entry(batch: int) -> SimpleNamespace:
        if batch == 1:
            raise StateReaderError("purged")
        return SimpleNamespace(watermark_ms=batch * 1000)

    cp = SimpleNamespace(
        storage=SimpleNamespace(prefetch=lambda rels, small=False: fetched.extend(rels)), offset_entry=entry
    )
    entries = offset_entries(cp, iter([0, 1, 2]))
    assert {b: e.watermark_ms for b, e in entries.items()} == {0: 0, 2: 2000}
    assert fetched == ["offsets/0", "offsets/1", "offsets/2"]


@pytest.mark.parametrize("name", ["operator_stores", "first_retained", "offset_entries", "retained_batches"])
def test_the_analyses_take_these_facts_from_here(name):
    from state_reader.fronts import notebook
    from state_reader.inspect import doctor, doctor_state, explain, schema_check, stats, verify

    users = [m for m in (doctor, doctor_state, explain, schema_check, stats, verify, notebook) if hasattr(m, name)]
    assert users, name
    assert all(getattr(m, name) is getattr(retained, name) for m in users)
