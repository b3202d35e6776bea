"""The order of rows by a numeric key, then by a second column, where most keys are distinct (a conversation's
tallies, one row each mostly; one cost ratio a conversation): ``np.lexsort((then, key))``'s order of the values, in a
third of its time, by sorting the keys alone and only the runs of equal keys by ``then``.

Example:
    >>> import numpy as np
    >>> key, then = np.array([3.0, 1.0, 3.0, 2.0]), np.array([9.0, 5.0, 4.0, 7.0])
    >>> order = by_key_then(key, then)
    >>> key[order].tolist(), then[order].tolist()
    ([1.0, 2.0, 3.0, 3.0], [5.0, 7.0, 4.0, 9.0])
"""

from __future__ import annotations

import numpy as np

__all__ = ["by_key_then"]


def by_key_then(key: np.ndarray, then: np.ndarray, *, runs: bool = False) -> np.ndarray:
    """Indices that order the rows by ``key``, then by ``then`` (numeric arrays of the same length), NaNs last and
    together as lexsort orders them. Rows equal in both come in no particular order: their values compare equal
    either way (0.0 and -0.0 may swap, as may NaNs of other signs: what a sum in this order reads is the same but
    for the sign of a zero or of a NaN). ``runs``: the keys come mostly in sorted runs (merged in about one pass)."""
    # A merge sort takes sorted runs as they come (a run's tallies, each part sorted by key); a quicksort is faster
    # on keys in no order.
    order = np.argsort(key, kind="stable" if runs else None)
    if len(order) < 2:
        return order
    k = key[order]
    new = np.ones(len(k), dtype=bool)
    new[1:] = k[1:] != k[:-1]
    if k.dtype.kind == "f":
        new[1:] &= ~(np.isnan(k[1:]) & np.isnan(k[:-1]))  # NaNs are one run, ordered by ``then``, as lexsort has them
    if new.all():
        return order  # every key distinct
    run = np.cumsum(new) - 1
    several = np.bincount(run)[run] > 1
    at = np.flatnonzero(several)
    order[at] = order[at][np.lexsort((then[order[at]], run[at]))]
    return order
