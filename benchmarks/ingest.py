"""Reading production formats: conversations per second for each reader, and peak memory as the source grows.

The same synthetic conversations (a system prompt, a question, a tool round, an answer, a follow-up and its answer:
seven messages, three model calls) are written in each format a source may hold, and read back through
``de.read_conversations`` one conversation at a time, as a run's sampling pass reads them. The baseline is the
plain OpenAI-chat JSONL reader on the same conversations, measured in the same run: each format's figure is also
given as a ratio to it. Trace formats hold one record per model call (three per conversation, each sending the whole
history as agents do), grouped back into conversations by the reader; OTLP JSON is written as the Collector's file
exporter writes it (100 spans to a line, concurrent conversations interleaved, ``execute_tool`` spans between).

Each (format, size) is read in a fresh process, so its peak RSS is its own; "memory flat" means the peak at the
large size is close to the peak at the small one (the ratio is printed). One core: the reader is single-threaded.

    python benchmarks/ingest.py                          # 100,000 records per format; 10,000 for the memory ratio
    python benchmarks/ingest.py --records 20000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import delta_eval as de
from delta_eval.adapters import anthropic, gemini, openai_chat, openai_responses
from delta_eval.schema import Conversation, Message, ToolCall, ToolSpec
from delta_eval.testing.exports import otlp_documents, trace_records

LOOKUP = ToolSpec(
    name="get_order",
    description="Look an order up by id.",
    parameters={"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
)


def conversation(i: int) -> Conversation:
    """The ``i``-th synthetic conversation: seven messages, one tool round, three model calls."""
    call = ToolCall(id=f"call_{i}", name="get_order", arguments=json.dumps({"order_id": f"A{i:07d}"}))
    return Conversation(
        id=f"conv-{i}",
        tools=(LOOKUP,),
        messages=(
            Message(role="system", content="You are the support agent of an online shop. Be brief and exact."),
            Message(role="user", content=f"Where is my order A{i:07d}? It was due on Monday."),
            Message(role="assistant", tool_calls=(call,)),
            Message(role="tool", tool_call_id=call.id, name="get_order",
                    content=json.dumps({"order_id": f"A{i:07d}", "status": "shipped", "eta": "2026-12-05"})),
            Message(role="assistant", content="It shipped and should arrive on December 5."),
            Message(role="user", content="Thanks! Can I change the address?"),
            Message(role="assistant", content="Not once it has shipped, sorry. The carrier can redirect it."),
        ),
    )  # fmt: skip


def _openai(conv: Conversation) -> Iterator[dict[str, Any]]:
    yield {"id": conv.id, "messages": openai_chat.encode_messages(conv.messages),
           "tools": openai_chat.encode_tools(conv.tools)}  # fmt: skip


def _anthropic(conv: Conversation) -> Iterator[dict[str, Any]]:
    system, messages = anthropic.encode_messages(conv.messages, "claude-sonnet-4-5")
    tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in conv.tools]
    yield {"id": conv.id, "system": system, "messages": messages, "tools": tools}


def _gemini(conv: Conversation) -> Iterator[dict[str, Any]]:
    system, contents = gemini.encode_contents(conv.messages, "gemini-2.5-flash")
    declarations = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in conv.tools]
    yield {"id": conv.id, "systemInstruction": {"parts": [{"text": system}]}, "contents": contents,
           "tools": [{"functionDeclarations": declarations}]}  # fmt: skip


def _responses(conv: Conversation) -> Iterator[dict[str, Any]]:
    instructions, items = openai_responses.encode_input(conv.messages, "gpt-4.1")
    yield {"id": conv.id, "instructions": instructions, "input": items,
           "tools": openai_responses.encode_tools(conv.tools)}  # fmt: skip


Writer = Callable[[TextIO, int], None]


def _write_records(records_of: Callable[[Conversation], Iterator[dict[str, Any]]]) -> Writer:
    """A writer of one JSON line per record, conversation after conversation."""

    def write(fh: TextIO, conversations: int) -> None:
        for i in range(conversations):
            for record in records_of(conversation(i)):
                fh.write(json.dumps(record, separators=(",", ":")) + "\n")

    return write


def _write_otlp(fh: TextIO, conversations: int) -> None:
    """OTLP/JSON as the Collector's file exporter writes it: 100 spans to a line, the spans of concurrent
    conversations interleaved, an ``execute_tool`` span after each tool call."""
    for doc in otlp_documents(conversation(i) for i in range(conversations)):
        fh.write(json.dumps(doc, separators=(",", ":")) + "\n")


def _trace(fmt: str) -> Writer:
    """One JSON line per model call of trace format ``fmt``."""

    def write(fh: TextIO, conversations: int) -> None:
        for record in trace_records(fmt, (conversation(i) for i in range(conversations))):
            fh.write(json.dumps(record, separators=(",", ":")) + "\n")

    return write


#: Each format: its ``message_format``, how conversations are written to a file, the file suffix, and how many
#: records a conversation takes (a trace: one per model call, three here).
FORMATS: dict[str, tuple[str, Writer, str, int]] = {
    "openai chat (baseline)": ("openai", _write_records(_openai), ".jsonl", 1),
    "anthropic messages": ("anthropic", _write_records(_anthropic), ".jsonl", 1),
    "gemini contents": ("gemini", _write_records(_gemini), ".jsonl", 1),
    "openai responses": ("openai-responses", _write_records(_responses), ".jsonl", 1),
    "otel genai (OTLP JSON)": ("otel", _write_otlp, ".jsonl", 3),
    "openinference spans": ("openinference", _trace("openinference"), ".jsonl", 3),
    "langfuse generations": ("langfuse", _trace("langfuse"), ".jsonl", 3),
    "langsmith runs": ("langsmith", _trace("langsmith"), ".jsonl", 3),
}


def write(name: str, records: int, folder: Path) -> Path:
    """The file of ``records`` records (model calls, for a trace) of format ``name``."""
    _, writer, suffix, per = FORMATS[name]
    path = folder / f"{name.split()[0]}-{records}{suffix}"
    with path.open("w") as fh:
        writer(fh, records // per)
    return path


def read(name: str, path: str) -> tuple[int, int, float, float]:
    """Read every conversation of ``path``: (conversations, errors, seconds, peak RSS MB of this process)."""
    fmt = FORMATS[name][0]
    source = de.read_conversations(path, message_format=fmt)  # type: ignore[arg-type]
    good = bad = 0
    start = time.perf_counter()
    for item in source:
        if isinstance(item, Conversation):
            good += 1
        else:
            bad += 1
    seconds = time.perf_counter() - start
    return good, bad, seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(name: str, path: Path) -> tuple[int, int, float, float]:
    """Read ``path`` in a fresh process (this script with ``--read``), so the peak RSS is this read's alone."""
    out = subprocess.run([sys.executable, __file__, "--read", name, str(path)], check=True, capture_output=True,
                         text=True).stdout  # fmt: skip
    good, bad, seconds, peak = json.loads(out.strip().splitlines()[-1])
    return int(good), int(bad), float(seconds), float(peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000, help="records per format (default 100,000)")
    parser.add_argument("--small", type=int, default=None, help="records for the memory ratio (default records/10)")
    parser.add_argument("--repeats", type=int, default=3, help="reads per format; medians are printed")
    parser.add_argument("--formats", nargs="*", default=None, help="only these formats (names as printed)")
    parser.add_argument("--read", nargs=2, metavar=("FORMAT", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read:  # the fresh process of one measurement
        print(json.dumps(read(*args.read)))
        return
    small = args.small or max(1, args.records // 10)
    names = [n for n in FORMATS if args.formats is None or any(f in n for f in args.formats)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in names:
            big, little = write(name, args.records, folder), write(name, small, folder)
            runs = [measure(name, big) for _ in range(args.repeats)]
            convs, errors = runs[0][0], runs[0][1]
            seconds = statistics.median(r[2] for r in runs)
            peak = statistics.median(r[3] for r in runs)
            peak_small = statistics.median(measure(name, little)[3] for _ in range(args.repeats))
            rows.append((name, args.records, convs, errors, convs / seconds, args.records / seconds, peak, peak_small))
    base = rows[0][4] if rows and rows[0][0].startswith("openai chat") else None
    print(f"{'format':<26}{'records':>9}{'convs':>8}{'errors':>7}{'conv/s':>10}{'rec/s':>10}{'vs base':>9}"
          f"{'peak MB':>9}{'small MB':>9}{'mem ratio':>10}")  # fmt: skip
    for name, records, convs, errors, cps, rps, peak, peak_small in rows:
        ratio = f"{cps / base:.2f}x" if base else "-"
        print(f"{name:<26}{records:>9,}{convs:>8,}{errors:>7}{cps:>10,.0f}{rps:>10,.0f}{ratio:>9}"
              f"{peak:>9.0f}{peak_small:>9.0f}{peak / peak_small:>9.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
