"""Langfuse observations read as conversations: the spans the real Langfuse SDK records (its OpenAI integration
around the real ``openai`` SDK, talking to the fake OpenAI server), and the public API's shapes of the same calls
(observations, a page of them, traces with their session), read back as the conversations the agent had and
replayed with no error.

The API shapes need a Langfuse server to produce; they are built here from the SDK's spans as the public API's
specification describes them (github.com/langfuse/langfuse, ``fern/apis/server/definition/observations.yml``:
``ObservationsView``; ``traces.yml``: ``TraceWithFullDetails``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import delta_eval as de
from delta_eval.ingest.langfuse import FORMAT
from delta_eval.ingest.traces import detect_trace_format
from delta_eval.schema import Conversation, Message
from delta_eval.testing import FakeOpenAIServer
from tests.ingest.traced_agents import MODEL, canonical, tool_conversations

pytest.importorskip("langfuse")
ROOT = Path(__file__).resolve().parents[2]


def record(convs: list[Conversation], tmp_path: Path) -> tuple[list[dict[str, Any]], dict[str, list[Message]]]:
    """The spans of running ``convs`` through the openai SDK traced by Langfuse (in a process of its own: the
    integration patches the SDK for good), one trace and session each; and the messages each run had."""
    convs_file = tmp_path / "convs.json"
    convs_file.write_text(json.dumps([c.model_dump(mode="json") for c in convs]))
    with FakeOpenAIServer(recordings=convs) as server:
        done = subprocess.run(
            [sys.executable, "-m", "tests.ingest.langfuse_agent", str(convs_file), server.base_url,
             str(tmp_path / "spans.jsonl")],
            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ran = {k: [Message.model_validate(m) for m in v] for k, v in json.loads(done.stdout.splitlines()[-1]).items()}
    spans = [json.loads(line) for line in (tmp_path / "spans.jsonl").read_text().splitlines()]
    return spans, ran


def api_observation(span: dict[str, Any]) -> dict[str, Any]:
    """A span of the Langfuse SDK as ``GET /api/public/observations`` returns the observation (``ObservationsView``:
    hex ids, the type in capitals, ISO times, input, output and parameters as JSON values)."""
    a = span["attributes"]

    def value(key: str) -> Any:
        raw = a.get(f"langfuse.observation.{key}")
        return json.loads(raw) if isinstance(raw, str) and raw[:1] in "[{" else raw

    return {
        "id": span["context"]["span_id"][2:], "traceId": span["context"]["trace_id"][2:],
        "type": a["langfuse.observation.type"].upper(), "name": span["name"],
        "startTime": span["start_time"], "endTime": span["end_time"], "completionStartTime": None,
        "parentObservationId": (span["parent_id"] or "")[2:] or None, "level": "DEFAULT", "statusMessage": None,
        "model": a.get("langfuse.observation.model.name"), "modelParameters": value("model.parameters"),
        "input": value("input"), "output": value("output"), "metadata": {}, "usageDetails": value("usage_details"),
        "version": None, "promptId": None,
    }  # fmt: skip


def api_traces(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The traces of ``spans`` as ``GET /api/public/traces/{id}`` returns each (``TraceWithFullDetails``)."""
    traces: dict[str, dict[str, Any]] = {}
    for s in spans:
        trace_id = s["context"]["trace_id"][2:]
        trace = traces.setdefault(trace_id, {"id": trace_id, "timestamp": s["start_time"], "observations": [],
                                             "scores": [], "tags": []})  # fmt: skip
        trace["sessionId"] = s["attributes"].get("session.id")
        trace["observations"].append(api_observation(s))
    return list(traces.values())


@pytest.fixture(scope="module")
def recorded(
    tau_conversations: list[Conversation], tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[Conversation], list[dict[str, Any]], dict[str, list[Message]]]:
    """Two tool conversations, the spans of running them once, and the messages each run had."""
    convs = tool_conversations(tau_conversations, 2)
    return convs, *record(convs, tmp_path_factory.mktemp("langfuse"))


@pytest.mark.parametrize("shape", ["sdk-spans", "observations", "page", "traces", "parquet"])
def test_generations_of_the_real_sdk_read_back_and_replay(
    shape: str, recorded: tuple[list[Conversation], list[dict[str, Any]], dict[str, list[Message]]], tmp_path: Path
) -> None:
    convs, spans, ran = recorded
    observations = [api_observation(s) for s in spans]
    path = tmp_path / "export.jsonl"
    if shape == "sdk-spans":
        path.write_text("".join(json.dumps(s) + "\n" for s in spans))
    elif shape == "observations":
        path.write_text("".join(json.dumps(o) + "\n" for o in observations))
    elif shape == "page":
        path = tmp_path / "export.json"
        path.write_text(json.dumps({"data": observations, "meta": {"page": 1, "limit": 100,
                                                                   "totalItems": len(observations)}}))  # fmt: skip
    elif shape == "traces":
        path = tmp_path / "export.json"
        path.write_text(json.dumps(api_traces(spans)))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp_path / "export.parquet"
        rows = [{k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in o.items()} for o in observations]
        pq.write_table(pa.Table.from_pylist(rows), path)
    by_trace = shape in ("observations", "page", "parquet")  # no session: the trace groups a conversation's calls
    for fmt in ("langfuse", "auto"):
        good, bad = de.read_conversations(path, message_format=fmt, metadata=["model"]).load()  # type: ignore[arg-type]
        assert bad == []
        assert len(good) == len(convs)
        for conv, original in zip(good, convs, strict=True):
            key = f"langfuse-{original.id}"
            assert (conv.id == key) is not by_trace
            assert canonical(conv.messages) == canonical(ran[key])
            assert len(conv.calls) == sum(1 for m in original.messages if m.role == "assistant")
            assert [t.parameters for t in conv.tools] == [t.parameters for t in original.tools]
            assert conv.metadata == {"model": MODEL}
    with FakeOpenAIServer(recordings=good) as server:
        variant = de.Variant(model=f"openai:{MODEL}", provider_options={"base_url": server.base_url, "api_key": "k"})
        result = de.run(conversations=de.read_conversations(path, message_format="langfuse"), baseline=variant,
                        candidate=variant, out=tmp_path / "run")  # fmt: skip
    assert result.counts.errors == 0
    assert result.counts.pairs > 0


def generation(**fields: Any) -> dict[str, Any]:
    base = {"id": "o1", "type": "GENERATION", "traceId": "t1", "startTime": "2026-01-01T00:00:00Z",
            "input": {"messages": [{"role": "user", "content": "hi"}], "tools": []},
            "output": {"role": "assistant", "content": "hello"}}  # fmt: skip
    return base | fields


def test_anthropic_and_langchain_spellings_read() -> None:
    anthropic = generation(input={"system": "Be brief.", "messages": [
        {"role": "user", "content": "where is 7?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": {"o": 7}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "shipped"}]}]},
        output={"role": "assistant", "content": [{"type": "text", "text": "Shipped."}]})  # fmt: skip
    langchain = generation(input=[{"role": "user", "content": "where is 7?"}],
                           output={"role": "assistant", "content": "", "tool_calls": [
                               {"id": "c1", "name": "lookup", "args": {"o": 7}, "type": "tool_call"}]})  # fmt: skip
    [a, b] = list(FORMAT.calls([("line 1", anthropic), ("line 2", langchain)], "s"))
    assert [m.role for m in a.call.input] == ["system", "user", "assistant", "tool"]
    assert a.call.output[0].content == "Shipped."
    assert b.call.output[0].tool_calls[0].arguments == '{"o": 7}'


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"input": {"prompt": "x"}}, "input"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": {"messages": [{"role": "user", "content": "x"}], "tools": [{"description": "no name"}]}},
         "input.tools[0]"),
        ({"output": {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}}, "output[0].tool_calls[0].id"),
    ],
)  # fmt: skip
def test_a_bad_generation_is_an_error_naming_the_line_observation_and_field(
    fields: dict[str, Any], field: str, tmp_path: Path
) -> None:
    path = tmp_path / "obs.jsonl"
    path.write_text(json.dumps(generation(**fields)) + "\n" + json.dumps(generation(type="SPAN")) + "\n[1]\n")
    good, bad = de.read_conversations(path, message_format="langfuse").load()
    assert good == []
    assert [(e.source, e.record, e.field) for e in bad] == [(str(path), "line 1, observation o1", field),
                                                            (str(path), "line 3", "")]  # fmt: skip


def test_observations_are_told_from_the_other_trace_formats() -> None:
    assert FORMAT.looks_like(generation())
    assert detect_trace_format(generation()) == "langfuse"
    run = {"run_type": "llm", "trace_id": "t", "inputs": {}, "type": "x", "start_time": "2026-01-01T00:00:00Z"}
    span = {"attributes": {"openinference.span.kind": "LLM"}, "context": {"trace_id": "0x1"}}
    otel = {"attributes": {"gen_ai.operation.name": "chat"}, "context": {"trace_id": "0x1"}}
    assert not any(FORMAT.looks_like(r) for r in (run, span, otel, {"messages": []}))


def test_a_record_that_is_no_observation_is_an_error_and_other_spans_pass(tmp_path: Path) -> None:
    other = {"context": {"trace_id": "0x1", "span_id": "0xb"}, "attributes": {"gen_ai.operation.name": "chat"}}
    path = tmp_path / "obs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [generation(), other, {"id": "x", "messages": []}]))
    good, bad = de.read_conversations(path, message_format="langfuse").load()
    assert len(good) == 1
    assert [(e.record, e.field) for e in bad] == [("line 3", "type")]
