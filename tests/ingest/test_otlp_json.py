"""OTLP/JSON lines decoded into structs (:mod:`delta_eval.ingest.otlp_json`) read exactly as the same lines parsed
as generic JSON: the same calls, labels, fields and errors, whatever shape the line has."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from delta_eval.exceptions import RecordError
from delta_eval.ingest import otel_genai
from delta_eval.ingest.otlp_json import ExportRecord, decode_line
from delta_eval.ingest.readers import parse_json
from delta_eval.ingest.traces import TracedCall
from delta_eval.schema import Conversation, Message
from delta_eval.testing.exports import otlp_documents
from tests.ingest.test_otel_genai import skill_switch_export


def _kv(key: str, value: Any) -> dict[str, Any]:
    return {"key": key, "value": value}


_CHAT = [
    _kv("gen_ai.operation.name", {"stringValue": "chat"}),
    _kv("gen_ai.input.messages", {"stringValue": '[{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]'}),
    _kv("gen_ai.output.messages", {"stringValue": '[{"role": "assistant", "parts": [{"type": "text", "content": '
                                                  '"hello"}], "finish_reason": "stop"}]'}),
]  # fmt: skip


def _doc(*spans: Any, resource: Any = None, **extra: Any) -> dict[str, Any]:
    rs: dict[str, Any] = {"scopeSpans": [{"scope": {"name": "x"}, "spans": list(spans)}]}
    if resource is not None:
        rs["resource"] = resource
    return {"resourceSpans": [rs], **extra}


def _span(span_id: str, *attributes: Any, **fields: Any) -> dict[str, Any]:
    return {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": span_id, "name": "chat gpt-4o",
            "startTimeUnixNano": "1700000000000000000", "attributes": [*_CHAT, *attributes], **fields}  # fmt: skip


def _conversation() -> Conversation:
    return Conversation(id="c1", messages=(Message(role="system", content="Be brief."),
                                           Message(role="user", content="hi"), Message(role="assistant",
                                                                                       content="hello")))  # fmt: skip


LINES = [
    json.dumps(skill_switch_export()),
    json.dumps(skill_switch_export(), separators=(",", ":")),
    *(json.dumps(d) for d in otlp_documents([_conversation()])),
    json.dumps(
        _doc(
            _span(
                "00000000000000a1",
                _kv("n", {"intValue": "3"}),
                _kv("b", {"boolValue": True}),
                _kv("d", {"doubleValue": "1.5"}),
                _kv("xs", {"arrayValue": {"values": [{"intValue": 1}]}}),
                _kv("kv", {"kvlistValue": {"values": [_kv("a", {"stringValue": "b"})]}}),
                _kv("raw", {"bytesValue": "aGk="}),
                _kv("empty", {}),
                _kv("none", None),
                _kv("gen_ai.conversation.id", {"stringValue": "c-9"}),
            ),
            resource={"attributes": [_kv("service.name", {"stringValue": "svc"})]},
        )
    ),
    json.dumps(_doc(_span("00000000000000a2", _kv("two", {"stringValue": "a", "intValue": "1"})))),
    json.dumps(_doc(_span("00000000000000a3", _kv("n", {"intValue": "many"})))),
    json.dumps(_doc(_span("00000000000000a4", _kv("x", {"hologram": 1})))),
    json.dumps(_doc(_span("00000000000000a5"), resource={"attributes": [_kv("bad", {"doubleValue": "x"})]})),
    json.dumps(_doc(_span("00000000000000a6"), resource={})),
    json.dumps(_doc(_span("00000000000000a7", events=[{"name": "other", "timeUnixNano": "5"}]))),
    json.dumps(_doc(_span("00000000000000a8", spanId=None))),
    json.dumps(_doc({**_span("00000000000000a9"), "attributes": [["k", "v"], *_CHAT]})),
    json.dumps(_doc({**_span("00000000000000aa"), "attributes": [{"value": {"stringValue": "no key"}}, *_CHAT]})),
    json.dumps(_doc({**_span("00000000000000ab"), "attributes": [{"key": 7, "value": {}}, *_CHAT]})),
    json.dumps(_doc({**_span("00000000000000ac"), "attributes": [_kv("s", "plain"), *_CHAT]})),
    json.dumps(_doc({**_span("00000000000000ad"), "startTimeUnixNano": "2023-11-14T22:13:20Z"})),
    json.dumps(_doc({**_span("00000000000000ae"), "attributes": None})),
    json.dumps(_doc(_span("00000000000000af", _kv("gen_ai.input.messages", {"stringValue": "[{not json"})))),
    json.dumps(_doc(_span("00000000000000b0"), resourceLogs=[{"scopeLogs": [{"logRecords": [{"spanId": "1"}]}]}])),
    json.dumps(_doc(7)),
    json.dumps({"resourceSpans": [1]}),
    json.dumps({"resourceSpans": None}),
    json.dumps({"resourceSpans": [{"scopeSpans": None, "resource": None}]}),
    json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": None}]}]}),
    json.dumps({"resourceSpans": [{"resource": []}]}),
    json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [7]}]}]}),
    '  {"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "01", "doubleValue": NaN}]}]}]}',
    json.dumps(_doc(_span("00000000000000b1")))[:-1],  # cut short: not JSON
    '{"spanId": "eee19b7ec3c1b174", "traceId": "5b8efff798038103d269b633813fc60c", "attributes": {}}',
    "[1, 2]",
    # A key given twice: the last one counts, as json has it.
    json.dumps(_doc(_span("00000000000000b2")))[:-1] + ', "resourceSpans": null}',
    json.dumps(_doc(_span("00000000000000b3"))).replace('"name": "chat gpt-4o"', '"name": "a", "name": "b"'),
]


def _item(item: TracedCall | RecordError) -> Any:
    if isinstance(item, RecordError):
        return ("error", item.source, item.record, item.field, item.reason)
    return (item.conversation, item.order, item.label, item.call, dict(item.fields))


def _read(record: Any) -> list[Any]:
    return [_item(i) for i in otel_genai.calls([("line 1", record)], "s.jsonl")]


def _parsed(line: str) -> tuple[Any, str | None]:
    try:
        return parse_json(line), None
    except ValueError as exc:
        return None, str(exc)


@pytest.mark.parametrize("line", LINES)
def test_a_line_decoded_into_structs_reads_as_the_line_parsed(line: str) -> None:
    parsed, error = _parsed(line)
    if error is not None:  # not JSON: the decoder raises the same error
        with pytest.raises(ValueError, match=re.escape(error)):
            decode_line(line.encode())
        return
    record = decode_line(line.encode())
    assert _read(record) == _read(parsed)
    if isinstance(record, ExportRecord):  # everything else that looks at the record sees the parsed JSON
        assert dict(record) == parsed


def test_the_usual_export_line_is_decoded_into_structs() -> None:
    assert isinstance(decode_line(LINES[0].encode()), ExportRecord)
    assert isinstance(decode_line(LINES[1].encode()), ExportRecord)
    flat_span = next(line for line in LINES if line.startswith('{"spanId"'))
    assert not isinstance(decode_line(flat_span.encode()), ExportRecord)
