"""The simulated model as a judge: when a request asks for a judge's JSON answer, it reads the pair and answers by
stated rules, so demos and tests exercise the LLM judges end to end without a provider.

A request is a judge's when its ``response_format`` is a JSON schema with an ``equivalent`` property (stage 2) or a
``winner`` property (stage 3). The pair is read from the last user message, between the tags the judges' prompts
use (see :mod:`delta_eval.judges.prompts`): ``<output_a>``, ``<output_b>`` and, for stage 3, ``<reference>``. In an
output, ``[calls]`` segments are tool calls and ``[says]`` / ``[replies]`` segments are text. The prompt is parsed
as :mod:`delta_eval.tagged` lays it out, so hostile content (a closing tag, a ``[calls]`` line inside a reply) is
read as the text it is, never as structure.

- Stage 2: outputs with different ``[calls]`` lines are different (confidence 0.9). Otherwise the Jaccard overlap
  ``o`` of their words decides: equivalent when ``o >= 0.5``, with confidence ``0.5 + o / 2``; else different.
- Stage 3: each output scores the reference calls it follows in order, minus one per other call; the higher score
  wins. On equal scores the output whose words overlap the reference's more wins when it leads by more than 0.2,
  otherwise it is a tie; except that with probability ``judge_position_bias`` the simulated judge picks A whatever
  the texts say (a position bias, so that judging in both orders has something to catch). Severity: ``critical``
  when the loser made a call the reference did not, ``minor`` when it lost on text, ``none`` on a tie. Every
  dimension of the schema's ``scores`` gets ``1 + round(3 q)``, where ``q`` is the output's share of the reference
  calls followed (its text overlap when the reference makes no call). The rationale names what the losing output
  did differently (:func:`behaviour`: "skipped the required get_reservation_details call", "called book with a
  different 'cabin' argument", ...), so that clustering the reasons of a run finds its themes.

Example:
    >>> import random
    >>> schema = {"type": "object", "properties": {"equivalent": {"type": "boolean"}}}
    >>> a, b = "[replies] Your flight is booked.", "[replies] your flight is booked"
    >>> text = f"<output_a>\\n{a}\\n</output_a>\\n<output_b>\\n{b}\\n</output_b>"
    >>> json.loads(judge_answer(schema, text, random.Random(0), 0.0))["equivalent"]
    True
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from delta_eval.matching import word_overlap
from delta_eval.tagged import sections, segments, split_call, unescape

__all__ = ["behaviour", "is_judge_schema", "judge_answer", "theme_name"]


#: How much more of the reference's words an output must share to win on text alone.
_TEXT_MARGIN = 0.2


def is_judge_schema(schema: dict[str, Any] | None) -> bool:
    """Whether a response schema is a delta_eval judge's (stage 2 or stage 3), or asks to name a theme of the
    judges' reasons (see :mod:`delta_eval.analysis.naming`)."""
    props = (schema or {}).get("properties") or {}
    return "equivalent" in props or "winner" in props or "theme_name" in props


_SAID = re.compile(r"\breply [AB] ([^;.]+)")


_NAMED = re.compile(r"\b(required|extra|called) (\w+)")
_SLOT = {"required": "required tool", "extra": "extra tool", "called": "called a tool"}


def theme_name(text: str) -> str:
    """The simulated namer's name for a theme: the behaviour its example reasons state most often, with the tool
    and argument names kept; where the examples state it of several tools, the tools are listed after it.

    Example:
        >>> examples = "- reply B skipped the required book call; B 0.\\n- reply A skipped the required book call"
        >>> theme_name(f"<examples>\\n{examples}\\n</examples>")
        'Skipped the required book call'
        >>> theme_name("reply B skipped the required book call; reply A skipped the required cancel call")
        'Skipped the required tool call (book, cancel)'
    """
    said: list[str] = _SAID.findall(_section(text, "examples") or text)
    if not said:
        return "Other differences"
    # One behaviour whatever tool it concerned, as a person naming the theme would read it
    shapes = [_NAMED.sub(lambda m: _SLOT[m.group(1)], phrase) for phrase in said]
    shape = max(set(shapes), key=lambda s: (shapes.count(s), s))
    phrases = sorted({p for p, s in zip(said, shapes, strict=True) if s == shape})
    if len(phrases) == 1:
        common = phrases[0]
    else:
        tools = sorted({m.group(2) for p in phrases for m in _NAMED.finditer(p)})
        common = f"{shape} ({', '.join(tools)})"
    return common[:1].upper() + common[1:]


def _section(text: str, tag: str) -> str | None:
    # Only the theme namer's prompt, whose examples are the judges' own reasons, is read this way.
    match = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
    return match.group(1) if match else None


def _sections(text: str) -> dict[str, str]:
    """A judge prompt's sections by name (none when it is not laid out as :mod:`delta_eval.tagged` lays them)."""
    try:
        return dict(sections(text))
    except ValueError:
        return {}


def _parts(body: str) -> tuple[list[str], str]:
    """An output's calls (their escaped text, as shown) and its text: read from its labelled segments, so a call
    line written inside a reply's text is text, as a careful judge reads it."""
    calls, texts = [], []
    try:
        shown = segments(body) if body else []
    except ValueError:
        shown = []
    for label, raw in shown:
        if label == "calls":
            calls.append(raw)
        elif label in ("says", "replies"):
            texts.append(unescape(raw))
    return calls, " ".join(texts)


def _equivalence(text: str) -> dict[str, Any]:
    shown = _sections(text)
    (calls_a, text_a), (calls_b, text_b) = (_parts(shown.get(t, "")) for t in ("output_a", "output_b"))
    if calls_a != calls_b:
        return {"equivalent": False, "confidence": 0.9, "reason": "They make different tool calls."}
    o = word_overlap(text_a, text_b)
    if o >= 0.5:
        return {"equivalent": True, "confidence": round(0.5 + o / 2, 3),
                "reason": f"Same tool calls; the texts say the same things (word overlap {o:.2f})."}  # fmt: skip
    return {"equivalent": False, "confidence": round(1 - o / 2, 3),
            "reason": f"Same tool calls, but the texts say different things (word overlap {o:.2f})."}  # fmt: skip


def _follows(calls: list[str], reference: list[str]) -> tuple[int, int]:
    followed = 0
    for mine, ref in zip(calls, reference, strict=False):
        if mine != ref:
            break
        followed += 1
    return followed, len(calls) - followed


def _call(line: str) -> tuple[str, Any]:
    """A ``[calls]`` line's tool name and parsed arguments (``None`` when they are not JSON)."""
    name, rest = split_call(line)
    try:
        args = json.loads(rest)
    except ValueError:
        args = None
    return name, args


def behaviour(calls: list[str], text: str, reference: list[str]) -> str:
    """What an output did differently from the reference, in words naming the tool and the argument (the theme a
    reader of many such reasons would find).

    Example:
        >>> behaviour([], "Could you confirm?", ["get_reservation_details({})"])
        'asked the user to confirm instead of making the required get_reservation_details call'
        >>> behaviour(['book({"cabin": "economy"})'], "", ['book({"cabin": "business"})'])
        "called book with a different 'cabin' argument"
    """
    for k, ref in enumerate(reference):
        ref_name, ref_args = _call(ref)
        if k >= len(calls):
            if "?" in text:
                return f"asked the user to confirm instead of making the required {ref_name} call"
            return f"skipped the required {ref_name} call"
        name, args = _call(calls[k])
        if name != ref_name:
            return f"called {name} instead of the required {ref_name}"
        if args != ref_args:
            if isinstance(args, dict) and isinstance(ref_args, dict):
                changed = sorted(key for key in set(args) | set(ref_args) if args.get(key) != ref_args.get(key))
                return f"called {name} with a different {changed[0]!r} argument"
            return f"called {name} with different arguments"
    if len(calls) > len(reference):
        return f"made an extra {_call(calls[len(reference)])[0]} call the reference did not make"
    return "worded its reply differently from the reference"


def _pairwise(schema: dict[str, Any], text: str, rng: random.Random, position_bias: float) -> dict[str, Any]:
    shown = _sections(text)
    ref_calls, ref_text = _parts(shown.get("reference", ""))
    sides = {s: _parts(shown.get(f"output_{s.lower()}", "")) for s in ("A", "B")}
    follows = {s: _follows(calls, ref_calls) for s, (calls, _) in sides.items()}
    score = {s: f - extra for s, (f, extra) in follows.items()}
    overlap = {s: word_overlap(t, ref_text) for s, (_, t) in sides.items()}
    if score["A"] != score["B"]:
        winner = "A" if score["A"] > score["B"] else "B"
        loser = "B" if winner == "A" else "A"
        confidence = min(1.0, 0.6 + 0.2 * abs(score["A"] - score["B"]))
        severity = "critical" if follows[loser][1] > 0 else "minor"
        why = (
            f"reply {loser} {behaviour(*sides[loser], ref_calls)}; A follows {follows['A'][0]} of {len(ref_calls)} "
            f"reference calls, B {follows['B'][0]}"
        )
    else:
        diff = overlap["A"] - overlap["B"]
        if rng.random() < position_bias:
            winner = "A"  # the bias: on text alone, it sometimes just takes the first output shown
        else:
            winner = "tie" if abs(diff) <= _TEXT_MARGIN else "A" if diff > 0 else "B"
        confidence = round(min(1.0, 0.5 + abs(diff)), 3)
        severity = "none" if winner == "tie" else "minor"
        drift = ""
        if winner != "tie":
            loser = "B" if winner == "A" else "A"
            drift = f"reply {loser} {behaviour(*sides[loser], ref_calls)}; "
        why = f"{drift}same calls; text overlap with the reference A {overlap['A']:.2f}, B {overlap['B']:.2f}"

    def quality(s: str) -> float:
        return follows[s][0] / len(ref_calls) if ref_calls else overlap[s]

    dims = list(((schema.get("properties") or {}).get("scores", {}).get("properties") or {}).get("A", {})
                .get("properties") or {})  # fmt: skip
    scores = {s: {d: 1 + round(3 * quality(s)) for d in dims} for s in ("A", "B")}
    return {
        "rationale": f"Simulated judge: {why}.",
        "winner": winner,
        "confidence": confidence,
        "severity": severity,
        "scores": scores,
        "summary": f"{'The replies are equally good' if winner == 'tie' else f'Reply {winner} is better'}: {why}.",
    }


def judge_answer(schema: dict[str, Any], text: str, rng: random.Random, position_bias: float) -> str:
    """The simulated judge's JSON answer to a judge request whose pair is rendered in ``text``."""
    props = schema.get("properties") or {}
    if "theme_name" in props:
        return json.dumps({"theme_name": theme_name(text)})
    answer = _equivalence(text) if "equivalent" in props else _pairwise(schema, text, rng, position_bias)
    return json.dumps(answer)
