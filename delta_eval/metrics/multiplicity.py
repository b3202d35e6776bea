"""Adjusting p-values when many strata are tested at once: Holm (family-wise error) and Benjamini-Hochberg (false
discovery rate). With ten strata each tested at 5%, the chance that some stratum looks worse by luck alone is 40%.

Example:
    >>> holm([0.01, 0.04, 0.03])
    [0.03, 0.06, 0.06]
    >>> [round(p, 3) for p in benjamini_hochberg([0.01, 0.04, 0.03])]
    [0.03, 0.04, 0.04]
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["adjust", "benjamini_hochberg", "holm"]


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def benjamini_hochberg(p: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i], reverse=True)
    out = [0.0] * m
    running = 1.0
    for k, i in enumerate(order):
        rank = m - k
        running = min(running, p[i] * m / rank)
        out[i] = min(1.0, running)
    return out


def adjust(p: Sequence[float], method: str = "holm") -> list[float]:
    """``holm``, ``bh`` or ``none``."""
    if method == "holm":
        return holm(p)
    if method == "bh":
        return benjamini_hochberg(p)
    if method == "none":
        return list(p)
    raise ValueError(f"unknown adjustment {method!r}; one of holm, bh, none")
