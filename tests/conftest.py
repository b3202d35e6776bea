"""Shared fixtures: the bundled tau-bench data read through the library's own importer, and small conversations."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

import delta_eval as de
from delta_eval.schema import Conversation, Message, ToolCall
from delta_eval.testing import registered_adapters

# Tests never assert a timing: Hypothesis's per-example deadline (200 ms) failed a property test on a loaded machine.
settings.register_profile("delta_eval", deadline=None)
settings.load_profile("delta_eval")


@pytest.fixture(autouse=True)
def _forget_registered_adapters() -> Iterator[None]:
    """Adapters a test registers are gone when it ends, so no test sees another's."""
    with registered_adapters():
        yield


@pytest.fixture
def no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """No provider key in the environment, whatever the machine has."""
    for name in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def tau_source() -> de.ConversationSource:
    return de.demo.demo_conversations()


@pytest.fixture(scope="session")
def tau_conversations(tau_source: de.ConversationSource) -> list[Conversation]:
    good, bad = tau_source.load()
    assert bad == []
    return good


@pytest.fixture(scope="session")
def tau_raw() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(Path(de.demo.DEMO_CONVERSATIONS).read_text())
    return data


def tool_turn_conversation(conv_id: str = "c1") -> Conversation:
    """user asks; assistant calls lookup; tool answers; assistant replies; user thanks; assistant closes."""
    return Conversation(
        id=conv_id,
        messages=(
            Message(role="system", content="You are an airline agent. Today is 2024-05-15."),
            Message(role="user", content="What is my reservation ABC123?"),
            Message(
                role="assistant",
                tool_calls=(ToolCall(id="call_1", name="get_reservation", arguments='{"id": "ABC123"}'),),
            ),
            Message(role="tool", tool_call_id="call_1", name="get_reservation", content='{"flight": "HAT001"}'),
            Message(role="assistant", content="Your reservation ABC123 is on flight HAT001."),
            Message(role="user", content="Thanks!"),
            Message(role="assistant", content="You're welcome."),
        ),
        metadata={"tier": "gold", "date": "2024-05-15"},
    )


@pytest.fixture
def small_conversation() -> Conversation:
    return tool_turn_conversation()


def demo_source_toml(n: int = 3) -> str:
    """A config file's [source] and [sample] tables for the bundled tau-bench export, one turn per conversation."""
    return f"""
max_turns_per_conversation = 1

[source]
path = "{de.demo.DEMO_CONVERSATIONS}"
messages = "traj"
id = "{{task_id}}/{{trial}}"
tools = "{de.demo.DEMO_TOOLS}"

[sample]
n = {n}
"""
