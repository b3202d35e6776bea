"""The quantiles and tail probabilities from scipy.special agree with scipy.stats', which the intervals and tests
used before (and which a process no longer imports to decide)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats
from scipy.special import bdtr

from delta_eval.metrics.distributions import beta_ppf, binom_ppf, binom_two_sided_p, chi2_ppf, t_ppf

LEVELS = st.sampled_from([0.005, 0.025, 0.05, 0.1, 0.9, 0.95, 0.975, 0.995])


@given(LEVELS, st.floats(0.5, 1e6))
def test_t_quantile_is_scipy_stats(q: float, df: float) -> None:
    assert t_ppf(q, df) == float(stats.t.ppf(q, df))


@given(LEVELS, st.integers(0, 5000), st.integers(1, 5000))
def test_beta_quantile_is_scipy_stats(q: float, k: int, rest: int) -> None:
    # The shapes Clopper-Pearson asks for: k + 1 and n - k.
    assert beta_ppf(q, k + 1, rest) == pytest.approx(float(stats.beta.ppf(q, k + 1, rest)), rel=1e-12, abs=1e-300)


@given(LEVELS, st.floats(0.5, 1e5))
def test_chi2_quantile_is_scipy_stats(q: float, df: float) -> None:
    assert chi2_ppf(q, df) == float(stats.chi2.ppf(q, df))


@given(LEVELS, st.integers(1, 3_000_000), st.floats(0.001, 0.999))
def test_binomial_quantile_is_scipy_stats_and_the_smallest_rank_reaching_q(q: float, n: int, p: float) -> None:
    k = binom_ppf(q, n, p)
    assert bdtr(k, n, p) >= q
    assert k == 0 or bdtr(k - 1, n, p) < q
    assert k == int(stats.binom.ppf(q, n, p))


def test_binomial_quantile_at_the_ends() -> None:
    assert (binom_ppf(0.0, 10, 0.3), binom_ppf(1.0, 10, 0.3)) == tuple(int(x) for x in stats.binom.ppf([0, 1], 10, 0.3))
    assert binom_ppf(0.5, 1, 0.5) == 0  # P(X <= 0) = 0.5 exactly


@given(st.integers(0, 200_000), st.integers(0, 200_000))
def test_sign_test_p_value_is_scipy_stats_binomtest(k: int, extra: int) -> None:
    n = k + extra
    if n == 0:
        assert binom_two_sided_p(0, 0) == 1.0
        return
    # scipy.stats sums the tails with another incomplete beta: the two agree far below any significance level (where
    # its terms underflow it says 0: k=10 of 1,075 gave 0.0 against 2.7e-300 here).
    assert binom_two_sided_p(k, n) == pytest.approx(float(stats.binomtest(k, n, 0.5).pvalue), rel=1e-7, abs=1e-250)


def test_a_run_decides_without_importing_scipy_stats(tmp_path: Path) -> None:
    # What the module is for: a process that runs and decides (the decision is a run's last step, with the sides'
    # latency quantile intervals and the sign test) skips scipy.stats' import.
    code = (
        "import sys\n"
        "import delta_eval as de\n"
        "result = de.run(conversations=de.demo.demo_conversations(), baseline=de.Variant(model='simulated:baseline'),\n"
        "                candidate=de.Variant(model='simulated:candidate'), sample=de.Stratified(n=20, seed=1),\n"
        "                out='run')\n"
        "d = result.decision()\n"
        "print(d.outcome, d.sides['candidate'].latency_p95_ci_ms is not None)\n"
        "print('scipy.stats' in sys.modules, 'scipy.special' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-3:] == ["True", "False", "True"], done.stdout
