"""Stage 1: deterministic equivalence.

Two outputs are equivalent when they make the same tool calls in the same order with equivalent arguments
(canonical JSON, type-tolerant, see :mod:`delta_eval.matching`) and say the same text once normalised. No model is
called; the reason says what differed first.

Example:
    >>> from delta_eval.schema import TurnOutput
    >>> deterministic_equivalence(TurnOutput(final_text="Done!"), TurnOutput(final_text="done")).equivalent
    True
"""

from __future__ import annotations

from dataclasses import dataclass

from delta_eval.matching import DEFAULT_MATCH, MatchOptions, calls_equivalent, texts_equivalent
from delta_eval.schema import TurnOutput

__all__ = ["DeterministicResult", "deterministic_equivalence"]


@dataclass(frozen=True)
class DeterministicResult:
    """Whether two outputs are deterministically equivalent, and why (or where they first differ)."""

    equivalent: bool
    reason: str
    calls_equal: bool


def deterministic_equivalence(a: TurnOutput, b: TurnOutput, match: MatchOptions = DEFAULT_MATCH) -> DeterministicResult:
    """Compare two outputs: tool calls in order, then the normalised text."""
    calls_a, calls_b = a.tool_calls, b.tool_calls
    for k, (x, y) in enumerate(zip(calls_a, calls_b, strict=False)):
        if x.name != y.name:
            return DeterministicResult(False, f"tool call {k + 1} differs: {x.name} vs {y.name}", False)
        if not calls_equivalent(x, y, match):
            return DeterministicResult(False, f"tool call {k + 1} ({x.name}) has different arguments", False)
    if len(calls_a) != len(calls_b):
        return DeterministicResult(False, f"{len(calls_a)} vs {len(calls_b)} tool calls", False)
    if not texts_equivalent(a.texts, b.texts):
        return DeterministicResult(False, f"same {len(calls_a)} tool calls; texts differ", True)
    return DeterministicResult(True, f"same {len(calls_a)} tool calls and same text after normalisation", True)
