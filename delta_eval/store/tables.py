"""The Arrow schemas of a run folder's datasets and the conversions from schema types to rows.

Datasets: ``replays`` (three rows a pair: baseline, candidate, and the recorded turn), ``verdicts`` (one row a
pair), ``errors`` (one row per failure), ``conversations`` (one row per sampled conversation, with its stratum and
weight, messages as JSON), ``strata`` (population and sample size per stratum).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from delta_eval.schema import (
    Conversation,
    ErrorRecord,
    Replay,
    Step,
    ToolCall,
    ToolResult,
    TurnOutput,
    Verdict,
)

__all__ = [
    "DATASETS",
    "SCHEMAS",
    "conversation_row",
    "error_row",
    "replay_row",
    "turn_output_from_steps",
    "verdict_row",
]

_USAGE = [
    pa.field("input_tokens", pa.int64()),
    pa.field("cached_input_tokens", pa.int64()),
    pa.field("output_tokens", pa.int64()),
    pa.field("reasoning_tokens", pa.int64()),
]
_CALL = pa.struct(
    [
        pa.field("id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("arguments", pa.string()),
        pa.field("arguments_valid", pa.bool_()),
    ]
)
_RESULT = pa.struct(
    [
        pa.field("call_id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("content", pa.string()),
        pa.field("source", pa.string()),
    ]
)
_STEP = pa.struct(
    [
        pa.field("text", pa.string()),
        pa.field("tool_calls", pa.list_(_CALL)),
        pa.field("tool_results", pa.list_(_RESULT)),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "replays": pa.schema(
        [
            pa.field("pair_id", pa.string()),
            pa.field("conversation_id", pa.string()),
            pa.field("turn_index", pa.int32()),
            pa.field("side", pa.string()),
            pa.field("variant", pa.string()),
            pa.field("model", pa.string()),
            pa.field("final_text", pa.string()),
            pa.field("steps", pa.list_(_STEP)),
            pa.field("n_tool_calls", pa.int32()),
            pa.field("finish_reason", pa.string()),
            pa.field("hit_tool_cap", pa.bool_()),
            *_USAGE,
            pa.field("cost_usd", pa.float64()),
            pa.field("latency_ms", pa.float64()),
            pa.field("ttft_ms", pa.float64()),
            pa.field("model_calls", pa.int32()),
            pa.field("cached_calls", pa.int32()),
            pa.field("error", pa.string()),
            pa.field("error_type", pa.string()),
        ]
    ),
    "verdicts": pa.schema(
        [
            pa.field("pair_id", pa.string()),
            pa.field("conversation_id", pa.string()),
            pa.field("turn_index", pa.int32()),
            pa.field("stage", pa.string()),
            pa.field("outcome", pa.string()),
            pa.field("confidence", pa.float64()),
            pa.field("reasoning", pa.string()),
            pa.field("judge", pa.string()),
            pa.field("candidate_position", pa.string()),
            pa.field("stratum", pa.string()),
            pa.field("weight", pa.float64()),
            pa.field("judge_input_tokens", pa.int64()),
            pa.field("judge_cached_input_tokens", pa.int64()),
            pa.field("judge_output_tokens", pa.int64()),
            pa.field("judge_reasoning_tokens", pa.int64()),
            pa.field("judge_cost_usd", pa.float64()),
            pa.field("judge_latency_ms", pa.float64()),
            pa.field("error", pa.string()),
            pa.field("details", pa.string()),
        ]
    ),
    "errors": pa.schema(
        [
            pa.field("stage", pa.string()),
            pa.field("message", pa.string()),
            pa.field("source", pa.string()),
            pa.field("record", pa.string()),
            pa.field("field", pa.string()),
            pa.field("conversation_id", pa.string()),
            pa.field("pair_id", pa.string()),
            pa.field("error_type", pa.string()),
            pa.field("attempts", pa.int32()),
            pa.field("at", pa.timestamp("us", tz="UTC")),
        ]
    ),
    "conversations": pa.schema(
        [
            pa.field("conversation_id", pa.string()),
            pa.field("source", pa.string()),
            pa.field("record", pa.string()),
            pa.field("position", pa.int64()),
            pa.field("stratum", pa.string()),
            pa.field("weight", pa.float64()),
            pa.field("n_messages", pa.int32()),
            pa.field("n_turns", pa.int32()),
            pa.field("n_pairs", pa.int32()),
            pa.field("metadata", pa.string()),
            pa.field("messages", pa.string()),
            pa.field("tools", pa.string()),
        ]
    ),
    "strata": pa.schema(
        [
            pa.field("stratum", pa.string()),
            pa.field("population", pa.int64()),
            pa.field("sampled", pa.int64()),
            pa.field("weight", pa.float64()),
        ]
    ),
}
DATASETS = tuple(SCHEMAS)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _call(c: ToolCall) -> dict[str, Any]:
    return {"id": c.id, "name": c.name, "arguments": c.arguments, "arguments_valid": c.arguments_valid}


def _step(s: Step) -> dict[str, Any]:
    return {
        "text": s.text,
        "tool_calls": [_call(c) for c in s.tool_calls],
        "tool_results": [r.model_dump() for r in s.tool_results],
    }


def turn_output_from_steps(steps: list[dict[str, Any]] | None, final_text: str | None) -> TurnOutput:
    """Rebuild a :class:`TurnOutput` from a stored ``steps`` column and ``final_text``."""
    return TurnOutput(
        steps=tuple(
            Step(
                text=s["text"],
                tool_calls=tuple(
                    ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in s["tool_calls"]
                ),
                tool_results=tuple(ToolResult(**r) for r in s["tool_results"]),
            )
            for s in steps or []
        ),
        final_text=final_text,
    )


def replay_row(r: Replay) -> dict[str, Any]:
    """The ``replays`` row of a replay."""
    return {
        "pair_id": r.pair_id,
        "conversation_id": r.conversation_id,
        "turn_index": r.turn_index,
        "side": r.side,
        "variant": r.variant,
        "model": r.model,
        "final_text": r.output.final_text,
        "steps": [_step(s) for s in r.output.steps],
        "n_tool_calls": len(r.output.tool_calls),
        "finish_reason": r.finish_reason,
        "hit_tool_cap": r.hit_tool_cap,
        **r.usage.model_dump(),
        "cost_usd": r.cost_usd,
        "latency_ms": r.latency_ms,
        "ttft_ms": r.ttft_ms,
        "model_calls": r.model_calls,
        "cached_calls": r.cached_calls,
        "error": r.error,
        "error_type": r.error_type,
    }


def verdict_row(v: Verdict) -> dict[str, Any]:
    """The ``verdicts`` row of a verdict."""
    row = v.model_dump(exclude={"judge_usage", "details"})
    row.update({f"judge_{k}": n for k, n in v.judge_usage.model_dump().items()})
    row["details"] = _json(v.details)
    return row


def error_row(e: ErrorRecord) -> dict[str, Any]:
    """The ``errors`` row of an error record, time-stamped now."""
    return {**e.model_dump(), "at": datetime.now(UTC)}


def conversation_row(
    c: Conversation, *, position: int, stratum: str, weight: float, n_turns: int, n_pairs: int
) -> dict[str, Any]:
    """The ``conversations`` row of a sampled conversation."""
    return {
        "conversation_id": c.id,
        "source": c.source,
        "record": c.record,
        "position": position,
        "stratum": stratum,
        "weight": weight,
        "n_messages": len(c.messages),
        "n_turns": n_turns,
        "n_pairs": n_pairs,
        "metadata": _json(c.metadata),
        "messages": _json([m.model_dump(exclude_defaults=True) for m in c.messages]),
        "tools": _json([t.model_dump() for t in c.tools]),
    }
