"""Consistency across repeats (``RunConfig.epochs``): does a side give the same answer every time, and does the
decision hold in every epoch?

A side's answer at a point is its tool calls (names and canonical arguments, in order) and its final text once
normalised (:mod:`delta_eval.matching`); a replay that failed answers "error" (a side that fails now and then is
inconsistent, not spared the comparison). Two figures per side:

- ``agreement``: the share of pairs of epochs, at a point, that gave the same answer (averaged over points). It
  does not depend on how many epochs were run, so runs of 2 and 5 epochs compare.
- ``consistent``: the share of points where every epoch gave the same answer (falls as epochs are added).

A model that answers one way on Monday and another on Tuesday makes any single run's verdict a draw.

Example:
    >>> rows = [{"side": "candidate", "pair_id": f"c#0@{e}", "epoch": e, "conversation_id": "c",
    ...          "final_text": t, "steps": []} for e, t in ((1, "Yes."), (2, "yes"), (3, "No."))]
    >>> consistency(rows)["candidate"].consistent.value
    0.0
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from delta_eval.matching import canonical_arguments, normalize_text
from delta_eval.metrics.frames import Rows, rows_of
from delta_eval.metrics.sides import Rate, rate
from delta_eval.schema import ToolCall

__all__ = ["Consistency", "base_pair_id", "consistency"]


class Consistency(BaseModel):
    """One side's consistency over epochs: points seen in two or more epochs, the pairwise agreement of epochs,
    the share answered the same way in every epoch, and the mean number of distinct answers per point."""

    model_config = ConfigDict(frozen=True)

    side: str
    points: int
    epochs: int
    agreement: Rate
    consistent: Rate
    distinct_answers: float


def base_pair_id(pair_id: str, epoch: int | None) -> str:
    """The point's pair id without its ``@epoch`` suffix."""
    suffix = f"@{epoch}"
    return pair_id[: -len(suffix)] if epoch is not None and pair_id.endswith(suffix) else pair_id


def _answer(row: dict[str, Any]) -> tuple[Any, ...]:
    if row.get("error") is not None:
        return ("error",)
    calls = []
    for step in row.get("steps") or []:
        for call in step.get("tool_calls") or []:
            tc = ToolCall(id="", name=str(call.get("name")), arguments=str(call.get("arguments") or "{}"))
            calls.append((tc.name, canonical_arguments(tc)))
    return tuple(calls), normalize_text(row.get("final_text"))


def consistency(replays: Rows) -> dict[str, Consistency]:
    """:class:`Consistency` of each replayed side (empty when the run had one epoch)."""
    rows = rows_of(replays, ["side", "pair_id", "epoch", "conversation_id", "final_text", "steps", "error"])
    points: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("side") == "recorded":
            continue
        points.setdefault((str(r["side"]), base_pair_id(str(r["pair_id"]), r.get("epoch"))), []).append(r)
    out = {}
    for side in sorted({side for side, _ in points}):
        repeated = [(pid, own) for (s, pid), own in points.items() if s == side and len(own) > 1]
        if not repeated:
            continue
        answers = [[_answer(r) for r in own] for _, own in repeated]
        distinct = [len(set(a)) for a in answers]
        clusters = [str(own[0]["conversation_id"]) for _, own in repeated]
        out[side] = Consistency(
            side=side,
            points=len(repeated),
            epochs=max(len(own) for _, own in repeated),
            agreement=rate([_pairwise_agreement(a) for a in answers], clusters),
            consistent=rate([float(d == 1) for d in distinct], clusters),
            distinct_answers=sum(distinct) / len(distinct),
        )
    return out


def _pairwise_agreement(answers: list[tuple[Any, ...]]) -> float:
    """The share of pairs of epochs that gave the same answer."""
    k = len(answers)
    same = sum(answers[i] == answers[j] for i in range(k) for j in range(i + 1, k))
    return same / (k * (k - 1) / 2)
