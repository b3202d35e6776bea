"""The LLM judges through the real SDKs, against the fake provider servers on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

import delta_eval as de
from delta_eval.adapters.pool import ModelPool
from delta_eval.adapters.registry import AdapterContext
from delta_eval.calls import ModelRequest
from delta_eval.judges.answers import equivalence_schema, pairwise_schema
from delta_eval.judges.base import PairView, SideView
from delta_eval.judges.cascade import Decision, JudgeCascade
from delta_eval.judges.context import JudgeContext
from delta_eval.judges.prompts import Rubric, pairwise_instructions
from delta_eval.pricing import Price
from delta_eval.schema import Message, Step, ToolCall, ToolResult, TurnOutput
from delta_eval.testing import FakeAnthropicServer, FakeGeminiServer, FakeOpenAIServer
from delta_eval.testing.servers.gemini import normalise
from delta_eval.testing.servers.provider import FakeProviderServer
from tests.judges.test_cascade import POINT, replay

FAST = de.RetryPolicy(initial_wait=0.0, max_wait=0.0, max_attempts=3)
LOOKUP = ToolCall(id="x", name="get_reservation", arguments='{"id": "ABC123"}')
RESULT = ToolResult(call_id="x", name="get_reservation", content='{"flight": "HAT001"}')
GOOD = TurnOutput(steps=(Step(tool_calls=(LOOKUP,), tool_results=(RESULT,)),), final_text="You are on flight HAT001.")
SAME = TurnOutput(steps=(Step(tool_calls=(LOOKUP,), tool_results=(RESULT,)),), final_text="you are on flight HAT001")
WORSE = TurnOutput(final_text="Could you tell me more?")


def _schema_sent(body: dict[str, Any], api: str) -> Any:
    """Where each provider's request carries the structured-output schema."""
    if api == "openai":
        return body["response_format"]["json_schema"]["schema"]
    if api == "openai-responses":
        return body["text"]["format"]["schema"]
    if api == "anthropic":
        return body["output_config"]["format"]["schema"]
    return normalise(body)["generationConfig"]["responseJsonSchema"]


Case = tuple[str, type[FakeProviderServer], Callable[[Any], dict[str, Any]]]
CASES: list[Case] = [
    ("openai", FakeOpenAIServer, lambda s: {"base_url": s.base_url, "api_key": "k"}),
    ("openai-responses", FakeOpenAIServer, lambda s: {"base_url": s.base_url, "api_key": "k"}),
    ("anthropic", FakeAnthropicServer, lambda s: {"base_url": s.url, "api_key": "k"}),
    ("gemini", FakeGeminiServer, lambda s: {"base_url": s.url, "api_key": "k"}),
]


class Judging:
    """A judge context on a pool of real adapters; closes them at the end."""

    def __init__(self, prices: dict[str, Price] | None = None, seed: int = 0) -> None:
        self.pool = ModelPool(None, FAST, AdapterContext())
        self.context = JudgeContext(pool=self.pool, prices=prices or {}, seed=seed)

    def run(self, fn: Callable[[], Any]) -> Any:
        async def go() -> Any:
            try:
                return await fn()
            finally:
                await self.pool.aclose()

        return anyio.run(go)


def pair(a: TurnOutput, b: TurnOutput) -> PairView:
    return PairView(point=POINT, a=SideView(output=a), b=SideView(output=b))


@pytest.mark.parametrize(("api", "server_class", "options"), CASES, ids=[c[0] for c in CASES])
def test_structured_answers_through_each_provider(
    api: str, server_class: type[FakeProviderServer], options: Callable[[Any], dict[str, Any]]
) -> None:
    with server_class() as server:
        judging = Judging(prices={f"{api}:judge": Price(input=1.0, output=4.0)})
        eq = de.EquivalenceJudge(model=f"{api}:judge-small", provider_options=options(server))(judging.context)
        judge = de.PairwiseJudge(model=f"{api}:judge", provider_options=options(server))(judging.context)

        async def both() -> tuple[Any, Any]:
            return await eq.equivalent(pair(GOOD, SAME)), await judge.compare(pair(WORSE, GOOD))

        same, better = judging.run(both)
        bodies = [r.json() for r in server.requests]
    assert (same.equivalent, same.confidence) == (True, 1.0)
    assert "Same tool calls" in same.reasoning
    assert same.raw["answer"]["equivalent"] is True
    assert same.usage.input_tokens > 0
    assert (better.winner, better.severity) == ("B", "minor")
    dims = Rubric.default().dimensions
    assert set(better.scores["A"]) == set(better.scores["B"]) == set(dims)
    assert better.scores["B"]["accuracy"] > better.scores["A"]["accuracy"]
    assert better.summary.startswith("Reply B is better")
    assert better.prompt_hash == pairwise_instructions(Rubric.default()).hash
    assert better.cost_usd == pytest.approx((better.usage.input_tokens + 4 * better.usage.output_tokens) / 1e6)
    # the provider was asked for the answer's schema, in its own wire format
    assert _schema_sent(bodies[0], api) == equivalence_schema()
    assert _schema_sent(bodies[1], api) == pairwise_schema(dims)


def scripted_server(answers: Callable[[ModelRequest], str]) -> FakeOpenAIServer:
    return FakeOpenAIServer(respond=lambda request: Message(role="assistant", content=answers(request)))


def last_user(request: ModelRequest) -> str:
    return next(m.content or "" for m in reversed(request.messages) if m.role == "user")


def test_a_malformed_answer_gets_one_repair() -> None:
    good = json.dumps({"equivalent": False, "confidence": 0.9, "reason": "different flights"})
    with scripted_server(lambda r: good if "could not be used" in last_user(r) else "Sure! They differ.") as server:
        judging = Judging()
        judge = de.EquivalenceJudge(
            model="openai:nano", provider_options={"base_url": server.base_url, "api_key": "k"}
        )(judging.context)
        result = judging.run(lambda: judge.equivalent(pair(GOOD, WORSE)))
        sent = [r.json()["messages"] for r in server.requests]
    assert (result.equivalent, result.reasoning) == (False, "different flights")
    assert result.raw["repaired_from"] == "Sure! They differ."
    assert len(sent) == 2
    # the repair shows the judge its own answer and what was wrong with it
    assert sent[1][-2] == {"role": "assistant", "content": "Sure! They differ."}
    assert "not JSON" in sent[1][-1]["content"]
    assert result.usage.input_tokens > 0
    assert result.usage.output_tokens > 2  # both calls counted


def test_an_answer_unusable_twice_is_an_error_verdict_that_keeps_what_the_judge_said() -> None:
    bad = json.dumps({"winner": "A", "confidence": 2, "severity": "none", "scores": {}, "summary": ""})
    with scripted_server(lambda r: bad) as server:
        judging = Judging(prices={"openai:judge": Price(input=1.0, output=1.0)})
        judge = de.PairwiseJudge(model="openai:judge", provider_options={"base_url": server.base_url, "api_key": "k"})(
            judging.context
        )
        cascade = JudgeCascade(None, judge)
        baseline, candidate = (replay(side, out) for side, out in (("baseline", GOOD), ("candidate", WORSE)))
        decision: Decision = judging.run(lambda: cascade.decide(POINT, baseline, candidate))
    assert (decision.verdict.stage, decision.verdict.outcome) == ("error", "error")
    assert "unusable answer after one repair attempt" in (decision.verdict.error or "")
    assert "confidence" in (decision.verdict.error or "")
    [row] = decision.judgements
    assert (row.answer, row.raw) == ("error", {"text": bad, "repair_text": bad})
    assert row.usage.input_tokens > 0
    assert row.cost_usd is not None  # the judge answered: what it cost is known
    assert decision.verdict.judge_cost_usd == row.cost_usd
    [error] = decision.errors
    assert (error.stage, error.pair_id) == ("judge", POINT.pair_id)


def answer(winner: str, confidence: float, severity: str = "none", accuracy: int = 3) -> str:
    scores = {d: accuracy for d in Rubric.default().dimensions}
    return json.dumps(
        {
            "rationale": f"says {winner}",
            "winner": winner,
            "confidence": confidence,
            "severity": severity,
            "scores": {"A": scores, "B": scores},
            "summary": f"{winner} wins",
        }
    )


def test_both_orders_are_kept_and_a_disagreement_counts_as_configured() -> None:
    # A judge that always says "A": surer when A is the candidate (the output saying HAT001).
    def position_biased(request: ModelRequest) -> str:
        shown_a = last_user(request).split("<output_a>")[1].split("</output_a>")[0]
        return answer("A", 0.9 if "HAT001" in shown_a else 0.5)

    outcomes = {}
    for rule in ("tie", "mean"):
        with scripted_server(position_biased) as server:
            judging = Judging()
            judge = de.PairwiseJudge(
                model="openai:judge", provider_options={"base_url": server.base_url, "api_key": "k"}
            )(judging.context)
            cascade = JudgeCascade(None, judge, order="both", disagreement=rule)  # type: ignore[arg-type]
            base, cand = replay("baseline", WORSE), replay("candidate", GOOD)
            decision: Decision = judging.run(lambda: cascade.decide(POINT, base, cand))  # noqa: B023
            assert len(server.requests) == 2
        v = decision.verdict
        assert (v.candidate_position, v.orders_agree, v.details["position_inconsistent"]) == ("both", False, True)
        assert sorted(j.candidate_position for j in decision.judgements) == ["A", "B"]
        assert sorted(j.outcome or "" for j in decision.judgements) == ["baseline", "candidate"]
        outcomes[rule] = (v.outcome, v.preference)
    assert outcomes["tie"] == ("tie", 0.5)
    assert outcomes["mean"] == ("candidate", pytest.approx((0.95 + 0.25) / 2))


@pytest.mark.parametrize(
    ("dissent", "severity"),
    [("B", "minor"), ("A", "critical")],
    ids=["critical-blames-the-winner", "critical-blames-the-loser"],
)
def test_a_panel_of_three_providers_takes_the_median_and_the_loser_s_worst_severity(
    dissent: str, severity: str
) -> None:
    # Severity belongs to the side that lost: a "critical" from a judge that blamed the other side says nothing
    # about the loser (two judges "B worse, minor" + one "A worse, critical" is not "B worse, critical").
    said = {
        "openai": answer("A", 0.8, "minor", 2),
        "anthropic": answer(dissent, 0.6, "critical", 4),
        "gemini": answer("A", 0.9, "none", 3),
    }
    servers = {
        "openai": FakeOpenAIServer(respond=lambda r: Message(role="assistant", content=said["openai"])),
        "anthropic": FakeAnthropicServer(respond=lambda r: Message(role="assistant", content=said["anthropic"])),
        "gemini": FakeGeminiServer(respond=lambda r: Message(role="assistant", content=said["gemini"])),
    }
    with servers["openai"] as o, servers["anthropic"] as a, servers["gemini"] as g:
        judging = Judging()
        urls = {"openai": o.base_url, "anthropic": a.url, "gemini": g.url}
        panel = [
            de.PairwiseJudge(model=f"{p}:judge", provider_options={"base_url": u, "api_key": "k"})(judging.context)
            for p, u in urls.items()
        ]
        # Candidate shown as A (seed 0 on this pair id decides); check rather than assume.
        cascade = JudgeCascade(None, panel)
        base, cand = replay("baseline", WORSE), replay("candidate", GOOD)
        decision: Decision = judging.run(lambda: cascade.decide(POINT, base, cand))
    v = decision.verdict
    cand_a = v.candidate_position == "A"
    prefs = sorted(j.preference or 0 for j in decision.judgements)
    assert len(decision.judgements) == 3
    assert {j.judge for j in decision.judgements} == {"openai:judge", "anthropic:judge", "gemini:judge"}
    assert v.preference == pytest.approx(prefs[1])  # the median judge
    assert v.outcome == ("candidate" if cand_a else "baseline")  # at least two of three said A
    assert v.severity == severity  # the worst a judge blaming the loser gave: never averaged away
    assert v.candidate_scores["accuracy"] == 3.0  # median of 2, 4, 3
    assert v.judge == "openai:judge + anthropic:judge + gemini:judge"
    assert v.details["panel"] == {j.judge: j.preference for j in decision.judgements}


def test_a_refusal_is_an_error_not_a_tie() -> None:
    from delta_eval.adapters.base import ModelAdapter
    from delta_eval.calls import ModelResponse

    class Refuses(ModelAdapter):
        async def generate(self, request: ModelRequest) -> ModelResponse:
            message = Message(role="assistant", content="I can't help with that.")
            return ModelResponse(message=message, finish_reason="content_filter", provider_finish_reason="refusal")

    de.register_adapter("refuser", lambda model, options, context: Refuses(model))
    judging = Judging()
    judge = de.PairwiseJudge(model="refuser:x")(judging.context)
    decision: Decision = judging.run(
        lambda: JudgeCascade(None, judge).decide(POINT, replay("baseline", WORSE), replay("candidate", GOOD))
    )
    assert decision.verdict.outcome == "error"
    assert "refused to answer (refusal)" in (decision.verdict.error or "")
    assert decision.judgements[0].raw == {"text": "I can't help with that."}


@pytest.fixture
def demo_server() -> Iterator[FakeOpenAIServer]:
    from delta_eval.demo import behaviours, demo_conversations

    conversations, _ = demo_conversations().load()
    b = behaviours(seed=7, latency_ms=0.0, candidate="reword")
    b["judge"] = b["judge"].model_copy(update={"judge_position_bias": 1.0})
    with FakeOpenAIServer(recordings=conversations, behaviour=b) as server:
        yield server


def judge_requests(server: FakeOpenAIServer) -> int:
    return sum(r.json()["model"] in ("judge", "judge-small") for r in server.requests)


def test_a_run_with_llm_judges_counts_its_funnel_audits_reproducibly_and_never_pays_a_judge_twice(
    tmp_path: Any, demo_server: FakeOpenAIServer
) -> None:
    from delta_eval.analysis.report import render_report
    from delta_eval.demo import demo_config, demo_conversations, demo_models
    from delta_eval.judges.cascade import drawn_for_audit

    options = {"base_url": demo_server.base_url, "api_key": "k"}
    models = demo_models("openai", options, candidate="reword", latency_ms=0.0)
    judges = models.judges.model_copy(update={"audit_fraction": 0.3})
    cache = tmp_path / "cache.sqlite"

    def config(out: str) -> de.RunConfig:
        return demo_config(tmp_path / out, n=16, models=models).model_copy(update={"judges": judges, "cache": cache})

    first = de.run(config("first"), conversations=demo_conversations())
    paid = judge_requests(demo_server)
    counts = first.counts
    con = first.connect()
    rows = con.execute("SELECT count(*) FROM judgements").fetchone()[0]
    assert paid == rows > 0  # one request per judge call: no call repeated within the run
    stage2 = counts.judging["equivalence"]
    stage3 = counts.judging["judge"]
    assert (
        stage2.calls
        == stage2.pairs
        == con.execute("SELECT count(*) FROM judgements WHERE stage = 'equivalence'").fetchone()[0]
    )
    assert stage3.calls == 2 * stage3.pairs  # both orders
    assert stage3.pairs == counts.by_stage["judge"] + counts.by_stage.get("error", 0)
    assert counts.orders_compared == counts.by_stage["judge"] + counts.audited  # audits are judged both ways too
    disagreeing = con.execute("SELECT count(*) FROM verdicts WHERE NOT orders_agree").fetchone()[0]
    assert counts.orders_disagree == disagreeing > 0  # the judge's position bias is caught
    # The audit: the pairs drawn are exactly those the seeded draw names, and each got a stage-3 answer.
    equivalent = [p for (p,) in con.execute("SELECT pair_id FROM verdicts WHERE stage = 'equivalence'").fetchall()]
    drawn = {p for p in equivalent if drawn_for_audit(first.manifest.seed, p, 0.3)}
    audited = {p for (p,) in con.execute("SELECT pair_id FROM verdicts WHERE audit_outcome IS NOT NULL").fetchall()}
    assert audited == drawn
    assert counts.audited == len(drawn) > 0
    assert counts.judging["audit"].pairs == len(drawn)
    report = render_report(first)
    assert f"orders disagreed on {disagreeing}:" in report
    assert f"stage-2 audit: {len(drawn)} 'equivalent' pairs re-judged" in report
    assert "self-preference: the stage-3 judge openai:judge" in report
    assert first.manifest.judge_models == {"equivalence": ["openai:judge-small"], "judge": ["openai:judge"]}

    # The same run elsewhere on the same response cache asks no judge anything, and decides the same.
    second = de.run(config("second"), conversations=demo_conversations())
    assert judge_requests(demo_server) == paid
    same = "SELECT pair_id, stage, outcome, preference, audit_outcome FROM verdicts ORDER BY pair_id"
    assert second.connect().execute(same).fetchall() == con.execute(same).fetchall()
    judged = second.manifest.sessions[-1].calls["openai:judge"]
    assert (judged.answered, judged.cached) == (0, stage3.calls + counts.judging["audit"].calls)


@pytest.mark.parametrize(("api", "server_class", "options"), CASES, ids=[c[0] for c in CASES])
def test_the_trace_is_the_providers_reasoning_summary_where_it_gives_one(
    api: str, server_class: type[FakeProviderServer], options: Callable[[Any], dict[str, Any]]
) -> None:
    from delta_eval.adapters.simulated import SimulatedBehaviour

    # A verified organisation: OpenAI gives reasoning summaries only to those.
    verified: dict[str, Any] = {"verified_organization": True} if server_class is FakeOpenAIServer else {}
    with server_class(behaviour=SimulatedBehaviour(reasoning_tokens=50), **verified) as server:
        judging = Judging()
        params = de.GenerateParams(max_tokens=4000, reasoning_budget=1024)
        judge = de.PairwiseJudge(model=f"{api}:judge", provider_options=options(server), params=params)
        result = judging.run(lambda: judge(judging.context).compare(pair(WORSE, GOOD)))
    assert result.usage.reasoning_tokens == 50
    rationale = result.raw["answer"]["rationale"]
    assert rationale.startswith("Simulated judge:")
    if api == "openai":  # Chat Completions returns no reasoning summary: the judge's own rationale is the trace
        assert result.reasoning == rationale
        assert "reasoning_summary" not in result.raw
    else:
        assert result.reasoning == result.raw["reasoning_summary"] != rationale
        assert result.reasoning


def test_panel_members_sharing_a_model_need_names_of_their_own() -> None:
    from delta_eval.judges.config import build_cascade

    twice = [de.PairwiseJudge(model="simulated:judge"), de.PairwiseJudge(model="simulated:judge")]
    with pytest.raises(de.ConfigError, match="'simulated:judge'; give each a distinct name="):
        build_cascade(de.Judges(judge=twice), JudgeContext())
    named = [twice[0], twice[1].model_copy(update={"name": "second opinion"})]
    judges = de.Judges(judge=named)
    assert judges.names()[1] == "simulated:judge + second opinion"
    assert [j.name for j in build_cascade(judges, JudgeContext())._judges] == ["simulated:judge", "second opinion"]
