"""The calls a session's simulators (the user simulator, the LLM tool simulator) made for one side, as rows of the
run's ``simulator_calls`` table, priced at the run's prices.

Example:
    >>> from delta_eval.schema import ReplayPoint, TurnOutput
    >>> log = SimulatorLog(ReplayPoint(pair_id="c#session", conversation_id="c", turn_index=0, message_index=1,
    ...                                context=(), recorded=TurnOutput()), "baseline")
    >>> log.calls
    []
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from delta_eval.adapters.client import CallResult, ModelClient
from delta_eval.pricing import Price, cost, price_for
from delta_eval.schema import ReplayPoint, Side, SimulatorCall, SimulatorRole

__all__ = ["SimulatorLog"]


@dataclass
class SimulatorLog:
    """Collects the simulator calls of one side's session of ``point``."""

    point: ReplayPoint
    side: Side
    calls: list[SimulatorCall] = field(default_factory=list)

    def add(
        self,
        role: SimulatorRole,
        purpose: str,
        client: ModelClient,
        request_key: str,
        result: CallResult,
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        """Record one answered call of ``client`` (its usage priced at ``prices``, else the catalogue's)."""
        r = result.response
        price = price_for(client.model, prices, info=client.adapter.info)
        self.calls.append(
            SimulatorCall(
                pair_id=self.point.pair_id,
                conversation_id=self.point.conversation_id,
                turn_index=self.point.turn_index,
                epoch=self.point.epoch,
                side=self.side,
                role=role,
                model=client.model,
                purpose=purpose,
                request_key=request_key,
                cached=result.cached,
                usage=r.usage,
                cost_usd=cost(r.usage, price),
                latency_ms=r.latency_ms,
            )
        )
