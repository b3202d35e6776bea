from __future__ import annotations

import pytest

import delta_eval as de
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.replay import checks as checks_module
from delta_eval.replay.checks import check_output
from delta_eval.schema import Step, ToolCall, ToolSpec, TurnOutput

BOOK = ToolSpec(
    name="book",
    parameters={
        "type": "object",
        "properties": {"flight": {"type": "string"}, "seats": {"type": "integer", "minimum": 1}},
        "required": ["flight", "seats"],
        "additionalProperties": False,
    },
)


def calls(*pairs: tuple[str, str]) -> TurnOutput:
    return TurnOutput(steps=(Step(tool_calls=tuple(ToolCall(id=str(k), name=n, arguments=a)
                                                   for k, (n, a) in enumerate(pairs))),))  # fmt: skip


def test_every_kind_of_invalid_tool_call_is_counted_with_its_reason() -> None:
    out = calls(
        ("book", '{"flight": "HAT001", "seats": 2}'),  # fine
        ("book", '{"flight": "HAT001", "seats": 0, "meal": "veg"}'),  # two schema problems, one call
        ("book", "{not json"),
        ("book", "[1, 2]"),
        ("cancel", "{}"),
    )
    checks = check_output(out, (BOOK,), TurnOutput(final_text="ok"))
    assert checks.invalid_tool_calls == 4
    assert checks.tool_call_problems == (
        "book: arguments: Additional properties are not allowed ('meal' was unexpected)",
        "book: arguments.seats: 0 is less than the minimum of 1",
        "book: arguments are not a JSON object",
        "book: arguments are not a JSON object",
        "cancel: no such tool",
    )


def test_a_call_checked_before_is_not_validated_again_unless_its_schema_differs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    validated: list[str] = []
    validate = checks_module._validate

    def counting(call: ToolCall, validator: object) -> list[str]:
        validated.append(call.arguments)
        return validate(call, validator)

    monkeypatch.setattr(checks_module, "_validate", counting)
    arguments = '{"flight": "HAT404", "seats": 0}'
    for _ in range(3):  # the same call on both sides and again: validated once
        problems = check_output(calls(("book", arguments)), (BOOK,), TurnOutput(final_text="ok")).tool_call_problems
        assert problems == ("book: arguments.seats: 0 is less than the minimum of 1",)
    assert validated == [arguments]
    looser = ToolSpec(name="book", parameters={"type": "object"})  # another schema under the same name
    assert check_output(calls(("book", arguments)), (looser,), TurnOutput(final_text="ok")).invalid_tool_calls == 0
    assert validated == [arguments, arguments]


def test_agreement_with_the_recorded_action() -> None:
    recorded = calls(("book", '{"flight": "HAT001", "seats": 2}'))
    same = check_output(calls(("book", '{"seats": 2.0, "flight": "HAT001"}')), (BOOK,), recorded)
    assert (same.matches_recorded, same.text_instead_of_action) == (True, False)
    talked = check_output(TurnOutput(final_text="Shall I book it?"), (BOOK,), recorded)
    assert (talked.matches_recorded, talked.text_instead_of_action) == (False, True)
    other = check_output(calls(("book", '{"flight": "HAT002", "seats": 2}')), (BOOK,), recorded)
    assert (other.matches_recorded, other.text_instead_of_action) == (False, False)
    both_text = check_output(TurnOutput(final_text="Hello"), (BOOK,), TurnOutput(final_text="Hi"))
    assert both_text.matches_recorded is True
    acted = check_output(recorded, (BOOK,), TurnOutput(final_text="Hi"))
    assert acted.matches_recorded is False


def test_a_run_keeps_the_checks_on_each_replay_row(tmp_path: object) -> None:
    cfg = demo_config(tmp_path / "run", n=12, latency_ms=0.0, judges="rule")  # type: ignore[operator]
    con = de.run(cfg, conversations=demo_conversations()).connect()
    by_side = dict(
        con.execute(
            "SELECT side, avg(text_instead_of_action::INT) FROM replays WHERE side <> 'recorded' GROUP BY side"
        ).fetchall()
    )
    # the demo's candidate skips a recorded tool call 6% of the time
    assert by_side["candidate"] > 0
    changed = con.execute(
        "SELECT count(*) FROM replays WHERE side = 'candidate' AND NOT matches_recorded AND NOT text_instead_of_action"
    ).fetchone()[0]
    assert changed > 0  # changed arguments
