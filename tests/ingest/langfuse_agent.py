"""Run conversations through the real ``openai`` SDK traced by Langfuse's OpenAI integration, and write the spans
the Langfuse SDK exports (``ReadableSpan.to_json()``, one per line).

Run as ``python -m tests.ingest.langfuse_agent CONVERSATIONS.json BASE_URL OUT.jsonl`` in a process of its own:
importing ``langfuse.openai`` patches the ``openai`` SDK for good, which no other test must see. Each
conversation is one Langfuse trace (an agent observation) and session (``propagate_attributes``); the spans go to
an in-memory exporter given to the Langfuse client, never to a server. Prints the messages each run had, as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from delta_eval.schema import Conversation
from tests.ingest.traced_agents import openai_call, run_agent


def main(conversations: str, base_url: str, out: str) -> None:
    """Run each conversation of the file ``conversations`` against ``base_url`` and write the spans to ``out``."""
    from langfuse import Langfuse, propagate_attributes
    from langfuse.openai import OpenAI  # patches the openai SDK: this process only

    exporter = InMemorySpanExporter()
    langfuse = Langfuse(public_key="pk-lf-test", secret_key="sk-lf-test", base_url="http://127.0.0.1:9",
                        span_exporter=exporter)  # fmt: skip
    convs = [Conversation.model_validate(c) for c in json.loads(Path(conversations).read_text())]
    ran = {}
    client = OpenAI(base_url=base_url, api_key="k", max_retries=0)
    for conv in convs:
        # One trace per conversation (an agent observation around its calls), one session too.
        with langfuse.start_as_current_observation(name="agent", as_type="agent"),\
                propagate_attributes(session_id=f"langfuse-{conv.id}"):  # fmt: skip
            ran[f"langfuse-{conv.id}"] = [m.model_dump() for m in run_agent(conv, openai_call(client, conv))]
    langfuse.flush()
    langfuse.shutdown()
    Path(out).write_text("".join(s.to_json(indent=None) + "\n" for s in exporter.get_finished_spans()))
    print(json.dumps(ran))


if __name__ == "__main__":
    main(*sys.argv[1:4])
