"""Errors are not forever: the next run of the same command tries again the pairs that ended in a retryable
provider error; the others stay, unless ``retry_errors``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import delta_eval as de
from delta_eval.adapters import simulated
from delta_eval.analysis.report import render_report
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.exceptions import BadRequestError, ContextLengthError, ProviderError, TransientError


class Outage:
    """A simulated model behind a switch: while ``error`` is set, every call fails with it."""

    def __init__(self, inner: Any, state: dict[str, ProviderError | None]) -> None:
        self.inner, self.state = inner, state

    async def generate(self, request: de.ModelRequest) -> Any:
        if (error := self.state["error"]) is not None:
            raise error
        return await self.inner.generate(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def outage() -> dict[str, ProviderError | None]:
    state: dict[str, ProviderError | None] = {"error": None}

    def factory(model: str, options: Any, context: Any) -> Outage:
        return Outage(simulated.create(model.replace("outage:", "simulated:"), options, context), state)

    de.register_adapter("outage", factory)
    return state


def config(out: Path, **changes: Any) -> de.RunConfig:
    cfg = demo_config(out, n=4, latency_ms=0.0)
    # The demo's own simulated 429s and 500s off: the only failures are the outage's.
    calm = {**cfg.candidate.provider_options, "rate_limit_rate": 0.0, "server_error_rate": 0.0}
    candidate = cfg.candidate.model_copy(update={"model": "outage:candidate", "provider_options": calm})
    return cfg.model_copy(
        update={"candidate": candidate, "retry": de.RetryPolicy(max_attempts=1, initial_wait=0.0), **changes}
    )


def error_pairs(path: Path) -> int:
    con = de.open_run(path)
    return int(con.execute("SELECT count(*) FROM verdicts WHERE outcome = 'error'").fetchone()[0])


def test_pairs_that_ended_in_a_retryable_error_are_tried_again(
    tmp_path: Path, outage: dict[str, ProviderError | None]
) -> None:
    out = tmp_path / "run"
    outage["error"] = TransientError("503 service unavailable", model="outage:candidate", status=503)
    first = de.run(config(out), conversations=demo_conversations())
    failed = error_pairs(out)
    assert failed == first.counts.pairs > 0
    rows = de.open_run(out).execute("SELECT DISTINCT retryable FROM errors WHERE stage = 'replay'").fetchall()
    assert rows == [(True,)]

    outage["error"] = None  # the provider is back
    second = de.run(config(out), conversations=demo_conversations())
    assert error_pairs(out) == 0
    assert second.counts.pairs == first.counts.pairs
    assert second.manifest.sessions[-1].retried_pairs == failed
    con = de.open_run(out)
    assert con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone() == (failed, failed)
    assert f"retried {failed} pairs that had ended in error" in render_report(second)
    # the errors of the first attempt went with their batches; the run's errors are those of what it holds now
    assert con.execute("SELECT count(*) FROM errors WHERE stage = 'replay'").fetchone() == (0,)


def test_non_retryable_errors_stay_unless_asked(tmp_path: Path, outage: dict[str, ProviderError | None]) -> None:
    out = tmp_path / "run"
    outage["error"] = BadRequestError("400 invalid tool schema", model="outage:candidate", status=400)
    first = de.run(config(out), conversations=demo_conversations())
    failed = error_pairs(out)
    assert failed == first.counts.pairs > 0

    outage["error"] = None
    second = de.run(config(out), conversations=demo_conversations())
    assert error_pairs(out) == failed
    assert second.manifest.sessions[-1].retried_pairs == 0
    assert second.manifest.sessions[-1].pairs_decided == 0

    third = de.run(config(out, retry_errors=True), conversations=demo_conversations())
    assert error_pairs(out) == 0
    assert third.manifest.sessions[-1].retried_pairs == failed


def test_non_retryable_errors_in_a_batch_with_retryable_ones_are_not_called_again(
    tmp_path: Path, outage: dict[str, ProviderError | None]
) -> None:
    # One batch holds both kinds: the retryable pairs are tried again, the context-length ones stay as they were.
    calls: list[str] = []

    class Mixed(Outage):
        async def generate(self, request: de.ModelRequest) -> Any:
            calls.append(str(request.conversation_id))
            if self.state["error"] is not None:
                if sum(map(ord, str(request.conversation_id))) % 2:
                    raise ContextLengthError("prompt is too long", model="mixed:candidate", status=400)
                raise TransientError("503 service unavailable", model="mixed:candidate", status=503)
            return await self.inner.generate(request)

    de.register_adapter(
        "mixed", lambda m, o, c: Mixed(simulated.create(m.replace("mixed:", "simulated:"), o, c), outage)
    )
    out = tmp_path / "run"
    cfg = config(out, flush_every=1000)
    cfg = cfg.model_copy(update={"candidate": cfg.candidate.model_copy(update={"model": "mixed:candidate"})})
    outage["error"] = TransientError("on", model="mixed:candidate")
    first = de.run(cfg, conversations=demo_conversations())
    con = de.open_run(out)
    kinds = dict(con.execute("SELECT retryable, count(DISTINCT pair_id) FROM errors GROUP BY 1").fetchall())
    assert kinds.get(True, 0) > 0
    assert kinds.get(False, 0) > 0
    lasting = {
        r[0]: r[1:]
        for r in con.execute("SELECT pair_id, message, retryable FROM errors WHERE NOT retryable").fetchall()
    }
    assert len(first.manifest.sessions) == 1

    outage["error"] = None
    calls.clear()
    second = de.run(cfg, conversations=demo_conversations())
    con = de.open_run(out)
    assert second.manifest.sessions[-1].retried_pairs == kinds[True]
    assert error_pairs(out) == len(lasting)
    assert {r[0]: r[1:] for r in con.execute("SELECT pair_id, message, retryable FROM errors").fetchall()} == lasting
    # no call for a conversation whose pairs all ended in a context-length error
    lasting_conversations = {p.split("#")[0] for p in lasting}
    assert lasting_conversations.isdisjoint(calls)
    assert con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone() == (
        first.counts.pairs,
        first.counts.pairs,
    )
