"""The anytime-valid test keeps its error rate however often it is looked at, and stops early when the answer is
clear (simulation, fixed seeds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import delta_eval as de
from delta_eval.metrics.sequential import SequentialTest


def run_test(true_rate: float, margin: float, seed: int, limit: int = 1500) -> tuple[str | None, int]:
    """Conversations of 1-10 pairs; a pair is decided (p 0.7) by a per-conversation propensity, else a tie, so
    that the mean score is ``true_rate``."""
    rng = np.random.default_rng(seed)
    q_mean = (true_rate - 0.15) / 0.7
    test = SequentialTest(margin=margin, scale=10)
    for _ in range(limit):
        q = rng.beta(q_mean * 3, (1 - q_mean) * 3)
        pairs = int(rng.integers(1, 11))
        u = rng.random(pairs)
        test.add(float(np.where(u < 0.7 * q, 1.0, np.where(u < 0.7, 0.0, 0.5)).sum()), pairs)
        if test.verdict is not None:
            break
    return test.verdict, test.conversations


def test_at_the_margin_not_worse_is_declared_at_most_alpha_over_two_of_the_time() -> None:
    runs = [run_test(0.45, 0.05, seed, limit=800) for seed in range(200)]
    false_claims = sum(v == "not worse" for v, _ in runs) / len(runs)
    assert false_claims <= 0.055  # the guarantee is 2.5%; 200 runs leave binomial slack


def test_a_clear_answer_comes_early_either_way() -> None:
    good = [run_test(0.55, 0.05, seed) for seed in range(60)]
    assert all(v == "not worse" for v, _ in good)
    assert np.median([n for _, n in good]) < 300
    bad = [run_test(0.30, 0.05, seed) for seed in range(60)]
    assert all(v == "worse" for v, _ in bad)


def test_a_run_stops_once_settled_and_stays_stopped(tmp_path: Path) -> None:
    from delta_eval.analysis.report import render_report
    from delta_eval.demo import demo_config, demo_conversations

    cfg = demo_config(tmp_path / "run", n=150, latency_ms=0.0, candidate="reword").model_copy(
        update={"stop_early": True, "decision": de.DecisionRule(margin=0.1)}
    )
    first = de.run(cfg, conversations=demo_conversations())
    assert first.status == "completed"
    assert first.manifest.stopped_early is not None
    assert first.manifest.stopped_early.startswith("the candidate is not worse")
    assert first.counts.pairs < first.counts.pairs_planned
    # only whole conversations were fed to the test; each one is complete in the folder
    con = first.connect()
    incomplete = con.execute(
        """SELECT count(*) FROM conversations c
           LEFT JOIN (SELECT conversation_id, count(*) AS n FROM verdicts GROUP BY 1) v USING (conversation_id)
           WHERE coalesce(v.n, 0) < c.n_pairs"""
    ).fetchone()[0]
    assert incomplete <= 2 * cfg.concurrency  # those in flight when it stopped
    assert "STOPPED EARLY" in render_report(first)
    assert first.decision().non_inferiority.verdict in ("not worse", "better")
    again = de.run(cfg, conversations=demo_conversations())
    assert again.manifest.sessions[-1].pairs_decided == 0
    assert again.manifest.stopped_early == first.manifest.stopped_early


def test_early_stopping_answers_the_rule_s_own_question() -> None:
    # 90% of pairs equivalent, the candidate losing 65% of the rest: within a 2-point margin over all pairs (48.5%),
    # clearly worse over judged pairs (35%). The test settles whichever question the rule asks.
    from delta_eval.metrics.estimand import Estimand
    from delta_eval.stopping import EarlyStop
    from delta_eval.testing.verdicts import simulate_verdicts

    rows, truth = simulate_verdicts(4000, win_rate=0.35, over="judged", equivalent=0.9, ties=0.0, rho=0.2, seed=3)
    assert truth.all == pytest.approx(0.485)
    by_conv: dict[str, list[dict[str, object]]] = {}
    for r in rows:
        by_conv.setdefault(str(r["conversation_id"]), []).append(r)
    planned = {c: (len(own), 1.0) for c, own in by_conv.items()}
    said = {}
    for over in ("all", "judged"):
        stop = EarlyStop(0.02, 0.05, planned, Estimand(over=over))  # type: ignore[arg-type]
        for c, own in by_conv.items():
            for r in own:
                stop.add(c, r)
            if stop.settled:
                break
        said[over] = stop.test.verdict
    assert said == {"all": "not worse", "judged": "worse"}
