"""How many draws each stratum gets: proportional to its size, or Neyman's (size times spread), with a minimum per
stratum. Sampling (:mod:`delta_eval.sampling.stratified`) and planning (:mod:`delta_eval.metrics.planning`) share it.

Example:
    >>> allocate({"a": 80, "b": 15, "c": 5}, n=10)
    {'a': 8, 'b': 1, 'c': 1}
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["allocate"]


def allocate(
    counts: Mapping[str, int],
    n: int | None,
    min_per_stratum: int = 1,
    sd: Mapping[str, float] | None = None,
) -> dict[str, int]:
    """Allocation of ``n`` draws over strata of the given sizes (largest-remainder rounding): proportional to
    ``N_h``, or with ``sd`` (per-stratum standard deviations, e.g. from a pilot's plan) Neyman's ``N_h S_h``, which
    puts the draws where the outcome varies most. A stratum missing from ``sd`` gets the mean of the others.

    Every stratum gets at least ``min(min_per_stratum, N_h)`` when ``n`` allows it (when it does not, the minimum is
    lowered until it does); no stratum gets more than its size; the total is ``min(n, sum of sizes)``. ``n=None``
    takes everything.

    Example:
        >>> allocate({"a": 50, "b": 50}, n=10, sd={"a": 0.1, "b": 0.4})
        {'a': 2, 'b': 8}
    """
    total = sum(counts.values())
    if sd:
        fallback = sum(sd.values()) / len(sd)
        share = {h: counts[h] * max(float(sd.get(h, fallback)), 1e-9) for h in counts}
    else:
        share = {h: float(counts[h]) for h in counts}
    if n is None or n >= total:
        return dict(counts)
    alloc = {h: 0 for h in counts}
    # Too few draws for every stratum's minimum: lower the minimum until it fits (down to plain proportions).
    while min_per_stratum > 0 and sum(min(min_per_stratum, c) for c in counts.values()) > n:
        min_per_stratum -= 1
    # Strata whose proportional share falls below the minimum get the minimum; the rest share what is left.
    fixed: dict[str, int] = {}
    while True:
        free = [h for h in counts if h not in fixed]
        n_free = n - sum(fixed.values())
        pop_free = sum(share[h] for h in free)
        targets = {h: n_free * share[h] / pop_free for h in free} if pop_free else {}
        newly = {h: min(min_per_stratum, counts[h]) for h in free if targets[h] < min(min_per_stratum, counts[h])}
        # A stratum whose share exceeds its size takes all of it (Neyman can ask for more than there is).
        newly.update({h: counts[h] for h in free if targets[h] > counts[h]})
        if not newly:
            break
        fixed.update(newly)
    alloc.update(fixed)
    for h, t in targets.items():
        alloc[h] = min(counts[h], math.floor(t))
    # Largest remainder first; a stratum already full passes its draw on.
    order = sorted(targets, key=lambda h: (-(targets[h] - math.floor(targets[h])), -counts[h], h))
    short = n - sum(alloc.values())
    while short > 0:
        progressed = False
        for h in order:
            if short and alloc[h] < counts[h]:
                alloc[h] += 1
                short -= 1
                progressed = True
        if not progressed:
            break
    return alloc
