from __future__ import annotations

from pathlib import Path

import pytest

import delta_eval as de
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.metrics.consistency import base_pair_id, consistency


def test_epochs_replay_each_point_k_times_and_the_decision_is_taken_per_epoch(tmp_path: Path) -> None:
    cfg = demo_config(tmp_path / "run", n=6, latency_ms=0.0)
    seeded = cfg.candidate.model_copy(update={"params": de.GenerateParams(seed=1)})
    result = de.run(cfg.model_copy(update={"epochs": 3, "candidate": seeded}), conversations=demo_conversations())
    con = result.connect()
    points = con.execute("SELECT count(DISTINCT pair_id) FROM verdicts WHERE epoch = 1").fetchone()[0]
    assert result.counts.pairs == result.counts.pairs_planned == 3 * points
    assert con.execute("SELECT DISTINCT epoch FROM replays ORDER BY 1").fetchall() == [(1,), (2,), (3,)]
    assert con.execute("SELECT count(*) FROM verdicts WHERE NOT regexp_matches(pair_id, '@[123]$')").fetchone() == (0,)
    d = result.decision()
    assert sorted(d.epochs) == [1, 2, 3]
    # The baseline has no seed: the simulated model answers a request the same way every time; the candidate's
    # seed moves with the epoch, so it answers differently.
    assert d.consistency["baseline"].consistent.value == 1.0
    candidate = d.consistency["candidate"]
    assert candidate.consistent.value is not None
    assert candidate.consistent.value < 1.0
    assert candidate.distinct_answers > 1.0
    assert candidate.points == points
    assert "epochs: APPROVED in" in "\n".join(d.lines())


def test_consistency_compares_calls_by_meaning_and_text_once_normalised() -> None:
    def row(epoch: int, args: str, text: str) -> dict[str, object]:
        steps = [{"tool_calls": [{"name": "book", "arguments": args}]}]
        return {"side": "candidate", "pair_id": f"c#0@{epoch}", "epoch": epoch, "conversation_id": "c",
                "final_text": text, "steps": steps}  # fmt: skip

    same = [row(1, '{"a": 1, "b": 2}', "Booked!"), row(2, '{"b": 2.0, "a": 1}', "booked")]
    assert consistency(same)["candidate"].consistent.value == 1.0
    different = [row(1, '{"a": 1}', "Booked!"), row(2, '{"a": 2}', "Booked!")]
    assert consistency(different)["candidate"].distinct_answers == 2.0
    assert consistency([row(1, "{}", "x")]) == {}  # one epoch: nothing to compare
    assert base_pair_id("c#0@12", 12) == "c#0"
    assert base_pair_id("c#0", 1) == "c#0"


def test_agreement_does_not_fall_with_more_epochs_and_a_failed_replay_is_an_answer() -> None:
    def row(epoch: int, text: str, error: str | None = None) -> dict[str, object]:
        return {"side": "candidate", "pair_id": f"c#0@{epoch}", "epoch": epoch, "conversation_id": "c",
                "final_text": text, "steps": [], "error": error}  # fmt: skip

    # The same model answering "yes" 80% of the time: 3 epochs and 6 epochs, each with one "no".
    three = consistency([row(1, "yes"), row(2, "yes"), row(3, "no")])["candidate"]
    six = consistency([row(e, "no" if e == 6 else "yes") for e in range(1, 7)])["candidate"]
    assert three.consistent.value == six.consistent.value == 0.0  # "every epoch the same" says nothing more
    assert three.agreement.value == pytest.approx(1 / 3)
    assert six.agreement.value == pytest.approx(10 / 15)
    # A side that fails in one epoch is not more consistent for it: its error is an answer.
    failing = consistency([row(1, "yes"), row(2, "yes"), row(3, "", error="500")])["candidate"]
    assert (failing.points, failing.consistent.value) == (1, 0.0)
