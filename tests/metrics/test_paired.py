from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from delta_eval.metrics import win_rate
from delta_eval.metrics.multiplicity import benjamini_hochberg, holm
from delta_eval.metrics.paired import net_preference, non_inferiority, sign_test

outcomes = st.sampled_from(["candidate", "baseline", "tie", "equivalent"])


def rows(outs: list[str], per_conversation: int = 3) -> list[dict[str, object]]:
    return [{"outcome": o, "conversation_id": f"c{i // per_conversation}"} for i, o in enumerate(outs)]


@given(st.lists(outcomes, min_size=1, max_size=80))
def test_net_preference_is_wins_minus_losses_and_twice_the_win_rate_minus_one(outs: list[str]) -> None:
    net = net_preference(rows(outs))
    assert net.estimate == pytest.approx((outs.count("candidate") - outs.count("baseline")) / len(outs))
    assert net.ci_low == pytest.approx(2 * net.win_rate.ci_low - 1)
    assert -1.0 <= net.ci_low <= net.estimate + 1e-9 <= net.ci_high + 2e-9 <= 1.0 + 2e-9


def test_the_continuous_win_rate_reproduces_alpacaeval() -> None:
    # AlpacaEval: win_rate = mean(p) * 100, standard_error = pandas std (ddof=1) / sqrt(n) * 100.
    rng = np.random.default_rng(3)
    p = rng.uniform(0, 1, 805).round(4).tolist()
    verdicts = [{"outcome": "candidate" if x > 0.5 else "baseline" if x < 0.5 else "tie", "preference": x,
                 "conversation_id": f"q{i}"} for i, x in enumerate(p)]  # fmt: skip
    w = win_rate(verdicts, soft=True, method="iid")
    assert w.estimate * 100 == pytest.approx(statistics.fmean(p) * 100, abs=1e-12)
    assert w.se * 100 == pytest.approx(statistics.stdev(p) / math.sqrt(len(p)) * 100, rel=1e-12)
    assert w.ci_high - w.estimate == pytest.approx(1.959964 * w.se, rel=1e-6)
    # Without soft, the same rows give the hard win rate.
    hard = win_rate(verdicts, method="iid")
    assert hard.estimate == pytest.approx(sum(x > 0.5 for x in p) / len(p) + 0.5 * sum(x == 0.5 for x in p) / len(p))


def test_sign_test_counts_conversations_not_turns() -> None:
    ten = rows(["candidate"] * 30, per_conversation=3)  # 30 wins but only 10 conversations
    t = sign_test(ten)
    assert (t.favour_candidate, t.favour_baseline, t.balanced) == (10, 0, 0)
    assert t.p_value == pytest.approx(2 * 0.5**10)
    mixed = rows(["candidate", "baseline", "tie"] * 4, per_conversation=3)  # each conversation in balance
    assert sign_test(mixed).balanced == 4
    assert sign_test(mixed).p_value == 1.0


def simulate(true_rate: float, conversations: int, seed: int) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    out = []
    for c in range(conversations):
        q = rng.beta(true_rate * 4, (1 - true_rate) * 4)
        for _ in range(rng.integers(3, 9)):
            out.append({"outcome": "candidate" if rng.random() < q else "baseline", "conversation_id": f"c{c}"})
    return out


def test_non_inferiority_verdicts_and_how_many_more_conversations() -> None:
    assert non_inferiority(simulate(0.65, 400, 1), margin=0.02).verdict == "better"
    assert non_inferiority(simulate(0.49, 2000, 2), margin=0.05).verdict == "not worse"
    assert non_inferiority(simulate(0.30, 400, 3), margin=0.02).verdict == "worse"
    small = non_inferiority(simulate(0.6, 25, 9), margin=0.02)
    assert small.verdict == "undecided"
    assert small.more_conversations is not None
    assert "need about" in str(small)
    # With about that many more conversations, the same population gives a decided verdict.
    assert small.more_conversations < 200
    bigger = non_inferiority(simulate(0.6, 25 + small.more_conversations, 13), margin=0.02)
    assert bigger.verdict in ("not worse", "better")
    with pytest.raises(ValueError, match="margin"):
        non_inferiority(simulate(0.5, 10, 6), margin=2)


@given(st.lists(st.floats(0, 1), min_size=1, max_size=30))
def test_holm_and_bh_adjust_upwards_and_bh_is_never_stricter(p: list[float]) -> None:
    h, b = holm(p), benjamini_hochberg(p)
    for raw, hp, bp in zip(p, h, b, strict=True):
        assert raw - 1e-12 <= bp <= hp + 1e-12 <= 1.0 + 1e-12
    # the order of the p-values is kept
    order = sorted(range(len(p)), key=lambda i: p[i])
    assert [h[i] for i in order] == sorted(h)
