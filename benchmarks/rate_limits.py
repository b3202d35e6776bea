"""Calls in flight and wall time under rate limits: the adaptive limiter against the old one, in the same run.

Two fake providers (the ``simulated:`` model, in process, so two shared cores measure the limiter and not HTTP):

(a) noise: a steady 3% of calls answered with a 429 (and a short Retry-After) whatever the load. The ideal keeps
    the configured maximum of calls in flight.
(b) a true limit: requests per "minute" enforced as a token bucket (the minute shortened to ``--minute-s``), with
    OpenAI's ``x-ratelimit-*-requests`` headers on every answer and a 429 for each request over the limit. The ideal
    sends exactly the allowed rate (after the bucket's first full minute's burst), and no request over the limit.

The old behaviour (halve the cap on every 429 burst, grow by one per window of ``cap`` successes, no headers) is
measured alongside, as the baseline. Each configuration runs ``--repeats`` times, alternating; medians are printed.

    python benchmarks/rate_limits.py                  # 2,000 calls each, 3 repeats
    python benchmarks/rate_limits.py --calls 500 --repeats 1
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import time
from typing import Any

import anyio

from delta_eval.adapters.client import ModelClient
from delta_eval.adapters.limits import ModelLimiter, Ticket
from delta_eval.adapters.ratelimit_headers import RateLimitSignal
from delta_eval.adapters.retry import RetryPolicy
from delta_eval.adapters.simulated import SimulatedAdapter, SimulatedBehaviour
from delta_eval.calls import ModelRequest
from delta_eval.exceptions import ProviderError
from delta_eval.schema import Message

LATENCY_MS = 40.0
SIGMA = 0.3
MEAN_LATENCY_S = LATENCY_MS / 1000 * math.exp(SIGMA**2 / 2)  # of the log-normal latency
# Scaled with the latency: in production a call takes seconds and the limiter's cooldown is one second, so the
# cooldown spans about half a call here too (or the old limiter would look better than it is).
COOLDOWN_S = LATENCY_MS / 1000 / 2
RETRY = RetryPolicy(max_attempts=30, initial_wait=0.01, max_wait=0.2)


class HalvingLimiter(ModelLimiter):
    """The limiter as it was: every 429 (once per cooldown) halves the cap; it grows by one per ``cap`` successes;
    headers are ignored."""

    def observe(self, signal: RateLimitSignal | None, ticket: Ticket | None = None) -> None:
        return None

    def on_success(self, signal: RateLimitSignal | None = None, ticket: Ticket | None = None) -> None:
        if self.concurrency >= self.max_concurrency:
            return
        self._successes += 1
        if self._successes >= self.concurrency:
            self._capacity.total_tokens = self.concurrency + 1
            self._successes = 0

    def on_rate_limited(self, signal: RateLimitSignal | None = None, ticket: Ticket | None = None) -> None:
        self.rate_limited += 1
        now = time.monotonic()
        if now - self._last_decrease >= self.cooldown:
            self._capacity.total_tokens = max(1, self.concurrency // 2)
            self._last_decrease = now
            self._successes = 0


class Counting(SimulatedAdapter):
    """The simulated model, keeping the time integral of its calls in flight (for their mean)."""

    def __init__(self, behaviour: SimulatedBehaviour) -> None:
        super().__init__("simulated:bench", behaviour)
        self.in_flight = 0
        self.area = 0.0
        self._at = time.perf_counter()

    def _tick(self, delta: int) -> None:
        now = time.perf_counter()
        self.area += self.in_flight * (now - self._at)
        self._at = now
        self.in_flight += delta

    async def generate(self, request: ModelRequest) -> Any:
        self._tick(+1)
        try:
            return await super().generate(request)
        finally:
            self._tick(-1)


def behaviours(rpm: float, minute_s: float) -> dict[str, SimulatedBehaviour]:
    """The two fake providers."""
    common: dict[str, Any] = {"latency_ms": LATENCY_MS, "latency_sigma": SIGMA, "seed": 3}
    return {
        "noise": SimulatedBehaviour(rate_limit_rate=0.03, retry_after_s=0.02, **common),
        "limit": SimulatedBehaviour(requests_per_minute=rpm, minute_s=minute_s, **common),
    }


def one_run(kind: str, behaviour: SimulatedBehaviour, calls: int, max_concurrency: int) -> dict[str, float]:
    """Send ``calls`` distinct requests through a client with the ``kind`` limiter (``adaptive`` or ``halving``)
    from more workers than the cap, as a run's pairs do; return what it measured."""
    adapter = Counting(behaviour)
    limiter = (ModelLimiter if kind == "adaptive" else HalvingLimiter)(max_concurrency, cooldown=COOLDOWN_S)
    client = ModelClient(adapter, limiter, RETRY)
    requests = iter(range(calls))

    async def worker() -> None:
        for i in requests:
            request = ModelRequest(model="simulated:bench", messages=(Message(role="user", content=f"request {i}"),))
            with contextlib.suppress(ProviderError):  # out of attempts: counted in the client's stats as failed
                await client.generate(request)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(max_concurrency * 2):
                tg.start_soon(worker)

    start = time.perf_counter()
    adapter._at = start
    anyio.run(main)
    wall = time.perf_counter() - start
    return {
        "wall_s": wall,
        "mean_in_flight": adapter.area / wall,
        "rate_limited": float(client.stats.rate_limited),
        "over_limit": float(adapter.bucket.rejected if adapter.bucket is not None else 0),
        "answered_per_s": client.stats.answered / wall,
        "failed": float(client.stats.failed),
    }


def ideal(name: str, behaviour: SimulatedBehaviour, calls: int, max_concurrency: int) -> dict[str, float]:
    """The best a client could do: (a) the cap always full; (b) the allowed rate after the first minute's burst."""
    full = calls * MEAN_LATENCY_S / max_concurrency
    if name == "noise" or behaviour.requests_per_minute is None:
        return {"wall_s": full, "in_flight": float(max_concurrency)}
    per_s = behaviour.requests_per_minute / behaviour.minute_s
    wall = max(full, (calls - behaviour.requests_per_minute) / per_s)
    return {"wall_s": wall, "in_flight": per_s * MEAN_LATENCY_S, "per_s": per_s}


def measure(calls: int, repeats: int, max_concurrency: int, rpm: float, minute_s: float) -> dict[str, Any]:
    """Median figures per (provider, limiter) and the ideal per provider."""
    out: dict[str, Any] = {}
    for name, behaviour in behaviours(rpm, minute_s).items():
        runs: dict[str, list[dict[str, float]]] = {"halving": [], "adaptive": []}
        for _ in range(repeats):
            for kind in runs:  # alternating, so drift on a shared machine hits both alike
                runs[kind].append(one_run(kind, behaviour, calls, max_concurrency))
        best = ideal(name, behaviour, calls, max_concurrency)
        out[name] = {"ideal": best}
        for kind, results in runs.items():
            med = {k: statistics.median(r[k] for r in results) for k in results[0]}
            med["of_ideal"] = best["wall_s"] / med["wall_s"]  # share of the allowed throughput reached
            out[name][kind] = med
    return out


def report(figures: dict[str, Any], calls: int, max_concurrency: int) -> str:
    """The figures as a table."""
    lines = [f"{calls} calls, max concurrency {max_concurrency}, median latency {LATENCY_MS:.0f} ms (medians)"]
    for name, label in (("noise", "(a) steady 3% 429 noise"), ("limit", "(b) true request limit with headers")):
        best = figures[name]["ideal"]
        extra = f", allowed {best['per_s']:.0f} req/s" if "per_s" in best else ""
        lines.append(f"{label}: ideal {best['wall_s']:.2f} s wall, {best['in_flight']:.1f} in flight{extra}")
        for kind in ("halving", "adaptive"):
            m = figures[name][kind]
            lines.append(
                f"  {kind:9} wall {m['wall_s']:6.2f} s  in flight {m['mean_in_flight']:5.1f}  "
                f"{m['answered_per_s']:6.0f} answers/s  {m['of_ideal']:5.0%} of ideal  "
                f"429s {m['rate_limited']:5.0f}  over the limit {m['over_limit']:5.0f}  failed {m['failed']:3.0f}"
            )
        ratio = figures[name]["halving"]["wall_s"] / figures[name]["adaptive"]["wall_s"]
        lines.append(f"  adaptive is {ratio:.2f}x as fast as halving")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-concurrency", type=int, default=32)
    parser.add_argument("--rpm", type=float, default=300.0, help="the true limit's requests per minute")
    parser.add_argument("--minute-s", type=float, default=1.0, help="how long that minute lasts, in seconds")
    args = parser.parse_args()
    figures = measure(args.calls, args.repeats, args.max_concurrency, args.rpm, args.minute_s)
    print(report(figures, args.calls, args.max_concurrency))


if __name__ == "__main__":
    main()
