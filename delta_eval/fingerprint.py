"""What makes two configurations "the same run": the fingerprint a run folder is resumed by, without the settings
that only say how to reach a model.

A model's connection (its endpoint, a local server's port, timeouts, connection pools, headers, where its keys
are read from) may change between sessions of one run: the demo's fake server listens on a new port each time, a
proxy moves, a timeout is raised after a kill. None of these changes which pairs exist or what a model is asked,
so none of them makes a folder hold "another configuration".

Example:
    >>> comparable({"baseline": {"model": "openai:m", "provider_options": {"base_url": "http://h:1", "seed": 1}}})
    {'baseline': {'model': 'openai:m', 'provider_options': {'seed': 1}}}
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["CONNECTION_OPTIONS", "comparable"]

#: ``provider_options`` that say how to reach a model, not which model it is or what it is asked.
CONNECTION_OPTIONS = frozenset(
    {"base_url", "endpoint", "timeout", "connection_pools", "headers", "api_key", "ad_token", "access_token",
     "aws_access_key", "aws_secret_key", "aws_session_token", "aws_profile", "organization"}
)  # fmt: skip
#: The provider options of a model: a side's or judge's, and a session's user and tool simulators'.
_OPTIONS = frozenset({"provider_options", "user_options", "tool_options"})
#: Options naming the environment variable a credential is read from (``api_key_env``, ``ad_token_env``, ...).
_ENV_NAME = re.compile(r"_env$")


def comparable(fingerprint: Any) -> Any:
    """``fingerprint`` without the connection settings of every ``provider_options`` in it (the sides', the
    judges'), and of a session's ``user_options`` and ``tool_options``: what two sessions of one run must agree
    on."""
    if isinstance(fingerprint, dict):
        out = {}
        for key, value in fingerprint.items():
            if key in _OPTIONS and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k not in CONNECTION_OPTIONS and not _ENV_NAME.search(k)}
                if not value:
                    continue  # all connection: as if none were given
            out[key] = comparable(value)
        return out
    if isinstance(fingerprint, list):
        return [comparable(v) for v in fingerprint]
    return fingerprint
