"""The few quantiles and tail probabilities the intervals and tests need (Student t, beta, binomial, chi-square),
from :mod:`scipy.special`'s functions rather than :mod:`scipy.stats`' distribution objects.

``scipy.stats`` takes about three times as long to import as ``scipy.special`` (~0.75 s of CPU against ~0.3 s
here), a price every process pays at its first decision: a run's last step, each ``delta-eval report``, each Ray
or process shard that decides. The values are the ones ``scipy.stats`` gives (its distributions call these
functions, or for the binomial quantile compute the same discrete inverse); tests hold each to it.

Example:
    >>> round(t_ppf(0.975, 10), 4), binom_ppf(0.025, 100, 0.5)
    (2.2281, 40)
"""

from __future__ import annotations

__all__ = ["beta_ppf", "binom_ppf", "binom_two_sided_p", "chi2_ppf", "t_ppf"]


def t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (``scipy.stats.t.ppf``)."""
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def beta_ppf(q: float, a: float, b: float) -> float:
    """The ``q`` quantile of the beta distribution with shapes ``a`` and ``b`` (``scipy.stats.beta.ppf``)."""
    from scipy.special import betaincinv

    return float(betaincinv(a, b, q))


def chi2_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of the chi-square distribution with ``df`` degrees of freedom (``scipy.stats.chi2.ppf``)."""
    from scipy.special import gammaincinv

    return float(2 * gammaincinv(df / 2, q))


def binom_ppf(q: float, n: int, p: float) -> int:
    """The ``q`` quantile of the binomial distribution of ``n`` trials of probability ``p``: the smallest ``k`` with
    ``P(X <= k) >= q`` (``scipy.stats.binom.ppf``), found by bisection on the distribution function."""
    from scipy.special import bdtr

    if q <= 0:
        return -1  # as scipy.stats: one below the support
    if q >= 1:
        return n
    lo, hi = 0, n  # P(X <= n) = 1 >= q: hi always qualifies
    if bdtr(0, n, p) >= q:
        return 0
    while hi - lo > 1:  # invariant: P(X <= lo) < q <= P(X <= hi)
        mid = (lo + hi) // 2
        if bdtr(mid, n, p) >= q:
            hi = mid
        else:
            lo = mid
    return hi


def binom_two_sided_p(k: int, n: int) -> float:
    """The two-sided p-value of ``k`` successes in ``n`` trials against a probability of one half
    (``scipy.stats.binomtest(k, n, 0.5).pvalue``): twice the smaller tail, at most 1."""
    from scipy.special import bdtr

    if n <= 0:
        return 1.0
    low = min(k, n - k)
    if 2 * low == n:
        return 1.0
    return float(min(1.0, 2 * bdtr(low, n, 0.5)))
