"""The user's own checks (delta_eval.metrics.checks): each kind on hand-built rows and on the rows of a real small
run, the argument matching and the regular-expression checks as properties, and the config round trip.

(Named test_user_checks, not test_checks: tests/replay/test_checks.py exists, and the test folders are not packages,
so two test modules may not share a name.)
"""

from __future__ import annotations

import json
import re
import time
import tomllib
from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import delta_eval as de
from delta_eval.callables import callable_name
from delta_eval.demo import demo_conversations
from delta_eval.metrics import (
    CHECK_RESULTS_SCHEMA,
    Check,
    CheckedTurn,
    CheckRate,
    CheckResult,
    check_rates,
    check_results,
)
from delta_eval.schema import Replay, TurnOutput
from delta_eval.store.tables import TABLES

# -- hand-built rows ----------------------------------------------------------------------------------------------


def call(name: str, arguments: Any = None, *, raw: str | None = None) -> dict[str, Any]:
    return {"id": "call_1", "name": name, "arguments": raw if raw is not None else json.dumps(arguments or {})}


def replay_row(
    side: str = "candidate",
    pair: str = "c#0",
    *,
    final: str | None = "",
    texts: Sequence[str | None] = (),
    calls: Sequence[dict[str, Any]] = (),
    error: str | None = None,
) -> dict[str, Any]:
    """A row of the replays table as a run writes it (only the columns the checks read)."""
    steps: list[dict[str, Any]] = [{"text": t, "tool_calls": [], "tool_results": []} for t in texts]
    if calls:
        steps.append({"text": None, "tool_calls": list(calls), "tool_results": []})
    return {
        "side": side,
        "pair_id": pair,
        "conversation_id": pair.split("#")[0],
        "error": error,
        "steps": steps,
        "final_text": final,
    }


def results(checks: Sequence[Check], rows: Any) -> list[CheckResult]:
    return [CheckResult(**r) for r in check_results(checks, rows).to_pylist()]


def outcome(check: Check, row: dict[str, Any]) -> tuple[bool | None, str]:
    [result] = results([check], [row])
    return result.passed, result.detail


# -- text ---------------------------------------------------------------------------------------------------------


def test_text_checks_read_every_step_text_and_the_final_text_joined_by_newlines() -> None:
    row = replay_row(texts=["Let me look that up.", None], final="Your refund is on its way.")
    assert outcome(Check(name="joined", text_matches=r"up\.\nYour refund"), row) == (True, "")
    assert outcome(Check(name="in_step", text_matches="look that up"), row) == (True, "")
    passed, detail = outcome(Check(name="apology", text_matches=r"(?i)\bsorry\b"), row)
    assert passed is False
    assert detail == r"no match for /(?i)\bsorry\b/"


def test_text_not_matches_names_what_matched_with_its_context() -> None:
    row = replay_row(final="Thanks for waiting. " + "x" * 80 + " We will refund the full amount today. " + "y" * 80)
    passed, detail = outcome(Check(name="no_refund_promise", text_not_matches=r"(?i)we will refund"), row)
    assert passed is False
    assert detail.startswith("matched 'We will refund' in '…")
    assert "the full amount" in detail
    assert len(detail) <= 160
    assert outcome(Check(name="no_refund_promise", text_not_matches="(?i)refund"), replay_row(final="Booked.")) == (
        True,
        "",
    )


def test_an_empty_turn_has_empty_text() -> None:
    row = replay_row(final=None)
    assert outcome(Check(name="anything", text_matches="."), row)[0] is False
    assert outcome(Check(name="nothing", text_not_matches="."), row) == (True, "")
    assert outcome(Check(name="empty", text_matches="^$"), row) == (True, "")


_PATTERNS = st.sampled_from(["a", "ab|ba", r"^a", r"b$", r"(?i)AB", r"[ab]{2}", r"\d+", r"a\nb", r"(?m)^b", "", "z"])


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.one_of(st.none(), st.text(alphabet="abAB1 \n", max_size=6)), max_size=3),
    final=st.one_of(st.none(), st.text(alphabet="abAB1 \n", max_size=8)),
    pattern=st.one_of(_PATTERNS, st.text(alphabet="abAB1.", max_size=3).map(re.escape)),
    error=st.sampled_from([None, None, "boom"]),
)
def test_text_matches_and_text_not_matches_are_complements_where_they_apply(
    texts: list[str | None], final: str | None, pattern: str, error: str | None
) -> None:
    row = replay_row(texts=texts, final=final, error=error)
    matches, not_matches = results(
        [Check(name="m", text_matches=pattern), Check(name="n", text_not_matches=pattern)], [row]
    )
    if error is not None:
        assert matches.passed is None
        assert not_matches.passed is None
        return
    expected = re.search(pattern, "\n".join(t for t in [*texts, final] if t)) is not None
    assert matches.passed is expected
    assert not_matches.passed is (not expected)


# -- tools --------------------------------------------------------------------------------------------------------


def test_tool_called_and_tool_not_called_by_name() -> None:
    row = replay_row(calls=[call("get_user_details", {"user_id": "mia"}), call("think", {"thought": "hm"})])
    assert outcome(Check(name="looked_up", tool_called="get_user_details"), row) == (True, "")
    assert outcome(Check(name="booked", tool_called="book_reservation"), row) == (
        False,
        "book_reservation not called (called: get_user_details, think)",
    )
    assert outcome(Check(name="booked", tool_called="book_reservation"), replay_row()) == (
        False,
        "book_reservation not called (no calls)",
    )
    assert outcome(Check(name="no_transfer", tool_not_called="transfer_to_human_agents"), row) == (True, "")
    passed, detail = outcome(Check(name="no_thinking", tool_not_called="think"), row)
    assert passed is False
    assert detail == 'called think({"thought": "hm"})'


def test_arguments_match_with_the_librarys_type_tolerance() -> None:
    economy = Check(name="economy", tool_called="book_reservation", arguments={"cabin": "economy", "passengers": 1})
    for raw in (
        '{"cabin": "economy", "passengers": 1}',
        '{"passengers": "1", "cabin": "economy "}',  # "1" == 1, strings trimmed, any key order
        '{"passengers": 1.0, "cabin": "economy", "origin": "JFK"}',  # keys not named are free
    ):
        assert outcome(economy, replay_row(calls=[call("book_reservation", raw=raw)])) == (True, ""), raw
    passed, detail = outcome(
        economy, replay_row(calls=[call("book_reservation", {"cabin": "Economy", "passengers": 1})])
    )
    assert passed is False  # argument strings are compared with case, as in stage 1
    assert detail == (
        'no book_reservation call with {"cabin": "economy", "passengers": 1}; got {"cabin": "Economy", "passengers": 1}'
    )
    # null is the same as left out
    no_insurance = Check(name="no_insurance", tool_called="book_reservation", arguments={"insurance": None})
    assert outcome(no_insurance, replay_row(calls=[call("book_reservation", {"cabin": "economy"})]))[0] is True
    assert outcome(no_insurance, replay_row(calls=[call("book_reservation", {"insurance": None})]))[0] is True
    assert outcome(no_insurance, replay_row(calls=[call("book_reservation", {"insurance": "yes"})]))[0] is False


def test_nested_argument_values_compare_as_a_whole_with_the_same_tolerance() -> None:
    flights = Check(
        name="flights",
        tool_called="book_reservation",
        arguments={"flights": [{"flight_number": "HAT136", "date": "2024-05-20"}]},
    )
    same = {"flights": [{"date": "2024-05-20 ", "flight_number": "HAT136"}], "cabin": "economy"}
    assert outcome(flights, replay_row(calls=[call("book_reservation", same)]))[0] is True
    more = {
        "flights": [{"date": "2024-05-20", "flight_number": "HAT136"}, {"date": "2024-05-21", "flight_number": "X"}]
    }
    assert outcome(flights, replay_row(calls=[call("book_reservation", more)]))[0] is False


def test_re_prefixed_values_are_regular_expressions_on_the_arguments_string_form() -> None:
    check = Check(
        name="direct",
        tool_called="search_direct_flight",
        arguments={"origin": "re:^(JFK|LGA)$", "date": r"re:^2024-05-\d\d$", "passengers": "re:^[12]$"},
    )
    good = {"origin": "JFK", "destination": "SEA", "date": "2024-05-20", "passengers": 2}
    assert outcome(check, replay_row(calls=[call("search_direct_flight", good)])) == (True, "")
    for bad in ({**good, "origin": "EWR"}, {**good, "date": "2024-06-01"}, {**good, "passengers": 3}):
        assert outcome(check, replay_row(calls=[call("search_direct_flight", bad)]))[0] is False, bad
    missing = {k: v for k, v in good.items() if k != "origin"}
    passed, detail = outcome(check, replay_row(calls=[call("search_direct_flight", missing)]))
    assert passed is False
    assert detail.endswith('got {"date": "2024-05-20", "passengers": 2}')


def test_tool_called_with_arguments_needs_some_matching_call_and_tool_not_called_none() -> None:
    business, economy = call("book_reservation", {"cabin": "business"}), call("book_reservation", {"cabin": "economy"})
    must = Check(name="economy", tool_called="book_reservation", arguments={"cabin": "economy"})
    never = Check(name="no_economy", tool_not_called="book_reservation", arguments={"cabin": "economy"})
    assert outcome(must, replay_row(calls=[business, economy])) == (True, "")
    assert outcome(must, replay_row(calls=[business, business])) == (
        False,
        'no book_reservation call with {"cabin": "economy"}; got {"cabin": "business"}',
    )
    assert outcome(never, replay_row(calls=[business])) == (True, "")  # the tool was called, but not so
    assert outcome(never, replay_row()) == (True, "")
    assert outcome(never, replay_row(calls=[business, economy])) == (
        False,
        'called book_reservation({"cabin": "economy"})',
    )


def test_arguments_that_are_not_a_json_object_match_no_constraint() -> None:
    check = Check(name="economy", tool_called="book_reservation", arguments={"cabin": "economy"})
    for raw in ('{"cabin": "economy"', '["economy"]', "economy"):
        passed, detail = outcome(check, replay_row(calls=[call("book_reservation", raw=raw)]))
        assert passed is False
        assert "not a JSON object" in detail
    # without arguments, any call of the tool counts, whatever its arguments
    assert outcome(
        Check(name="booked", tool_called="book_reservation"), replay_row(calls=[call("book_reservation", raw="{oops")])
    ) == (True, "")


_KEYS = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)
_VALUES = st.one_of(
    st.integers(-(10**6), 10**6), st.booleans(), st.text(alphabet="xyz 19.", max_size=6), st.lists(st.integers(0, 9))
)


def _rendered(value: Any, how: int) -> Any:
    """``value`` as a model might write it: an integer also as a string or a float (the same under matching)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value, str(value), float(value)][how]
    return value


def _different(value: Any) -> Any:
    """A value that no tolerance makes equal to ``value``."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "q"
    return [*value, 99]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), args=st.dictionaries(_KEYS, _VALUES, min_size=1, max_size=6))
def test_argument_matching_ignores_key_order_and_number_types(data: st.DataObject, args: dict[str, Any]) -> None:
    wanted = data.draw(st.lists(st.sampled_from(sorted(args)), min_size=1, unique=True))
    order = data.draw(st.permutations(sorted(args)))
    hows = data.draw(st.lists(st.integers(0, 2), min_size=len(order), max_size=len(order)))
    raw = json.dumps({k: _rendered(args[k], how) for k, how in zip(order, hows, strict=True)})
    row = replay_row(calls=[call("think", {"thought": "first"}), call("f", raw=raw)])
    expected = {k: args[k] for k in wanted}
    assert outcome(Check(name="called", tool_called="f", arguments=expected), row) == (True, "")
    assert outcome(Check(name="never", tool_not_called="f", arguments=expected), row)[0] is False

    # one wanted value changed: the call no longer matches
    changed = data.draw(st.sampled_from(wanted))
    other = {**expected, changed: _different(args[changed])}
    assert outcome(Check(name="called", tool_called="f", arguments=other), row)[0] is False
    assert outcome(Check(name="never", tool_not_called="f", arguments=other), row) == (True, "")


# -- predicates ---------------------------------------------------------------------------------------------------


def fewer_than_three_calls(turn: CheckedTurn) -> bool:
    """A predicate as a config file would name it."""
    return len(turn.tool_calls) < 3


def same_calls_as_production(turn: CheckedTurn) -> bool | None:
    if turn.recorded is None:
        return None
    return [c.name for c in turn.tool_calls] == [c.name for c in turn.recorded.tool_calls]


def test_a_predicate_gets_the_turn_rebuilt_its_row_and_productions_turn() -> None:
    seen: list[CheckedTurn] = []

    def look(turn: CheckedTurn) -> bool:
        seen.append(turn)
        return True

    rows = [
        replay_row("recorded", texts=["Checking."], calls=[call("get_user_details", {"user_id": "mia"})]),
        {
            **replay_row(
                "candidate", texts=["On it."], calls=[call("get_user_details", {"user_id": "mia"})], final="Done."
            ),
            "model": "simulated:cand",
        },
    ]
    assert [r.passed for r in results([Check(name="look", predicate=look)], rows)] == [True]
    [turn] = seen
    assert isinstance(turn.output, TurnOutput)
    assert turn.output.final_text == "Done."
    assert [c.parsed_arguments for c in turn.tool_calls] == [{"user_id": "mia"}]
    assert turn.text == "On it.\nDone."
    assert (turn.side, turn.pair_id, turn.conversation_id, turn.row["model"]) == (
        "candidate",
        "c#0",
        "c",
        "simulated:cand",
    )
    assert turn.recorded is not None
    assert turn.recorded.texts == ("Checking.",)


def test_a_predicate_may_say_why_or_that_it_does_not_apply() -> None:
    row = replay_row(calls=[call("a"), call("b"), call("c")])
    assert outcome(Check(name="few", predicate=fewer_than_three_calls), row) == (False, "predicate returned False")
    assert outcome(Check(name="why", predicate=lambda t: (False, f"{len(t.tool_calls)} calls")), row) == (
        False,
        "3 calls",
    )
    assert outcome(Check(name="na", predicate=lambda t: None), row) == (None, "predicate: does not apply")
    assert outcome(Check(name="na", predicate=lambda t: (None, "no booking here")), row) == (None, "no booking here")
    assert outcome(Check(name="odd", predicate=lambda t: "yes"), row) == (None, "predicate returned str, not a bool")
    # no recorded row among these: the predicate decides what that means
    assert outcome(Check(name="same", predicate=same_calls_as_production), row)[0] is None


def test_a_raising_predicate_gives_none_with_the_exception_and_spares_the_other_checks() -> None:
    def broken(turn: CheckedTurn) -> bool:
        return 1 / len(turn.tool_calls) > 0

    rows = [replay_row(pair="c#0"), replay_row(pair="c#1", calls=[call("think")])]
    got = results([Check(name="broken", predicate=broken), Check(name="thinks", tool_called="think")], rows)
    assert [(r.pair_id, r.check, r.passed) for r in got] == [
        ("c#0", "broken", None),
        ("c#0", "thinks", False),
        ("c#1", "broken", True),
        ("c#1", "thinks", True),
    ]
    assert got[0].detail == "predicate raised ZeroDivisionError: division by zero"


def test_a_predicate_named_module_function_is_resolved_when_the_check_is_made() -> None:
    name = callable_name(fewer_than_three_calls)
    check = Check(name="few", predicate=name)
    assert check.predicate is fewer_than_three_calls
    with pytest.raises(ValidationError, match="check 'few': predicate 'no_such_module_xyz:f': cannot import"):
        Check(name="few", predicate="no_such_module_xyz:f")


# -- where a check applies ----------------------------------------------------------------------------------------


def test_recorded_rows_are_not_checked_and_failed_replays_say_nothing() -> None:
    rows = [
        replay_row("recorded", calls=[call("book_reservation")]),
        replay_row("baseline", calls=[call("book_reservation")]),
        replay_row("candidate", error="RateLimitError: 429 after 6 attempts", calls=[call("book_reservation")]),
    ]
    got = results([Check(name="booked", tool_called="book_reservation")], rows)
    assert [(r.side, r.passed, r.detail) for r in got] == [
        ("baseline", True, ""),
        ("candidate", None, "replay failed: RateLimitError: 429 after 6 attempts"),
    ]


def test_when_recorded_calls_restricts_a_check_to_the_turns_where_production_called_the_tool() -> None:
    check = Check(
        name="economy",
        tool_called="book_reservation",
        arguments={"cabin": "economy"},
        when_recorded_calls="book_reservation",
    )
    rows = [
        replay_row("recorded", "c#0", calls=[call("book_reservation", {"cabin": "economy"})]),
        replay_row("baseline", "c#0", calls=[call("book_reservation", {"cabin": "economy"})]),
        replay_row("candidate", "c#0", final="Shall I book it?"),
        replay_row("recorded", "c#1", final="Anything else?"),
        replay_row("baseline", "c#1", final="Anything else?"),
        replay_row("candidate", "c#2", final="Hello"),  # no recorded row for this pair
        replay_row("candidate", "c#3", error="timeout"),
        replay_row("recorded", "c#3", calls=[call("think")]),
    ]
    got = [(r.pair_id, r.side, r.passed, r.detail) for r in results([check], rows)]
    assert got == [
        ("c#0", "baseline", True, ""),
        ("c#0", "candidate", False, "book_reservation not called (no calls)"),
        ("c#1", "baseline", None, "not applicable: production did not call book_reservation"),
        ("c#2", "candidate", None, "not applicable: no recorded turn for this pair"),
        ("c#3", "candidate", None, "not applicable: production did not call book_reservation"),
    ]


# -- validation and configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"text_matches": "(unclosed"}, "check 'bad': text_matches '(unclosed' is not a valid regular expression"),
        ({"text_not_matches": "[a-"}, "check 'bad': text_not_matches '[a-' is not a valid regular expression"),
        ({"tool_called": "f", "arguments": {"n": "re:*"}}, "check 'bad': arguments['n'] '*' is not a valid regular"),
        ({}, "check 'bad' needs exactly one of text_matches, text_not_matches, tool_called, tool_not_called, predic"),
        ({"tool_called": "f", "text_matches": "x"}, "(found: text_matches, tool_called)"),
        ({"text_matches": "x", "arguments": {"a": 1}}, "check 'bad': arguments only go with tool_called or tool_not"),
        ({"tool_called": ""}, "tool_called"),
        ({"tool_called": "f", "severity": "high"}, "severity"),
    ],
)
def test_an_invalid_check_is_refused_with_a_message_naming_it(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        Check(name="bad", **fields)
    assert message in str(info.value)


@pytest.mark.parametrize("name", ["", "1st", "no refund", "check:x", "a/b"])
def test_check_names_are_identifier_like(name: str) -> None:
    with pytest.raises(ValidationError, match="name"):
        Check(name=name, tool_called="f")
    assert Check(name="no-refund_2", tool_called="f").name == "no-refund_2"


def test_check_names_must_be_unique_in_one_evaluation() -> None:
    with pytest.raises(ValueError, match=r"check names must be unique.*: booked"):
        check_results([Check(name="booked", tool_called="a"), Check(name="booked", tool_called="b")], [])
    assert check_results([], [replay_row()]).schema == CHECK_RESULTS_SCHEMA


ALL_KINDS = [
    Check(name="no_refund", description="never promises a refund", text_not_matches=r"(?i)\bwe will refund\b"),
    Check(name="greets", text_matches="(?i)hello|hi"),
    Check(
        name="economy",
        tool_called="book_reservation",
        arguments={"cabin": "economy", "passengers": 1, "flights": [{"flight_number": "HAT1"}], "date": "re:^2024-"},
        when_recorded_calls="book_reservation",
    ),
    Check(name="no_transfer", tool_not_called="transfer_to_human_agents"),
    Check(name="few_calls", predicate=fewer_than_three_calls),
]


@pytest.mark.parametrize("check", ALL_KINDS, ids=lambda c: c.name)
def test_a_check_round_trips_through_json(check: Check) -> None:
    data = json.loads(json.dumps(check.model_dump(mode="json")))
    assert Check.model_validate(data) == check
    if check.predicate is not None:
        assert data["predicate"] == f"{__name__}:fewer_than_three_calls"
    compact = check.model_dump(mode="json", exclude_defaults=True)  # what a config file would hold
    assert None not in compact.values()
    assert Check.model_validate(compact) == check


def test_checks_read_from_toml() -> None:
    text = f"""
[[checks]]
name = "no_refund"
text_not_matches = '(?i)\\bwe will refund\\b'

[[checks]]
name = "economy"
tool_called = "book_reservation"
arguments = {{ cabin = "economy", passengers = "re:^[12]$" }}
when_recorded_calls = "book_reservation"

[[checks]]
name = "few_calls"
predicate = "{__name__}:fewer_than_three_calls"
"""
    checks = [Check.model_validate(c) for c in tomllib.loads(text)["checks"]]
    assert checks[0].text_not_matches == r"(?i)\bwe will refund\b"
    assert checks[1].arguments == {"cabin": "economy", "passengers": "re:^[12]$"}
    assert checks[2].predicate is fewer_than_three_calls
    assert [c.kind for c in checks] == ["text_not_matches", "tool_called", "predicate"]


# -- rates and inputs ---------------------------------------------------------------------------------------------


def test_check_rates_count_failures_over_the_turns_where_a_check_said_something() -> None:
    rows = [
        replay_row("baseline", "c#0", calls=[call("think")]),
        replay_row("candidate", "c#0"),
        replay_row("baseline", "c#1", error="boom"),
        replay_row("candidate", "c#1", calls=[call("think")]),
        replay_row("candidate", "c#2", calls=[call("think")]),
    ]
    table = check_results([Check(name="no_think", tool_not_called="think"), Check(name="any", text_matches="")], rows)
    expected = {
        "baseline": {"no_think": CheckRate(1, 1), "any": CheckRate(0, 1)},
        "candidate": {"no_think": CheckRate(2, 3), "any": CheckRate(0, 3)},
    }
    assert check_rates(table) == expected
    assert check_rates([CheckResult(**r) for r in table.to_pylist()]) == expected
    assert check_rates(table.to_pylist()) == expected
    assert check_rates(table)["candidate"]["no_think"].rate == pytest.approx(2 / 3)
    assert CheckRate(0, 0).rate is None
    assert check_rates([]) == {}


def test_the_same_rows_give_the_same_results_in_any_form() -> None:
    rows = [
        replay_row("recorded", "c#0", calls=[call("book_reservation", {"cabin": "economy"})]),
        replay_row("baseline", "c#0", texts=["Booking."], calls=[call("book_reservation", {"cabin": "economy"})]),
        replay_row("candidate", "c#0", final="We will refund you."),
        replay_row("candidate", "c#1", error="boom"),
    ]
    checks = [
        Check(
            name="economy",
            tool_called="book_reservation",
            arguments={"cabin": "economy"},
            when_recorded_calls="book_reservation",
        ),
        Check(name="no_refund", text_not_matches="refund"),
    ]
    expected = check_results(checks, rows).to_pylist()
    assert len(expected) == 6
    table = pa.Table.from_pylist(rows)  # steps of an inferred shape, not the run's
    assert check_results(checks, table).to_pylist() == expected
    assert check_results(checks, duckdb.arrow(table)).to_pylist() == expected


# -- a real run ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_replays(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    """The replays of a small simulated run on four demo conversations; the candidate skips half its tool calls."""
    conversations, problems = demo_conversations().load()
    assert problems == []
    result = de.run(
        conversations=conversations[:4],
        baseline=de.Variant(model="simulated:base"),
        candidate=de.Variant(model="simulated:cand", provider_options={"skip_tool_rate": 0.5}),
        out=tmp_path_factory.mktemp("checks") / "r",
        progress=False,
    )
    table: pa.Table = result.table("replays")
    return table


def stored(table: pa.Table) -> dict[tuple[str, str], Replay]:
    """Each replay of the table as the store reads it back: the reference the checks are compared with."""
    replays = (TABLES["replays"].parse(row) for row in table.to_pylist())
    return {(r.pair_id, r.side): r for r in replays}


def test_checks_on_a_real_run_agree_with_the_stored_replays(run_replays: pa.Table) -> None:
    replays = stored(run_replays)
    checks = [
        Check(name="refund", text_matches="(?i)refund"),
        Check(name="no_refund", text_not_matches="(?i)refund"),
        Check(name="looks_up", tool_called="get_reservation_details"),
        Check(name="no_think", tool_not_called="think"),
        Check(name="economy", tool_called="update_reservation_flights", arguments={"cabin": "economy"}),
        Check(name="no_business", tool_not_called="update_reservation_flights", arguments={"cabin": "business"}),
        Check(
            name="looks_up_when", tool_called="get_reservation_details", when_recorded_calls="get_reservation_details"
        ),
        Check(name="same_calls", predicate=same_calls_as_production),
    ]

    def expected(check: str, replay: Replay) -> bool | None:
        text = "\n".join(replay.output.texts)
        calls = replay.output.tool_calls
        cabins = [c.parsed_arguments.get("cabin") for c in calls if c.name == "update_reservation_flights"]
        recorded = replays[(replay.pair_id, "recorded")].output.tool_calls
        return {
            "refund": re.search("(?i)refund", text) is not None,
            "no_refund": re.search("(?i)refund", text) is None,
            "looks_up": any(c.name == "get_reservation_details" for c in calls),
            "no_think": all(c.name != "think" for c in calls),
            "economy": "economy" in cabins,
            "no_business": "business" not in cabins,
            "looks_up_when": (
                any(c.name == "get_reservation_details" for c in calls)
                if any(c.name == "get_reservation_details" for c in recorded)
                else None
            ),
            "same_calls": [c.name for c in calls] == [c.name for c in recorded],
        }[check]

    got = results(checks, run_replays)
    checked = [r for r in replays.values() if r.side != "recorded"]
    assert len(got) == len(checks) * len(checked) > 0
    for r in got:
        replay = replays[(r.pair_id, r.side)]
        assert r.conversation_id == replay.conversation_id
        assert r.passed is expected(r.check, replay), (r, replay.output)
        assert (r.detail == "") is (r.passed is True), r
    rates = check_rates(got)
    # the candidate skips tool calls production made; the simulated baseline does not
    assert rates["candidate"]["looks_up_when"].failed > rates["baseline"]["looks_up_when"].failed == 0
    assert rates["candidate"]["same_calls"].failed > rates["baseline"]["same_calls"].failed
    assert {r.passed for r in got if r.check == "economy"} == {True, False}


def test_a_predicate_sees_exactly_the_turns_the_store_holds(run_replays: pa.Table) -> None:
    replays = stored(run_replays)
    mismatched: list[str] = []

    def as_stored(turn: CheckedTurn) -> bool:
        replay = replays[(turn.pair_id, turn.side)]
        recorded = replays[(turn.pair_id, "recorded")]
        if turn.output != replay.output or turn.recorded != recorded.output or turn.row["model"] != replay.model:
            mismatched.append(turn.pair_id)
        return True

    got = results([Check(name="as_stored", predicate=as_stored)], run_replays)
    assert {r.passed for r in got} == {True}
    assert mismatched == []


def test_many_chunks_and_batches_give_the_same_results_as_one_row_at_a_time(run_replays: pa.Table) -> None:
    # 200 copies of the run: the table has 200 chunks and its rows span several reading batches.
    big = pa.concat_tables([run_replays] * 200)
    checks = [
        Check(name="no_refund", text_not_matches="(?i)refund"),
        Check(
            name="looks_up_when", tool_called="get_reservation_details", when_recorded_calls="get_reservation_details"
        ),
    ]
    once = check_results(checks, run_replays).to_pylist()
    assert check_results(checks, big).to_pylist() == once * 200
    assert check_results(checks, big.combine_chunks()).to_pylist() == once * 200
    assert check_results(checks, run_replays.to_pylist()).to_pylist() == once


@pytest.mark.slow
def test_a_hundred_thousand_replay_rows_are_checked_in_seconds(run_replays: pa.Table) -> None:
    big = pa.concat_tables([run_replays] * (100_000 // run_replays.num_rows + 1)).combine_chunks()
    checks = [*ALL_KINDS[:4], Check(name="looks_up", tool_called="get_reservation_details")]
    start = time.process_time()
    table = check_results(checks, big)
    seconds = time.process_time() - start
    assert table.num_rows == len(checks) * big.num_rows * 2 // 3
    assert seconds < 20, seconds  # about 2 s on a laptop core; the bound only catches a change of complexity
