"""Stored rows derive from the schema types: whatever a run writes to Parquet reads back as the object it was."""

from __future__ import annotations

import hashlib
import tempfile
from datetime import UTC
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from delta_eval.schema import (
    ErrorRecord,
    Judgement,
    Message,
    ReasoningState,
    Replay,
    SampledConversation,
    SimulatorCall,
    Step,
    Stratum,
    ToolCall,
    ToolResult,
    ToolSpec,
    TurnOutput,
    Usage,
    Verdict,
)
from delta_eval.store.conversation_key import conversation_key
from delta_eval.store.derived import DERIVED_FROM
from delta_eval.store.folder import RunFolder
from delta_eval.store.media import StoredMedia
from delta_eval.store.tables import SCHEMAS, TABLES
from delta_eval.store.tallies import TALLIES, tally

text = st.text(max_size=12)
counts = st.integers(min_value=0, max_value=2**40)
reals = st.floats(allow_nan=False, allow_infinity=False, width=64)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | reals | text,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(text, kids, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(text, json_values, max_size=3)
usages = st.builds(Usage, **dict.fromkeys(Usage.model_fields, counts))
calls = st.builds(ToolCall, id=text, name=text, arguments=text)
results = st.builds(ToolResult, call_id=text, name=text, content=text, source=st.sampled_from(["recorded", "custom"]))
steps = st.builds(
    Step, text=st.none() | text, tool_calls=st.lists(calls, max_size=2).map(tuple),
    tool_results=st.lists(results, max_size=2).map(tuple),
)  # fmt: skip
outputs = st.builds(TurnOutput, steps=st.lists(steps, max_size=2).map(tuple), final_text=st.none() | text)
replays = st.builds(
    Replay, pair_id=text, conversation_id=text, turn_index=counts, side=st.sampled_from(["baseline", "candidate"]),
    variant=text, model=text, output=outputs, finish_reason=text, hit_tool_cap=st.booleans(), usage=usages,
    cost_usd=st.none() | reals, latency_ms=reals, ttft_ms=st.none() | reals, model_calls=counts, cached_calls=counts,
    served_model=st.none() | text, request_ids=st.lists(text, max_size=2).map(tuple), error=st.none() | text,
    error_type=st.none() | text,
)  # fmt: skip
verdicts = st.builds(
    Verdict, pair_id=text, conversation_id=text, turn_index=counts,
    stage=st.sampled_from(["deterministic", "equivalence", "judge", "error"]),
    outcome=st.sampled_from(["equivalent", "candidate", "baseline", "tie", "error"]), confidence=st.none() | reals,
    reasoning=text, judge=text, candidate_position=st.sampled_from([None, "A", "B", "both"]), stratum=text,
    weight=reals, judge_usage=usages, judge_cost_usd=st.none() | reals, judge_latency_ms=reals,
    error=st.none() | text, details=json_objects,
)  # fmt: skip
judgements = st.builds(
    Judgement, pair_id=text, conversation_id=text, turn_index=counts, stage=st.sampled_from(["equivalence", "judge"]),
    judge=text, candidate_position=st.sampled_from(["A", "B"]), answer=text,
    outcome=st.sampled_from([None, "equivalent", "candidate", "baseline", "tie"]), confidence=st.none() | reals,
    reasoning=text, raw=json_objects, usage=usages, cost_usd=st.none() | reals, latency_ms=reals,
    error=st.none() | text,
)  # fmt: skip
simulator_calls = st.builds(
    SimulatorCall, pair_id=text, conversation_id=text, turn_index=counts,
    side=st.sampled_from(["baseline", "candidate"]), role=st.sampled_from(["user_simulator", "tool_simulator"]),
    model=text, purpose=text, request_key=text, cached=st.booleans(), usage=st.none() | usages,
    cost_usd=st.none() | reals, latency_ms=reals, answered_at=st.datetimes(timezones=st.just(UTC)),
)  # fmt: skip
errors = st.builds(
    ErrorRecord, stage=st.sampled_from(["ingest", "sample", "replay", "judge", "run"]), message=text, source=text,
    record=text, field=text, conversation_id=st.none() | text, pair_id=st.none() | text, error_type=text,
    attempts=counts, at=st.datetimes(timezones=st.just(UTC)),
)  # fmt: skip
messages = st.builds(
    Message, role=st.sampled_from(["system", "user", "assistant", "tool"]), content=st.none() | text,
    tool_calls=st.lists(calls, max_size=2).map(tuple), tool_call_id=st.none() | text, name=st.none() | text,
    reasoning=st.none() | st.builds(ReasoningState, provider=text, data=json_values, summary=st.none() | text),
)  # fmt: skip
conversations = st.builds(
    SampledConversation, conversation_id=text, source=text, record=text, position=counts, stratum=text, weight=reals,
    n_messages=counts, n_turns=counts, n_pairs=counts, metadata=json_objects,
    messages=st.lists(messages, max_size=3).map(tuple),
    tools=st.lists(st.builds(ToolSpec, name=text, description=text, parameters=json_objects), max_size=2).map(tuple),
)  # fmt: skip
strata = st.builds(Stratum, stratum=text, population=counts, sampled=counts, weight=reals)
media = st.builds(
    StoredMedia, sha256=st.text("0123456789abcdef", min_size=64, max_size=64),
    kind=st.sampled_from(["image", "file", "audio"]), media_type=text, data=text,
)  # fmt: skip

BY_DATASET: dict[str, Any] = {
    "replays": replays,
    "verdicts": verdicts,
    "judgements": judgements,
    "simulator_calls": simulator_calls,
    "errors": errors,
    "conversations": conversations,
    "strata": strata,
    "media": media,
}


def test_every_dataset_has_a_strategy_here() -> None:
    # but the derived datasets (never added)
    assert set(BY_DATASET) | set(DERIVED_FROM) == set(TABLES)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_what_is_written_reads_back_as_it_was(data: st.DataObject) -> None:
    written: dict[str, list[BaseModel]] = {
        name: data.draw(st.lists(strategy, min_size=1, max_size=3), label=name) for name, strategy in BY_DATASET.items()
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = RunFolder(Path(tmp))
        for name, objs in written.items():
            folder.add(name, objs)
        folder.commit()
        for name, objs in written.items():
            table = folder.read(name)
            assert table.schema == SCHEMAS[name]
            assert [TABLES[name].parse(row) for row in table.to_pylist()] == objs
        # the verdicts' tallies written with them, counting each one
        tallies = folder.read(TALLIES)
        assert tallies.schema == SCHEMAS[TALLIES]
        assert tallies.equals(tally(TABLES["verdicts"].to_arrow(written["verdicts"])))
        assert sum(tallies.column("n").to_pylist()) == len(written["verdicts"])


def test_layout_users_query_by() -> None:
    # the flat columns SQL over a run relies on, and the nested steps
    replays = SCHEMAS["replays"]
    for column in ("pair_id", "side", "final_text", "input_tokens", "cache_write_tokens", "cost_usd", "n_tool_calls"):
        assert column in replays.names
    call = replays.field("steps").type.value_type.field("tool_calls").type.value_type
    assert call.field("arguments_valid").type == pa.bool_()
    assert {"judge_input_tokens", "judge_cost_usd", "details"} <= set(SCHEMAS["verdicts"].names)
    assert SCHEMAS["verdicts"].field("details").type == pa.string()  # JSON text
    assert SCHEMAS["conversations"].field("messages").type == pa.string()
    assert SCHEMAS["errors"].field("at").type == pa.timestamp("us", tz="UTC")


def test_verdicts_carry_their_conversations_key() -> None:
    # a function of the id alone (the same in every process, shard and resumed run); none without a conversation
    verdicts = TABLES["verdicts"]
    row = verdicts.row(Verdict(pair_id="c#0", conversation_id="c", turn_index=0, stage="judge", outcome="tie"))
    assert SCHEMAS["verdicts"].field("conversation_key").type == pa.int64()
    digest = hashlib.blake2b(b"c", digest_size=8).digest()
    assert row["conversation_key"] == conversation_key("c") == int.from_bytes(digest, "little", signed=True)
    assert conversation_key("") is None
    assert conversation_key("c") != conversation_key("d")
