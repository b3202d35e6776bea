"""Factory of the ``simulated:`` adapter (the model itself lives in :mod:`delta_eval.testing.simulated`).

Options are the fields of :class:`~delta_eval.testing.simulated.SimulatedBehaviour`; a misspelt one is a
:class:`~delta_eval.exceptions.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from delta_eval.adapters.registry import AdapterContext
from delta_eval.exceptions import ConfigError
from delta_eval.testing.simulated import SimulatedAdapter, SimulatedBehaviour

__all__ = ["create"]


def create(model: str, options: Mapping[str, Any], context: AdapterContext) -> SimulatedAdapter:
    """A simulated model answering from ``context.recordings``."""
    try:
        behaviour = SimulatedBehaviour(**options)
    except ValidationError as exc:
        raise ConfigError(f"bad options for {model}: {exc}") from None
    return SimulatedAdapter(model, behaviour, context.recordings)
