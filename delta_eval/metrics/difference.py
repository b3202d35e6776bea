"""The difference of two rates measured on the same pairs, with an interval a decision can rest on.

Both the win rate and the relative gates are such a difference. The win rate is ``1/2 + (A - B) / 2``, where ``A``
is the share of pairs the candidate wins and ``B`` the share the baseline wins (ties and equivalent pairs count in
neither); a relative gate is ``A - B`` where ``A`` is the candidate's failure rate and ``B`` the baseline's. Each
rate is a ratio ``sum(w a) / sum(w t)`` over the pairs (``t`` is 1 for a per-pair rate, or a count such as the
tool calls a turn made), with sampling weights ``w``, and the pairs come in conversations (clusters) sampled
within strata.

The interval, built for small samples, rare events, ties and clustering alike:

1. Each rate gets the linearised stratified-cluster variance (a conversation's pairs move together), and from it
   its effective sample size ``n* = r (1 - r) / var``: how many independent pairs its information is worth.
2. Each rate gets a Wilson score interval at ``n*``, with the Student ``t`` quantile on ``conversations - strata``
   degrees of freedom instead of the normal one (Korn & Graubard's small-sample correction). Where a rate's rarer
   outcome was seen in fewer than :data:`MIN_CONVERSATIONS_SEEN` conversations, its design effect cannot be
   estimated from so few: its ``n*`` is at most the number of conversations (each counted once), or, where the two
   rates count the same kind of event on each side (a relative gate), its units over the other rate's design
   effect when that one can be estimated.
   So "no pair won by either side in 100 conversations" bounds the unseen differences at about 3.7%, not at 0.
3. The two intervals are combined into one for ``A - B`` by Newcombe's method of variance estimates recovery
   (MOVER), with the estimated correlation of the two rates.

Simulation (``benchmarks/decision_calibration.py``, 400 runs per cell; ``tests/metrics/test_coverage.py`` guards it):
over all and over judged pairs, with intra-conversation correlation 0 to 0.8 and true win rates of 10%, 30% and
50%, 95% intervals cover the truth in 92.8-98.8% of runs from 50 conversations up (65 of 72 cells within 93-97%;
the others err on the safe side, where wins are rare), and in at least 93.5% in strata of 4-25 conversations
(conservative there by design).

Example:
    >>> sums = PairedSums.of([1, 0, 0, 1, 0, 0], [0, 1, 0, 0, 0, 0], clusters=["a", "a", "b", "b", "c", "c"])
    >>> d = sums.difference()
    >>> round(d.estimate, 3), d.clusters, d.pairs
    (0.167, 3, 6)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from delta_eval.metrics.intervals import strata_codes, stratified_moments, t_quantile, wilson_bounds

__all__ = ["MIN_CONVERSATIONS_SEEN", "PRODUCTS", "Difference", "PairedSums", "RateInterval", "StratumSums"]

#: A rate whose rarer outcome was seen in fewer conversations than this has its effective size capped at the
#: number of conversations: a design effect estimated from a handful of clusters is too unstable to trust.
MIN_CONVERSATIONS_SEEN = 10

#: A rate's variance below this (a standard error under 1e-13) is rounding, not information: taken as 0.
ROUNDING_VARIANCE = 1e-26

#: The products of (a, ta, b, tb) whose sums the variances read: per pair weighted by ``w^2`` for the
#: as-if-independent variance (``iid``), per conversation for the clustered one (:class:`StratumSums`).
PRODUCTS = (("a", "a"), ("a", "ta"), ("ta", "ta"), ("b", "b"), ("b", "tb"), ("tb", "tb"), ("a", "b"), ("a", "tb"),
            ("ta", "b"), ("ta", "tb"))  # fmt: skip


@dataclass(frozen=True)
class RateInterval:
    """One rate of the difference: its value, interval, standard error and effective sample size."""

    value: float | None
    ci_low: float
    ci_high: float
    se: float
    n_eff: float
    seen_in: int  # conversations where the rarer of event / non-event occurred


@dataclass(frozen=True)
class Difference:
    """``A - B`` with its interval (``estimate`` is ``None`` when no pair counts), the two rates, and the design.

    ``se`` is the cluster-robust standard error of the difference and ``se_iid`` what it would be were every pair
    independent; ``df`` the degrees of freedom (conversations minus strata); ``correlation`` that of the two rates.
    """

    estimate: float | None
    ci_low: float
    ci_high: float
    a: RateInterval
    b: RateInterval
    se: float
    se_iid: float
    df: float
    clusters: int
    strata: int
    pairs: int
    correlation: float
    confidence: float

    @property
    def design_effect(self) -> float | None:
        """``(se / se_iid)^2``: how many times less information the pairs carry than as many independent ones."""
        if self.se <= 0 or self.se_iid <= 0:
            return None
        return (self.se / self.se_iid) ** 2


@dataclass(frozen=True)
class PairedSums:
    """What the interval needs of each conversation (cluster): its stratum, ``sum(w a)``, ``sum(w t_a)``,
    ``sum(w b)``, ``sum(w t_b)``, and whether each rate's event and non-event occurred in it; plus the totals that
    give the as-if-independent variance. Built from pairs by :meth:`of`, or from per-conversation sums a query
    engine computed (:meth:`from_clusters`), so a million pairs need not be loaded. What pairs in memory, the
    paired metrics of :mod:`~delta_eval.metrics.sql_sums` and the cluster bootstrap (which resamples
    conversations) read; the win rate and the decision over a table add the conversations up per stratum too
    (:class:`StratumSums`, the same interval, see :meth:`moments`)."""

    strata: np.ndarray
    a: np.ndarray
    ta: np.ndarray
    b: np.ndarray
    tb: np.ndarray
    seen: np.ndarray  # shape (4, clusters): a-event, a-non-event, b-event, b-non-event occurred
    pairs: int
    iid: np.ndarray  # sums over pairs of the products the as-if-independent variance needs (see _iid_var)

    @classmethod
    def of(
        cls,
        a: Sequence[float],
        b: Sequence[float],
        *,
        ta: Sequence[float] | None = None,
        tb: Sequence[float] | None = None,
        weights: Sequence[float] | None = None,
        clusters: Sequence[str] | None = None,
        strata: Sequence[str] | None = None,
    ) -> PairedSums:
        """From one value per pair: ``a`` and ``b`` (events, in [0, 1] per unit of ``ta`` / ``tb``, which default to
        1), the sampling ``weights`` (default 1), the conversation of each pair (default: each its own) and its
        stratum (default: one)."""
        n = len(a)
        av = np.asarray(a, dtype=float)
        bv = np.asarray(b, dtype=float)
        tav = np.ones(n) if ta is None else np.asarray(ta, dtype=float)
        tbv = np.ones(n) if tb is None else np.asarray(tb, dtype=float)
        w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
        cl_all = np.asarray([str(i) for i in range(n)] if clusters is None else [str(c) for c in clusters], dtype=str)
        st_all = np.asarray([""] * n if strata is None else [str(s) for s in strata], dtype=str)
        # Sorted first: floating-point sums then do not depend on the order the rows came in (a resumed run writes
        # its verdicts in another order than a fresh one, and must report the same interval).
        order = np.lexsort((tbv, bv, tav, av, w, cl_all, st_all)) if n else np.arange(0)
        av, bv, tav, tbv, w = av[order], bv[order], tav[order], tbv[order], w[order]
        cl, st = cl_all[order].tolist(), st_all[order].tolist()
        keys: dict[str, int] = {}
        cid = np.fromiter((keys.setdefault(c, len(keys)) for c in cl), dtype=np.int64, count=n)
        k = len(keys)
        stratum_of = [""] * k
        for c, h in zip(cid.tolist(), st, strict=True):
            stratum_of[c] = h

        def per(v: np.ndarray) -> np.ndarray:
            return np.bincount(cid, weights=v, minlength=k)

        seen = np.zeros((4, k), dtype=bool)
        for row, event in enumerate((av > 0, (tav - av) > 0, bv > 0, (tbv - bv) > 0)):
            seen[row, np.unique(cid[event])] = True
        return cls(
            strata=np.asarray(stratum_of, dtype=str),
            a=per(w * av),
            ta=per(w * tav),
            b=per(w * bv),
            tb=per(w * tbv),
            seen=seen,
            pairs=n,
            iid=_iid_products(w, av, tav, bv, tbv),
        )

    @classmethod
    def from_clusters(
        cls,
        strata: Sequence[str] | np.ndarray,
        a: Sequence[float] | np.ndarray,
        ta: Sequence[float] | np.ndarray,
        b: Sequence[float] | np.ndarray,
        tb: Sequence[float] | np.ndarray,
        *,
        pairs: int,
        seen: np.ndarray | None = None,
        iid: np.ndarray | None = None,
    ) -> PairedSums:
        """From per-conversation sums (unweighted hard outcomes by default: a conversation saw an event where its sum
        is positive, a non-event where the sum falls short of its total). ``iid`` defaults to the products of
        unweighted 0/1 events with ``a`` and ``b`` exclusive (the win rate's wins and losses)."""
        av, tav, bv, tbv = (np.asarray(x, dtype=float) for x in (a, ta, b, tb))
        if seen is None:
            seen = np.vstack([av > 0, tav - av > 0, bv > 0, tbv - bv > 0])
        if iid is None:
            # 0/1 events, weight 1, one unit per pair, a and b never both: every product is a count.
            sa, sb, n = float(av.sum()), float(bv.sum()), float(tav.sum())
            iid = np.array([sa, sa, n, sb, sb, n, 0.0, sa, sb, n])
        return cls(np.asarray(strata, dtype=str), av, tav, bv, tbv, seen, pairs, iid)

    def moments(self) -> StratumSums:
        """The same sums added up per stratum (:class:`StratumSums`): what the interval reads of them."""
        keep = (self.ta > 0) | (self.tb > 0)
        exact = self._exact(keep)
        if exact is not None:
            return exact
        ta_sum, tb_sum = float(self.ta.sum()), float(self.tb.sum())
        ra = float(self.a.sum() / ta_sum) if ta_sum > 0 else 0.0
        rb = float(self.b.sum() / tb_sum) if tb_sum > 0 else 0.0
        names, which = strata_codes(self.strata[keep])
        k = len(names)
        m = np.bincount(which, minlength=k)
        u, v = self.a[keep] - ra * self.ta[keep], self.b[keep] - rb * self.tb[keep]
        sums = np.vstack([np.bincount(which, weights=x, minlength=k) for x in (u, v)]).reshape(2, k)
        du, dv = u - (sums[0] / np.maximum(m, 1))[which], v - (sums[1] / np.maximum(m, 1))[which]
        squares = np.vstack([np.bincount(which, weights=x * y, minlength=k) for x, y in ((du, du), (dv, dv), (du, dv))])
        return StratumSums(
            strata=names,
            clusters=m,
            sums=sums,
            squares=squares.reshape(3, k),
            seen=np.vstack([np.bincount(which, weights=row[keep], minlength=k) for row in self.seen]).reshape(4, k),
            rates=(ra, rb),
            units=(ta_sum, tb_sum),
            pairs=self.pairs,
            iid=self.iid,
        )

    def difference(
        self, confidence: float = 0.95, *, scale: float = 1.0, spread: float = 1.0, same_kind: bool = False
    ) -> Difference:
        """``A - B`` and its interval (see the module docstring). ``scale`` answers "what if there were ``scale``
        times as many conversations like these": variances shrink by it, conversations, degrees of freedom and the
        conversations where each outcome was seen grow by it (for planning and "need about N more"). ``spread``
        multiplies the variances (planning uses an upper bound of the pilot's). ``same_kind``: the two rates count the
        same kind of event on each side (a failure of the candidate and of the baseline), so a rate seen too rarely to
        estimate its design effect may borrow the other's; not so for wins and losses, whose clustering differs."""
        return _difference(self._design, self.iid, self.pairs, confidence, scale, spread, same_kind)

    @cached_property
    def _design(self) -> _Design:
        # Computed once: the decision asks for many intervals of the same sums. The same conversations give the
        # same design, to the last bit, whatever order they are listed in (by name, by key, as a run's files
        # hold them): counts in exact arithmetic (_exact), any other sums once put in an order of their values.
        keep = (self.ta > 0) | (self.tb > 0)
        g = int(keep.sum())
        exact = self._exact(keep)
        if exact is not None:
            return exact._design
        # The strata by their indices in their order (the order of their names): cheaper to sort by, to reorder and
        # to group than the names.
        names, which = strata_codes(self.strata)
        # Ordered by the values: a rate's units on both sides (the win rate's) are one key, not two (rows that tie
        # on the rest tie on it too).
        keys = [self.b, self.ta, self.a] if self.tb is self.ta or np.array_equal(self.tb, self.ta) else \
            [self.tb, self.b, self.ta, self.a]  # fmt: skip
        order = np.lexsort(keys if len(names) < 2 else [*keys, which])
        a, ta, b, tb, strata, kept = (x[order] for x in (self.a, self.ta, self.b, self.tb, which, keep))
        ta_sum, tb_sum = float(ta.sum()), float(tb.sum())
        if g == 0 or ta_sum <= 0 or tb_sum <= 0:
            return _Design(g, ta_sum, tb_sum, 0.0, 0.0, (0.0, 0.0, 0.0), 0.0, 0, np.zeros(4))
        ra, rb = float(a.sum() / ta_sum), float(b.sum() / tb_sum)
        za = (a[kept] - ra * ta[kept]) / ta_sum
        zb = (b[kept] - rb * tb[kept]) / tb_sum
        moments, df, n_strata = stratified_moments(strata[kept], za, zb)
        seen = self.seen if bool(keep.all()) else self.seen[:, keep]
        counts = np.count_nonzero(seen, axis=1) if seen.dtype == bool else seen.sum(axis=1)  # (flags: counted)
        return _Design(g, ta_sum, tb_sum, ra, rb, moments, df, n_strata, counts)

    def _exact(self, keep: np.ndarray) -> StratumSums | None:
        """The sums per stratum (:class:`StratumSums`) in exact arithmetic, where every sum of the conversations is
        a whole number small enough for each product and total of them to be an exact double (counts: every rate
        of a side, the unweighted win rate): each stratum's residuals and their squares expanded from exact totals
        and rounded once, as :func:`~delta_eval.metrics.counted.counted` has DuckDB give them (the same bits).
        ``None`` otherwise."""
        cols = {"a": self.a, "ta": self.ta, "b": self.b, "tb": self.tb}
        if not len(self.a):
            return None
        # An array given as two columns (a rate's units on both sides) is read once, below too.
        distinct = {id(x): x for x in cols.values()}
        # Whole numbers (a NaN or an infinity is not) whose products and totals stay below 2**52.
        big = max(max(float(x.max()), -float(x.min())) for x in distinct.values())
        if not big * big * len(self.a) < 2.0**52 or not all(np.array_equal(x, np.trunc(x)) for x in distinct.values()):
            return None
        ta_sum, tb_sum = float(self.ta.sum()), float(self.tb.sum())
        if not keep.any() or ta_sum <= 0 or tb_sum <= 0:
            return None  # no design: as the general path says
        ra, rb = float(self.a.sum() / ta_sum), float(self.b.sum() / tb_sum)
        every = bool(keep.all())  # no copy of the columns to leave none out
        strata = self.strata if every else self.strata[keep]
        if (strata == strata[0]).all():
            names, which = strata[:1], np.zeros(len(strata), dtype=np.intp)
        else:
            names, which = strata_codes(strata)
        k = len(names)
        picked = {i: x if every else x[keep] for i, x in distinct.items()}
        zero = {id(x): not x.any() for x in picked.values()}
        a, ta, b, tb = (picked[id(x)] for x in cols.values())
        # Whole numbers below 2**53: every total is exact, in any order (a dot product's too). Products summed by
        # numpy, not BLAS: a threaded BLAS dot waits on a busy core (40x slower on a loaded 2-core machine). Each
        # distinct product once (a one-sided rate has no b and the same units on both sides: 3 of the 10).
        known: dict[tuple[int, ...], np.ndarray] = {}

        def total(*xs: np.ndarray) -> np.ndarray:
            key = tuple(sorted(id(x) for x in xs))
            if key not in known:
                if any(zero[id(x)] for x in xs):
                    known[key] = np.zeros(k)
                elif k == 1:
                    known[key] = np.array([float((xs[0] if len(xs) == 1 else np.multiply(*xs)).sum())])
                else:
                    known[key] = np.bincount(which, weights=xs[0] if len(xs) == 1 else xs[0] * xs[1], minlength=k)
            return known[key]

        pairs = ((a, a), (a, ta), (ta, ta), (b, b), (b, tb), (tb, tb), (a, b), (a, tb), (ta, b), (ta, tb))
        totals = [total(x) for x in (a, ta, b, tb)] + [total(x, y) for x, y in pairs]
        m = np.bincount(which, minlength=k)
        sums, squares = np.zeros((2, k)), np.zeros((3, k))
        columns = np.vstack(totals).T.tolist()  # a stratum's totals, as Python floats
        for j, size in enumerate(m.tolist()):
            sums[0, j], sums[1, j], squares[0, j], squares[1, j], squares[2, j] = exact_residuals(
                columns[j], ra, rb, size
            )
        kept = self.seen if every else self.seen[:, keep]
        seen = kept.sum(axis=1) if k == 1 else np.vstack([np.bincount(which, weights=row, minlength=k) for row in kept])
        seen = seen.astype(np.int64)  # counts, as the general path gives them
        return StratumSums(strata=names, clusters=m, sums=sums, squares=squares, seen=seen.reshape(4, k),
                           rates=(ra, rb), units=(ta_sum, tb_sum), pairs=self.pairs, iid=self.iid)  # fmt: skip


def exact_residuals(totals: Sequence[float], ra: float, rb: float, m: int) -> tuple[float, float, float, float, float]:
    """One stratum's sums of the residuals ``u = a - ra ta`` and ``v = b - rb tb`` of its ``m`` conversations, and
    their squares and product about their means (``su, sv, uu, vv, uv``), from the exact totals of whole numbers
    ``a, ta, b, tb, a a, a ta, ta ta, b b, b tb, tb tb, a b, a tb, ta b, ta tb``: in integer arithmetic (a double
    rate is a ratio of integers), each rounded once, so the same totals give the same doubles in any order (the
    expansion of the squares loses nothing).

    Example:
        >>> exact_residuals([1, 2, 0, 2, 1, 1, 2, 0, 0, 2, 0, 1, 0, 2], 0.5, 0.0, 2)
        (0.0, 0.0, 0.5, 0.0, 0.0)
    """
    if m == 0:
        return 0.0, 0.0, 0.0, 0.0, 0.0
    sa, sta, sb, stb, aa, ata, tata, bb, btb, tbtb, ab, atb, tab, tatb = (int(x) for x in totals)
    (p, q), (r, s) = ra.as_integer_ratio(), rb.as_integer_ratio()
    su, sv = sa * q - p * sta, sb * s - r * stb  # the sums of u and v, times q and s
    uu = m * (aa * q * q - 2 * p * q * ata + p * p * tata) - su * su
    vv = m * (bb * s * s - 2 * r * s * btb + r * r * tbtb) - sv * sv
    uv = m * (ab * q * s - r * q * atb - p * s * tab + p * r * tatb) - su * sv
    # An integer over an integer is the correctly rounded quotient.
    return su / q, sv / s, uu / (m * q * q), vv / (m * s * s), uv / (m * q * s)


@dataclass(frozen=True)
class StratumSums:
    """What the interval needs of the conversations, added up per stratum (a column each). With the two rates
    ``A = sum(w a) / sum(w t_a)`` and ``B`` (``rates``, over every conversation, whose ``units`` are ``sum(w t_a)``
    and ``sum(w t_b)``), each conversation's residuals ``u = sum(w a) - A sum(w t_a)`` and ``v`` (the same of ``b``)
    are the linearised totals the variance reads: per stratum, the conversations with units (``clusters``), the sums
    of their ``u`` and ``v`` (``sums``), the sums of squares and products of those about the stratum's means
    (``squares``: ``uu``, ``vv``, ``uv``), and how many saw each rate's event and non-event (``seen``: a-event,
    a-non-event, b-event, b-non-event); ``pairs`` and ``iid`` as :class:`PairedSums`.

    The interval is the one :class:`PairedSums` gives (the stratified-cluster variance needs no more), so a query
    engine can add the conversations up per stratum and only a row per stratum reaches Python
    (:func:`~delta_eval.metrics.counted.counted`). The residuals are taken at the rates and centred per stratum
    before they are squared, as the per-conversation path does (an expansion into raw sums of squares loses the
    variance when one conversation outweighs the rest; ``tests/metrics/test_moments.py`` holds the two to the
    same intervals).

    Example:
        >>> s = PairedSums.of([1, 0, 0, 1, 0, 0], [0, 1, 0, 0, 0, 0], clusters=["a", "a", "b", "b", "c", "c"])
        >>> d, e = s.moments().difference(), s.difference()
        >>> round(d.estimate, 12) == round(e.estimate, 12), round(d.se - e.se, 12), d.strata, d.clusters
        (True, 0.0, 1, 3)
    """

    strata: np.ndarray
    clusters: np.ndarray
    sums: np.ndarray
    squares: np.ndarray
    seen: np.ndarray
    rates: tuple[float, float]
    units: tuple[float, float]
    pairs: int
    iid: np.ndarray

    def difference(
        self, confidence: float = 0.95, *, scale: float = 1.0, spread: float = 1.0, same_kind: bool = False
    ) -> Difference:
        """``A - B`` and its interval: :meth:`PairedSums.difference`, from the sums per stratum."""
        return _difference(self._design, self.iid, self.pairs, confidence, scale, spread, same_kind)

    @cached_property
    def _design(self) -> _Design:
        # Computed once: the decision asks for many intervals of the same sums (bisections over levels and sizes).
        g = int(self.clusters.sum())
        (ra, rb), (ta_sum, tb_sum) = self.rates, self.units
        if g == 0 or ta_sum <= 0 or tb_sum <= 0:
            return _Design(g, ta_sum, tb_sum, 0.0, 0.0, (0.0, 0.0, 0.0), 0.0, 0, np.zeros(4))
        m = self.clusters
        # Strata of two conversations or more are groups of their own, their squares already about their means.
        own = m > 1
        factor = m[own] / (m[own] - 1)
        uu, vv, uv = (float((factor * row[own]).sum()) for row in self.squares)
        df = float((m[own] - 1).sum())
        # Strata of one conversation are pooled into one group (a lone conversation says nothing about its
        # stratum's spread): their residuals (each stratum's sums) about the group's mean.
        lone = m == 1
        size = int(lone.sum())
        if size > 1:
            du, dv = (row[lone] - row[lone].mean() for row in self.sums)
            pooled = size / (size - 1)
            uu, vv = uu + pooled * float((du * du).sum()), vv + pooled * float((dv * dv).sum())
            uv += pooled * float((du * dv).sum())
            df += size - 1
        moments = (uu / (ta_sum * ta_sum), vv / (tb_sum * tb_sum), uv / (ta_sum * tb_sum))
        return _Design(g, ta_sum, tb_sum, ra, rb, moments, df, int((m > 0).sum()), self.seen.sum(axis=1))


@dataclass(frozen=True)
class _Design:
    """What the interval reads of the sums, however they were kept: the conversations counted (``g``), each rate's
    units and value, the variances of the two linearised totals and their covariance, the degrees of freedom, the
    strata, and the conversations where each rate's event and non-event occurred (a-event, a-non-event, b-event,
    b-non-event)."""

    g: int
    ta_sum: float
    tb_sum: float
    ra: float
    rb: float
    moments: tuple[float, float, float]
    df: float
    n_strata: int
    seen: np.ndarray


def _difference(design: _Design, iid: np.ndarray, pairs: int, confidence: float, scale: float, spread: float,
                same_kind: bool) -> Difference:  # fmt: skip
    """:meth:`PairedSums.difference` from its design (shared with :meth:`StratumSums.difference`)."""
    g, ta_sum, tb_sum, ra, rb = design.g, design.ta_sum, design.tb_sum, design.ra, design.rb
    if g == 0 or ta_sum <= 0 or tb_sum <= 0:
        empty = RateInterval(None, 0.0, 1.0, 0.0, 0.0, 0)
        return Difference(None, -1.0, 1.0, empty, empty, 0.0, 0.0, 0.0, g, 0, pairs, 0.0, confidence)
    (va, vb, cov), df, n_strata = design.moments, design.df, design.n_strata
    # A variance at the level of floating-point rounding (a rate's standard error under 1e-13) is none: the
    # rounding would otherwise set the correlation of the two rates, and with it the interval (and differ between
    # two ways of adding up the same sums).
    if va < ROUNDING_VARIANCE:
        va, cov = 0.0, 0.0
    if vb < ROUNDING_VARIANCE:
        vb, cov = 0.0, 0.0
    if scale != 1.0 or spread != 1.0:
        va, vb, cov, g = va * spread / scale, vb * spread / scale, cov * spread / scale, max(1, round(g * scale))
        df = max(0.0, (df + n_strata) * scale - n_strata)
    c = t_quantile(confidence, df) if df > 0 else math.inf
    seen = design.seen * scale
    seen_a, seen_b = int(min(seen[0], seen[1])), int(min(seen[2], seen[3]))
    # Kish's effective number of units of each rate, and its design effect where it can be estimated: a rate
    # seen in too few conversations borrows the other's (the same kind of event on the same pairs).
    tata, tbtb = float(iid[2]), float(iid[5])
    units_a = ta_sum * ta_sum / tata * scale if tata > 0 else float(g)
    units_b = tb_sum * tb_sum / tbtb * scale if tbtb > 0 else float(g)
    deffs = [units * var / (r * (1 - r)) for units, var, r, seen_in in
             ((units_a, va, ra, seen_a), (units_b, vb, rb, seen_b))
             if seen_in >= MIN_CONVERSATIONS_SEEN and 0 < r < 1 and var > 0]  # fmt: skip
    deff = max(1.0, *deffs) if deffs and same_kind else None
    ia = _rate(ra, va, g, c, seen_a, None if deff is None else units_a / deff)
    ib = _rate(rb, vb, g, c, seen_b, None if deff is None else units_b / deff)
    r = cov / math.sqrt(va * vb) if va > 0 and vb > 0 else 0.0
    r = min(max(r, -1.0), 1.0)
    d = ra - rb
    # MOVER: each bound of the difference recovers the variance from the bounds of the two rates.
    below_a, above_b = ra - ia.ci_low, ib.ci_high - rb
    above_a, below_b = ia.ci_high - ra, rb - ib.ci_low
    lo = d - math.sqrt(max(below_a**2 + above_b**2 - 2 * r * below_a * above_b, 0.0))
    hi = d + math.sqrt(max(above_a**2 + below_b**2 - 2 * r * above_a * below_b, 0.0))
    var_iid = _iid_var(iid, ra, rb, ta_sum, tb_sum, pairs) * spread / scale
    return Difference(
        estimate=d,
        ci_low=max(-1.0, lo),
        ci_high=min(1.0, hi),
        a=ia,
        b=ib,
        se=math.sqrt(max(va + vb - 2 * cov, 0.0)),
        se_iid=math.sqrt(var_iid),
        df=df,
        clusters=g,
        strata=n_strata,
        pairs=pairs,
        correlation=r,
        confidence=confidence,
    )


def _rate(p: float, var: float, clusters: int, c: float, seen_in: int, borrowed: float | None) -> RateInterval:
    n_eff = p * (1 - p) / var if var > 0 else math.inf
    if seen_in < MIN_CONVERSATIONS_SEEN:
        # Too few conversations to estimate this rate's design effect: at most what the other rate's design
        # effect allows, and never less than one unit per conversation.
        n_eff = min(n_eff, max(float(clusters), borrowed or 0.0))
    n_eff = max(n_eff, 1.0)
    lo, hi = wilson_bounds(min(max(p, 0.0), 1.0), n_eff, c)
    return RateInterval(p, lo, hi, math.sqrt(max(var, 0.0)), n_eff, seen_in)


def _iid_products(w: np.ndarray, a: np.ndarray, ta: np.ndarray, b: np.ndarray, tb: np.ndarray) -> np.ndarray:
    w2 = w * w
    x = {"a": a, "ta": ta, "b": b, "tb": tb}
    return np.array([float((w2 * x[p] * x[q]).sum()) for p, q in PRODUCTS])


def _iid_var(p: np.ndarray, ra: float, rb: float, ta: float, tb: float, n: int) -> float:
    """The variance of ``A - B`` were every pair its own cluster: ``n / (n - 1) sum(e_i^2)`` with the linearised
    residual ``e_i = w (a - A t_a) / T_a - w (b - B t_b) / T_b``, expanded into the totals of :func:`_iid_products`."""
    if n < 2:
        return 0.0
    aa, ata, tata, bb, btb, tbtb, ab, atb, tab, tatb = (float(x) for x in p)
    ea = (aa - 2 * ra * ata + ra * ra * tata) / (ta * ta)
    eb = (bb - 2 * rb * btb + rb * rb * tbtb) / (tb * tb)
    cross = (ab - rb * atb - ra * tab + ra * rb * tatb) / (ta * tb)
    return max(n / (n - 1) * (ea + eb - 2 * cross), 0.0)
