"""Planning: the sample size a pilot asks for gives about the power it promises (simulation, fixed seeds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import delta_eval as de
from delta_eval.allocation import allocate
from delta_eval.metrics import non_inferiority
from delta_eval.metrics.planning import sample_size


def conversations(n: int, rng: np.random.Generator, rate: float = 0.5) -> list[dict[str, object]]:
    rows = []
    for c in range(n):
        q = rng.beta(rate * 3, (1 - rate) * 3)
        stratum = "long" if c % 3 == 0 else "short"
        for _ in range(rng.integers(6, 12) if stratum == "long" else rng.integers(1, 4)):
            u = rng.random()
            outcome = "candidate" if u < 0.6 * q else "baseline" if u < 0.6 else "tie"
            rows.append({"outcome": outcome, "conversation_id": f"c{c}", "stratum": stratum})
    return rows


def test_the_planned_sample_has_about_the_power_asked_for() -> None:
    rng = np.random.default_rng(5)
    plan = sample_size(conversations(80, rng), margin=0.05, power=0.8)
    assert 20 < plan.conversations < 2000
    decided = sum(
        non_inferiority(conversations(plan.conversations, rng), margin=0.05).verdict in ("not worse", "better")
        for _ in range(120)
    )
    assert 0.7 <= decided / 120 <= 0.92  # about 80%
    # Twice the margin needs about a quarter of the conversations.
    wider = sample_size(conversations(80, np.random.default_rng(5)), margin=0.10, power=0.8)
    assert wider.conversations == pytest.approx(plan.conversations / 4, rel=0.1)
    with pytest.raises(ValueError, match="not above the margin"):
        sample_size(conversations(80, rng), margin=0.05, expected=0.44)


def test_neyman_allocation_puts_draws_where_outcomes_vary() -> None:
    rng = np.random.default_rng(6)
    plan = sample_size(conversations(90, rng), margin=0.05, population={"long": 1000, "short": 2000})
    assert plan.stratum_sd["long"] > plan.stratum_sd["short"]  # long conversations carry more variable totals
    proportional = allocate({"long": 1000, "short": 2000}, plan.conversations)
    assert plan.allocation["long"] > proportional["long"]
    assert sum(plan.allocation.values()) == plan.conversations
    assert allocate({"a": 5, "b": 100}, 50, sd={"a": 10.0, "b": 0.1}) == {"a": 5, "b": 45}  # never more than N_h


def test_de_plan_reads_a_pilot_run(tmp_path: Path) -> None:
    from delta_eval.demo import demo_config, demo_conversations

    pilot = de.run(demo_config(tmp_path / "pilot", n=20, latency_ms=0.0), conversations=demo_conversations())
    plan = de.plan(pilot, margin=0.1, expected=0.55)
    assert plan.pilot_conversations == 20
    assert set(plan.allocation) == {s["stratum"] for s in pilot.table("strata").to_pylist()}
    assert plan.judge_cost_usd == 0.0  # simulated judges cost nothing
    assert "conversations" in str(plan)
    sample = de.Stratified(by=["task_type"], n=plan.conversations, stratum_sd=plan.stratum_sd)
    assert sample.stratum_sd == plan.stratum_sd


def test_the_plan_answers_the_rule_s_estimand() -> None:
    # Mostly equivalent pairs: over judged pairs the same margin needs far fewer conversations' worth of judged
    # pairs per conversation, so more conversations; the plan follows the estimand it is given.
    from delta_eval.metrics.estimand import Estimand
    from delta_eval.testing.verdicts import simulate_verdicts

    pilot, _ = simulate_verdicts(120, win_rate=0.5, over="judged", equivalent=0.8, rho=0.3, seed=8)
    everything = sample_size(pilot, margin=0.02)
    judged = sample_size(pilot, margin=0.02, estimand=Estimand(over="judged"))
    assert judged.conversations > 3 * everything.conversations
    assert "judged pairs" in str(judged)
    assert "all pairs" in str(everything)
