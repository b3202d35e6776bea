from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from delta_eval.adapters.simulated_judge import behaviour, judge_answer
from delta_eval.calls import ModelRequest
from delta_eval.judges.base import PairView, SideView
from delta_eval.judges.prompts import (
    MAX_CHARS,
    Rubric,
    equivalence_instructions,
    pairwise_instructions,
    render_equivalence_pair,
    render_pairwise_pair,
)
from delta_eval.replay.points import replay_points
from delta_eval.schema import (
    Conversation,
    MediaPart,
    Message,
    ReplayPoint,
    Step,
    ToolCall,
    ToolResult,
    ToolSpec,
    TurnOutput,
)
from tests.conftest import tool_turn_conversation

POINT = next(iter(replay_points(tool_turn_conversation())))
TOOLS = (
    ToolSpec(
        name="get_reservation",
        description="Look a reservation up",
        parameters={"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
    ),
)
LOOKUP = ToolCall(id="x", name="get_reservation", arguments='{"id": "ABC123"}')
FOLLOWED = TurnOutput(
    steps=(
        Step(
            tool_calls=(LOOKUP,),
            tool_results=(ToolResult(call_id="x", name="get_reservation", content='{"flight": "HAT001"}'),),
        ),
    ),
    final_text="You are on flight HAT001.",
)
DIVERGED = TurnOutput(
    steps=(
        Step(
            text="Let me cancel that.",
            tool_calls=(ToolCall(id="y", name="cancel_reservation", arguments='{"id": "ABC123"}'),),
            tool_results=(ToolResult(call_id="y", name="cancel_reservation", content="not run", source="simulated"),),
        ),
    ),
    final_text="Your reservation is cancelled.",
)


def side(output: TurnOutput, system: str = "You are an airline agent.") -> SideView:
    messages = (Message(role="system", content=system), *POINT.context[1:])
    return SideView(output=output, request=ModelRequest(model="m", messages=messages, tools=TOOLS))


def test_stage2_sees_the_last_user_message_and_both_outputs_with_their_calls() -> None:
    text = render_equivalence_pair(PairView(point=POINT, a=side(FOLLOWED), b=side(DIVERGED)))
    assert "<last_user_message>\nWhat is my reservation ABC123?\n</last_user_message>" in text
    a = text.split("<output_a>")[1].split("</output_a>")[0]
    b = text.split("<output_b>")[1].split("</output_b>")[0]
    assert '[calls] get_reservation({"id": "ABC123"})' in a
    assert "[replies] You are on flight HAT001." in a
    assert "[says] Let me cancel that." in b
    assert "cancel_reservation" in b
    # stage 2 compares what the outputs do; it is not shown tool results, the tools or the system prompt
    assert "[result" not in text
    assert "<tools>" not in text
    assert "airline agent" not in text


def test_stage3_sees_the_whole_context_the_reference_and_the_results_each_output_got() -> None:
    text = render_pairwise_pair(PairView(point=POINT, a=side(FOLLOWED), b=side(DIVERGED)))
    tools = text.split("<tools>")[1].split("</tools>")[0]
    assert "get_reservation: Look a reservation up" in tools
    assert '"required": ["id"]' in tools  # the parameter schema, as the model saw it
    assert "<system_prompt>\nYou are an airline agent.\n</system_prompt>" in text
    assert "[user] What is my reservation ABC123?" in text.split("<conversation>")[1]
    reference = text.split("<reference>")[1].split("</reference>")[0]
    assert '[result] get_reservation: {"flight": "HAT001"}' in reference  # the recorded result
    b = text.split("<output_b>")[1]
    assert "[result, could not run] cancel_reservation: not run" in b
    assert "<reference>" not in render_pairwise_pair(
        PairView(point=POINT, a=side(FOLLOWED), b=side(DIVERGED)), reference=False
    )


# The same call as three provider wires return it: spaced, compact with other key order, pretty-printed.
WIRES = (
    '{"id": "ABC123", "party": {"adults": 2, "infants": 0}, "fare": 1.50}',
    '{"party":{"infants":0,"adults":2},"fare":1.50,"id":"ABC123"}',
    '{\n  "fare": 1.50,\n  "id": "ABC123",\n  "party": {\n    "adults": 2,\n    "infants": 0\n  }\n}',
)
SHOWN = '({"fare": 1.50, "id": "ABC123", "party": {"adults": 2, "infants": 0}})'


def looked_up(arguments: str) -> TurnOutput:
    call = ToolCall(id="x", name="get_reservation", arguments=arguments)
    return FOLLOWED.model_copy(update={"steps": (FOLLOWED.steps[0].model_copy(update={"tool_calls": (call,)}),)})


def recorded_with(arguments: str) -> list[ReplayPoint]:
    """The points of the test conversation, its recorded lookup call sent as ``arguments``."""
    conv = tool_turn_conversation()
    messages = list(conv.messages)
    messages[2] = Message(
        role="assistant", tool_calls=(ToolCall(id="call_1", name="get_reservation", arguments=arguments),)
    )
    return list(replay_points(Conversation(id=conv.id, messages=tuple(messages), metadata=conv.metadata)))


def test_judges_see_call_arguments_in_one_layout_whatever_the_wire() -> None:
    stage2, stage3 = set(), set()
    for a, b in itertools.product(WIRES, repeat=2):
        # Both outputs, the reference (the first point records the call) and the history (later points have it).
        for point in recorded_with(a):
            pair = PairView(point=point, a=side(looked_up(a)), b=side(looked_up(b)))
            stage2.add((point.message_index, render_equivalence_pair(pair)))
            stage3.add((point.message_index, render_pairwise_pair(pair)))
    points = len(recorded_with(WIRES[0]))
    assert points > 1
    assert len(stage2) == len(stage3) == points  # one text per point, whichever wires the calls came on
    first, *later = (text for _, text in sorted(stage3))
    for text in [first, *(text for _, text in stage2)]:
        a = text.split("<output_a>")[1].split("</output_a>")[0]
        assert f"[calls] get_reservation{SHOWN}" in a
        assert a == text.split("<output_b>")[1].split("</output_b>")[0]
    assert f"[calls] get_reservation{SHOWN}" in first.split("<reference>")[1]
    assert f"[assistant calls] get_reservation{SHOWN}" in later[0].split("<conversation>")[1]


def test_the_simulated_judge_no_longer_tells_wires_apart() -> None:
    # It compares [calls] lines as text and parses their arguments as JSON, as a model reads them.
    pair = PairView(point=POINT, a=side(looked_up(WIRES[0])), b=side(looked_up(WIRES[1])))
    schema = {"type": "object", "properties": {"equivalent": {"type": "boolean"}}}
    answer = json.loads(judge_answer(schema, render_equivalence_pair(pair), random.Random(0), 0.0))
    assert answer["equivalent"] is True
    line = f"get_reservation{SHOWN}"
    assert (
        behaviour([line], "", [line.replace("1.50", "2")]) == "called get_reservation with a different 'fare' argument"
    )


def test_differing_system_prompts_are_shown_per_output() -> None:
    pair = PairView(point=POINT, a=side(FOLLOWED, "Old prompt."), b=side(FOLLOWED, "New prompt."))
    text = render_pairwise_pair(pair)
    assert "<system_prompt_a>\nOld prompt.\n</system_prompt_a>" in text
    assert "<system_prompt_b>\nNew prompt.\n</system_prompt_b>" in text
    assert "<system_prompt>" not in text
    swapped = render_pairwise_pair(pair.swapped())
    assert "<system_prompt_a>\nNew prompt.\n</system_prompt_a>" in swapped


def test_a_huge_tool_result_is_cut_in_the_middle() -> None:
    huge = "x" * (3 * MAX_CHARS)
    out = TurnOutput(
        steps=(Step(tool_calls=(LOOKUP,), tool_results=(ToolResult(call_id="x", name="g", content=huge),)),)
    )
    text = render_pairwise_pair(PairView(point=POINT, a=side(out), b=side(FOLLOWED)))
    assert f"[… {2 * MAX_CHARS} characters cut …]" in text
    assert len(text) < 2 * MAX_CHARS


def test_a_rubric_names_its_dimensions_and_changes_the_prompt_hash(tmp_path: Path) -> None:
    default = Rubric.default()
    assert default.dimensions == ("task_success", "policy", "accuracy", "communication")
    path = tmp_path / "rubric.md"
    path.write_text(
        "# Refunds\nNever refund without a reason.\n\n## Dimensions\n- refunds: policy kept\n"
        "- `tone`: polite\n\n## Notes\n- not_a_dimension: ignored\n"
    )
    mine = Rubric.load(path)
    assert mine.dimensions == ("refunds", "tone")
    ours, theirs = pairwise_instructions(default), pairwise_instructions(mine)
    assert "Never refund without a reason." in theirs.text
    assert "Dimensions: refunds, tone." in theirs.text
    assert ours.hash != theirs.hash
    assert pairwise_instructions(mine, reference=False).hash != theirs.hash
    assert pairwise_instructions(mine).hash == theirs.hash  # stable
    # A rubric without a dimensions section is scored on the default dimensions.
    assert Rubric.parse("Be kind.").dimensions == default.dimensions
    with pytest.raises(ValueError, match="rubric file not found"):
        Rubric.load(tmp_path / "missing.md")


def test_the_instructions_are_the_package_files_without_their_version_comment() -> None:
    eq = equivalence_instructions().text
    assert eq.startswith("You compare two replies")
    assert "<!--" not in eq
    assert "<output_a>" in eq
    assert "{rubric}" not in pairwise_instructions(Rubric.default()).text


#: A 1x1 PNG.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def test_judges_see_media_as_placeholders_with_their_hash_never_the_bytes() -> None:
    image = MediaPart.from_base64("image", PNG, "image/png")
    chart = MediaPart.from_base64("image", PNG, "image/png", filename="chart.png")
    conv = Conversation(id="m", messages=(
        Message(role="user", content="Why was my bag refused?", media=(image,)),
        Message(role="assistant", tool_calls=(LOOKUP,)),
        Message(role="tool", tool_call_id="x", name="get_reservation", content="see chart", media=(chart,)),
        Message(role="assistant", content="It was too heavy."),
        Message(role="user", content="And this one?", media=(image,)),
        Message(role="assistant", content="That one is fine."),
    ))  # fmt: skip
    point = list(replay_points(conv))[-1]
    pair = PairView(point=point, a=SideView(output=FOLLOWED), b=SideView(output=DIVERGED))
    stage3, stage2 = render_pairwise_pair(pair), render_equivalence_pair(pair)
    shown = "[image image/png sha256:" + image.sha256[:12] + "]"
    assert shown == image.placeholder
    conversation = stage3.split("<conversation>")[1].split("</conversation>")[0]
    assert f"[user] {shown} Why was my bag refused?" in conversation
    assert f"[tool result] get_reservation: {shown} see chart" in conversation
    assert f"<last_user_message>\n{shown} And this one?\n</last_user_message>" in stage2
    for text in (stage3, stage2):
        assert PNG not in text
        assert PNG[:40] not in text
