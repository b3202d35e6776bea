"""Nested real-world exports read by mapping alone: a tau2-bench style results file (conversations under
``simulations[*]``, tool results keyed by ``id``, tool-call arguments as objects, user-side tool calls the agent
never saw, a greeting before the first user message)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import delta_eval as de
from delta_eval.analysis.report import render_report
from delta_eval.demo import demo_config
from delta_eval.replay.points import count_turns, replay_points
from delta_eval.schema import Conversation, Message

GREETING = {"role": "assistant", "content": "Hi! How can I help you today?", "turn_idx": 0}


def tau2_message(m: dict[str, Any]) -> dict[str, Any]:
    """One tau-bench message in tau2-bench's dialect."""
    if m["role"] == "tool":
        return {"role": "tool", "id": m["tool_call_id"], "content": m["content"], "requestor": "assistant"}
    out = {"role": m["role"], "content": m.get("content")}
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c["id"],
                "name": c["function"]["name"],
                "arguments": json.loads(c["function"]["arguments"]),
                "requestor": "assistant",
            }
            for c in m["tool_calls"]
        ]
    return out


def tau2_document(raw: list[dict[str, Any]]) -> dict[str, Any]:
    simulations = []
    for r in raw:
        system, first_user, *rest = r["traj"]
        messages = [
            tau2_message(system),
            GREETING,
            tau2_message(first_user),
            # the user simulator checks its own phone: the agent never sees this
            {
                "role": "user",
                "content": None,
                "requestor": "user",
                "tool_calls": [{"id": "u-1", "name": "check_status_bar", "arguments": {}, "requestor": "user"}],
            },
            {"role": "tool", "id": "u-1", "content": "4 bars", "requestor": "user"},
            *(tau2_message(m) for m in rest),
        ]
        simulations.append(
            {
                "id": f"sim-{r['task_id']}-{r['trial']}",
                "task_id": r["task_id"],
                "trial": r["trial"],
                "reward_info": {"reward": r["reward"]},
                "messages": messages,
            }
        )
    return {
        "info": {"environment_info": {"domain_name": "airline"}, "agent_info": {"llm": "gpt-4o"}},
        "tasks": [],
        "simulations": simulations,
    }


def shape(messages: tuple[Message, ...]) -> list[tuple[Any, ...]]:
    """Messages as compared: arguments as parsed JSON (given as objects, they are written with other spacing)."""
    return [
        (m.role, m.content, m.tool_call_id, m.name, [(c.id, c.name, json.loads(c.arguments)) for c in m.tool_calls])
        for m in messages
    ]


def read(path: Path) -> de.ConversationSource:
    return de.read_conversations(
        path,
        records="simulations[*]",
        id="{task_id}/{trial}",
        message_fields={"tool_call_id": "id"},
        skip={"requestor": "user"},
        metadata={"reward": "reward_info.reward", "domain": "$.info.environment_info.domain_name"},
        tools=de.demo.DEMO_TOOLS,
    )


@pytest.fixture
def export(tmp_path: Path, tau_raw: list[dict[str, Any]]) -> Path:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(tau2_document(tau_raw[:20])))
    return path


def test_a_tau2_export_reads_by_mapping_alone(
    export: Path, tau_conversations: list[Conversation], tau_raw: list[dict[str, Any]]
) -> None:
    good, bad = read(export).load()
    assert bad == []
    assert [c.id for c in good] == [c.id for c in tau_conversations[:20]]
    for conv, original, raw in zip(good, tau_conversations[:20], tau_raw[:20], strict=True):
        assert conv.messages[1].content == GREETING["content"]
        assert shape(conv.messages[:1] + conv.messages[2:]) == shape(original.messages)  # the user's tool call went
        assert conv.metadata == {"reward": raw["reward"], "domain": "airline"}
        assert "simulations[" in (conv.record or "")
        # the greeting is not replayed; the other turns keep their numbers after it
        points = list(replay_points(conv))
        assert len(points) == count_turns(conv) == count_turns(original)
        assert count_turns(conv, greetings=True) == len(points) + 1
        assert points[0].turn_index == 1


def test_a_run_over_it_skips_and_counts_the_greetings(tmp_path: Path, export: Path) -> None:
    cfg = demo_config(tmp_path / "run", n=6, latency_ms=0.0, judges="rule").model_copy(
        update={"sample": de.Stratified(n=6, by=["domain"])}
    )
    result = de.run(cfg, conversations=read(export))
    assert result.status == "completed"
    assert result.counts.errors == 0
    assert result.counts.greetings_skipped == 6
    assert result.counts.pairs == result.counts.pairs_planned > 0
    con = result.connect()
    assert con.execute("SELECT min(turn_index) FROM verdicts").fetchone() == (1,)
    assert "6 greeting turns left out" in render_report(result)


def test_a_records_path_that_leads_nowhere_is_a_record_error(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": []}))
    good, bad = read(path).load()
    assert good == []
    assert len(bad) == 1
    assert bad[0].field == "simulations[*]"
    assert "leads to nothing, not a list" in bad[0].reason


def test_roles_are_mapped_or_left_out() -> None:
    source = de.ConversationSource(
        "mem",
        lambda: [
            (
                "record 0",
                {
                    "messages": [
                        {"role": "narrator", "content": "(a call centre)"},
                        {"role": "human", "content": "hi"},
                        {"role": "ai", "content": "hello"},
                    ]
                },
            )
        ],
        de.FieldMapping(roles={"human": "user", "ai": "assistant", "narrator": None}),
    )
    [conv] = source.load()[0]
    assert [(m.role, m.content) for m in conv.messages] == [("user", "hi"), ("assistant", "hello")]
    with pytest.raises(ValueError, match="map to system, user, assistant or tool"):
        de.FieldMapping(roles={"human": "customer"})
