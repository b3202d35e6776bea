"""``batch=true`` with ``anthropic:`` and ``gemini:`` judges: the judges' calls go through Anthropic's Message
Batches and Gemini's batch mode (the real ``anthropic`` and ``google-genai`` SDKs against the fakes' batch
endpoints), a request the provider failed is an error row for its pair alone, a run killed while it polls resumes
by polling the same batch, and nothing is paid twice. The fakes refuse what the real APIs refuse."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import anyio
import httpx
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

import delta_eval as de
from delta_eval.adapters.batch import BATCH_DISCOUNT, BatchSettings
from delta_eval.demo import behaviours, demo_config, demo_conversations, demo_models
from delta_eval.pricing import Price, cost
from delta_eval.schema import Message, Usage
from delta_eval.testing.servers.anthropic import FakeAnthropicServer
from delta_eval.testing.servers.gemini import FakeGeminiServer
from tests.killing import kill_when

JUDGES = ("judge-small", "judge")
FAST = BatchSettings(size=40, wait_s=0.2, poll_s=0.02)
PRICE = Price(input=2.0, output=8.0)
Server = FakeAnthropicServer | FakeGeminiServer


@dataclass(frozen=True)
class Provider:
    """How a test reads one fake's batches."""

    prefix: str
    server: type[Server]

    def serve(self) -> Server:
        conversations, _ = demo_conversations().load()
        return self.server(recordings=conversations, behaviour=behaviours(latency_ms=0))

    def requests(self, server: Server) -> list[tuple[str, str]]:
        """(custom id, model) of every request of every batch the server created."""
        if isinstance(server, FakeAnthropicServer):
            return [(r["custom_id"], r["params"]["model"]) for b in server.batch.batches.values() for r in b.requests]
        return [(r["metadata"]["key"], b.model) for b in server.batch.batches.values() for r in b.requests]

    def ended(self, server: Server) -> dict[str, bool]:
        if isinstance(server, FakeAnthropicServer):
            return {i: b.processing_status == "ended" for i, b in server.batch.batches.items()}
        return {i: b.state == "BATCH_STATE_SUCCEEDED" for i, b in server.batch.batches.items()}

    def failed(self, server: Server) -> set[str]:
        """Custom ids of the requests the batches answered with an error."""
        if isinstance(server, FakeAnthropicServer):
            return {k for b in server.batch.batches.values() for k, r in b.results.items() if r["type"] == "errored"}
        return {a["metadata"]["key"] for b in server.batch.batches.values() for a in b.answers if "error" in a}

    def interactive_judge_calls(self, server: Server) -> int:
        if isinstance(server, FakeAnthropicServer):
            return sum(
                1 for r in server.requests if r.path == "/v1/messages" and (r.json() or {}).get("model") in JUDGES
            )
        return sum(1 for r in server.requests if any(f"/models/{j}:generateContent" in r.path for j in JUDGES))

    def fail(self, server: Server, which: Callable[[str, str], bool] | None) -> None:
        """Make the requests ``which(custom_id, model)`` picks fail in their batch."""
        if which is None:
            server.batch.fail_request = None
        elif isinstance(server, FakeAnthropicServer):
            server.batch.fail_request = lambda r: which(r["custom_id"], r["params"]["model"])
        else:
            batches = server.batch.batches
            server.batch.fail_request = lambda r: which(r["metadata"]["key"], _model_of(batches, r))


def _model_of(batches: dict[str, Any], request: dict[str, Any]) -> str:
    return next(str(b.model) for b in batches.values() if any(r is request for r in b.requests))


PROVIDERS = [Provider("anthropic", FakeAnthropicServer), Provider("gemini", FakeGeminiServer)]


def config(provider: Provider, server: Server, out: Path, **more: Any) -> de.RunConfig:
    models = demo_models(provider.prefix, {"base_url": server.url, "api_key": "test-key-for-the-fake"})
    prices = {f"{provider.prefix}:{name}": PRICE for name in JUDGES}
    return demo_config(out, n=6, models=models).model_copy(update={"batch": FAST, "prices": prices, **more})


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.prefix)
def test_a_batch_run_judges_through_the_providers_batch_api_at_half_price(provider: Provider, tmp_path: Path) -> None:
    with provider.serve() as server:
        result = de.run(config(provider, server, tmp_path / "run"), conversations=demo_conversations())
        sent = provider.requests(server)
        ended = provider.ended(server)
        interactive = provider.interactive_judge_calls(server)
    assert result.status == "completed"
    assert result.counts.errors == 0
    llm = [j for j in result.table("judgements").to_pylist() if j["stage"] in ("equivalence", "judge")]
    assert llm, "the demo's pairs reach the LLM judges"
    assert interactive == 0  # every judge call went through a batch
    assert {model for _, model in sent} == set(JUDGES)
    assert ended
    assert all(ended.values())
    assert max(Counter(key for key, _ in sent).values()) == 1  # each request sent once, in one batch
    for j in llm:
        usage = Usage(input_tokens=j["input_tokens"], output_tokens=j["output_tokens"])
        assert j["cost_usd"] == pytest.approx(cost(usage, PRICE) * BATCH_DISCOUNT)  # type: ignore[operator]
    assert any("batch API" in note for note in result.manifest.notes)


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.prefix)
def test_failed_requests_are_error_rows_for_their_pairs_alone_and_a_rerun_sends_only_them(
    provider: Provider, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    with provider.serve() as server:
        # Every stage-3 request fails, and a quarter of the stage-2 ones (partial results in each batch).
        provider.fail(server, lambda key, model: model == "judge" or key[-1] in "0123")
        first = de.run(config(provider, server, out), conversations=demo_conversations())
        failed = provider.failed(server)
        answered = {key for key, _ in provider.requests(server)} - failed
        assert failed
        assert answered
        errors = first.table("errors").to_pylist()
        assert len(errors) == len(failed)  # one error row per failed request
        assert all(e["stage"] in ("equivalence", "judge") and e["retryable"] for e in errors)
        outcomes = Counter(v["outcome"] for v in first.table("verdicts").to_pylist())
        assert 0 < outcomes["error"] < sum(outcomes.values())

        sent_before = len(provider.requests(server))
        provider.fail(server, None)
        second = de.run(config(provider, server, out), conversations=demo_conversations())
        resent = {key for key, _ in provider.requests(server)[sent_before:]}
        interactive = provider.interactive_judge_calls(server)
    assert "error" not in {v["outcome"] for v in second.table("verdicts").to_pylist()}
    assert resent & failed  # failed requests were asked again ...
    assert not resent & answered  # ... and none that had been answered
    assert interactive == 0


_CHILD = """
import sys
from pathlib import Path
import delta_eval as de
from delta_eval.adapters.batch import BatchSettings
from delta_eval.demo import demo_config, demo_conversations, demo_models
from delta_eval.pricing import Price

prefix, base_url, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
models = demo_models(prefix, {"base_url": base_url, "api_key": "test-key-for-the-fake"})
prices = {f"{prefix}:{name}": Price(input=2.0, output=8.0) for name in ("judge-small", "judge")}
settings = BatchSettings(size=40, wait_s=0.2, poll_s=0.02)
de.run(demo_config(out, n=6, models=models).model_copy(update={"batch": settings, "prices": prices}),
       conversations=demo_conversations(), progress=False)
"""


def _journal(out: Path) -> tuple[set[str], set[str]]:
    """The batch ids the run folder's journal says were created, and the keys of the batches it journalled
    without their ids (a create call that did not return)."""
    path = out / "batches.jsonl"
    events = [json.loads(line) for line in (path.read_text().splitlines() if path.is_file() else [])]
    created = {e["file"]: e["batch"] for e in events if e["step"] == "created"}
    uncreated = {k for e in events if e["step"] == "uploaded" and e["file"] not in created for k in e["keys"]}
    return set(created.values()), uncreated


def _kill_and_resume(provider: Provider, tmp_path: Path, *, stall: bool) -> tuple[de.RunResult, Killed]:
    """Run the demo in a child process, kill it while it waits on held batches (``stall``: while the provider
    creates one, before the child hears of it), then resume it in this process with the batches free to end."""
    out = tmp_path / "run"
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    with provider.serve() as server:
        server.batch.hold = True  # batches stay in progress: the run can only poll
        server.batch.stall_create = stall
        proc = subprocess.Popen([sys.executable, str(script), provider.prefix, server.url, str(out)], cwd=Path.cwd())
        batches = server.batch.batches
        kill_when(
            proc, (lambda: bool(batches)) if stall else lambda: any(b.retrieved >= 3 for b in list(batches.values()))
        )
        server.batch.stall_create = False
        polls = {i: b.retrieved for i, b in batches.items()}
        killed = Killed(polls, *_journal(out), {i: _keys(provider, b) for i, b in batches.items()})
        assert killed.polls
        assert not any(provider.ended(server).values())

        server.batch.hold = False
        resumed = de.run(config(provider, server, out), conversations=demo_conversations())
        killed.sent = provider.requests(server)
        killed.ended = provider.ended(server)
        killed.polled = {i: b.retrieved for i, b in batches.items()}
        killed.interactive = provider.interactive_judge_calls(server)
    assert resumed.status == "completed"
    assert "error" not in {v["outcome"] for v in resumed.table("verdicts").to_pylist()}
    assert killed.interactive == 0
    return resumed, killed


def _keys(provider: Provider, batch: Any) -> set[str]:
    if provider.prefix == "anthropic":
        return {r["custom_id"] for r in batch.requests}
    return {r["metadata"]["key"] for r in batch.requests}


@dataclass
class Killed:
    """The killed run's batches at the kill (``polls``: times each was read; ``journalled``: those its journal
    knows; ``uncreated``: the requests it journalled in a batch without an id; ``keys``: each batch's requests)
    and the server after the resumed run."""

    polls: dict[str, int]
    journalled: set[str]
    uncreated: set[str]
    keys: dict[str, set[str]]
    sent: list[tuple[str, str]] = field(default_factory=list)
    ended: dict[str, bool] = field(default_factory=dict)
    polled: dict[str, int] = field(default_factory=dict)
    interactive: int = 0


def _resent(resumed: de.RunResult) -> int:
    """Requests the resumed run's notes say it sent again (an earlier session's batch not found)."""
    return sum(int(note.split(": ", 1)[1].split()[0]) for note in resumed.manifest.notes if "sent again" in note)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.prefix)
def test_a_run_killed_while_polling_resumes_by_polling_the_same_batch(provider: Provider, tmp_path: Path) -> None:
    resumed, killed = _kill_and_resume(provider, tmp_path, stall=False)
    # The batches of the killed run were polled again, to their end, by the resumed one. A batch the provider
    # created as the kill came, before the journal's line, is found again where the provider can tell (Gemini);
    # otherwise (Anthropic) its requests were sent again, and the run's notes count them.
    lost = [i for i in killed.polls if not (killed.ended[i] and killed.polled[i] > killed.polls[i])]
    assert all(i not in killed.journalled for i in lost)
    assert not lost or provider.prefix == "anthropic"
    twice = {k for k, n in Counter(k for k, _ in killed.sent).items() if n > 1}
    assert twice == {k for i in lost for k in killed.keys[i]}  # nothing else paid twice
    # Where the provider cannot be asked, every request of a create call cut short is counted as maybe paid twice
    # (its batch at the provider, or not yet); where it can, none is (found, or known not to exist).
    assert _resent(resumed) == (len(killed.uncreated) if provider.prefix == "anthropic" else 0)
    assert any("of an earlier session polled again" in note and not note.split(",")[1].startswith(" 0")
               for note in resumed.manifest.notes)  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.prefix)
def test_a_run_killed_while_the_provider_creates_a_batch(provider: Provider, tmp_path: Path) -> None:
    resumed, killed = _kill_and_resume(provider, tmp_path, stall=True)
    orphans = set(killed.polls)
    assert not orphans & killed.journalled  # the child never heard of them
    sent = Counter(k for k, _ in killed.sent)
    orphan_keys = {k for i in orphans for k in killed.keys[i]}
    if provider.prefix == "gemini":
        # found by their display name, polled to their end: nothing sent twice, nothing said to be
        assert all(killed.ended[i] for i in orphans)
        assert max(sent.values()) == 1
        assert _resent(resumed) == 0
    else:
        # a Message Batch cannot be found by what it holds: its requests went again, and the notes say how many
        assert not any(killed.ended[i] for i in orphans)
        assert {k for k, n in sent.items() if n > 1} == orphan_keys
        assert orphan_keys <= killed.uncreated
        assert _resent(resumed) == len(killed.uncreated)


# -- the fakes refuse what the real APIs refuse ------------------------------------------------------------


def _anthropic_request(custom_id: str, **params: Any) -> dict[str, Any]:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    return {"custom_id": custom_id, "params": {**body, **params}}


async def _anthropic_create(server: FakeAnthropicServer, requests: list[dict[str, Any]]) -> Any:
    async with anthropic.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0) as client:
        return await client.messages.batches.create(requests=requests)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("requests", "says"),
    [
        ([], "at least one request"),
        ([_anthropic_request("a b")], "should match pattern"),
        ([_anthropic_request("x" * 65)], "should match pattern"),
        ([_anthropic_request("a"), _anthropic_request("a")], "duplicate custom_id"),
        ([{"custom_id": "a"}], "params: Field required"),
    ],
)
def test_the_anthropic_fake_refuses_a_batch_as_anthropic_does(requests: list[dict[str, Any]], says: str) -> None:
    with FakeAnthropicServer(respond=lambda request: Message(role="assistant", content="ok")) as server:
        with pytest.raises(anthropic.BadRequestError, match=says):
            anyio.run(_anthropic_create, server, requests)
        assert not server.batch.batches


def test_the_anthropic_fake_processes_a_batch_as_anthropic_does() -> None:
    async def scenario(server: FakeAnthropicServer) -> dict[str, Any]:
        async with anthropic.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0) as client:
            requests = [_anthropic_request("ok"), _anthropic_request("no_max_tokens"), _anthropic_request("streams",
                        stream=True), _anthropic_request("fails")]  # fmt: skip
            del requests[1]["params"]["max_tokens"]
            batch = await client.messages.batches.create(requests=requests)  # type: ignore[arg-type]
            seen = [batch.processing_status]
            counts = batch.request_counts.processing
            with pytest.raises(anthropic.AnthropicError, match="results_url"):
                await client.messages.batches.results(batch.id)  # not before it ends
            while batch.processing_status != "ended":
                batch = await client.messages.batches.retrieve(batch.id)
                seen.append(batch.processing_status)
            results = {line.custom_id: line.result async for line in await client.messages.batches.results(batch.id)}
            listed = [b.id async for b in client.messages.batches.list(limit=1)]
            cancelled = await client.messages.batches.create(requests=[_anthropic_request("later")])
            canceling = await client.messages.batches.cancel(cancelled.id)
            cancelled = await client.messages.batches.retrieve(cancelled.id)
            cancelled_results = [line.result.type async for line in await client.messages.batches.results(cancelled.id)]
            return {"seen": seen, "processing": counts, "counts": batch.request_counts, "results": results,
                    "listed": listed, "canceling": canceling.processing_status, "cancelled": cancelled_results,
                    "cancelled_counts": cancelled.request_counts}  # fmt: skip

    with FakeAnthropicServer(respond=lambda request: Message(role="assistant", content="ok")) as server:
        server.batch.fail_request = lambda r: r["custom_id"] == "fails"
        got = anyio.run(scenario, server)
    assert got["seen"][0] == "in_progress"
    assert got["seen"][-1] == "ended"
    assert got["processing"] == 4  # every request counts as processing until the whole batch ends
    assert (got["counts"].succeeded, got["counts"].errored) == (1, 3)
    results = got["results"]
    assert results["ok"].type == "succeeded"
    assert results["ok"].message.content[0].text == "ok"
    assert results["no_max_tokens"].type == "errored"
    assert "max_tokens" in results["no_max_tokens"].error.error.message  # the Messages API's own refusal
    assert results["streams"].type == "errored"
    assert results["fails"].error.error.type == "api_error"
    assert len(got["listed"]) == 1
    assert got["canceling"] == "canceling"
    assert got["cancelled"] == ["canceled"]
    assert got["cancelled_counts"].canceled == 1


async def _gemini(server: FakeGeminiServer, src: Any) -> Any:
    client = genai.Client(api_key="k", http_options=genai_types.HttpOptions(base_url=server.url))
    try:
        job = await client.aio.batches.create(model="gemini-2.5-flash", src=src)
        states = [job.state]
        while job.state is not None and job.state.value in ("JOB_STATE_PENDING", "JOB_STATE_RUNNING"):
            job = await client.aio.batches.get(name=job.name or "")
            states.append(job.state)
        return job, [s.value for s in states if s is not None]
    finally:
        await client.aio.aclose()


def test_the_gemini_fake_refuses_a_batch_without_requests_as_google_does() -> None:
    with FakeGeminiServer(respond=lambda request: Message(role="assistant", content="ok")) as server:
        with pytest.raises(genai_errors.ClientError, match="at least one request"):
            anyio.run(_gemini, server, [])
        # The SDK refuses two sources itself: the raw call, as another client could send it.
        both = {"batch": {"inputConfig": {"fileName": "files/x", "requests": {"requests": [{"request": {}}]}}}}
        reply = httpx.post(f"{server.url}/v1beta/models/gemini-2.5-flash:batchGenerateContent", json=both)
        assert reply.status_code == 400
        assert reply.json()["error"]["status"] == "INVALID_ARGUMENT"
        assert "exactly one" in reply.json()["error"]["message"]
        assert not server.batch.batches


def test_the_gemini_fake_processes_a_batch_as_google_does() -> None:
    src = [
        {"contents": "hi", "metadata": {"key": "ok"}},
        {"contents": [{"role": "system", "parts": [{"text": "hi"}]}], "metadata": {"key": "bad_role"}},
        {"contents": "hi", "metadata": {"key": "fails"}},
    ]
    with FakeGeminiServer(respond=lambda request: Message(role="assistant", content="ok")) as server:
        server.batch.fail_request = lambda r: r["metadata"]["key"] == "fails"
        job, states = anyio.run(_gemini, server, src)
    assert states[0] == "JOB_STATE_PENDING"
    assert "JOB_STATE_RUNNING" in states
    assert states[-1] == "JOB_STATE_SUCCEEDED"
    answers = {(a.metadata or {})["key"]: a for a in job.dest.inlined_responses}
    assert answers["ok"].response.text == "ok"
    assert answers["bad_role"].error.code == 3  # INVALID_ARGUMENT: generateContent's own refusal
    assert "role" in answers["bad_role"].error.message
    assert answers["fails"].error.code == 13


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.prefix)
def test_replays_go_through_batches_too_when_asked_and_are_priced_at_the_discount(
    provider: Provider, tmp_path: Path
) -> None:
    with provider.serve() as server:
        c = config(provider, server, tmp_path / "run")
        prices = {f"{provider.prefix}:{name}": PRICE for name in ("baseline", "candidate", *JUDGES)}
        c = c.model_copy(update={"batch": FAST.model_copy(update={"replays": True}), "prices": prices})
        result = de.run(c, conversations=demo_conversations())
        sent = provider.requests(server)
        if isinstance(server, FakeAnthropicServer):
            interactive = [r for r in server.requests if r.path == "/v1/messages"]
        else:
            interactive = [r for r in server.requests if r.path.endswith(":generateContent")]
    assert result.status == "completed"
    # the demo's candidate fails some calls (429, 500): in a batch, each is a retryable error row of its pair
    assert all(e["stage"] == "replay" and e["retryable"] for e in result.table("errors").to_pylist())
    assert interactive == []  # every call, replays' and judges', went through a batch
    assert {"baseline", "candidate"} <= {model for _, model in sent}
    assert max(Counter(key for key, _ in sent).values()) == 1
    replays = result.table("replays").to_pylist()
    assert replays
    for r in (r for r in replays if r["error"] is None and r["side"] != "recorded"):
        usage = Usage(input_tokens=r["input_tokens"], output_tokens=r["output_tokens"])
        assert r["cost_usd"] == pytest.approx(cost(usage, PRICE) * BATCH_DISCOUNT)  # type: ignore[operator]
