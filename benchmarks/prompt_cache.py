"""Prompt caching on replays: the demo (the bundled tau-bench airline conversations) replayed on the Anthropic wire
(``anthropic:claude-sonnet-4-6``) and the OpenAI wire (``openai:gpt-4.1``), through the real SDKs, against the
fake servers, whose prompt caches follow the providers' documented rules
(:mod:`delta_eval.testing.servers.prompt_cache`).

Each wire runs twice in this process, on the same sample and the same simulated answers:

- off (the baseline of the comparison): Anthropic with ``prompt_cache=False`` (no ``cache_control`` breakpoints, so
  nothing is cached); OpenAI, whose cache is automatic and cannot be turned off by a client, against a server with
  its cache off (what the same calls cost without a cache);
- on: Anthropic with its breakpoints on the tools, the system prompt and the history; OpenAI with
  ``prompt_cache_key`` (the conversation's key) against the caching server.

For each it prints: the input tokens replayed, those billed at the full input price, cache reads, cache writes,
the share of input tokens billed as cache reads (target >= 50% with caching on), and dollars, with the dollars the
same replays cost at the full input price (what "saved by caching" is measured against).

    python benchmarks/prompt_cache.py                   # 40 conversations, concurrency 8, 20 ms server latency
    python benchmarks/prompt_cache.py --n 10 --latency-ms 0
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import delta_eval as de
from delta_eval.adapters.simulated import SimulatedBehaviour
from delta_eval.analysis.spend import SideSpend, side_spend
from delta_eval.demo import CANDIDATE_PROMPT, demo_config, demo_conversations
from delta_eval.demo import DemoModels as Models
from delta_eval.judges.config import Judges
from delta_eval.testing.servers.anthropic import FakeAnthropicServer
from delta_eval.testing.servers.openai import FakeOpenAIServer

WIRES = {"anthropic": "anthropic:claude-sonnet-4-6", "openai": "openai:gpt-4.1"}


class Figures(NamedTuple):
    """What one run's replays used, both sides together."""

    wire: str
    caching: bool
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float
    full_price_usd: float
    seconds: float

    @property
    def full_price_tokens(self) -> int:
        """Input tokens billed at the full input price (neither read from nor written to the cache)."""
        return self.input_tokens - self.cache_read_tokens - self.cache_write_tokens

    @property
    def read_share(self) -> float:
        """The share of input tokens billed as cache reads."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else 0.0


def _total(spend: list[SideSpend], wire: str, caching: bool, seconds: float) -> Figures:
    def need(value: Any) -> Any:
        assert value is not None, "a replay reported no usage: the figures would be unknown"
        return value

    return Figures(
        wire=wire,
        caching=caching,
        input_tokens=sum(need(s.input_tokens) for s in spend),
        cache_read_tokens=sum(need(s.cache_read_tokens) for s in spend),
        cache_write_tokens=sum(need(s.cache_write_tokens) for s in spend),
        cost_usd=sum(need(s.cost_usd) for s in spend),
        full_price_usd=sum(need(s.full_price_usd) for s in spend),
        seconds=seconds,
    )


def run_wire(
    wire: str, caching: bool, out: Path, *, n: int, latency_ms: float, concurrency: int, seed: int = 7
) -> Figures:
    """Replay ``n`` demo conversations on ``wire``, with caching on or off; the figures of both sides."""
    model = WIRES[wire]
    conversations, _ = demo_conversations().load()
    behaviour = SimulatedBehaviour(reword_rate=0.1, latency_ms=latency_ms, seed=seed)
    server: FakeAnthropicServer | FakeOpenAIServer
    if wire == "anthropic":
        server = FakeAnthropicServer(recordings=conversations, behaviour=behaviour)
    else:
        server = FakeOpenAIServer(recordings=conversations, behaviour=behaviour, prompt_cache=caching)
    with server:
        options: dict[str, Any] = {"api_key": "bench-key-for-the-fake-server"}
        if isinstance(server, FakeAnthropicServer):
            options.update(base_url=server.url, prompt_cache=caching)
        else:
            options.update(base_url=server.base_url, prompt_cache_key=caching)
        baseline = de.Variant(name="baseline", model=model, provider_options=options)
        candidate = de.Variant(name="candidate", model=model, system_prompt=CANDIDATE_PROMPT, provider_options=options)
        # The rule judges: no judge calls, only the replays are measured.
        models = Models(baseline=baseline, candidate=candidate, judges=Judges())
        config = demo_config(out, n=n, seed=seed, models=models).model_copy(update={"concurrency": concurrency})
        start = time.perf_counter()
        result = de.run(config, conversations=demo_conversations())
        seconds = time.perf_counter() - start
    con = result.connect()
    try:
        return _total(side_spend(con, config.prices), wire, caching, seconds)
    finally:
        con.close()


def _row(f: Figures) -> str:
    return (
        f"  {f.wire:10s} {'on' if f.caching else 'off':4s} {f.input_tokens:>12,d} {f.full_price_tokens:>12,d} "
        f"{f.cache_read_tokens:>12,d} {f.cache_write_tokens:>12,d} {f.read_share:>10.1%} "
        f"{f.cost_usd:>10.4f} {f.full_price_usd:>12.4f} {f.seconds:>8.1f}"
    )


def main(argv: list[str] | None = None) -> list[Figures]:
    """Run both wires, caching off then on, and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=40, help="conversations sampled")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="the fake server's latency per call")
    parser.add_argument("--concurrency", type=int, default=8, help="pairs replayed at once")
    parser.add_argument("--wires", default=",".join(WIRES))
    args = parser.parse_args(argv)
    figures = []
    with tempfile.TemporaryDirectory(prefix="delta-eval-prompt-cache-") as tmp:
        for wire in args.wires.split(","):
            for caching in (False, True):
                out = Path(tmp) / f"{wire}-{'on' if caching else 'off'}"
                figures.append(run_wire(wire, caching, out, n=args.n, latency_ms=args.latency_ms,
                                        concurrency=args.concurrency))  # fmt: skip
    print(f"prompt caching on the demo: {args.n} conversations, concurrency {args.concurrency}, "
          f"{args.latency_ms:g} ms server latency; both sides summed")  # fmt: skip
    print(
        "  wire       cache input tokens   full price  cache reads cache writes read share   cost USD "
        "at full price  seconds"
    )
    for f in figures:
        print(_row(f))
    for wire in args.wires.split(","):
        off, on = (f for f in figures if f.wire == wire)
        saved = on.full_price_usd - on.cost_usd
        share = saved / on.full_price_usd if on.full_price_usd else 0.0
        print(f"  {wire}: {on.read_share:.1%} of input tokens read from cache (target >= 50%); "
              f"${on.cost_usd:.4f} with caching vs ${off.cost_usd:.4f} without "
              f"(saved ${saved:.4f} against the same replays at full price, {share:.0%})")  # fmt: skip
    return figures


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
