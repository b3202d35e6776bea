"""Judges built from a JudgeContext call their model through the run's pool: one cache, one limiter, one count."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

import delta_eval as de
from delta_eval.adapters.pool import ModelPool
from delta_eval.adapters.registry import AdapterContext
from delta_eval.calls import ModelRequest, ModelResponse
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.judges.base import PairView, PairwiseResult
from delta_eval.judges.context import JudgeContext
from delta_eval.pricing import Price
from delta_eval.schema import Message, Usage
from delta_eval.testing import ScriptedAdapter

JUDGE_MODEL = "judgemodel:strict"


class PrefersTools(ScriptedAdapter):
    """A judge model: prefers the output that makes more tool calls, answering in JSON."""

    def __init__(self, model: str) -> None:
        super().__init__(model, [], usage=Usage(input_tokens=300, output_tokens=20))

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        shown = json.loads(request.messages[-1].content or "{}")
        a, b = shown["a_calls"], shown["b_calls"]
        winner = "tie" if a == b else "A" if a > b else "B"
        answer = json.dumps({"winner": winner, "why": f"A made {a} calls, B {b}"})
        return ModelResponse(message=Message(role="assistant", content=answer), usage=self.usage)


class ToolCountJudge:
    """A stage-3 judge that asks a model, through the run's context."""

    name = "tool-count"

    def __init__(self, context: JudgeContext) -> None:
        self.context = context
        self.client = context.client(JUDGE_MODEL)

    async def compare(self, pair: PairView) -> PairwiseResult:
        shown = {"a_calls": len(pair.a.output.tool_calls), "b_calls": len(pair.b.output.tool_calls)}
        request = ModelRequest(model=JUDGE_MODEL, messages=(Message(role="user", content=json.dumps(shown)),))
        order = "a" if pair.a.output.tool_calls else "b"
        result = await self.client.generate(request, namespace=f"{self.name}:{pair.pair_id}:{order}")
        answer = json.loads(result.response.message.content or "{}")
        usage = result.response.usage
        return PairwiseResult(
            winner=answer["winner"],
            confidence=0.9,
            reasoning=answer["why"],
            usage=usage,
            cost_usd=self.context.cost_of(JUDGE_MODEL, usage),
            latency_ms=result.response.latency_ms,
            raw=answer,
        )


@pytest.fixture
def judge_adapters() -> list[PrefersTools]:
    built: list[PrefersTools] = []

    def factory(model: str, options: Mapping[str, Any], context: AdapterContext) -> PrefersTools:
        built.append(PrefersTools(model))
        return built[-1]

    de.register_adapter("judgemodel", factory)
    return built


def config(out: Path, cache: Path) -> de.RunConfig:
    cfg = demo_config(out, n=6, latency_ms=0.0)
    return cfg.model_copy(
        update={
            "judges": de.Judges(equivalence=None, judge=ToolCountJudge),
            "candidate": cfg.candidate.model_copy(update={"provider_options": {"skip_tool_rate": 0.5}}),
            "prices": {JUDGE_MODEL: Price(input=1.0, output=10.0)},
            "cache": cache,
        }
    )


def test_judge_calls_share_the_runs_cache_and_are_counted(tmp_path: Path, judge_adapters: list[PrefersTools]) -> None:
    cache = tmp_path / "shared-cache.sqlite"
    first = de.run(config(tmp_path / "first", cache), conversations=demo_conversations())
    judged = first.counts.by_stage.get("judge", 0)
    assert judged > 0
    [adapter] = judge_adapters
    assert len(adapter.requests) == judged  # one call per judged pair, through the adapter the pool built
    stats = first.manifest.sessions[-1].calls[JUDGE_MODEL]
    assert (stats.answered, stats.cached) == (judged, 0)
    con = first.connect()
    rows = con.execute(
        "SELECT judge, input_tokens, output_tokens, cost_usd FROM judgements WHERE stage = 'judge'"
    ).fetchall()
    assert len(rows) == judged
    assert {row[:3] for row in rows} == {("tool-count", 300, 20)}
    assert [row[3] for row in rows] == pytest.approx([(300 * 1.0 + 20 * 10.0) / 1e6] * judged)
    assert con.execute("SELECT sum(judge_cost_usd) FROM verdicts").fetchone()[0] == pytest.approx(
        judged * (300 + 200) / 1e6
    )

    # The same run elsewhere with the same cache: nothing is paid again, the judge's answers included.
    second = de.run(config(tmp_path / "second", cache), conversations=demo_conversations())
    assert len(judge_adapters[-1].requests) == 0
    stats = second.manifest.sessions[-1].calls[JUDGE_MODEL]
    assert (stats.answered, stats.cached) == (0, judged)
    assert second.win_rate() == first.win_rate()


def test_a_factory_that_takes_no_context_is_a_clear_error(tmp_path: Path) -> None:
    class NoContext:
        name = "x"

        def __init__(self) -> None:
            pass

        async def compare(self, pair: PairView) -> PairwiseResult:
            raise AssertionError("never called")

    cfg = demo_config(tmp_path / "run", n=2, latency_ms=0.0).model_copy(update={"judges": de.Judges(judge=NoContext)})
    with pytest.raises(de.ConfigError, match="must take a JudgeContext"):
        de.run(cfg, conversations=demo_conversations())


def test_one_model_one_client_and_one_limiter_for_sides_and_judges() -> None:
    pool = ModelPool()
    side = pool.client("simulated:m", {"reword_rate": 0.1}, de.ModelLimits(max_concurrency=3), label="candidate")
    judge = JudgeContext(pool=pool).client("simulated:m", {"reword_rate": 0.1})
    assert judge is side  # same model and options: one client, one set of counters
    other = pool.client("simulated:m", {"reword_rate": 0.9}, label="judge")
    assert other is not side
    assert other.limiter is side.limiter  # limits belong to the model id, whoever calls it
    assert side.limiter.max_concurrency == 3
    assert set(pool.stats()) == {"simulated:m", "simulated:m (judge)"}
    closed: list[str] = []

    async def close() -> None:
        for adapter in pool.adapters:
            adapter.aclose = _recorder(closed, adapter.model)  # type: ignore[method-assign]
        await pool.aclose()

    anyio.run(close)
    assert closed == ["simulated:m", "simulated:m"]


def _recorder(into: list[str], name: str) -> Any:
    async def aclose() -> None:
        into.append(name)

    return aclose
