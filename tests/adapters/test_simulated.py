from __future__ import annotations

import random

import anyio
import pytest

import delta_eval as de
from delta_eval.adapters.simulated import reword
from delta_eval.calls import ModelRequest
from delta_eval.exceptions import RateLimitError, TransientError
from delta_eval.replay.points import replay_points
from delta_eval.testing import RecordingIndex, SimulatedAdapter, SimulatedBehaviour


@pytest.fixture(scope="module")
def index(tau_conversations: list[de.Conversation]) -> RecordingIndex:
    idx = RecordingIndex()
    idx.add(tau_conversations)
    return idx


def request_for(point: de.ReplayPoint, model: str = "simulated:m") -> ModelRequest:
    return ModelRequest(model=model, messages=point.context, tools=point.tools)


def test_faithful_model_says_what_production_said(
    tau_conversations: list[de.Conversation], index: RecordingIndex
) -> None:
    model = SimulatedAdapter("simulated:m", SimulatedBehaviour(), index)
    for conv in tau_conversations[:20]:
        for point in replay_points(conv):
            message = model.respond(request_for(point))
            first = point.recorded.steps[0].tool_calls if point.recorded.steps else ()
            if first:
                assert [c.name for c in message.tool_calls] == [c.name for c in first]
                assert [c.arguments for c in message.tool_calls] == [c.arguments for c in first]
            else:
                assert message.content == point.recorded.final_text


def test_same_request_same_answer_and_behaviours_change_it(
    tau_conversations: list[de.Conversation], index: RecordingIndex
) -> None:
    points = [
        p for c in tau_conversations[:40] for p in replay_points(c) if p.recorded.final_text and not p.recorded.steps
    ]
    noisy = SimulatedAdapter("simulated:m", SimulatedBehaviour(reword_rate=1.0), index)
    answers = [noisy.respond(request_for(p)).content for p in points]
    assert answers == [noisy.respond(request_for(p)).content for p in points]
    assert sum(a != p.recorded.final_text for a, p in zip(answers, points, strict=True)) > 0.9 * len(points)


def test_unknown_context_gets_a_generic_reply() -> None:
    model = SimulatedAdapter("simulated:m")
    req = ModelRequest(model="simulated:m", messages=(de.Message(role="user", content="never recorded"),))
    assert "more about what you need" in (model.respond(req).content or "")


def test_failures_are_drawn_per_attempt() -> None:
    model = SimulatedAdapter("simulated:m", SimulatedBehaviour(rate_limit_rate=0.5, server_error_rate=0.3))
    req = ModelRequest(model="simulated:m", messages=(de.Message(role="user", content="hi"),))
    kinds = []
    for _ in range(60):
        try:
            anyio.run(model.generate, req)
            kinds.append("ok")
        except RateLimitError:
            kinds.append("429")
        except TransientError:
            kinds.append("500")
    assert {"ok", "429", "500"} <= set(kinds)


def test_reword_styles() -> None:
    rng = random.Random(3)
    text = "Could you please provide your user ID? I'll check."
    variants = {reword(text, rng) for _ in range(30)}
    assert len(variants) >= 3
    assert all(v != text for v in variants)
