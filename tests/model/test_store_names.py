"""The names of a checkpoint's stores (``model/store_names``), importable without the model's file access."""

from __future__ import annotations

import subprocess
import sys

from state_reader.model.store_names import JOIN_SIDES, JOIN_STORES, JOIN_V4_STORES, join_side_stores


def test_a_sides_stores_are_its_counts_then_its_rows_in_every_join_format():
    assert [join_side_stores(side) for side in JOIN_SIDES] == [JOIN_STORES[:2], JOIN_STORES[2:]]
    assert join_side_stores("right", v4=True) == ("right-keyWithTsToValues", "right-tsWithKey")
    assert set(JOIN_V4_STORES) == {s for side in JOIN_SIDES for s in join_side_stores(side, v4=True)}


def test_the_names_load_nothing_heavy():
    probe = "import sys, state_reader.model.store_names; print('numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "False"
