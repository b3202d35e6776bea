"""Deterministic checks of a replayed turn, kept on its ``replays`` row and fed to the decision's gates.

- Tool-call validity: each call's arguments parse as a JSON object, name a tool the side was offered, and validate
  against that tool's JSON Schema (``jsonschema``, the draft the schema declares, 2020-12 by default). Problems are
  listed, one line each (``book_reservation: arguments.passengers: [] should be non-empty``).
- Agreement with the recorded action: the replay made the same tool calls as production did at this point (same
  tools, equivalent arguments, same order), or, where production answered in text, also answered in text.
- Text instead of action: production called a tool here, the replay called none.
- No decision: the replay neither called a tool nor wrote any text (an empty reply, or only reasoning); its own
  outcome, apart from text instead of action, since there is nothing to judge the turn by.

Example:
    >>> from delta_eval.schema import ToolCall, ToolSpec, TurnOutput, Step
    >>> spec = ToolSpec(name="f", parameters={"type": "object", "properties": {"x": {"type": "integer"}},
    ...                                       "required": ["x"]})
    >>> out = TurnOutput(steps=(Step(tool_calls=(ToolCall(id="1", name="f", arguments='{"x": "one"}'),)),))
    >>> check_output(out, (spec,), TurnOutput(final_text="hi")).tool_call_problems
    ("f: arguments.x: 'one' is not of type 'integer'",)
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from delta_eval.matching import DEFAULT_MATCH, MatchOptions, call_sequences_equivalent
from delta_eval.memo import IdentityMemo
from delta_eval.schema import ToolCall, ToolSpec, TurnOutput

__all__ = ["ReplayChecks", "check_output"]

#: Problems listed per replay at most (the count is always complete).
MAX_PROBLEMS = 20


@dataclass(frozen=True)
class ReplayChecks:
    """What :func:`check_output` found: the number of invalid tool calls and why, agreement with the recorded
    action (``None`` for a replay that failed), whether the replay answered in text where production acted, and
    whether it decided nothing at all (``None`` for a replay that failed)."""

    invalid_tool_calls: int = 0
    tool_call_problems: tuple[str, ...] = ()
    matches_recorded: bool | None = None
    text_instead_of_action: bool = False
    no_decision: bool | None = None


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    from jsonschema.validators import validator_for

    schema = json.loads(schema_json)
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except Exception:  # a broken tool schema checks nothing rather than failing every call
        return None
    return cls(schema)


def _spec_validator(spec: ToolSpec) -> Any:
    return _validator(json.dumps(spec.parameters, sort_keys=True))


#: Each tool spec's validator, by the identity of the spec (the specs of a run are a few objects, offered to every
#: call): serialising a spec's schema to find its validator cost as much as validating most calls.
_SPEC_VALIDATORS = IdentityMemo[Any](maxsize=1024)
#: The problems of the calls checked lately, by tool name and arguments text, with the validator they were checked
#: against: the two sides of a pair mostly make the same calls, and the turns of a conversation repeat theirs.
_CHECKED: OrderedDict[tuple[str, str], tuple[Any, tuple[str, ...]]] = OrderedDict()
_CHECKED_MAX = 4096


def _problems(call: ToolCall, tools: dict[str, ToolSpec]) -> list[str]:
    spec = tools.get(call.name)
    if spec is None:
        return [f"{call.name}: no such tool"]
    validator = _SPEC_VALIDATORS.get(spec, _spec_validator)
    key = (call.name, call.arguments)
    kept = _CHECKED.get(key)
    if kept is not None and kept[0] is validator:
        return list(kept[1])
    found = _validate(call, validator)
    _CHECKED[key] = (validator, tuple(found))
    if len(_CHECKED) > _CHECKED_MAX:
        _CHECKED.pop(next(iter(_CHECKED)), None)
    return found


def _validate(call: ToolCall, validator: Any) -> list[str]:
    args = call.parsed_arguments
    if not call.arguments_valid or not isinstance(args, dict):
        return [f"{call.name}: arguments are not a JSON object"]
    if validator is None:
        return []
    out = []
    for error in sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path)):
        where = ".".join(["arguments", *(str(p) for p in error.absolute_path)])
        out.append(f"{call.name}: {where}: {error.message}")
    return out


def check_output(
    output: TurnOutput,
    tools: tuple[ToolSpec, ...],
    recorded: TurnOutput,
    match: MatchOptions = DEFAULT_MATCH,
) -> ReplayChecks:
    """The checks of one replayed turn against the tools it was offered and the recorded turn."""
    offered = {t.name: t for t in tools}
    invalid, problems = 0, []
    for call in output.tool_calls:
        found = _problems(call, offered)
        if found:
            invalid += 1
            problems += found
    calls, reference = output.tool_calls, recorded.tool_calls
    matches = call_sequences_equivalent(calls, reference, match) if reference else not calls
    silent = not calls and not any(text.strip() for text in output.texts)
    return ReplayChecks(
        invalid_tool_calls=invalid,
        tool_call_problems=tuple(problems[:MAX_PROBLEMS]),
        matches_recorded=matches,
        # Saying nothing is not "text instead of action": it is no decision, counted apart.
        text_instead_of_action=bool(reference) and not calls and not silent,
        no_decision=silent,
    )
