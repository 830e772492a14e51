"""``doctor``'s suggestions to rewrite into a better format: a transformWithState query on UnsafeRow is told how
to move to Avro (the command, which works as given), its healthy twin on Avro and other queries are not."""

from __future__ import annotations

import shlex
import shutil

import state_reader
from state_reader.inspect.doctor_upgrades import ENCODING_AVRO
from state_reader.model.conf import CONF_ENCODING
from tests.support.cli import run
from tests.support.resume import forget_unfinished_batch


def _suggested(checkpoint: str) -> list:
    return [f for f in state_reader.diagnose(checkpoint).findings if f.kind == ENCODING_AVRO]


def test_transform_with_state_on_unsaferow_is_told_the_command_to_avro(checkpoints, tmp_path):
    source = str(tmp_path / "tws")
    shutil.copytree(checkpoints("tws"), source)
    forget_unfinished_batch(source)  # as a query stopped between batches
    (finding,) = _suggested(source)
    command = finding.evidence["command"]
    assert finding.severity == "info" and command in finding.action
    assert command == f"state-reader rewrite {source} {source}-avro --conf {CONF_ENCODING}=avro"
    done = run(*shlex.split(command)[1:])
    assert done.returncode == 0, done.stderr
    assert state_reader.read_state(source + "-avro", state_var_name="counters").num_rows > 0
    # the rewritten checkpoint is the healthy twin: on Avro, nothing to suggest
    assert _suggested(source + "-avro") == []


def test_no_suggestion_on_avro_or_without_transform_with_state(checkpoints, agg):
    assert _suggested(checkpoints("tws_avro")) == []
    assert _suggested(agg) == []
