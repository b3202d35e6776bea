"""Ingest speed and memory: OpenTelemetry GenAI spans (OTLP/JSON, as the Collector's file exporter writes them)
against the plain OpenAI-chat JSONL reader on the same conversations, measured in the same run.

The synthetic agent makes ``--calls`` model calls per conversation (a question, a tool round, an answer, a second
question and answer...), each a ``chat`` span with the current attributes (``gen_ai.input.messages`` holding the
whole history sent, as agents send it); an ``execute_tool`` span follows each tool call, as the instrumentation
writes it, and is skipped. Spans are written 100 to a line, interleaving conversations like a batch processor
fed by concurrent agents does. The baseline is each conversation's messages as one OpenAI-chat record.

Each reading runs in a child process of its own, so its peak RSS is its own. Printed: conversations per second and
peak RSS for each reader, at ``--spans`` model-call spans and at a quarter of that (memory that grows with the
source shows as the difference).

    python benchmarks/ingest.py                      # 100,000 model-call spans (25,000 conversations of 4 calls)
    python benchmarks/ingest.py --spans 20000        # smaller
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TOOLS = [{"type": "function", "name": "get_order", "description": "An order's status.",
          "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}]  # fmt: skip
SYSTEM = [{"type": "text", "content": "You are a support agent. Answer briefly."}]
BATCH = 100


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def conversation(k: int, calls: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The model calls of conversation ``k`` as ``(sent, answer)`` parts messages, and its OpenAI-chat messages."""
    chat: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM[0]["content"]}]
    history: list[dict[str, Any]] = []
    out = []
    turn = 0
    while len(out) < calls:
        turn += 1
        question = f"Conversation {k}, question {turn}: where is order {k}-{turn}?"
        history.append(_text("user", question))
        chat.append({"role": "user", "content": question})
        if len(out) + 2 <= calls:  # a tool round, then the answer
            call_id = f"call_{k}_{turn}"
            call = {"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": "get_order",
                                                    "arguments": {"order_id": f"{k}-{turn}"}}]}  # fmt: skip
            out.append((list(history), call))
            result = {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id,
                                                 "response": '{"status": "shipped"}'}]}  # fmt: skip
            history += [call, result]
            chat += [{"role": "assistant", "tool_calls": [{"id": call_id, "type": "function", "function": {
                "name": "get_order", "arguments": json.dumps({"order_id": f"{k}-{turn}"})}}]},
                     {"role": "tool", "tool_call_id": call_id, "content": '{"status": "shipped"}'}]  # fmt: skip
        answer = _text("assistant", f"Order {k}-{turn} shipped yesterday; it arrives tomorrow.")
        out.append((list(history), answer))
        history.append(answer)
        chat.append({"role": "assistant", "content": answer["parts"][0]["content"]})
    return [{"sent": s, "answer": a} for s, a in out], chat


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def _span(k: int, n: int, name: str, attrs: dict[str, Any]) -> dict[str, Any]:
    start = 1_700_000_000_000_000_000 + k * 1_000_000_000 + n * 1_000_000
    return {"traceId": f"{k:032x}", "spanId": f"{k * 64 + n:016x}", "name": name, "kind": 3,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 500_000),
            "attributes": [_attr(a, v) for a, v in attrs.items()], "status": {}}  # fmt: skip


def write_exports(folder: Path, spans: int, calls: int) -> tuple[Path, Path, int]:
    """The OTLP/JSON export and the chat JSONL of ``spans // calls`` conversations; their number."""
    n_conv = spans // calls
    otlp, chat = folder / f"otel-{spans}.jsonl", folder / f"chat-{spans}.jsonl"
    resource_ = {"attributes": [_attr("service.name", "support-agent")]}
    with otlp.open("w") as fo, chat.open("w") as fc:
        batch: list[dict[str, Any]] = []

        def flush() -> None:
            doc = {"resourceSpans": [{"resource": resource_, "scopeSpans": [
                {"scope": {"name": "opentelemetry.instrumentation.openai_v2"}, "spans": batch}]}]}  # fmt: skip
            fo.write(json.dumps(doc) + "\n")
            batch.clear()

        for k in range(n_conv):
            model_calls, messages = conversation(k, calls)
            fc.write(json.dumps({"id": f"{k:032x}", "messages": messages, "tools": TOOLS}) + "\n")
            for n, c in enumerate(model_calls):
                batch.append(_span(k, n, "chat gpt-4o", {
                    "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": "gpt-4o", "gen_ai.response.model": "gpt-4o-2024-08-06",
                    "gen_ai.usage.input_tokens": 120 + 40 * n, "gen_ai.usage.output_tokens": 20,
                    "gen_ai.system_instructions": json.dumps(SYSTEM), "gen_ai.tool.definitions": json.dumps(TOOLS),
                    "gen_ai.input.messages": json.dumps(c["sent"]),
                    "gen_ai.output.messages": json.dumps([{**c["answer"], "finish_reason": "stop"}])}))  # fmt: skip
                if c["answer"]["parts"][0]["type"] == "tool_call":
                    batch.append(_span(k, 32 + n, "execute_tool get_order", {
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_order"}))  # fmt: skip
                if len(batch) >= BATCH:
                    flush()
        if batch:
            flush()
    return otlp, chat, n_conv


def measure(path: str, fmt: str) -> dict[str, float]:
    """Read the whole source (in this process): conversations, errors, seconds, peak RSS."""
    import delta_eval as de

    source = de.read_conversations(path, message_format=fmt)  # type: ignore[arg-type]
    start = time.perf_counter()
    good = bad = 0
    for item in source:
        if isinstance(item, de.Conversation):
            good += 1
        else:
            bad += 1
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"conversations": good, "errors": bad, "seconds": seconds, "rss_mb": rss}


def in_child(path: Path, fmt: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--measure", str(path), fmt], check=True, capture_output=True,
                         text=True).stdout  # fmt: skip
    result: dict[str, float] = json.loads(out.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=100_000, help="model-call spans in the large export")
    parser.add_argument("--calls", type=int, default=4, help="model calls per conversation")
    parser.add_argument("--measure", nargs=2, metavar=("PATH", "FORMAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'spans':>8} {'convs':>7}  {'reader':<22} {'conv/s':>9} {'peak RSS MB':>12} {'MB/1k conv':>11}")
        for spans in (args.spans // 4, args.spans):
            otlp, chat, n_conv = write_exports(Path(tmp), spans, args.calls)
            for label, path, fmt in (("OpenAI chat JSONL", chat, "openai"), ("OTLP/JSON (otel)", otlp, "otel")):
                r = in_child(path, fmt)
                if (r["conversations"], r["errors"]) != (n_conv, 0):
                    raise SystemExit(f"{label}: read {r} of {n_conv} conversations")
                per_s = r["conversations"] / r["seconds"]
                print(f"{spans:>8} {n_conv:>7}  {label:<22} {per_s:>9,.0f} {r['rss_mb']:>12,.0f} "
                      f"{1000 * r['rss_mb'] / n_conv:>11,.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
