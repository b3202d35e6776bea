"""A model's limiter shared by the shards of a Ray run (delta_eval.executors.ray_cluster), without Ray: the actor
runs in this event loop behind a handle whose ``.remote`` calls run as tasks, as Ray runs an async actor's methods.

Slots are leased in batches and passed from call to call within a shard, so these hold the guarantees that leasing
must keep: never more calls in flight than the model's cap across every shard, every slot given back, a cancelled
call or a dead attempt holding nothing, each shard getting its share, outcomes reaching the actor when it adapts.
"""

from __future__ import annotations

import asyncio
import pickle
import random
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from delta_eval.adapters.limits import ModelLimits
from delta_eval.executors import ray_cluster
from delta_eval.executors.ray_cluster import (
    LEASE_REUSES,
    LINGER_S,
    LimiterActor,
    LimiterHost,
    ModelHandle,
    RemoteLimiter,
    _last_error_line,
)


class _Handle:
    """An actor handle: ``handle.method.remote(*args)`` starts the method as a task (it runs whether or not it is
    awaited) and counts the messages sent."""

    def __init__(self, actor: LimiterActor) -> None:
        self.actor = actor
        self.sent: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method: Callable[..., Awaitable[Any]] = getattr(self.actor, name)
        sent = self.sent

        class _Method:
            @staticmethod
            def remote(*args: Any) -> asyncio.Future[Any]:
                sent[name] += 1
                return asyncio.ensure_future(method(*args))

        return _Method


async def _holders(limits: ModelLimits, n: int) -> tuple[LimiterActor, _Handle, list[RemoteLimiter]]:
    actor = LimiterActor(limits)
    handle = _Handle(actor)
    limiters = []
    for shard in range(n):
        await handle.open.remote(shard, f"{shard}-a")
        limiters.append(RemoteLimiter(handle, f"{shard}-a", limits))
    return actor, handle, limiters


def test_leased_slots_never_exceed_the_cap_across_shards_and_all_come_back() -> None:
    async def main() -> None:
        limits = ModelLimits(max_concurrency=8, adaptive=False)
        actor, handle, limiters = await _holders(limits, 3)
        rng = random.Random(5)
        flight, peak, done = 0, 0, Counter[int]()

        async def call(k: int, limiter: RemoteLimiter) -> None:
            nonlocal flight, peak
            async with limiter.slot():
                flight += 1
                peak = max(peak, flight)
                await anyio.sleep(rng.random() * 0.004)
                flight -= 1
            done[k] += 1

        async with anyio.create_task_group() as tg:
            for i in range(600):
                k = i % 3
                tg.start_soon(call, k, limiters[k])
        for limiter in limiters:
            await limiter.aclose()
        assert peak == 8  # the cap is used, and never passed
        assert done == {0: 200, 1: 200, 2: 200}
        assert await actor.borrowed() == 0
        assert actor.limiter._capacity.borrowed_tokens == 0
        # Leasing: far fewer messages asking for slots than calls made.
        assert handle.sent["acquire_many"] <= 600 / 4

    anyio.run(main)


def test_a_shard_saturating_the_model_does_not_starve_another() -> None:
    async def main() -> None:
        limits = ModelLimits(max_concurrency=4, adaptive=False)
        _, _, (busy, late) = await _holders(limits, 2)
        finished: list[str] = []

        async def call(name: str, limiter: RemoteLimiter) -> None:
            async with limiter.slot():
                await anyio.sleep(0.001)
            finished.append(name)

        async with anyio.create_task_group() as tg:
            for _ in range(400):
                tg.start_soon(call, "busy", busy)
            await anyio.sleep(0.005)  # the busy shard holds every slot and has hundreds of calls waiting
            for _ in range(10):
                tg.start_soon(call, "late", late)
        # Each slot goes back to the actor after LEASE_REUSES calls, so the late shard is served long before the
        # busy one is done.
        assert finished.index("late") < 400 - 4 * LEASE_REUSES
        await busy.aclose()
        await late.aclose()

    anyio.run(main)


def test_a_slot_freed_when_no_call_waits_serves_the_next_call_then_goes_back_unused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A slot lingers LINGER_S (0.25 s) for the next call: on a loaded machine the gap between two calls can be
    # longer. Kept as long as the calls go on here, then let go at once: what is tested is what happens, not when.
    monkeypatch.setattr(ray_cluster, "LINGER_S", 60.0)

    async def main() -> None:
        limits = ModelLimits(max_concurrency=8, adaptive=False)
        actor, handle, (limiter,) = await _holders(limits, 1)
        # One call after the other, as a pair's turns: none waits for a slot. One call short of two leases' uses: the
        # second lease, a use left, is kept (one used up goes back at the next settling, a few milliseconds on).
        for _ in range(2 * LEASE_REUSES - 1):
            async with limiter.slot():
                await anyio.sleep(0.001)
            await anyio.sleep(0.001)
        # Kept for the next call (its uses bound), not given back and leased again for every call.
        assert handle.sent["acquire_many"] == 2
        assert await actor.borrowed() == 1
        monkeypatch.setattr(ray_cluster, "LINGER_S", 0.0)
        async with limiter.slot():  # used once more, then idle: it goes back to the actor for other shards
            pass
        for _ in range(3000):  # given back at the holder's next settling (every few milliseconds)
            if await actor.borrowed() == 0:
                break
            await anyio.sleep(0.01)
        assert await actor.borrowed() == 0
        await limiter.aclose()

    anyio.run(main)


def test_a_cancelled_call_and_a_dead_attempt_hold_nothing() -> None:
    async def main() -> None:
        limits = ModelLimits(max_concurrency=2, adaptive=False)
        actor, handle, (limiter,) = await _holders(limits, 1)
        entered = anyio.Event()

        async def hold() -> None:
            async with limiter.slot():
                entered.set()
                await anyio.sleep_forever()

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(hold)  # two hold the slots, three wait
            await entered.wait()
            await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
        await anyio.sleep(LINGER_S + 0.03)  # the slots kept for a next call are given back
        assert await actor.borrowed() == 0

        # An attempt whose worker died holding slots, and asking for more: the retry of its shard opens a new
        # holder, which gives back what the dead one held and what the actor grants it afterwards.
        dead = RemoteLimiter(handle, "0-a", limits)
        dead_slots = [dead.slot() for _ in range(3)]
        await dead_slots[0].__aenter__()
        await dead_slots[1].__aenter__()
        pending = asyncio.ensure_future(dead_slots[2].__aenter__())
        await anyio.sleep(0.01)
        assert await actor.borrowed() == 2
        assert not pending.done()
        await handle.open.remote(0, "0-b")
        retry = RemoteLimiter(handle, "0-b", limits)
        with anyio.fail_after(10):  # a guard against a hang, not a timing
            async with retry.slot(), retry.slot():
                assert await actor.borrowed() == 2  # both slots are the retry's
        pending.cancel()
        await retry.aclose()
        await anyio.sleep(0.01)  # the dead attempt's last ask is granted, and given back at once
        assert await actor.borrowed() == 0
        assert actor.limiter._capacity.borrowed_tokens == 0

    anyio.run(main)


def test_an_adaptive_model_s_outcomes_reach_the_actor_and_its_slots_serve_one_call() -> None:
    async def main() -> None:
        limits = ModelLimits(max_concurrency=16, adaptive=True)
        actor, handle, (limiter,) = await _holders(limits, 1)
        assert limiter.reuses == 1  # a slot a call: the cap may shrink, and the ticket places the call's headers
        for _ in range(10):
            async with limiter.slot() as ticket:
                limiter.on_rate_limited(None, ticket)
        await anyio.sleep(0.02)
        assert actor.limiter.rate_limited == 10
        assert await actor.concurrency() < 16  # sustained 429s cut the shared cap
        assert handle.sent["settle"] < 10  # gathered, not one message a call
        await limiter.aclose()

    anyio.run(main)


def test_a_model_with_a_request_rate_takes_a_slot_from_the_actor_for_every_call() -> None:
    limits = ModelLimits(max_concurrency=4, requests_per_minute=6000, adaptive=False)
    assert RemoteLimiter(object(), "0-a", limits).reuses == 1  # every call counted against the rate there
    assert RemoteLimiter(object(), "0-a", ModelLimits(max_concurrency=4, adaptive=False)).reuses == LEASE_REUSES


def test_a_holder_closed_while_the_actor_grants_it_a_batch_gives_each_slot_back_once() -> None:
    """A batch being granted (one slot held, the next being taken) when the holder is closed (its shard's retry
    opened a new one): close gives back what was held, the batch only the slot it was taking. Giving the held one
    back twice made the actor raise and lose the slot being taken for good."""

    async def main() -> None:
        actor = LimiterActor(ModelLimits(max_concurrency=4, adaptive=False))
        await actor.open(0, "0-a")
        batch = asyncio.ensure_future(actor.acquire_many("0-a", 4))
        for _ in range(1000):  # until the first slot is held and the second being taken
            if actor._held.get("0-a"):
                break
            await asyncio.sleep(0)
        assert actor._held["0-a"]
        assert not batch.done()
        await actor.open(0, "0-b")  # the retry: the dead attempt's holder is closed
        assert await batch == []
        assert await actor.borrowed() == 0
        assert actor.limiter._capacity.borrowed_tokens == 0

    anyio.run(main)


def test_an_attempt_replaced_by_a_newer_one_fails_its_waiting_calls_instead_of_asking_forever() -> None:
    async def main() -> None:
        limits = ModelLimits(max_concurrency=1, adaptive=False)
        _, handle, (old,) = await _holders(limits, 1)
        async with old.slot():
            waiting = asyncio.ensure_future(old.slot().__aenter__())
            await anyio.sleep(0.01)
            await handle.open.remote(0, "0-b")  # the retry of shard 0: the old holder is closed
            with anyio.fail_after(10):  # a guard against a hang, not a timing
                try:
                    await waiting
                except Exception as exc:
                    failed = exc
                else:
                    raise AssertionError("the replaced attempt's call got a slot")
        assert "replaced" in str(failed)
        assert handle.sent["acquire_many"] <= 3  # it asked once or twice, not in a loop

    anyio.run(main)


def test_one_host_actor_keeps_each_model_s_limit_apart() -> None:
    """Every model's limiter in one actor (one process for the run): each model's calls are capped by its own."""

    async def main() -> None:
        caps = {"a": 2, "b": 5}
        host = LimiterHost({m: ModelLimits(max_concurrency=c, adaptive=False) for m, c in caps.items()})
        handle = _Handle(host)  # type: ignore[arg-type]
        limiters: dict[tuple[str, int], RemoteLimiter] = {}
        for model, cap in caps.items():
            for shard in range(2):
                await ModelHandle(handle, model).open.remote(shard, f"{shard}-{model}")
                limits = ModelLimits(max_concurrency=cap, adaptive=False)
                limiters[model, shard] = RemoteLimiter(ModelHandle(handle, model), f"{shard}-{model}", limits)
        flight, peak = Counter[str](), Counter[str]()

        async def call(model: str, limiter: RemoteLimiter) -> None:
            async with limiter.slot():
                flight[model] += 1
                peak[model] = max(peak[model], flight[model])
                await anyio.sleep(0.002)
                flight[model] -= 1

        async with anyio.create_task_group() as tg:
            for i in range(200):
                for model in caps:
                    tg.start_soon(call, model, limiters[model, i % 2])
        for limiter in limiters.values():
            await limiter.aclose()
        assert peak == caps  # each model its own cap, reached and never passed
        assert [await host.borrowed(m) for m in caps] == [0, 0]

    anyio.run(main)


def test_a_model_handle_is_sent_to_a_shard_whole() -> None:
    handle = pickle.loads(pickle.dumps(ModelHandle("the host's handle", "model-a")))
    assert handle == ModelHandle("the host's handle", "model-a")


def test_a_retry_s_ask_that_reaches_the_actor_before_its_open_waits_for_the_dead_attempt_s_slots() -> None:
    """A shard does not wait for its open (an async actor may run messages out of order): an ask run first is the
    holder's all the same, and the open that follows gives back what the shard's dead attempt held."""

    async def main() -> None:
        actor = LimiterActor(ModelLimits(max_concurrency=2, adaptive=False))
        await actor.open(0, "0-a")
        assert len(await actor.acquire_many("0-a", 2)) == 2  # the attempt that died holds the whole cap
        ask = asyncio.ensure_future(actor.acquire_many("0-b", 2))
        await anyio.sleep(0.01)
        assert not ask.done()
        await actor.open(0, "0-b")
        with anyio.fail_after(10):  # a guard against a hang, not a timing
            assert len(await ask) >= 1
        assert await actor.borrowed() == len(ask.result())  # every slot held is the retry's
        await actor.close("0-b")
        assert actor.limiter._capacity.borrowed_tokens == 0

    anyio.run(main)


def test_a_failed_shard_is_told_by_its_error_also_under_an_exception_group_s_drawing() -> None:
    def raise_grouped() -> None:
        try:
            raise ValueError("the real cause")
        except ValueError as exc:
            raise ExceptionGroup("unhandled errors in a TaskGroup", [exc]) from None

    try:
        raise_grouped()
    except ExceptionGroup as group:
        text = "".join(traceback.format_exception(group))
    assert text.rstrip().endswith("-")  # the drawing ends the text: its last line told nothing
    assert _last_error_line(text) == "ValueError: the real cause"
    assert _last_error_line("") == ""
