from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import pytest

import delta_eval as de
from delta_eval.adapters.registry import (
    AdapterContext,
    create_adapter,
    known_prefixes,
    register_adapter,
    registered_adapters,
    unregister_adapter,
)
from delta_eval.calls import ModelRequest
from delta_eval.exceptions import ConfigError
from delta_eval.schema import Message
from delta_eval.testing import ScriptedAdapter


def test_unknown_prefix_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        create_adapter("nosuch:model")
    assert "unknown model prefix 'nosuch'" in str(info.value)
    assert "simulated" in str(info.value)
    with pytest.raises(ConfigError, match="needs a provider prefix"):
        create_adapter("gpt-4o")


def test_registered_factory_serves_its_prefix() -> None:
    def factory(model: str, options: Mapping[str, Any], context: AdapterContext) -> ScriptedAdapter:
        return ScriptedAdapter(model, [options["reply"]])

    register_adapter("echo-test", factory)
    assert "echo-test" in known_prefixes()
    adapter = create_adapter("echo-test:m", {"reply": "pong"})
    req = ModelRequest(model="echo-test:m", messages=(Message(role="user", content="ping"),))
    assert anyio.run(adapter.generate, req).message.content == "pong"
    with pytest.raises(ConfigError):
        register_adapter("bad:prefix", factory)


def test_simulated_options_are_validated() -> None:
    assert create_adapter("simulated:x", {"reword_rate": 0.5}).behaviour.reword_rate == 0.5  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="bad options for simulated:x"):
        create_adapter("simulated:x", {"reword_rat": 0.5})
    with pytest.raises(ConfigError):
        create_adapter("simulated:x", {"reword_rate": 2})


def test_variant_requires_a_prefix() -> None:
    with pytest.raises(ValueError, match="needs a provider prefix"):
        de.Variant(model="gpt-4o")


def test_registrations_are_undone_when_the_block_ends() -> None:
    def factory(model: str, options: Mapping[str, Any], context: AdapterContext) -> ScriptedAdapter:
        return ScriptedAdapter(model, ["x"])

    register_adapter("outer-test", factory)
    with registered_adapters():
        register_adapter("inner-test", factory)
        register_adapter("outer-test", lambda m, o, c: ScriptedAdapter(m, ["replaced"]))
        assert {"inner-test", "outer-test"} <= set(known_prefixes())
    assert "inner-test" not in known_prefixes()
    # what was registered before the block is back as it was
    req = ModelRequest(model="outer-test:m", messages=(Message(role="user", content="hi"),))
    assert anyio.run(create_adapter("outer-test:m").generate, req).message.content == "x"
    unregister_adapter("outer-test")
    assert "outer-test" not in known_prefixes()
    with pytest.raises(ConfigError, match="unknown model prefix"):
        create_adapter("outer-test:m")
