"""The order that sorts rows by columns of text, as ``pyarrow.compute.sort_indices`` gives it (ascending, by UTF-8
bytes, which is Python's order of code points; nulls last; ties in the rows' order), about twice as fast for the
short names of conversations and groups the per-conversation sums are ordered by.

Each name becomes its bytes padded with zeros to a multiple of 8, read as big-endian unsigned 64-bit integers, whose
order is the bytes' order; numpy's stable ``lexsort`` orders the rows by them. Names holding a zero byte (padding
could not tell them apart) or longer than :data:`MAX_BYTES` are ordered by Arrow.

Example:
    >>> import pyarrow as pa
    >>> text_order([pa.array(["b", "a", None, "ab", "a"])]).tolist()
    [1, 4, 3, 0, 2]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["MAX_BYTES", "text_order"]

#: Names up to this many bytes are ordered by numpy (a sort key per 8 bytes); longer ones by Arrow.
MAX_BYTES = 32


def text_order(columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """The indices that sort the rows by ``columns`` (text arrays of the same length, the first the most
    significant), as ``pc.sort_indices`` with every column ascending."""
    keys: list[np.ndarray] = []
    for column in reversed(columns):  # lexsort's last key is its most significant
        words = _words(column)
        if words is None:
            table = pa.table({f"k{i}": c for i, c in enumerate(columns)})
            fallback: np.ndarray = pc.sort_indices(table, sort_keys=[(f"k{i}", "ascending") for i in
                                                                     range(len(columns))]).to_numpy()  # fmt: skip
            return fallback
        keys += words
    if not keys:
        return np.arange(0, dtype=np.int64)
    order: np.ndarray = np.lexsort(keys)
    return order


def _words(column: pa.Array | pa.ChunkedArray) -> list[np.ndarray] | None:
    """The column's sort keys, least significant first (its 8-byte words from last to first, then whether it is
    null), or ``None`` when numpy cannot order it."""
    flat = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if flat.type == pa.large_string():
        kind: type[np.signedinteger] = np.int64
    elif flat.type == pa.string():
        kind = np.int32
    else:
        return None
    n = len(flat)
    if n == 0:
        return [np.zeros(0, dtype=np.uint64)]
    _, offsets_buffer, data_buffer = flat.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=kind)[flat.offset : flat.offset + n + 1].astype(np.int64)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, dtype=np.uint8)
    used = data[offsets[0] : offsets[-1]]
    lengths = np.diff(offsets)
    longest = int(lengths.max())
    if longest > MAX_BYTES or (used == 0).any():
        return None
    width = max(8, -(-longest // 8) * 8)
    padded = np.zeros((n, width), dtype=np.uint8)
    padded[np.arange(width) < lengths[:, None]] = used  # row by row, each name's bytes then zeros
    null = np.asarray(pc.is_null(flat).to_numpy(zero_copy_only=False), dtype=bool)
    if null.any():
        padded[null] = 0  # a null slot may hold bytes: nulls tie among themselves, kept in the rows' order
    words = padded.view(">u8")
    return [*(words[:, j] for j in reversed(range(words.shape[1]))), null]
