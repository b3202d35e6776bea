from __future__ import annotations

import random
from pathlib import Path

import anyio
import pytest

import delta_eval as de
from delta_eval.adapters.client import ModelClient
from delta_eval.adapters.limits import ModelLimiter
from delta_eval.adapters.registry import create_adapter
from delta_eval.adapters.retry import RetryPolicy, call_with_retry
from delta_eval.calls import ModelRequest
from delta_eval.exceptions import AuthenticationError, ConfigError, ProviderError, RateLimitError, TransientError
from delta_eval.schema import Message
from delta_eval.store.cache import SQLiteCache
from delta_eval.testing import ScriptedAdapter

REQUEST = ModelRequest(model="scripted:m", messages=(Message(role="user", content="hi"),))


def test_retry_after_is_a_floor_on_the_wait() -> None:
    policy = RetryPolicy(initial_wait=1.0, max_wait=8.0)
    rng = random.Random(0)
    waits = [policy.wait(k, None, rng) for k in range(1, 6)]
    assert all(0 <= w <= min(8.0, 2 ** (k - 1)) for k, w in enumerate(waits, start=1))
    assert policy.wait(1, 30.0, rng) >= 30.0
    assert policy.wait(1, 10_000.0, rng) == policy.max_retry_after


def test_retryable_errors_are_retried_until_success() -> None:
    attempts: list[float] = []
    retried: list[tuple[int, float]] = []

    async def flaky() -> str:
        attempts.append(anyio.current_time())
        if len(attempts) < 3:
            raise TransientError("503", status=503) if len(attempts) == 1 else RateLimitError("429", retry_after=0.05)
        return "ok"

    async def main() -> tuple[str, int]:
        return await call_with_retry(
            flaky, RetryPolicy(initial_wait=0.0), on_retry=lambda e, n, d: retried.append((n, d))
        )

    assert anyio.run(main) == ("ok", 3)
    assert [n for n, _ in retried] == [1, 2]
    assert retried[1][1] >= 0.05  # Retry-After honoured
    assert attempts[2] - attempts[1] >= 0.05


def test_non_retryable_error_raises_at_once_with_attempts() -> None:
    async def denied() -> str:
        raise AuthenticationError("bad key", status=401)

    with pytest.raises(AuthenticationError) as info:
        anyio.run(call_with_retry, denied, RetryPolicy())
    assert info.value.attempts == 1


def test_cache_hit_skips_the_adapter_and_survives_reopening(tmp_path: Path) -> None:
    cache = SQLiteCache(tmp_path / "cache.sqlite")
    adapter = ScriptedAdapter("scripted:m", ["first answer"])
    client = ModelClient(adapter, ModelLimiter(2), cache=cache)
    first = anyio.run(client.generate, REQUEST)
    assert not first.cached
    assert first.response.message.content == "first answer"
    cache.close()

    reopened = SQLiteCache(tmp_path / "cache.sqlite")
    again = ModelClient(ScriptedAdapter("scripted:m", []), ModelLimiter(2), cache=reopened)
    hit = anyio.run(again.generate, REQUEST)
    assert hit.cached
    assert hit.response.message.content == "first answer"
    assert again.stats.made == 0
    assert again.stats.cached == 1
    # a different namespace is a different call
    with pytest.raises(IndexError):
        anyio.run(lambda: again.generate(REQUEST, namespace="other"))
    reopened.close()


def test_the_same_request_in_flight_twice_is_sent_once_and_a_failed_one_is_sent_by_the_next_caller(
    tmp_path: Path,
) -> None:
    """Five callers ask the same thing at once: one call is made, four answers come from the cache. When that call
    fails, a waiting caller sends it again (nobody is left with nothing); other requests are never held."""

    class Slow(ScriptedAdapter):
        async def generate(self, request: ModelRequest) -> de.ModelResponse:
            await anyio.sleep(0.02)
            return await super().generate(request)

    other = REQUEST.model_copy(update={"messages": (Message(role="user", content="other"),)})
    outcomes: list[object] = []

    async def ask(client: ModelClient, request: ModelRequest) -> None:
        try:
            outcomes.append((await client.generate(request)).cached)
        except ProviderError as exc:
            outcomes.append(exc)

    async def main(client: ModelClient, requests: list[ModelRequest]) -> None:
        async with anyio.create_task_group() as tg:
            for request in requests:
                tg.start_soon(ask, client, request)

    shared = ModelClient(Slow("scripted:m", lambda r: "x"), ModelLimiter(8), cache=SQLiteCache(tmp_path / "a.sqlite"))
    anyio.run(main, shared, [REQUEST] * 5 + [other])
    assert (shared.stats.made, shared.stats.cached) == (2, 4)
    assert sorted(map(str, outcomes)) == ["False", "False", "True", "True", "True", "True"]

    outcomes.clear()
    failing = Slow("scripted:m", [AuthenticationError("bad key", status=401), "y"])
    retried = ModelClient(failing, ModelLimiter(8), cache=SQLiteCache(tmp_path / "b.sqlite"))
    anyio.run(main, retried, [REQUEST] * 3)
    assert (retried.stats.made, retried.stats.failed, retried.stats.cached) == (2, 1, 1)
    assert [type(o).__name__ for o in outcomes] == ["AuthenticationError", "bool", "bool"]

    # A content-filtered answer is not cached (a rerun asks again), but the callers waiting for it take it too.
    class Filtered(Slow):
        async def generate(self, request: ModelRequest) -> de.ModelResponse:
            answer = await super().generate(request)
            return answer.model_copy(update={"finish_reason": "content_filter"})

    outcomes.clear()
    filtered = ModelClient(Filtered("scripted:m", lambda r: ""), ModelLimiter(8), cache=SQLiteCache(tmp_path / "c"))
    anyio.run(main, filtered, [REQUEST] * 3)
    assert (filtered.stats.made, filtered.stats.cached) == (1, 2)
    assert filtered.cache is not None
    assert filtered.cache.get(REQUEST.cache_key(identity=filtered.adapter.cache_identity())) is None

    # Without a cache there is nowhere to find the first answer: each caller makes its own call.
    uncached = ModelClient(Slow("scripted:m", lambda r: "z"), ModelLimiter(8))
    anyio.run(main, uncached, [REQUEST] * 3)
    assert uncached.stats.made == 3


def test_cache_key_covers_request_and_namespace() -> None:
    other = REQUEST.model_copy(update={"params": de.GenerateParams(temperature=0.5)})
    assert REQUEST.cache_key() == REQUEST.model_copy().cache_key()
    assert REQUEST.cache_key() != other.cache_key()
    assert REQUEST.cache_key(namespace="a") != REQUEST.cache_key(namespace="b")


def test_the_adapters_identity_is_asked_once_and_keys_every_call(tmp_path: Path) -> None:
    """The identity (an endpoint) is the adapter's configuration: asked once, not made anew for every call's key."""
    asked: list[int] = []

    class Endpoint(ScriptedAdapter):
        def cache_identity(self) -> dict[str, str]:
            asked.append(1)
            return {"base_url": "http://a.example/v1"}

    cache = SQLiteCache(tmp_path / "cache.sqlite")
    client = ModelClient(Endpoint("scripted:m", ["one", "two", "three"]), ModelLimiter(2), cache=cache)
    requests = [REQUEST.model_copy(update={"messages": (Message(role="user", content=f"q{k}"),)}) for k in range(3)]

    async def main() -> list[str]:
        return [(await client.generate(r, namespace="n")).response.message.content or "" for r in requests]

    assert anyio.run(main) == ["one", "two", "three"]
    assert len(asked) == 1
    identity = {"base_url": "http://a.example/v1"}
    assert all(cache.get(r.cache_key(namespace="n", identity=identity)) is not None for r in requests)
    cache.close()


def test_limiter_caps_concurrency() -> None:
    in_flight = peak = 0

    class Slow(ScriptedAdapter):
        async def generate(self, request: ModelRequest) -> de.ModelResponse:
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            await anyio.sleep(0.01)
            in_flight -= 1
            return await super().generate(request)

    client = ModelClient(Slow("scripted:m", lambda r: "x"), ModelLimiter(3))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(12):
                tg.start_soon(client.generate, REQUEST)

    anyio.run(main)
    assert peak == 3
    assert client.stats.made == 12


def test_adaptive_concurrency_halves_once_per_cooldown_on_sustained_429s_and_grows_back() -> None:
    limiter = ModelLimiter(16, cooldown=60.0)
    for _ in range(6):
        limiter.on_rate_limited()  # sustained: the fifth cuts; the sixth falls in the same cooldown
    assert limiter.concurrency == 8
    for _ in range(2):  # one step per max(1, cap // 4) successes
        limiter.on_success()
    assert limiter.concurrency == 9
    fixed = ModelLimiter(16, adaptive=False)
    for _ in range(6):
        fixed.on_rate_limited()
    assert fixed.concurrency == 16


def test_rate_limited_calls_are_counted_and_signal_the_limiter() -> None:
    adapter = ScriptedAdapter("scripted:m", [RateLimitError("429", retry_after=0.0), "ok"])
    limiter = ModelLimiter(8)
    client = ModelClient(adapter, limiter, RetryPolicy(initial_wait=0.0))
    result = anyio.run(client.generate, REQUEST)
    assert result.attempts == 2
    assert client.stats.rate_limited == 1
    assert client.stats.retries == 1
    assert limiter.rate_limited == 1
    assert limiter.concurrency == 8  # one 429 is noise, not a rate limit


def test_provider_errors_carry_status_and_retryability() -> None:
    err = ProviderError("boom", model="openai:gpt-4o", status=500)
    assert str(err) == "openai:gpt-4o: boom"
    assert (err.status, err.retryable) == (500, False)
    assert RateLimitError("x").retryable
    assert TransientError("x").retryable


SECRET = "sk-live-0123456789abcdef"


def test_a_key_in_the_wrong_place_never_reaches_an_error_message(tmp_path: Path) -> None:
    # adapter options that fail validation
    with pytest.raises(ConfigError) as info:
        create_adapter("simulated:x", {"api_key": SECRET})
    assert "api_key" in str(info.value)
    assert SECRET not in str(info.value)
    # a run configured in Python
    with pytest.raises(ConfigError) as info:
        de.run(
            baseline=de.Variant(model="simulated:a"),
            candidate={"model": "simulated:b", "api_key": SECRET},
            out=tmp_path / "run",
        )
    assert "candidate.api_key" in str(info.value)
    assert SECRET not in str(info.value)
    # a config file, with the key where a number belongs
    path = tmp_path / "eval.toml"
    path.write_text(
        f'out = "x"\n[baseline]\nmodel = "simulated:a"\n[candidate]\nmodel = "simulated:b"\n'
        f'[candidate.params]\ntemperature = "{SECRET}"\n'
    )
    with pytest.raises(ConfigError) as info:
        de.load_config(path)
    assert "candidate.params.temperature" in str(info.value)
    assert SECRET not in str(info.value)


def test_a_cache_written_under_key_version_1_still_answers_and_a_new_one_never_reads_old_keys(tmp_path: Path) -> None:
    answer = de.ModelResponse(message=Message(role="assistant", content="from an old cache"))
    # A cache as version 1 wrote it: no user_version mark, the answer under the old key.
    old = SQLiteCache(tmp_path / "old.sqlite")
    old.put(REQUEST.cache_key_v1(namespace="candidate:c#0"), "scripted:m", answer)
    old._db.execute("PRAGMA user_version = 0")
    old.close()
    reopened = SQLiteCache(tmp_path / "old.sqlite")
    assert reopened.holds_v1_keys
    client = ModelClient(ScriptedAdapter("scripted:m", []), ModelLimiter(2), cache=reopened)
    got = anyio.run(lambda: client.generate(REQUEST, namespace="candidate:c#0"))
    assert got.cached
    assert got.response.message.content == "from an old cache"
    assert reopened.get(REQUEST.cache_key(namespace="candidate:c#0")) is not None  # kept under the new key too
    reopened.close()
    # A cache started under version 2 is marked so: an old key in it is never looked up.
    new = SQLiteCache(tmp_path / "new.sqlite")
    assert not new.holds_v1_keys
    new.put(REQUEST.cache_key_v1(namespace="candidate:c#0"), "scripted:m", answer)
    new.close()
    again = SQLiteCache(tmp_path / "new.sqlite")
    assert not again.holds_v1_keys
    fresh = ModelClient(ScriptedAdapter("scripted:m", ["from the model"]), ModelLimiter(2), cache=again)
    assert anyio.run(lambda: fresh.generate(REQUEST, namespace="candidate:c#0")).response.message.content == (
        "from the model"
    )
    again.close()
