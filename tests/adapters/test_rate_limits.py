"""The adaptive limiter tells a rate limit from noise: stray 429s leave concurrency alone, sustained ones or headers
saying the limit is spent cut it, headers pace calls, and successes bring it back. Deterministic: a fake clock, a
seeded draw."""

from __future__ import annotations

import random

import anyio
import pytest

import delta_eval as de
from delta_eval.adapters.client import ModelClient
from delta_eval.adapters.limits import ModelLimiter, Ticket
from delta_eval.adapters.ratelimit_headers import RateLimitSignal, collect_headers, read_rate_limit
from delta_eval.adapters.retry import RetryPolicy
from delta_eval.adapters.simulated import RequestBucket, SimulatedAdapter, SimulatedBehaviour
from delta_eval.exceptions import RateLimitError
from delta_eval.testing.servers.openai import FakeOpenAIServer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_three_percent_noise_does_not_collapse_concurrency() -> None:
    clock, rng = Clock(), random.Random(16)
    limiter = ModelLimiter(32, clock=clock)
    lowest = limiter.concurrency
    for _ in range(5000):
        clock.now += 0.01
        if rng.random() < 0.03:
            limiter.on_rate_limited(RateLimitSignal(retry_after=1.0))
        else:
            limiter.on_success()
        lowest = min(lowest, limiter.concurrency)
    assert limiter.rate_limited > 100
    assert lowest >= 16  # at worst one rare cut, soon undone
    assert limiter.concurrency == 32


def test_a_sustained_429_rate_cuts_and_successes_bring_it_back() -> None:
    clock, rng = Clock(), random.Random(16)
    limiter = ModelLimiter(32, clock=clock, cooldown=1.0)
    lowest = 32
    for _ in range(200):  # a third of the calls refused, for two seconds
        clock.now += 0.01
        if rng.random() < 0.33:
            limiter.on_rate_limited()
        else:
            limiter.on_success()
        lowest = min(lowest, limiter.concurrency)
    assert lowest <= 16  # halved (at most once a cooldown)
    cut = limiter.concurrency
    steps = 0
    while limiter.concurrency < 32:
        limiter.on_success()
        steps += 1
    assert steps <= 4 * 32  # additive, a step per cap // 4 successes: a cut is undone within a few rounds
    assert cut < 32


def test_headers_saying_the_limit_is_spent_cut_at_once_and_pause() -> None:
    clock = Clock()
    limiter = ModelLimiter(32, clock=clock)
    spent = read_rate_limit(
        {"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "0",
         "x-ratelimit-reset-requests": "6s", "retry-after": "2"}
    )  # fmt: skip
    assert spent is not None
    limiter.on_rate_limited(spent, Ticket(clock.now))
    assert limiter.concurrency == 16  # one 429, but the provider says it is its limit
    assert limiter.wait_s() == pytest.approx(2.0)  # Retry-After
    clock.now += 2.0
    assert limiter.wait_s() == 0.0  # then a request is back: 600 over 6 s is 100 a second, and 2 s passed


def test_headers_pace_calls_to_what_is_left() -> None:
    clock = Clock()
    limiter = ModelLimiter(32, clock=clock)
    # Anthropic's form: 10 of 60 left, the whole limit back in 5 s (10 requests a second).
    anthropic = read_rate_limit(
        {"anthropic-ratelimit-requests-limit": "60", "anthropic-ratelimit-requests-remaining": "10",
         "anthropic-ratelimit-requests-reset": "2030-01-01T00:00:05Z"},
        now=__import__("datetime").datetime(2030, 1, 1, tzinfo=__import__("datetime").UTC),
    )  # fmt: skip
    assert anthropic == RateLimitSignal(limit=60, remaining=10, reset_s=5.0)
    limiter.on_success(anthropic, Ticket(clock.now))
    clock.now += 0.001
    for _ in range(9):  # the ten left go at once, but one kept in hand for a call the count may not include yet
        assert limiter.wait_s() == 0.0
        limiter._sent.append(clock.now)
    assert limiter.wait_s() == pytest.approx(0.099)  # then one every tenth of a second
    clock.now += 0.1
    assert limiter.wait_s() == pytest.approx(0.0)
    assert limiter.concurrency == 32  # pacing is not a cut


def test_client_hands_the_adapters_headers_to_the_limiter() -> None:
    """A true limit of 60 a minute, with a bucket holding 3: the fourth call waits for its request to come back
    instead of drawing a 429."""
    behaviour = SimulatedBehaviour(requests_per_minute=3, minute_s=0.3)  # 10 a second
    adapter = SimulatedAdapter("simulated:m", behaviour)
    client = ModelClient(adapter, ModelLimiter(1), RetryPolicy(max_attempts=1))

    async def main() -> None:
        for i in range(6):
            await client.generate(
                de.ModelRequest(model="simulated:m", messages=(de.Message(role="user", content=str(i)),))
            )

    anyio.run(main)
    assert adapter.bucket is not None
    assert adapter.bucket.rejected == 0
    assert client.stats.rate_limited == 0


def test_request_bucket_refuses_over_the_limit_with_headers() -> None:
    clock = Clock()
    bucket = RequestBucket(2, minute_s=1.0, clock=clock)
    assert bucket.take()[0]
    assert bucket.take()[0]
    admitted, headers = bucket.take()
    assert not admitted
    assert bucket.rejected == 1
    signal = read_rate_limit(headers)
    assert signal is not None
    assert signal.exhausted
    assert signal.retry_after == pytest.approx(0.5)
    assert signal.refill_per_s == pytest.approx(2.0)


def test_fake_server_enforces_a_true_limit_with_openai_headers() -> None:
    openai = pytest.importorskip("openai")
    behaviour = SimulatedBehaviour(requests_per_minute=2, minute_s=60.0)
    with FakeOpenAIServer(behaviour=behaviour) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        messages = [{"role": "user", "content": "hi"}]
        first = client.chat.completions.with_raw_response.create(model="m", messages=messages)
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        client.chat.completions.create(model="m", messages=messages)
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="m", messages=messages)
    headers = dict(refused.value.response.headers)
    assert headers["x-ratelimit-remaining-requests"] == "0"
    with collect_headers() as seen:
        from delta_eval.adapters.errors import status_error

        err = status_error(429, "slow down", model="openai:m", headers=headers)
    assert isinstance(err, RateLimitError)
    assert seen
    assert seen[-1].exhausted


@pytest.mark.parametrize("model", ["openai:gpt-4.1", "anthropic:claude-sonnet-4-6", "gemini:gemini-3.5-flash"])
def test_the_real_sdks_successful_answers_pace_calls_by_their_headers(model: str) -> None:
    """The headers of successful answers reach the limiter through the SDK's HTTP client (not only a 429's): a true
    limit of 3 a (shortened) minute is kept without drawing a 429."""
    from delta_eval.adapters.registry import create_adapter
    from delta_eval.testing import FakeAnthropicServer, FakeGeminiServer

    servers = {"openai": FakeOpenAIServer, "anthropic": FakeAnthropicServer, "gemini": FakeGeminiServer}
    behaviour = SimulatedBehaviour(requests_per_minute=3, minute_s=0.3)
    with servers[model.split(":")[0]](behaviour=behaviour) as server:
        base = server.base_url if isinstance(server, FakeOpenAIServer) else server.url

        async def main() -> ModelClient:
            adapter = create_adapter(model, {"base_url": base, "api_key": "k"})
            client = ModelClient(adapter, ModelLimiter(1), RetryPolicy(max_attempts=3, initial_wait=0.0))
            try:
                for i in range(6):
                    request = de.ModelRequest(model=model, messages=(de.Message(role="user", content=str(i)),),
                                              params=de.GenerateParams(max_tokens=64))  # fmt: skip
                    await client.generate(request)
            finally:
                await adapter.aclose()
            return client

        client = anyio.run(main)
    assert client.stats.answered == 6
    assert client.stats.rate_limited == 0


def test_a_free_slot_is_taken_without_a_pass_of_the_event_loop_and_a_queued_call_keeps_its_turn() -> None:
    """anyio's acquire yields to the event loop even when a slot is free: a pass of a loop with hundreds of calls in
    flight, on every call. A free slot is taken at once; a call queued for a slot is not overtaken."""
    limiter = ModelLimiter(max_concurrency=2)
    order: list[str] = []
    passes = 0

    async def main() -> None:
        nonlocal passes
        done = anyio.Event()

        async def free_slots() -> None:
            for _ in range(50):
                async with limiter.slot():
                    pass
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(free_slots)
            while not done.is_set():
                await anyio.lowlevel.checkpoint()
                passes += 1

        # Both slots held, one call queued: a slot given back goes to it, not to a call arriving meanwhile.
        held = [object(), object()]
        for owner in held:
            await limiter.acquire(owner)

        async def call(name: str) -> None:
            async with limiter.slot():
                order.append(name)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "queued")
            await anyio.wait_all_tasks_blocked()
            limiter.release(held[0])
            await call("later")
        limiter.release(held[1])

    anyio.run(main)
    assert passes <= 1
    assert order == ["queued", "later"]
