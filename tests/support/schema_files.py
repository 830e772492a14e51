"""Schema v3 files (transformWithState's column families) as Spark writes them: the tests' writer
of what ``state_reader.formats.schema_files`` reads (a rewrite copies these files, never writes them)."""

from __future__ import annotations

from state_reader.formats.schema_files import _EMPTY_USER_KEY, ColumnFamilySchema, _JavaWriter
from state_reader.formats.spark_types import spark_json


def write_schema_v3(families: list[ColumnFamilySchema], *, with_ids: bool = True) -> bytes:
    """The bytes of a schema v3 file (``state/<op>/_stateSchema/<store>/<batch>_<uuid>``) listing ``families``.

    Families are written in the order given (Spark sorts them by name). ``with_ids``:
    the int16 key and value schema ids of released writers (4.0+); without them, the
    layout of pre-release 4.0 code. A family without a user key schema gets Spark's
    ``"{    }"`` placeholder.
    """
    out = _JavaWriter()
    out.utf("v3", "version")
    out.int32(len(families))
    for family in families:
        out.utf(family.name, "column family name")
        if with_ids:
            out.int16(family.key_schema_id)
        out.chunked(family.key_schema.json(), f"key schema of {family.name}")
        if with_ids:
            out.int16(family.value_schema_id)
        out.chunked(family.value_schema.json(), f"value schema of {family.name}")
        out.chunked(spark_json(family.key_encoder), f"key encoder spec of {family.name}")
        user_key = family.user_key_schema.json() if family.user_key_schema is not None else _EMPTY_USER_KEY
        out.chunked(user_key, f"user key schema of {family.name}")
    return out.bytes()
