"""``batch=true``: the judges' calls go through OpenAI's Batch API (the real ``openai`` SDK against the fake server's
``/v1/files`` and ``/v1/batches``), a run killed while it polls resumes by polling the same batch, and a request
the provider failed in a batch is an error row for its pair alone. Nothing is paid twice: no request is in two
batches, and none answered is sent again."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest

import delta_eval as de
from delta_eval.adapters.batch import BATCH_DISCOUNT, BatchSettings
from delta_eval.demo import behaviours, demo_config, demo_conversations, demo_models
from delta_eval.pricing import Price, cost
from delta_eval.schema import Usage
from delta_eval.testing.servers.openai import FakeOpenAIServer
from tests.killing import kill_when

JUDGES = ("judge-small", "judge")
FAST = BatchSettings(size=40, wait_s=0.2, poll_s=0.02)
PRICE = Price(input=2.0, output=8.0)


def serve() -> FakeOpenAIServer:
    conversations, _ = demo_conversations().load()
    return FakeOpenAIServer(recordings=conversations, behaviour=behaviours(latency_ms=0))


def config(server: FakeOpenAIServer, out: Path, n: int = 6, **more: Any) -> de.RunConfig:
    models = demo_models("openai", {"base_url": server.base_url, "api_key": "test-key-for-the-fake"})
    prices = {f"openai:{name}": PRICE for name in JUDGES}
    return demo_config(out, n=n, models=models).model_copy(update={"batch": FAST, "prices": prices, **more})


def interactive_judge_calls(server: FakeOpenAIServer) -> int:
    return sum(
        1 for r in server.requests if r.path == "/v1/chat/completions" and (r.json() or {}).get("model") in JUDGES
    )


def batch_lines(server: FakeOpenAIServer) -> list[dict[str, Any]]:
    """Every request line of every batch the server was asked to create."""
    return [
        json.loads(raw)
        for batch in server.batch.batches.values()
        for raw in server.batch.files[batch.input_file_id].content.splitlines()
    ]


def test_a_batch_run_judges_through_the_batch_api_at_half_price(tmp_path: Path) -> None:
    with serve() as server:
        result = de.run(config(server, tmp_path / "run"), conversations=demo_conversations())
    assert result.status == "completed"
    judgements = result.table("judgements").to_pylist()
    llm = [j for j in judgements if j["stage"] in ("equivalence", "judge")]
    assert llm, "the demo's pairs reach the LLM judges"
    assert interactive_judge_calls(server) == 0  # every judge call went through a batch
    lines = batch_lines(server)
    assert {line["body"]["model"] for line in lines} == set(JUDGES)
    assert all(b.status == "completed" for b in server.batch.batches.values())
    # each judge request was sent once, in one batch
    assert max(Counter(line["custom_id"] for line in lines).values()) == 1
    assert len(lines) == sum(b.completed for b in server.batch.batches.values())
    # the batch answers are priced at the batch discount
    for j in llm:
        usage = Usage(input_tokens=j["input_tokens"], output_tokens=j["output_tokens"])
        assert j["cost_usd"] == pytest.approx(cost(usage, PRICE) * BATCH_DISCOUNT)  # type: ignore[operator]
    assert any("batch API" in note for note in result.manifest.notes)
    assert (tmp_path / "run" / "batches.jsonl").is_file()


def test_batch_is_operational_not_part_of_the_fingerprint(tmp_path: Path) -> None:
    with serve() as server:
        batched = config(server, tmp_path / "run")
        plain = batched.model_copy(update={"batch": None})
    assert batched.fingerprint() == plain.fingerprint()
    assert de.RunConfig.model_validate({**dict(plain), "batch": True}).batch == BatchSettings()
    assert batched.judges_in_flight == FAST.size
    assert plain.judges_in_flight == plain.judge_concurrency


def test_failed_lines_are_error_rows_for_their_pairs_alone_and_a_rerun_sends_only_them(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with serve() as server:
        # Every stage-3 request fails, and a quarter of the stage-2 ones (whose pairs then go on to stage 3).
        server.batch.fail_line = lambda line: line["body"]["model"] == "judge" or line["custom_id"][-1] in "0123"
        first = de.run(config(server, out), conversations=demo_conversations())
        failed = {k for b in server.batch.batches.values() for k in _ids(server, b.error_file_id)}
        answered = {k for b in server.batch.batches.values() for k in _ids(server, b.output_file_id)}
        assert failed
        assert answered
        errors = first.table("errors").to_pylist()
        assert errors
        assert all(e["stage"] in ("equivalence", "judge") and e["retryable"] for e in errors)
        outcomes = Counter(v["outcome"] for v in first.table("verdicts").to_pylist())
        # one error row per failed request, with the server's own message (a pair whose stage-2 call failed goes on
        # to stage 3, so fewer pairs may end in an error than have an error row)
        assert len(errors) == len(failed)
        assert all("The server had an error" in e["message"] for e in errors)
        assert 0 < outcomes["error"] < sum(outcomes.values())
        # the answered requests are kept, the failed ones are not
        assert cached(out, answered) == answered
        assert not cached(out, failed)

        sent_before = len(batch_lines(server))
        server.batch.fail_line = None
        second = de.run(config(server, out), conversations=demo_conversations())  # retries the retryable errors
        resent = {line["custom_id"] for line in batch_lines(server)[sent_before:]}
    assert "error" not in {v["outcome"] for v in second.table("verdicts").to_pylist()}
    assert resent & failed  # failed requests were asked again (those the pairs still needed) ...
    assert not resent & answered  # ... and none that had been answered


def cached(out: Path, keys: set[str]) -> set[str]:
    with closing(sqlite3.connect(out / "cache.sqlite")) as db:
        return {k for k in keys if db.execute("SELECT 1 FROM responses WHERE key = ?", (k,)).fetchone()}


def _ids(server: FakeOpenAIServer, file_id: str | None) -> list[str]:
    if file_id is None:
        return []
    return [json.loads(raw)["custom_id"] for raw in server.batch.files[file_id].content.splitlines()]


_CHILD = """
import sys
from pathlib import Path
import delta_eval as de
from delta_eval.adapters.batch import BatchSettings
from delta_eval.demo import demo_config, demo_conversations, demo_models
from delta_eval.pricing import Price

base_url, out = sys.argv[1], Path(sys.argv[2])
models = demo_models("openai", {"base_url": base_url, "api_key": "test-key-for-the-fake"})
prices = {f"openai:{name}": Price(input=2.0, output=8.0) for name in ("judge-small", "judge")}
settings = BatchSettings(size=40, wait_s=0.2, poll_s=0.02)
de.run(demo_config(out, n=6, models=models).model_copy(update={"batch": settings, "prices": prices}),
       conversations=demo_conversations(), progress=False)
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_run_killed_while_polling_resumes_by_polling_the_same_batch(tmp_path: Path) -> None:
    out = tmp_path / "run"
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    with serve() as server:
        server.batch.hold = True  # batches stay in_progress: the run can only poll
        proc = subprocess.Popen([sys.executable, str(script), server.base_url, str(out)], cwd=Path.cwd())
        kill_when(proc, lambda: any(b.status == "in_progress" and b.retrieved >= 3
                                    for b in server.batch.batches.values()))  # fmt: skip
        held = {b.id: b.retrieved for b in server.batch.batches.values()}
        assert held
        assert all(b.status in ("validating", "in_progress") for b in server.batch.batches.values())

        server.batch.hold = False
        resumed = de.run(config(server, out), conversations=demo_conversations())
        lines = batch_lines(server)
        batches = dict(server.batch.batches)
    assert resumed.status == "completed"
    assert "error" not in {v["outcome"] for v in resumed.table("verdicts").to_pylist()}
    # the batches of the killed run were polled again, to their end, by the resumed one
    assert all(batches[b].status == "completed" and batches[b].retrieved > n for b, n in held.items())
    # no request in two batches, none sent one by one: nothing paid twice
    assert max(Counter(line["custom_id"] for line in lines).values()) == 1
    assert interactive_judge_calls(server) == 0
    assert any("of an earlier session polled again" in note and not note.split(",")[1].startswith(" 0")
               for note in resumed.manifest.notes)  # fmt: skip


def test_the_fake_refuses_a_batch_file_as_openai_does() -> None:
    def line(custom_id: str, model: str) -> bytes:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        line = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
        return json.dumps(line).encode()

    async def create(server: FakeOpenAIServer, content: bytes) -> Any:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
            f = await client.files.create(file=("in.jsonl", content), purpose="batch")
            b = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                            completion_window="24h")  # fmt: skip
            return await client.batches.retrieve(b.id)

    content = b"\n".join([line("a", "gpt-4.1"), line("a", "gpt-4.1"), line("b", "gpt-4.1-mini")])
    with serve() as server:
        batch = anyio.run(create, server, content)
    assert batch.status == "failed"
    assert [e.code for e in batch.errors.data] == ["duplicate_custom_id", "mismatched_model"]


def test_the_readme_example_of_batch_settings_runs() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Judges through the batch API", 1)[1].split("\n## ", 1)[0]
    [python] = re.findall(r"```python\n(.+?)\n```", section, flags=re.S)
    exec(python, {"de": de})
