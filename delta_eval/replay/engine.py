"""Replay one assistant turn under one variant: call the model, simulate its tools, until it speaks in plain text.

A turn gets at most ``max_tool_rounds`` rounds of tool calls; if the model still calls tools after that, the calls
are kept (without results), the replay is marked ``hit_tool_cap`` with finish reason ``tool_cap``, and nothing is
retried. A provider failure that outlives its retries ends the replay with ``finish_reason="error"`` and an error
row; whatever steps were made before it are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from delta_eval.adapters.batch import batch_cost
from delta_eval.adapters.client import ModelClient
from delta_eval.calls import ModelRequest
from delta_eval.exceptions import ProviderError, RecordError, ToolSimulationError
from delta_eval.matching import DEFAULT_MATCH, MatchOptions
from delta_eval.pricing import Price, Spend, cost, price_for
from delta_eval.replay.checks import ReplayChecks, check_output
from delta_eval.replay.render import build_request
from delta_eval.replay.tools import ToolContext, ToolSimulator, run_simulator
from delta_eval.schema import (
    ErrorRecord,
    Message,
    Replay,
    ReplayPoint,
    Side,
    SimulatorCall,
    Step,
    ToolCall,
    TurnOutput,
)
from delta_eval.variant import Variant

__all__ = ["Replayer", "SideReplay", "SupportsReplay", "recorded_replay"]


def recorded_replay(point: ReplayPoint) -> Replay:
    """The production turn, in the shape of a replay (``side="recorded"``), kept beside the two replays."""
    return Replay(
        pair_id=point.pair_id,
        conversation_id=point.conversation_id,
        turn_index=point.turn_index,
        epoch=point.epoch,
        side="recorded",
        variant="recorded",
        model="recorded",
        output=point.recorded,
        finish_reason="stop" if point.recorded.final_text is not None else "end",
    )


@dataclass(frozen=True)
class SideReplay:
    """One side's replay of a point, the request it started from (what a judge is shown), its error row, and in a
    session the calls its simulators made (rows of ``simulator_calls``)."""

    replay: Replay
    request: ModelRequest | None = None
    error: ErrorRecord | None = None
    simulator_calls: tuple[SimulatorCall, ...] = ()


class SupportsReplay(Protocol):
    """What replays a point on one side: a turn (:class:`Replayer`) or a whole session
    (:class:`~delta_eval.replay.session.SessionReplayer`)."""

    async def replay(self, point: ReplayPoint, side: Side) -> SideReplay:
        """The side's replay of ``point``; failures end it with an error row, never an exception."""
        ...


@dataclass
class Replayer:
    """Replays turns under one variant through one model client.

    Example::

        replayer = Replayer(client, variant, RecordedToolSimulator(), max_tool_rounds=5)
        side = await replayer.replay(point, side="candidate")
        side.replay.output.final_text
    """

    client: ModelClient
    variant: Variant
    simulator: ToolSimulator
    max_tool_rounds: int = 5
    prices: Mapping[str, Price] | None = None
    source: str = ""
    match: MatchOptions = DEFAULT_MATCH

    async def replay(self, point: ReplayPoint, side: Side) -> SideReplay:
        """The replay of ``point`` on this side; failures end it with an error row, never an exception."""
        steps: list[Step] = []
        spend = Spend()
        price = price_for(self.variant.model, self.prices, info=self.client.adapter.info)
        ttft: float | None = None
        served: str | None = None
        request_ids: list[str] = []
        final_text: str | None = None
        final_reasoning: str | None = None
        provider_finish: str | None = None
        finish = "stop"
        hit_cap = False
        request: ModelRequest | None = None

        def done(error: Exception | None = None) -> SideReplay:
            output = TurnOutput(steps=tuple(steps), final_text=final_text, final_reasoning=final_reasoning)
            checks = ReplayChecks()
            if error is None and request is not None:
                checks = check_output(output, request.tools, point.recorded, self.match)
            replay = Replay(
                pair_id=point.pair_id,
                conversation_id=point.conversation_id,
                turn_index=point.turn_index,
                epoch=point.epoch,
                side=side,
                variant=self.variant.name,
                model=self.variant.model,
                output=output,
                finish_reason="error" if error is not None else finish,
                provider_finish_reason=provider_finish,
                hit_tool_cap=hit_cap,
                usage=spend.usage,
                cost_usd=spend.cost_usd,
                latency_ms=spend.latency_ms,
                ttft_ms=ttft,
                model_calls=spend.calls,
                cached_calls=spend.cached_calls,
                served_model=served,
                request_ids=tuple(request_ids),
                finished_at=datetime.now(UTC),
                invalid_tool_calls=checks.invalid_tool_calls,
                tool_call_problems=checks.tool_call_problems,
                matches_recorded=checks.matches_recorded,
                text_instead_of_action=checks.text_instead_of_action,
                no_decision=checks.no_decision,
                recorded_acted=bool(point.recorded.tool_calls),
                error=None if error is None else str(error),
                error_type=None if error is None else type(error).__name__,
            )
            row = None
            if error is not None:
                row = ErrorRecord.from_exception(
                    error,
                    "replay",
                    message=f"{side} replay of {point.pair_id} failed: {error}",
                    source=self.source,
                    record=point.pair_id,
                    conversation_id=point.conversation_id,
                    pair_id=point.pair_id,
                )
            return SideReplay(replay, request, row)

        try:
            request = build_request(point, self.variant, self.source)
        except RecordError as exc:
            return done(exc)
        # The turns of a conversation share their prefix: providers that take a routing hint for their prompt cache
        # get the conversation (see delta_eval.adapters.prompt_cache).
        request = request.model_copy(update={"conversation_id": point.conversation_id})
        if point.epoch > 1 and request.params.seed is not None:
            # Each epoch is another draw, where the provider takes a seed.
            params = request.params.model_copy(update={"seed": request.params.seed + point.epoch - 1})
            request = request.model_copy(update={"params": params})
        messages: list[Message] = list(request.messages)
        previous: list[ToolCall] = []
        diverged = False
        for round_no in range(self.max_tool_rounds + 1):
            try:
                # Keyed by pair and side too: two pairs that happen to send the same request are still two draws.
                result = await self.client.generate(
                    request.model_copy(update={"messages": tuple(messages)}),
                    namespace=f"{side}:{point.pair_id}",
                )
            except ProviderError as exc:
                return done(exc)
            response = result.response
            spend.add(
                response.usage,
                cost_usd=batch_cost(cost(response.usage, price), response.batch),
                latency_ms=response.latency_ms,
                cached=result.cached,
            )
            ttft = response.ttft_ms if ttft is None else ttft
            served = response.served_model or served
            if response.request_id:
                request_ids.append(response.request_id)
            reply = response.message
            summary = reply.reasoning.summary if reply.reasoning is not None else None
            provider_finish = response.provider_finish_reason
            if not reply.tool_calls:
                final_text, final_reasoning = reply.content, summary
                finish = response.finish_reason
                break
            if round_no == self.max_tool_rounds:
                steps.append(Step(text=reply.content, tool_calls=reply.tool_calls, reasoning=summary))
                hit_cap = True
                finish = "tool_cap"
                break
            results = []
            for call in reply.tool_calls:
                ctx = ToolContext(
                    point=point, position=len(previous), previous_calls=tuple(previous), diverged=diverged
                )
                try:
                    res = await run_simulator(self.simulator, call, ctx)
                except Exception as exc:  # a user's simulator: its failure is this replay's error, not the run's
                    return done(
                        ToolSimulationError(f"tool simulator failed on {call.name}: {type(exc).__name__}: {exc}")
                    )
                res = res.model_copy(update={"call_id": call.id, "name": call.name})
                diverged = diverged or res.source != "recorded"
                previous.append(call)
                results.append(res)
            steps.append(
                Step(text=reply.content, tool_calls=reply.tool_calls, tool_results=tuple(results), reasoning=summary)
            )
            # The reply goes back as it came, reasoning state included: thinking models need it across tool rounds.
            messages.append(reply)
            messages.extend(
                Message(role="tool", tool_call_id=r.call_id, name=r.name, content=r.content) for r in results
            )
        return done()
