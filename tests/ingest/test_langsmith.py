"""LangSmith runs read as conversations: runs the real ``langsmith`` SDK posts (``wrap_openai``,
``wrap_anthropic`` around the real SDKs, talking to the fake provider servers) to a local LangSmith stand-in,
put back together as the API returns them and as ``Client.list_runs`` gives them, read back as the conversations
the agent had and replay with no error; LangChain's serialised messages read too (hand-built, and from a real
LangChain chat model traced by ``LangChainTracer``)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from email.parser import BytesParser
from email.policy import HTTP
from pathlib import Path
from typing import Any

import pytest

import delta_eval as de
from delta_eval.ingest.langsmith import FORMAT, runs_of_multipart
from delta_eval.ingest.traces import detect_trace_format
from delta_eval.schema import Conversation
from delta_eval.testing import FakeAnthropicServer, FakeOpenAIServer, JSONReply, Request
from delta_eval.testing.servers.http import FakeHTTPServer, Reply
from tests.ingest.traced_agents import (
    CLAUDE,
    MODEL,
    anthropic_call,
    canonical,
    openai_call,
    run_agent,
    tool_conversations,
)

langsmith = pytest.importorskip("langsmith")
# langsmith.wrappers imports a module of its own that warns it moved: the package's business, not this test's.
pytestmark = pytest.mark.filterwarnings("ignore:langsmith.wrappers._openai_agents is deprecated:DeprecationWarning")


class LangSmithStandIn(FakeHTTPServer):
    """What the SDK talks to instead of LangSmith: it keeps the multipart parts the SDK posts, and answers
    ``/runs/query`` (``Client.list_runs``) with the runs they make."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[tuple[str, bytes]] = []

    async def handle(self, request: Request) -> Reply:
        if request.path.endswith("/runs/multipart"):
            head = f"Content-Type: {request.headers['content-type']}\r\n\r\n".encode()
            message = BytesParser(policy=HTTP).parsebytes(head + request.body)
            for part in message.iter_parts():
                name = part.get_param("name", header="content-disposition")
                self.parts.append((str(name), part.get_payload(decode=True)))
            return JSONReply({}, status=202)
        if request.path.endswith("/runs/query"):
            return JSONReply({"runs": self.runs(), "cursors": {"next": None}})
        return JSONReply({})  # /info and the like: an empty answer, the SDK's defaults apply

    def runs(self) -> list[dict[str, Any]]:
        return runs_of_multipart(self.parts)


@pytest.fixture
def langsmith_server() -> Iterator[LangSmithStandIn]:
    with LangSmithStandIn() as server:
        yield server


def record(wire: str, convs: list[Conversation], server: LangSmithStandIn) -> dict[str, Any]:
    """Run ``convs`` through the real SDK of ``wire`` wrapped by LangSmith, one thread each; the messages of each
    run, by thread id."""
    import anthropic
    import openai
    from langsmith.wrappers import wrap_anthropic, wrap_openai

    client = langsmith.Client(api_url=server.url, api_key="ls-test-key")
    ran = {}
    fake_class = FakeOpenAIServer if wire == "openai" else FakeAnthropicServer
    with fake_class(recordings=convs) as fake:
        for conv in convs:
            extra: Any = {"client": client, "metadata": {"thread_id": f"{wire}-{conv.id}"}}
            with langsmith.tracing_context(enabled=True, client=client):
                if wire == "openai":
                    sdk = wrap_openai(openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0),
                                      tracing_extra=extra)  # fmt: skip
                    ran[f"{wire}-{conv.id}"] = run_agent(conv, openai_call(sdk, conv))
                else:
                    sdk = wrap_anthropic(anthropic.Anthropic(base_url=fake.url, api_key="k", max_retries=0),
                                         tracing_extra=extra)  # fmt: skip
                    ran[f"{wire}-{conv.id}"] = run_agent(conv, anthropic_call(sdk, conv))
                sdk.close()
    client.flush()
    client.cleanup()
    return ran


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
@pytest.mark.parametrize("shape", ["posted", "list_runs"])
def test_runs_the_sdk_posts_read_back_and_replay(
    wire: str, shape: str, langsmith_server: LangSmithStandIn, tau_conversations: list[Conversation], tmp_path: Path
) -> None:
    convs = tool_conversations(tau_conversations, 2)
    ran = record(wire, convs, langsmith_server)
    runs = langsmith_server.runs()
    assert len(runs) == sum(1 for c in convs for m in c.messages if m.role == "assistant")
    if shape == "list_runs":
        client = langsmith.Client(api_url=langsmith_server.url, api_key="ls-test-key")
        with warnings.catch_warnings():
            # Deprecated for client.runs.query (until 2027), still what exports are written with; same Run shape.
            warnings.simplefilter("ignore", DeprecationWarning)
            runs = [json.loads(r.json()) for r in client.list_runs(project_id="5a1b6c2e-0000-4000-8000-000000000001")]
        client.cleanup()
    path = write_jsonl(tmp_path / "runs.jsonl", runs)
    for fmt in ("langsmith", "auto"):
        source = de.read_conversations(path, message_format=fmt, metadata={"model": "extra.metadata.ls_model_name"})  # type: ignore[arg-type]
        good, bad = source.load()
        assert bad == []
        assert [c.id for c in good] == [f"{wire}-{c.id}" for c in convs]
        for conv, original in zip(good, convs, strict=True):
            assert canonical(conv.messages) == canonical(ran[conv.id])
            assert len(conv.calls) == sum(1 for m in original.messages if m.role == "assistant")
            assert [t.parameters for t in conv.tools] == [t.parameters for t in original.tools]
            assert conv.metadata == {"model": MODEL if wire == "openai" else CLAUDE}
    fake_class = FakeOpenAIServer if wire == "openai" else FakeAnthropicServer
    with fake_class(recordings=good) as fake:
        options = {"base_url": fake.base_url if wire == "openai" else fake.url, "api_key": "k"}
        model = f"{wire}:{MODEL if wire == 'openai' else CLAUDE}"
        result = de.run(
            conversations=de.read_conversations(path, message_format="langsmith"),
            baseline=de.Variant(model=model, provider_options=options),
            candidate=de.Variant(model=model, provider_options=options),
            out=tmp_path / "run",
        )
    assert result.counts.errors == 0
    assert result.counts.pairs > 0


def lc(kind: str, **kwargs: Any) -> dict[str, Any]:
    """A LangChain message as ``langchain_core.load.dumpd`` serialises it."""
    return {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", kind], "kwargs": kwargs}


LOOKUP = {"type": "function", "function": {"name": "lookup", "description": "Find an order.",
          "parameters": {"type": "object", "properties": {"order": {"type": "string"}}}}}  # fmt: skip


def langchain_runs() -> list[dict[str, Any]]:
    """Two calls of a LangChain chat model in one thread, as LangSmith records them: ``messages`` as a batch of
    serialised messages, the answer in ``generations``, the tools in ``extra.invocation_params``."""
    system, user = lc("SystemMessage", content="Be brief."), lc("HumanMessage", content="Where is order 7?")
    call = lc("AIMessage", content="", tool_calls=[{"name": "lookup", "args": {"order": "7"}, "id": "c1",
                                                    "type": "tool_call"}])  # fmt: skip
    result = lc("ToolMessage", content="shipped", tool_call_id="c1")
    answer = lc("AIMessage", content=[{"type": "text", "text": "It has shipped."}])
    extra = {"invocation_params": {"model": "gpt-4.1", "tools": [LOOKUP]}, "metadata": {"thread_id": "th-7"}}
    return [
        {"id": "r1", "run_type": "llm", "trace_id": "t1", "start_time": "2026-01-01T00:00:00Z", "extra": extra,
         "inputs": {"messages": [[system, user]]}, "outputs": {"generations": [[{"text": "", "message": call}]]}},
        {"id": "r0", "run_type": "chain", "trace_id": "t1", "start_time": "2026-01-01T00:00:00Z", "inputs": {}},
        {"id": "r2", "run_type": "llm", "trace_id": "t2", "start_time": "2026-01-01T00:00:05Z", "extra": extra,
         "inputs": {"messages": [[system, user, call, result]]},
         "outputs": {"generations": [[{"text": "It has shipped.", "message": answer}]]}},
    ]  # fmt: skip


def test_langchain_serialised_runs_read_as_one_thread(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "runs.jsonl", langchain_runs()[::-1])
    [conv], bad = de.read_conversations(path, message_format="auto").load()
    assert bad == []
    assert conv.id == "th-7"
    assert [(m.role, m.content) for m in conv.messages] == [
        ("system", "Be brief."), ("user", "Where is order 7?"), ("assistant", None), ("tool", "shipped"),
        ("assistant", "It has shipped.")]  # fmt: skip
    assert conv.messages[2].tool_calls[0].arguments == '{"order": "7"}'
    assert [t.name for t in conv.tools] == ["lookup"]


def test_a_parquet_export_keeping_fields_as_json_text_reads(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{k: json.dumps(v) if isinstance(v, dict) else v for k, v in r.items()} for r in langchain_runs()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "runs.parquet")
    [conv], bad = de.read_conversations(tmp_path / "runs.parquet", message_format="langsmith").load()
    assert bad == []
    assert len(conv.calls) == 2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"inputs": {"messages": [[{"role": "robot", "content": "x"}]]}}, "inputs.messages[0].role"),
        ({"inputs": "not an object"}, "inputs"),
        ({"inputs": {"other": 1}}, "inputs"),
        ({"extra": {"invocation_params": {"tools": [{"description": "no name"}]}}}, "extra.invocation_params.tools[0]"),
        ({"outputs": {"choices": [{"message": {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}}]}},
         "outputs.choices[0].message[0].tool_calls[0].id"),
    ],
)  # fmt: skip
def test_a_bad_run_is_an_error_naming_the_line_run_and_field(
    change: dict[str, Any], field: str, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "runs.jsonl", [langchain_runs()[0] | change, ["not a run"]])
    good, bad = de.read_conversations(path, message_format="langsmith").load()
    assert good == []
    assert [(e.source, e.record, e.field) for e in bad] == [(str(path), "line 1, run r1", field),
                                                            (str(path), "line 2", "")]  # fmt: skip


def test_runs_are_told_from_the_other_trace_formats() -> None:
    run = langchain_runs()[0]
    assert FORMAT.looks_like(run)
    assert detect_trace_format(run) == "langsmith"
    langfuse = {"type": "GENERATION", "traceId": "t", "startTime": "2026-01-01T00:00:00Z", "input": []}
    span = {"attributes": {"openinference.span.kind": "LLM"}, "context": {"trace_id": "0x1"}}
    otel = {"attributes": {"gen_ai.operation.name": "chat"}, "context": {"trace_id": "0x1"}}
    assert not any(FORMAT.looks_like(r) for r in (langfuse, span, otel, {"messages": []}))


def test_runs_of_a_real_langchain_chat_model_read_back_and_replay(
    langsmith_server: LangSmithStandIn, tau_conversations: list[Conversation], tmp_path: Path
) -> None:
    pytest.importorskip("langchain_openai")
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tracers import LangChainTracer
    from langchain_openai import ChatOpenAI

    from delta_eval.adapters.openai_chat import encode_tools
    from delta_eval.schema import Message, ToolCall

    def langchain(history: list[Message]) -> list[BaseMessage]:
        out: list[BaseMessage] = []
        for m in history:
            if m.role == "assistant":
                calls = [{"name": c.name, "args": c.parsed_arguments, "id": c.id} for c in m.tool_calls]
                out.append(AIMessage(content=m.content or "", tool_calls=calls))
            elif m.role == "tool":
                out.append(ToolMessage(content=m.content or "", tool_call_id=m.tool_call_id or ""))
            else:
                out.append((SystemMessage if m.role == "system" else HumanMessage)(content=m.content or ""))
        return out

    [conv] = tool_conversations(tau_conversations, 1)
    client = langsmith.Client(api_url=langsmith_server.url, api_key="ls-test-key")
    tracer = LangChainTracer(client=client, project_name="agents")
    with FakeOpenAIServer(recordings=[conv]) as fake:
        model = ChatOpenAI(model=MODEL, base_url=fake.base_url, api_key="k", max_retries=0).bind_tools(
            encode_tools(conv.tools)
        )

        def call(history: list[Message]) -> Message:
            answer = model.invoke(langchain(history), config={"callbacks": [tracer],
                                                              "metadata": {"thread_id": "lc-1"}})  # fmt: skip
            calls = tuple(ToolCall(id=c["id"] or "", name=c["name"], arguments=json.dumps(c["args"]))
                          for c in answer.tool_calls)  # fmt: skip
            return Message(role="assistant", content=str(answer.content) or None, tool_calls=calls)

        ran = run_agent(conv, call)
    tracer.wait_for_futures()
    client.flush()
    client.cleanup()
    path = write_jsonl(tmp_path / "runs.jsonl", langsmith_server.runs())
    [read], bad = de.read_conversations(path, message_format="auto").load()
    assert bad == []
    assert read.id == "lc-1"
    assert canonical(read.messages) == canonical(ran)
    assert [t.name for t in read.tools] == [t.name for t in conv.tools]
    with FakeOpenAIServer(recordings=[read]) as fake:
        variant = de.Variant(model=f"openai:{MODEL}", provider_options={"base_url": fake.base_url, "api_key": "k"})
        result = de.run(conversations=[read], baseline=variant, candidate=variant, out=tmp_path / "run")
    assert result.counts.errors == 0
    assert result.counts.pairs > 0


def test_a_record_that_is_no_run_is_an_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "runs.jsonl", [*langchain_runs(), {"id": "x", "messages": []}])
    good, bad = de.read_conversations(path, message_format="langsmith").load()
    assert len(good) == 1
    assert [(e.record, e.field) for e in bad] == [("line 4", "run_type")]
