"""Which rows of a decoded Arrow struct column are equal: dense group ids, vectorised.

Readers that must join or group decoded keys (a join side's counts and rows, the
items of one transformWithState list or map) use this instead of Python tuples
per row. Each field is dictionary-encoded by Arrow (nested structs recurse), the
per-field codes are stacked into an integer matrix, and numpy numbers its
distinct rows. Nulls, at any level, form their own value.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_NULL_CODE = -1


def _field_codes(arr: pa.Array) -> list[np.ndarray]:
    """One int64 code column per leaf of ``arr``; equal values get equal codes."""
    import pyarrow.compute as pc  # here: readers import this module, commands that decode nothing skip it

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    valid = np.ones(n, dtype=bool) if arr.null_count == 0 else arr.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_struct(arr.type):
        children = [_field_codes(arr.field(i)) for i in range(arr.type.num_fields)]
        return [valid.astype(np.int64)] + [np.where(valid, c, _NULL_CODE) for cs in children for c in cs]
    if pa.types.is_null(arr.type):
        return [np.full(n, _NULL_CODE, dtype=np.int64)]
    try:
        indices = pc.dictionary_encode(arr).indices
    except pa.ArrowNotImplementedError:
        # collections and intervals in keys are rare; their text form is an exact enough identity
        text = pa.array([None if v is None else repr(v) for v in arr.to_pylist()], pa.string())
        indices = pc.dictionary_encode(text).indices
    codes = indices.to_numpy(zero_copy_only=False) if indices.null_count else np.asarray(indices)
    return [np.where(valid, np.nan_to_num(codes, nan=_NULL_CODE), _NULL_CODE).astype(np.int64)]


def group_ids(arr: pa.Array) -> np.ndarray:
    """Dense ids (0, 1, ...) in order of first appearance: equal rows share an id."""
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    return dense_ids(np.stack(_field_codes(arr), axis=1))


def dense_ids(codes: np.ndarray) -> np.ndarray:
    """Dense ids of the distinct values (1-D) or rows (2-D) of an integer array, in order of first appearance."""
    if len(codes) == 0:
        return np.zeros(0, dtype=np.int64)
    matrix = codes.reshape(len(codes), -1)
    _, first, inverse = np.unique(matrix, axis=0, return_index=True, return_inverse=True)
    # renumber from np.unique's sorted order to the order rows first appear in
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first), dtype=np.int64)
    return rank[inverse.reshape(-1)]
