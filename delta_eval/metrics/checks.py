"""The user's own checks: declarative assertions on what each replayed side did in a turn, so a team can hold a
change to its own rules ("the reply never promises a refund", "book_reservation is called with cabin economy",
"transfer_to_human_agents is never called", or any Python predicate).

A :class:`Check` has a ``name`` and exactly one assertion:

- ``text_matches`` / ``text_not_matches``: a regular expression (Python :mod:`re`, found with ``re.search``; use
  inline flags such as ``(?i)``) that the turn's text must / must not contain. The turn's text is every step's text
  and the final text, joined by newlines;
- ``tool_called`` / ``tool_not_called``: a tool the turn must / must not call. With ``arguments``, only calls whose
  arguments match count: each given top-level key must be equal under the type-tolerant matching of
  :mod:`delta_eval.matching` (``"1"`` equals ``1``, strings trimmed, ``null`` equals absent), and a string value
  starting with ``re:`` is a regular expression that the argument's string form (a string as is, anything else as
  its JSON text) must contain. ``tool_called`` passes when some call of the tool matches; ``tool_not_called`` when
  none does;
- ``predicate``: a function (``"module:function"`` in config files) taking a :class:`CheckedTurn` and returning
  ``True`` (passes), ``False`` (fails), ``None`` (does not apply), or a pair of one of those and a short detail.

``when_recorded_calls`` restricts a check to the turns where production called that tool. A check that does not
apply to a turn, or a replay that ended in error (it has no output to check), gives ``passed=None``: neither a pass
nor a failure. :func:`check_results` evaluates checks on the ``replays`` rows of the baseline and the candidate;
:func:`check_rates` counts failures per side and check, for reports.

Example:
    >>> no_refund = Check(name="no_refund_promise", text_not_matches=r"(?i)\\bwe will refund\\b")
    >>> rows = [{"side": "candidate", "pair_id": "c#0", "conversation_id": "c", "error": None,
    ...          "final_text": "We will refund you today.", "steps": []}]
    >>> [(r["check"], r["passed"], r["detail"]) for r in check_results([no_refund], rows).to_pylist()]
    [('no_refund_promise', False, "matched 'We will refund' in 'We will refund you today.'")]
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, Literal, NamedTuple

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from delta_eval.matching import canonical_arguments
from delta_eval.metrics.frames import Rows, rows_of, to_arrow
from delta_eval.metrics.rule import REGEX_PREFIX, Check, CheckKind, Predicate
from delta_eval.schema import Step, ToolCall, ToolResult, TurnOutput

__all__ = [
    "CHECK_RESULTS_SCHEMA",
    "Check",
    "CheckKind",
    "CheckRate",
    "CheckResult",
    "CheckedTurn",
    "Predicate",
    "check_rates",
    "check_results",
]

_SIDES = ("baseline", "candidate")
#: The columns the declarative checks read; a predicate gets every column.
_COLUMNS = ("side", "pair_id", "conversation_id", "error", "steps", "final_text")
_DETAIL_CHARS = 160
_BATCH_ROWS = 4096
_MISSING = object()


@dataclass(frozen=True, slots=True)
class CheckedTurn:
    """What a predicate is given: one replayed side's turn.

    ``output`` is the turn rebuilt from its ``replays`` row (steps with their tool calls and results, final text);
    ``recorded`` is what production did in the same pair, when the rows include the ``recorded`` side (``None``
    otherwise); ``row`` is the replay's row as read, every column (``model``, ``latency_ms``, ``finish_reason``,
    ...). ``text`` is the text the regular-expression checks see.

    Example:
        >>> from delta_eval.schema import Step, ToolCall, TurnOutput
        >>> call = ToolCall(id="1", name="book_reservation", arguments='{"cabin": "economy"}')
        >>> turn = CheckedTurn(output=TurnOutput(steps=(Step(tool_calls=(call,)),), final_text="Booked."),
        ...                    row={"side": "candidate", "pair_id": "c#0", "conversation_id": "c"})
        >>> turn.side, turn.text, [c.parsed_arguments["cabin"] for c in turn.tool_calls]
        ('candidate', 'Booked.', ['economy'])
    """

    output: TurnOutput
    row: Mapping[str, Any] = field(default_factory=dict)
    recorded: TurnOutput | None = None

    @property
    def side(self) -> str:
        """``baseline`` or ``candidate``."""
        return str(self.row.get("side", ""))

    @property
    def pair_id(self) -> str:
        """The pair this turn is one side of."""
        return str(self.row.get("pair_id", ""))

    @property
    def conversation_id(self) -> str:
        """The conversation the turn belongs to."""
        return str(self.row.get("conversation_id", ""))

    @property
    def text(self) -> str:
        """Every text of the turn (each step's, then the final text), joined by newlines."""
        return "\n".join(self.output.texts)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """Every tool call of the turn, in order."""
        return self.output.tool_calls


class CheckResult(BaseModel):
    """One check on one replayed side of one pair. ``passed`` is ``None`` where the check could not say: it does not
    apply to the turn, the replay ended in error, or the predicate raised. ``detail`` says why it failed or was not
    evaluated (the matched text, the offending call, the exception), shortened; it is empty on a pass.

    Example:
        >>> CheckResult(pair_id="c#0", conversation_id="c", side="baseline", check="economy", passed=True).detail
        ''
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    pair_id: str
    conversation_id: str
    side: Literal["baseline", "candidate"]
    check: str
    passed: bool | None
    detail: str = ""


class CheckRate(NamedTuple):
    """How often a check failed on one side: ``failed`` of the ``applicable`` turns (those where it said pass or
    fail; turns where it could not say are in neither).

    Example:
        >>> CheckRate(failed=1, applicable=4).rate
        0.25
    """

    failed: int
    applicable: int

    @property
    def rate(self) -> float | None:
        """``failed / applicable``, or ``None`` when the check applied nowhere."""
        return self.failed / self.applicable if self.applicable else None


# -- evaluation ---------------------------------------------------------------------------------------------------

#: The table :func:`check_results` returns: one row per replayed side, pair and check (the fields of
#: :class:`CheckResult`).
CHECK_RESULTS_SCHEMA = pa.schema(
    [
        pa.field("pair_id", pa.string()),
        pa.field("conversation_id", pa.string()),
        pa.field("side", pa.string()),
        pa.field("check", pa.string()),
        pa.field("passed", pa.bool_()),
        pa.field("detail", pa.string()),
    ]
)

_Outcome = tuple[bool | None, str]
_Call = tuple[str, str]  # (name, raw arguments)


class _Turn:
    """One replay row as every check reads it, parsed once: its text, its calls, and (lazily, for predicates) the
    :class:`TurnOutput` rebuilt from the whole row."""

    __slots__ = ("_output", "calls", "conversation_id", "error", "pair_id", "row", "side", "text")

    def __init__(
        self,
        side: Any,
        pair_id: Any,
        conversation_id: Any,
        error: Any,
        text: str,
        calls: list[_Call],
        row: Mapping[str, Any] | None = None,
    ) -> None:
        self.side, self.pair_id, self.conversation_id = side, str(pair_id), str(conversation_id)
        self.error, self.text, self.calls, self.row = error, text, calls, row
        self._output: TurnOutput | None = None

    @classmethod
    def of_row(cls, row: Mapping[str, Any], keep_row: bool) -> _Turn:
        steps = row.get("steps") or ()
        texts = [s["text"] for s in steps if s.get("text")]
        if row.get("final_text"):
            texts.append(row["final_text"])
        calls = [(str(c.get("name") or ""), str(c.get("arguments") or "{}"))
                 for s in steps for c in s.get("tool_calls") or ()]  # fmt: skip
        return cls(row.get("side"), row.get("pair_id"), row.get("conversation_id"), row.get("error"),
                   "\n".join(texts), calls, row if keep_row else None)  # fmt: skip

    def output(self) -> TurnOutput:
        if self._output is None:
            self._output = _turn_output(self.row or {})
        return self._output


def _turn_output(row: Mapping[str, Any]) -> TurnOutput:
    """The :class:`TurnOutput` a ``replays`` row holds (the columns ``steps``, ``final_text``, ``final_reasoning``)."""
    steps = tuple(
        Step(
            text=s.get("text"),
            tool_calls=tuple(
                ToolCall(id=c.get("id") or "", name=c.get("name") or "", arguments=c.get("arguments") or "{}")
                for c in s.get("tool_calls") or ()
            ),
            tool_results=tuple(
                ToolResult(
                    call_id=t.get("call_id") or "",
                    name=t.get("name") or "",
                    content=t.get("content") or "",
                    source=t.get("source") or "recorded",
                )
                for t in s.get("tool_results") or ()
            ),
            reasoning=s.get("reasoning"),
        )
        for s in row.get("steps") or ()
    )
    return TurnOutput(steps=steps, final_text=row.get("final_text"), final_reasoning=row.get("final_reasoning"))


#: What the declarative checks read of a step: cast to it, the steps leave their tool results (often most of a row's
#: bytes) and their reasoning behind.
_NARROW_STEPS = pa.list_(
    pa.struct(
        [
            ("text", pa.string()),
            ("tool_calls", pa.list_(pa.struct([("name", pa.string()), ("arguments", pa.string())]))),
        ]
    )
)


def _arrow_turns(table: pa.Table) -> list[_Turn] | None:
    """The turns of a ``replays`` table read column by column, or ``None`` when its columns are not the run's.

    Only strings leave Arrow (the step texts, the calls' names and arguments), never a dict per row or per step, and
    the tool results are not read at all.
    """
    import pyarrow.compute as pc

    if not {"side", "pair_id", "conversation_id"} <= set(table.column_names):
        return None
    table = table.select([c for c in _COLUMNS if c in table.column_names])
    if "steps" in table.column_names:
        try:
            steps = table.column("steps").cast(_NARROW_STEPS)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None  # steps of another shape: read as rows instead
        table = table.set_column(table.column_names.index("steps"), "steps", steps)
    # One chunk, so that each column costs one call into Arrow however many files the table was read from.
    table = table.combine_chunks()
    n = table.num_rows

    def column(name: str) -> list[Any]:
        return table.column(name).to_pylist() if name in table.column_names else [None] * n

    texts: dict[int, list[str]] = {}
    calls: dict[int, list[_Call]] = {}
    if "steps" in table.column_names and n:
        all_steps = table.column("steps").chunk(0)
        flat = pc.list_flatten(all_steps)
        step_row = pc.list_parent_indices(all_steps).to_pylist()
        for row, text in zip(step_row, pc.struct_field(flat, "text").to_pylist(), strict=True):
            if text:
                texts.setdefault(row, []).append(text)
        tool_calls = pc.struct_field(flat, "tool_calls")
        flat_calls = pc.list_flatten(tool_calls)
        names = pc.struct_field(flat_calls, "name").to_pylist()
        arguments = pc.struct_field(flat_calls, "arguments").to_pylist()
        for step, name, raw in zip(pc.list_parent_indices(tool_calls).to_pylist(), names, arguments, strict=True):
            calls.setdefault(step_row[step], []).append((name or "", raw or "{}"))
    for i, final in enumerate(column("final_text")):
        if final:
            texts.setdefault(i, []).append(final)
    return [
        _Turn(side, pair_id, conversation_id, error, "\n".join(texts.get(i, ())), calls.get(i, []))
        for i, (side, pair_id, conversation_id, error) in enumerate(
            zip(column("side"), column("pair_id"), column("conversation_id"), column("error"), strict=True)
        )
    ]


def _turns_of_table(table: pa.Table, whole: bool) -> list[_Turn]:
    if whole:
        return [_Turn.of_row(row, True) for row in table.to_pylist()]
    turns = _arrow_turns(table)
    return turns if turns is not None else [_Turn.of_row(row, False) for row in rows_of(table, _COLUMNS)]


def _read(replays: Rows, whole: bool, production: bool) -> tuple[_Production, Iterator[list[_Turn]]]:
    """The recorded turns (read only if ``production``) and the turns to check, in batches: from every column when
    a predicate needs the whole row, else only from what the declarative checks read.

    An Arrow table is read a batch at a time, so that only one batch's rows are alive as Python objects at once:
    with a hundred thousand rows alive, the garbage collector's passes over them cost more than the checks.
    """
    try:
        table = to_arrow(replays)
    except TypeError:  # rows of mappings, all in memory already
        turns = [_Turn.of_row(row, whole) for row in rows_of(replays, None if whole else _COLUMNS)]
        recorded = [t for t in turns if t.side == "recorded"]
        rows = {t.pair_id: t.row or {} for t in recorded}
        return _Production({t.pair_id: t.calls for t in recorded}, rows.get), iter([turns])
    if "side" not in table.column_names:
        return _Production({}, lambda _: None), iter([])
    import pyarrow.compute as pc

    if not whole:
        table = table.select([c for c in _COLUMNS if c in table.column_names])
    is_recorded = pc.fill_null(pc.equal(table.column("side"), "recorded"), False)
    is_checked = pc.invert(is_recorded)
    batches = (
        _turns_of_table(table.slice(i, _BATCH_ROWS).filter(is_checked.slice(i, _BATCH_ROWS)), whole)
        for i in range(0, table.num_rows, _BATCH_ROWS)
    )
    if not production:
        return _Production({}, lambda _: None), batches
    recorded_table = table.filter(is_recorded)
    recorded_turns = _turns_of_table(recorded_table, False)
    position = {t.pair_id: i for i, t in enumerate(recorded_turns)}

    def recorded_row(pair_id: str) -> Mapping[str, Any] | None:
        # Rebuilt on demand, for a predicate that asks for production's turn.
        i = position.get(pair_id)
        return None if i is None else recorded_table.slice(i, 1).to_pylist()[0]

    return _Production({t.pair_id: t.calls for t in recorded_turns}, recorded_row), batches


@lru_cache(maxsize=65536)
def _arguments_of(raw: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A call's arguments parsed (key -> value) and canonicalised (key -> canonical value, as
    :func:`~delta_eval.matching.canonical_arguments` compares them), or ``None`` when they are not a JSON object.
    Cached by the raw text: the same arguments recur across sides, epochs and turns."""
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict):
        return None
    try:
        canonical = canonical_arguments(ToolCall(id="", name="", arguments=raw))
    except RecursionError:  # nested too deep to canonicalise: matches nothing, as arguments that do not parse
        return None
    return parsed, dict(json.loads(canonical)["obj"])


def _string_form(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class _ArgumentMatcher:
    """The ``arguments`` of a tool check, compiled once: canonical values to compare, regexes to search."""

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self.regexes = {k: re.compile(v[len(REGEX_PREFIX) :]) for k, v in arguments.items()
                        if isinstance(v, str) and v.startswith(REGEX_PREFIX)}  # fmt: skip
        plain = {k: v for k, v in arguments.items() if k not in self.regexes}
        # Canonicalised exactly as a call's arguments are, so the library's tolerances apply to both alike; a key
        # whose canonical form is absent (a null) must be absent or null in the call.
        found = _arguments_of(json.dumps(plain))
        assert found is not None
        self.canonical = {k: found[1].get(k, _MISSING) for k in plain}
        self.keys = list(arguments)

    def matches(self, raw: str) -> bool:
        if not self.keys:
            return True
        got = _arguments_of(raw)
        if got is None:
            return False
        parsed, canonical = got
        if any(canonical.get(k, _MISSING) != v for k, v in self.canonical.items()):
            return False
        for key, pattern in self.regexes.items():
            value = parsed.get(key)
            if value is None or not pattern.search(_string_form(value)):
                return False
        return True

    def got(self, raw: str) -> str:
        """What a call that did not match had under the constrained keys, for the detail."""
        found = _arguments_of(raw)
        if found is None:
            return f"arguments {_short(raw, 60)!r} (not a JSON object)"
        values = {k: found[0][k] for k in self.keys if k in found[0]}
        return json.dumps(values, ensure_ascii=False) if values else "none of those arguments"


def _short(text: str, limit: int = _DETAIL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _evaluator(check: Check) -> Callable[[_Turn, Callable[[], TurnOutput | None]], _Outcome]:
    """The check as a function of a parsed turn (and of a thunk giving the pair's recorded turn, for predicates)."""
    kind = check.kind
    if kind in ("text_matches", "text_not_matches"):
        pattern = re.compile(getattr(check, kind))
        must = kind == "text_matches"

        def text_check(turn: _Turn, _recorded: Callable[[], TurnOutput | None]) -> _Outcome:
            m = pattern.search(turn.text)
            if must:
                return (True, "") if m else (False, _short(f"no match for /{pattern.pattern}/"))
            if m is None:
                return True, ""
            start, end = m.span()
            context = ("…" if start > 40 else "") + turn.text[max(0, start - 40) : end + 40]
            context += "…" if end + 40 < len(turn.text) else ""
            return False, _short(f"matched {_short(m.group(0), 60)!r} in {context!r}")

        return text_check

    if kind in ("tool_called", "tool_not_called"):
        tool: str = getattr(check, kind)
        matcher = _ArgumentMatcher(check.arguments or {})
        must = kind == "tool_called"
        with_args = f" with {_short(json.dumps(check.arguments, ensure_ascii=False), 60)}" if check.arguments else ""

        def tool_check(turn: _Turn, _recorded: Callable[[], TurnOutput | None]) -> _Outcome:
            own = [raw for name, raw in turn.calls if name == tool]
            hit = next((raw for raw in own if matcher.matches(raw)), None)
            if hit is None and not own:
                if not must:
                    return True, ""
                called = list(dict.fromkeys(name for name, _ in turn.calls))
                return False, _short(f"{tool} not called ({'called: ' + ', '.join(called) if called else 'no calls'})")
            if hit is None:
                if not must:
                    return True, ""
                got = " / ".join(dict.fromkeys(matcher.got(raw) for raw in own))
                return False, _short(f"no {tool} call{with_args}; got {got}")
            return (True, "") if must else (False, _short(f"called {_short(f'{tool}({hit})', 120)}"))

        return tool_check

    predicate = check.predicate
    assert predicate is not None

    def predicate_check(turn: _Turn, recorded: Callable[[], TurnOutput | None]) -> _Outcome:
        # A predicate is the user's code: whatever it raises is this check's None on this turn, never the end of
        # the evaluation.
        try:
            answer = predicate(CheckedTurn(output=turn.output(), row=turn.row or {}, recorded=recorded()))
        except Exception as exc:
            return None, _short(f"predicate raised {type(exc).__name__}: {exc}")
        detail = ""
        if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], str):
            answer, detail = answer
        if answer is None:
            return None, _short(detail or "predicate: does not apply")
        if isinstance(answer, bool) or type(answer).__name__ == "bool_":  # numpy's bool too
            passed = bool(answer)
            return passed, "" if passed else _short(detail or "predicate returned False")
        return None, _short(f"predicate returned {type(answer).__name__}, not a bool")

    return predicate_check


class _Production:
    """The ``recorded`` turns of the pairs: their calls (for ``when_recorded_calls``), and their rows on demand (for a
    predicate's ``recorded``)."""

    def __init__(self, calls: Mapping[str, list[_Call]], row: Callable[[str], Mapping[str, Any] | None]) -> None:
        self._calls = calls
        self._row = row
        self._names: dict[str, frozenset[str]] = {}
        self._outputs: dict[str, TurnOutput | None] = {}

    def not_applicable(self, tool: str, pair_id: str) -> str | None:
        """Why a check restricted to turns where production called ``tool`` does not apply here (None: it does)."""
        if pair_id not in self._names:
            calls = self._calls.get(pair_id)
            if calls is None:
                return "not applicable: no recorded turn for this pair"
            self._names[pair_id] = frozenset(name for name, _ in calls)
        return None if tool in self._names[pair_id] else f"not applicable: production did not call {tool}"

    def output(self, pair_id: str) -> TurnOutput | None:
        if pair_id not in self._outputs:
            row = self._row(pair_id)
            self._outputs[pair_id] = None if row is None else _turn_output(row)
        return self._outputs[pair_id]


def check_results(checks: Sequence[Check], replays: Rows) -> pa.Table:
    """Every check on every ``baseline`` and ``candidate`` row of ``replays``: an Arrow table (schema
    :data:`CHECK_RESULTS_SCHEMA`) with one row per replay row and check, in the rows' order, then the checks'; each
    row holds the fields of a :class:`CheckResult`. Rows of the ``recorded`` side are not checked: they serve
    ``when_recorded_calls`` and a predicate's ``recorded``.

    ``replays`` is the run's ``replays`` table (an Arrow table, a DuckDB relation, a DataFrame, or mappings with
    its columns ``side``, ``pair_id``, ``conversation_id``, ``error``, ``steps``, ``final_text``). A replay that
    ended in error gives ``passed=None`` for every check, as does a check on a turn it does not apply to.

    Example:
        >>> rows = [{"side": "baseline", "pair_id": "c#0", "conversation_id": "c", "error": None, "final_text": "",
        ...          "steps": [{"text": None, "tool_calls": [{"name": "transfer_to_human_agents",
        ...                                                    "arguments": '{"summary": "refund"}'}]}]}]
        >>> checks = [Check(name="no_transfer", tool_not_called="transfer_to_human_agents")]
        >>> [(r["side"], r["passed"], r["detail"]) for r in check_results(checks, rows).to_pylist()]
        [('baseline', False, 'called transfer_to_human_agents({"summary": "refund"})')]
    """
    names = [c.name for c in checks]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"check names must be unique (gates refer to them by name): {', '.join(twice)}")
    if not checks:
        return CHECK_RESULTS_SCHEMA.empty_table()
    whole = any(c.predicate is not None for c in checks)
    production, batches = _read(replays, whole, whole or any(c.when_recorded_calls is not None for c in checks))
    evaluators = [(c.name, c.when_recorded_calls, _evaluator(c)) for c in checks]
    # Built as columns of plain values: a hundred thousand replays make half a million results.
    columns: dict[str, list[Any]] = {name: [] for name in CHECK_RESULTS_SCHEMA.names}
    pair_ids, conversation_ids, sides = columns["pair_id"], columns["conversation_id"], columns["side"]
    check_names, passed_values, details = columns["check"], columns["passed"], columns["detail"]
    for turn in (turn for batch in batches for turn in batch):
        if turn.side not in _SIDES:
            continue
        recorded = partial(production.output, turn.pair_id)
        for name, when, evaluate in evaluators:
            passed: bool | None
            if when is not None and (reason := production.not_applicable(when, turn.pair_id)):
                passed, detail = None, reason
            elif turn.error is not None:
                passed, detail = None, _short(f"replay failed: {turn.error}")
            else:
                passed, detail = evaluate(turn, recorded)
            pair_ids.append(turn.pair_id)
            conversation_ids.append(turn.conversation_id)
            sides.append(turn.side)
            check_names.append(name)
            passed_values.append(passed)
            details.append(detail)
    return pa.table(columns, schema=CHECK_RESULTS_SCHEMA)


def check_rates(results: Rows) -> dict[str, dict[str, CheckRate]]:
    """Failures of each check on each side: ``{side: {check: CheckRate(failed, applicable)}}``, sides sorted and
    checks in the order they first appear. ``results`` is the table :func:`check_results` returned, or the same as
    any rows (a DuckDB relation, a DataFrame, :class:`CheckResult` objects or mappings).

    Example:
        >>> rs = [CheckResult(pair_id=f"c#{i}", conversation_id="c", side="candidate", check="economy", passed=p)
        ...       for i, p in enumerate([True, False, None, True])]
        >>> check_rates(rs)
        {'candidate': {'economy': CheckRate(failed=1, applicable=3)}}
    """
    if isinstance(results, list | tuple):
        results = [r.model_dump() if isinstance(r, CheckResult) else r for r in results]
    counts: dict[str, dict[str, list[int]]] = {}
    for r in rows_of(results, ("side", "check", "passed")):
        tally = counts.setdefault(str(r["side"]), {}).setdefault(str(r["check"]), [0, 0])
        if r["passed"] is not None:
            tally[0] += not r["passed"]
            tally[1] += 1
    return {side: {check: CheckRate(*tally) for check, tally in counts[side].items()} for side in sorted(counts)}
